// The DoF view (paper 000 Tables 1-2, live): the layer x head DoF heatmap with values, heads whose
// estimate has not converged marked; the selected head's eigenvalue spectrum (log scale) with the
// lambda line; DoF against lambda; a lambda slider on a log2 scale (2^-12 .. 2^0 in quarter
// steps), a budget slider and a strategy chooser; and the per-layer feature-dimension bars with the
// mean cost, redrawn as the sliders move. The window computes (core's head_dofs, allocate) and
// hands the result to show_state(); this view only draws it.
#pragma once
#include <QWidget>
#include <memory>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/table.h"
#include "plot_panel.h"

class QSlider;
class QComboBox;
class QSpinBox;
class QLabel;

namespace attnscope::views {

// The tables the view exports ("Table…"): Table 2 (DoF of every head at lambda, unconverged heads
// listed), Table 1 (feature dimension per layer for the current strategy) and, for per-head, the
// dimension of every head.
enum class DofTable { DofGrid, Allocation, HeadDims };

class DofView : public QWidget {
  Q_OBJECT
 public:
  explicit DofView(QWidget* parent = nullptr);

  void set_spectra(std::shared_ptr<const DofSpectra> spectra);  // null clears
  void show_state(const DofAllocation& state);  // everything the sliders change, computed by core (allocation_at)
  void select(int layer, int head);  // no signal

  double lambda() const;  // 2^(slider position / 4)
  int64_t budget() const;
  AllocStrategy strategy() const;
  // Moves the controls without emitting settingsChanged (sessions).
  void set_controls(double lambda, int64_t budget, AllocStrategy strategy);
  // The command lines of its figures and tables (attnscope dof / allocate ...), set by the window.
  void set_commands(const QString& dof_command, const QString& allocate_command);

  QSlider* lambda_slider() const;
  QSlider* budget_slider() const;
  QComboBox* strategy_box() const;
  std::vector<PlotPanel*> panels() const;
  // The allocation bars as drawn: per layer the height of its bar (tests compare with core).
  std::vector<double> drawn_layer_dims() const;
  QString mean_cost_text() const;
  // The value printed in heatmap cell (layer, head): fmt_number(DoF), a '*' after it when the head
  // has not converged; "" outside the grid.
  QString cell_text(int layer, int head) const;
  int selected_layer() const;
  int selected_head() const;
  QLabel* lambda_label() const;
  QSpinBox* budget_box() const;

  // The shown state as one of core's tables (allocation_tables.h); empty before show_state.
  Table table(DofTable which) const;
  // Writes table(which) by the extension of `path`: .csv, .md or .tex (atomic; throws Error
  // naming the path).
  void export_table(DofTable which, const QString& path) const;

 signals:
  void settingsChanged(double lambda, qint64 budget, attnscope::AllocStrategy strategy);
  void headSelected(int layer, int head);

 private:
  struct Impl;
  Impl* d_;
};

}  // namespace attnscope::views
