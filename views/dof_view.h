// The DoF view (paper 000 Tables 1-2, live): the controls (a lambda slider on a log2 scale, 2^-12 ..
// 2^0 in quarter steps, a budget slider and a strategy chooser) over four panels, one file each:
// (a) the layer x head DoF heatmap with values, heads whose estimate has not converged marked
// (dof_grid_panel.h), and on a tab beside it the same per head as a sortable table (dof_head_table.h); (b) the selected head's eigenvalue spectrum with the lambda line
// (dof_spectrum_panel.h); (c) DoF against lambda (dof_curve_panel.h); (d) the per-layer feature
// dimensions with the mean cost (dof_allocation_panel.h), redrawn as the sliders move. The window
// computes (core's allocation_at) and hands the result to show_state(); this view only draws it.
// While the spectra are being computed every panel says so (show_pending).
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
class QDoubleSpinBox;
class QLabel;
class QTabWidget;

namespace attnscope::views {

class DofHeadTable;

// The tables the view exports ("Table…"): Table 2 (DoF of every head at lambda, unconverged heads
// listed), Table 1 (feature dimension per layer for the current strategy) and, for per-head, the
// dimension of every head.
enum class DofTable { DofGrid, Allocation, HeadDims };

class DofView : public QWidget {
  Q_OBJECT
 public:
  explicit DofView(QWidget* parent = nullptr);

  void set_spectra(std::shared_ptr<const DofSpectra> spectra);  // null clears
  // No spectra yet, and `note` says why in every panel ("Computing the DoF spectra…").
  void show_pending(const QString& note);
  QString note() const;  // what the heatmap says instead of values ("" while it shows them)
  void show_state(const DofAllocation& state);  // everything the sliders change, computed by core (allocation_at)
  void select(int layer, int head);  // no signal

  double lambda() const;  // 2^(slider position / 4)
  int64_t budget() const;
  AllocStrategy strategy() const;
  // Moves the controls without emitting settingsChanged (sessions).
  void set_controls(double lambda, int64_t budget, AllocStrategy strategy);
  // The state share (0: off) of head types under a state budget; set_state_share emits nothing.
  void set_state_share(double share);
  double state_share() const;
  QDoubleSpinBox* state_share_box() const;
  // The command lines of its figures and tables (attnscope dof / allocate ...), set by the window.
  void set_commands(const QString& dof_command, const QString& allocate_command);

  QSlider* lambda_slider() const;
  QSlider* budget_slider() const;
  QComboBox* strategy_box() const;
  std::vector<PlotPanel*> panels() const;
  // The allocation bars as drawn: per layer the height of its bar (tests compare with core).
  std::vector<double> drawn_layer_dims() const;
  QString mean_cost_text() const;
  QString allocation_caption() const;  // the text above Table 1's bars
  // The value printed in heatmap cell (layer, head): fmt_number(DoF), a '*' after it when the head
  // has not converged; "" outside the grid.
  QString cell_text(int layer, int head) const;
  int selected_layer() const;
  int selected_head() const;
  QLabel* lambda_label() const;
  QSpinBox* budget_box() const;
  // Panel (a) as a sortable table of every head (a tab beside the heatmap).
  DofHeadTable* head_table() const;
  QTabWidget* grid_tabs() const;

  // The shown state as one of core's tables (allocation_tables.h); empty before show_state.
  Table table(DofTable which) const;
  // Writes table(which) by the extension of `path`: .csv, .md or .tex (atomic; throws Error
  // naming the path).
  void export_table(DofTable which, const QString& path) const;

 signals:
  void settingsChanged(double lambda, qint64 budget, attnscope::AllocStrategy strategy);
  void stateShareChanged(double share);
  void headSelected(int layer, int head);

 private:
  struct Impl;
  Impl* d_;
};

}  // namespace attnscope::views
