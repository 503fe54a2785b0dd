// The training view: linearize the model (distill feature maps, convert, finetune, evaluate on
// held-out text) or distill only, and watch both stages learn. Left, the form (feature map, loss,
// dimensions from the DoF view's allocation or a fixed M, the softmax window of hybrid heads, steps,
// learning rates, batch, schedule, device; for linearize the sequence length, finetune steps and
// rank) and the current run with Linearize, Distill only and Resume; right, stage 1's loss of every
// layer per step (log scale, validation KL as dots) and stage 2's (finetune) loss and held-out loss
// per step, read from the runs' metrics.jsonl; below, the final table (held-out perplexity by length,
// exported as Markdown, LaTeX or CSV) and stage 1's attention KL per layer. The window fills it with
// what core computed; it draws only.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "attnscope/run/run_metrics.h"
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
  // While a run runs: the settings are read-only and stay what the run was started with (an
  // allocation given meanwhile is shown once the run ends).
  void set_frozen(bool frozen);
  bool frozen() const;
  // The current run: its folder, a line about its state, and which buttons apply.
  void set_run(const QString& dir, const QString& status, bool can_linearize, bool can_train, bool can_resume);
  // The run's final model (a finished linearize or finetune run's RUN/model): shown with Open model
  // and Save model as…; empty: none (the buttons are disabled).
  void set_final_model(const QString& path);
  QString final_model_text() const;
  // "Copy as command" of the figures: the run's `attnscope linearize|distill ...`.
  void set_command(const QString& run_command);

  // Stage 1's loss curves: one line per layer (training loss per step), validation KL as dots; the
  // step axis spans the run's `total_steps` (0: the steps there are), so a running curve grows to the
  // right.
  void set_curves(const RunMetrics& metrics, qint64 total_steps = 0);
  // Stage 2's (finetune): the next-token cross-entropy per step (line), the held-out loss as dots.
  void set_finetune_curves(const FinetuneMetrics& metrics, qint64 total_steps = 0);
  // The final table (its caption above it) and stage 1's attention KL per layer (empty: cleared).
  void set_comparison(const Table& table, const std::vector<double>& layer_kl);

  // Writes the table by the extension of `path`: .csv, .md or .tex (atomic; Error naming the
  // path when nothing is shown).
  void export_table(const QString& path) const;
  const Table& table() const;

  PlotPanel* loss_panel() const;      // stage 1
  PlotPanel* finetune_panel() const;  // stage 2
  PlotPanel* kl_panel() const;
  std::vector<PlotPanel*> panels() const;
  QTableWidget* comparison_table() const;
  QLabel* table_caption() const;
  QPushButton* linearize_button() const;
  QPushButton* train_button() const;  // "Distill only"
  QPushButton* resume_button() const;
  QPushButton* open_run_button() const;
  QPushButton* open_model_button() const;
  QPushButton* save_model_button() const;
  QComboBox* map_box() const;
  QSpinBox* steps_box() const;
  QSpinBox* features_box() const;
  QSpinBox* window_box() const;  // "Softmax window": hybrid heads' W (0 = plain linear)
  QSpinBox* seq_len_box() const;  // linearize: tokens per window (0 = the model's context)
  QSpinBox* finetune_steps_box() const;
  QSpinBox* rank_box() const;
  QRadioButton* allocation_radio() const;
  QRadioButton* fixed_radio() const;
  QLabel* run_label() const;

 signals:
  void linearizeRequested();
  void trainRequested();
  void resumeRequested();
  void openRunRequested();    // "Open run…": the window asks for the folder
  void openModelRequested();  // "Open model": the run's final model into the workbench
  void saveModelRequested();  // "Save model as…": the window asks for the folder

 private:
  struct Impl;
  Impl* d_;
};

}  // namespace attnscope::views
