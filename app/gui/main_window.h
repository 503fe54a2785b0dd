// The workbench window: the five views (Heads, Metrics, DoF, Jobs, Train) as tabs, the model and data
// panel as a dock, menus, toolbar and status bar (model, capture, the running job's progress with
// a Cancel button). It opens at a size that fits the screen's available geometry. It wires the views to the Workbench and back and computes nothing itself:
// selections are kept in step across the views, slider moves go to Workbench::set_dof_settings
// and straight back to the DoF view, and every view's "Copy as command" is refreshed whenever
// what it shows changes. Geometry, recent models and sessions and the last capture options and
// slider positions are kept in QSettings ("attnscope", "attnscope"). Every error is a message box
// with the message (opened window-modal, never blocking the event loop).
#pragma once
#include <QMainWindow>
#include <QString>
#include <QStringList>
#include <map>

#include "attnscope/analysis/head_detail.h"
#include "workbench.h"

class QAction;
class QLabel;
class QMessageBox;
class QMenu;
class QProgressBar;
class QPushButton;
class QTabWidget;
class QTimer;
class QDockWidget;

namespace attnscope::views {
class HeadsView;
class MetricsView;
class DofView;
class JobsView;
class ModelPanel;
class TrainingView;
class PlotPanel;
}  // namespace attnscope::views

namespace attnscope::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  static constexpr int kMaxRecent = 8;

  // use_settings = false: neither reads nor writes QSettings (screenshots look the same on every
  // machine, whatever its last session was).
  explicit MainWindow(QWidget* parent = nullptr, bool use_settings = true);
  ~MainWindow() override;

  Workbench* workbench() const { return workbench_; }
  views::ModelPanel* model_panel() const { return model_panel_; }
  views::HeadsView* heads_view() const { return heads_; }
  views::MetricsView* metrics_view() const { return metrics_; }
  views::DofView* dof_view() const { return dof_; }
  views::JobsView* jobs_view() const { return jobs_; }
  views::TrainingView* training_view() const { return training_; }
  QTabWidget* tabs() const { return tabs_; }
  QProgressBar* progress_bar() const { return progress_; }
  QPushButton* cancel_button() const { return cancel_; }
  QLabel* model_label() const { return model_label_; }
  QLabel* capture_label() const { return capture_label_; }
  QAction* action(const QString& name) const;  // by objectName ("capture", "save_session", ...)

  // The start-up: this model and these texts, with the capture (and so the whole analysis)
  // running at once.
  void open_default(const QString& model, const QStringList& texts, const QString& tokenizer = {});
  void open_model(const QString& spec, const QString& tokenizer = {});
  void add_text_files(const QStringList& files);
  bool open_session(const QString& path);
  bool save_session(const QString& path);
  void capture();  // the Capture button: the panel's texts and options
  void start_training();   // the Train view's Distill only button: the form's settings
  void start_linearize();  // the Train view's Linearize button: the form's settings
  // Cancel all jobs (Esc): at once when every running job is short; a job that has run more than a
  // few seconds, or any training job, is cancelled only after a confirmation (the dialog is
  // returned, nullptr when none was needed).
  QMessageBox* cancel_all_jobs();

  void show_view(View view);
  View current_view() const;
  // The figure "Export current figure" saves: the plot holding the focus, else the view's main one.
  views::PlotPanel* current_figure() const;

  QStringList recent_models() const;
  QStringList recent_sessions() const;
  // Opens a paths as a drop would (model folder, llama2.c file, text, session).
  void open_paths(const QStringList& paths);

  // Shown for every error; also emitted as errorShown (tests and the screenshot mode listen).
  void show_error(const QString& title, const QString& message);

 signals:
  void errorShown(const QString& title, const QString& message);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void build_views();
  void build_actions();
  void build_menus();
  void build_status_bar();
  void connect_workbench();
  void connect_views();
  void restore_settings();
  void fit_to_screen();
  void save_settings() const;
  void show_choices();  // the session's capture options, choosers and sliders into the views
  void remember(const QString& key, const QString& value);
  void fill_recent(QMenu* menu, const QString& key, bool sessions);

  void select_head(int layer, int head);
  void on_model_changed();
  // Every view empty, saying `note`: nothing of the model before stays under a new model's name.
  void clear_views(const QString& note);
  // The workbench's current results drawn again (a model that failed to open leaves them as they were).
  void redraw_results();
  void on_capture_ready();
  void on_analysis_ready();
  void on_head_detail_ready();
  void on_spectra_ready();
  void on_dof_state();
  void on_session_loaded();
  void update_metrics_for_grid();
  void update_commands();
  void update_title();
  void update_jobs();
  // The DoF view's note while a capture has no spectra: computing (a new capture's, or their job
  // runs), or that their job ended without them.
  void update_dof_note(bool new_capture = false);
  void update_training();             // the train view's run line, buttons and loss curves
  void update_training_allocation();  // what "DoF view's allocation" means now
  void open_job_result(int id);
  void export_report_dialog();
  void export_figure_dialog();
  void workspace_dialog();
  void show_shortcuts();
  void show_about();

  Workbench* workbench_;
  views::ModelPanel* model_panel_ = nullptr;
  views::HeadsView* heads_ = nullptr;
  views::MetricsView* metrics_ = nullptr;
  views::DofView* dof_ = nullptr;
  views::JobsView* jobs_ = nullptr;
  views::TrainingView* training_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QDockWidget* model_dock_ = nullptr;
  QLabel *model_label_ = nullptr, *capture_label_ = nullptr, *job_label_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QTimer* jobs_timer_ = nullptr;
  QMenu *recent_models_menu_ = nullptr, *recent_sessions_menu_ = nullptr;
  int status_job_ = 0;                     // the job the status bar shows
  std::map<int, QString> report_dirs_;     // report job id -> its folder
  bool applying_ = false;                  // pushing state into the views: ignore their signals
  bool grid_stale_ = false;
  const bool use_settings_;                // the grid's metrics wait for the heads view to show
};

}  // namespace attnscope::gui
