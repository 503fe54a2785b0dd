// The training view: distill feature maps on the current capture, watch them learn, convert the
// model and see how close and how fast it is. Left, the form (feature map, loss, steps, learning
// rates, batch, schedule, device, dimensions from the DoF view's allocation or a fixed M, the softmax
// window of hybrid heads) and the
// current run with Train, Resume and Convert + evaluate; right, the loss of every layer per step
// (log scale, validation KL as dots) read from the run's metrics.jsonl; below, the comparison of
// the converted model with its original (a table that exports as Markdown, LaTeX or CSV) and its
// attention KL per layer. The window fills it with what core computed; it draws only.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "attnscope/distill/run_metrics.h"
#include "attnscope/base/table.h"
#include "attnscope/workbench/session.h"
#include "plot_panel.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTableWidget;
class QToolButton;

namespace attnscope::views {

class TrainingView : public QWidget {
  Q_OBJECT
 public:
  explicit TrainingView(QWidget* parent = nullptr);
  ~TrainingView() override;

  // The feature maps and devices offered (losses and schedules are core's name tables).
  void set_choices(const QStringList& maps, const QStringList& devices);
  // The form as core's TrainSettings: its choices read through core's name tables.
  TrainSettings form() const;
  // Shows `form`; a map or device the lists lack (a session of another machine) is added, so that
  // the form shows what was asked and training says what is wrong with it.
  void set_form(const TrainSettings& form);
  // What "DoF view's allocation" means now ("dof, C = 64, λ = 2^-8: M = 48 64 80 64"); `available`
  // false (no spectra yet) greys the choice out and picks the fixed M.
  void set_allocation(const QString& text, bool available);
  // The current run: its folder, a line about its state, and which buttons apply.
  void set_run(const QString& dir, const QString& status, bool can_train, bool can_resume, bool can_convert);
  // "Copy as command" of the loss figure (the run's `attnscope distill ...`) and of the KL bars
  // (`attnscope eval --model RUN/converted ...`).
  void set_commands(const QString& distill_command, const QString& eval_command);

  // The loss curves: one line per layer (training loss per step), validation KL as dots; the step
  // axis spans the run's `total_steps` (0: the steps there are), so a running curve grows to the right.
  void set_curves(const RunMetrics& metrics, qint64 total_steps = 0);
  // The comparison table and the per-layer attention KL of the converted model (empty: cleared).
  void set_comparison(const Table& table, const std::vector<double>& layer_kl);

  // Writes the comparison by the extension of `path`: .csv, .md or .tex (atomic; Error naming the
  // path when nothing is shown).
  void export_table(const QString& path) const;
  const Table& table() const;

  PlotPanel* loss_panel() const;
  PlotPanel* kl_panel() const;
  std::vector<PlotPanel*> panels() const;
  QTableWidget* comparison_table() const;
  QPushButton* train_button() const;
  QPushButton* resume_button() const;
  QPushButton* open_run_button() const;
  QPushButton* convert_button() const;
  QComboBox* map_box() const;
  QSpinBox* steps_box() const;
  QSpinBox* features_box() const;
  QSpinBox* window_box() const;  // "Softmax window": hybrid heads' W (0 = plain linear)
  QRadioButton* allocation_radio() const;
  QRadioButton* fixed_radio() const;
  QLabel* run_label() const;

 signals:
  void trainRequested();
  void resumeRequested();
  void openRunRequested();  // "Open run…": the window asks for the folder
  void convertRequested();

 private:
  struct Impl;
  Impl* d_;
};

}  // namespace attnscope::views
