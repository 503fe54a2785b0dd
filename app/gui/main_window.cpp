#include "main_window.h"

#include "attnscope/attention/head_feature_maps.h"
#include "head_grid.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QUrl>
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "attnscope/io/text_source.h"
#include "attnscope/distill/distill.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/model/model_config.h"
#include "attnscope/workbench/run_status.h"
#include "attnscope/workbench/view_data.h"
#include "attnscope/workbench/workspace.h"
#include "dof_view.h"
#include "linearize_table.h"
#include "command_lines.h"
#include "control_names.h"
#include "dropped_file.h"
#include "workspace_dialog.h"
#include "heads_view.h"
#include "jobs_view.h"
#include "metrics_view.h"
#include "model_panel.h"
#include "plot_panel.h"
#include "training_view.h"

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "dev"
#endif

static void init_workbench_resources() { Q_INIT_RESOURCE(attnscope); }

namespace attnscope::gui {

namespace {

// A mixed converted model's head types as the grid's badges (S, H, L); none for other models.
std::vector<std::vector<QString>> head_type_letters(const LoadedModel* m) {
  const HeadFeatureMaps* lin = m && m->model ? m->model->feature_maps() : nullptr;
  std::vector<std::vector<QString>> out;
  if (!lin || !lin->mixed()) return out;
  for (const auto& layer : head_types_of(*lin)) {
    out.emplace_back();
    for (HeadType t : layer) out.back().push_back(QString(QChar(head_type_name(t)[0]).toUpper()));
  }
  return out;
}

QString q(const std::string& s) { return QString::fromStdString(s); }

// The tabs, in View's order (session.h).
constexpr View kViews[] = {View::Heads, View::Metrics, View::Dof, View::Jobs, View::Training};
constexpr int kViewCount = int(std::size(kViews));

QString model_name(const std::string& spec) {
  QFileInfo info(q(spec));
  const QString name = info.fileName();
  return name.isEmpty() ? QDir(q(spec)).dirName() : name;
}

QString human_count(int64_t n) {
  if (n >= 1000000000) return QString::number(double(n) / 1e9, 'f', 2) + "B";
  if (n >= 1000000) return QString::number(double(n) / 1e6, 'f', 2) + "M";
  if (n >= 1000) return QString::number(double(n) / 1e3, 'f', 1) + "k";
  return QString::number(n);
}


}  // namespace

MainWindow::MainWindow(QWidget* parent, bool use_settings)
    : QMainWindow(parent), workbench_(new Workbench(this)), use_settings_(use_settings) {
  init_workbench_resources();
  setWindowIcon(QIcon(":/icons/attnscope.svg"));
  setAcceptDrops(true);
  setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);
  build_views();
  build_actions();
  build_menus();
  build_status_bar();
  connect_workbench();
  connect_views();
  restore_settings();
  update_title();
  update_commands();
  update_training_allocation();
  update_training();
}

MainWindow::~MainWindow() = default;

// ---- construction ----

void MainWindow::build_views() {
  tabs_ = new QTabWidget(this);
  tabs_->setDocumentMode(true);
  heads_ = new views::HeadsView(tabs_);
  metrics_ = new views::MetricsView(tabs_);
  dof_ = new views::DofView(tabs_);
  jobs_ = new views::JobsView(tabs_);
  training_ = new views::TrainingView(tabs_);
  // Each view in a scroll area: on a screen narrower than a view's minimum the window still fits
  // and scrolls, instead of growing past the screen's edge.
  auto add_tab = [this](QWidget* view, const QString& title) {
    auto* scroll = new QScrollArea(tabs_);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidget(view);
    tabs_->addTab(scroll, title);
  };
  add_tab(heads_, tr("Heads"));
  add_tab(metrics_, tr("Metrics"));
  add_tab(dof_, tr("DoF"));
  add_tab(jobs_, tr("Jobs"));
  add_tab(training_, tr("Train"));
  setCentralWidget(tabs_);

  QStringList maps, trainable;
  for (const std::string& n : feature_map_names()) maps << q(n);
  for (const std::string& n : trainable_map_names()) trainable << q(n);
  // The learned maps are drawn at their random initialization: their titles say "(untrained)".
  heads_->set_feature_maps(maps, trainable);
  training_->set_choices(trainable, Workbench::distill_devices());

  model_panel_ = new views::ModelPanel(this);
  model_dock_ = new QDockWidget(tr("Model and data"), this);
  model_dock_->setObjectName("model_dock");
  auto* panel_scroll = new QScrollArea(model_dock_);
  panel_scroll->setWidgetResizable(true);
  panel_scroll->setFrameShape(QFrame::NoFrame);
  panel_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  panel_scroll->setWidget(model_panel_);
  model_dock_->setWidget(panel_scroll);
  model_dock_->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                           QDockWidget::DockWidgetClosable);
  addDockWidget(Qt::LeftDockWidgetArea, model_dock_);
}

QAction* MainWindow::action(const QString& name) const { return findChild<QAction*>(name); }

void MainWindow::build_actions() {
  auto make = [this](const QString& name, const QString& text, const QKeySequence& key, auto slot,
                     QStyle::StandardPixmap icon = QStyle::SP_CustomBase) {
    auto* a = new QAction(text, this);
    a->setObjectName(name);
    if (!key.isEmpty()) a->setShortcut(key);
    if (icon != QStyle::SP_CustomBase) a->setIcon(style()->standardIcon(icon));
    connect(a, &QAction::triggered, this, slot);
    addAction(a);  // shortcuts work with the menu bar hidden, too
    return a;
  };
  make("open_model_folder", tr("Open model &folder…"), QKeySequence::Open, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open model folder (with config.json)"));
    if (!dir.isEmpty()) open_model(dir);
  }, QStyle::SP_DirOpenIcon);
  make("open_llama2c", tr("Open &llama2.c file…"), QKeySequence(), [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open llama2.c checkpoint"), {}, tr("llama2.c checkpoints (*.bin);;All files (*)"));
    if (!f.isEmpty()) open_model(f);
  });
  make("open_hf", tr("Open &Hugging Face model…"), QKeySequence(), [this] {
    bool ok = false;
    const QString name = QInputDialog::getText(
        this, tr("Open Hugging Face model"),
        tr("Model name in the Hugging Face cache (ORG/NAME, under $HF_HOME or ~/.cache/huggingface):"),
        QLineEdit::Normal, {}, &ok);
    if (ok && !name.trimmed().isEmpty()) open_model(name.trimmed());
  });
  make("open_session", tr("Open &session…"), QKeySequence("Ctrl+Shift+O"), [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open session"), {}, tr("attnscope sessions (*.attnscope)"));
    if (!f.isEmpty()) open_session(f);
  }, QStyle::SP_DialogOpenButton);
  make("save_session", tr("&Save session"), QKeySequence::Save, [this] {
    if (workbench_->session_path().isEmpty()) action("save_session_as")->trigger();
    else save_session(workbench_->session_path());
  }, QStyle::SP_DialogSaveButton);
  make("save_session_as", tr("Save session &as…"), QKeySequence("Ctrl+Shift+S"), [this] {
    QString f = QFileDialog::getSaveFileName(this, tr("Save session"), QDir::home().filePath(model_name(workbench_->session().model) + ".attnscope"),
                                             tr("attnscope sessions (*.attnscope)"));
    if (f.isEmpty()) return;
    if (!f.endsWith(".attnscope")) f += ".attnscope";
    save_session(f);
  });
  make("export_report", tr("&Export report…"), QKeySequence("Ctrl+E"), [this] { export_report_dialog(); });
  make("workspace", tr("&Workspace…"), QKeySequence(), [this] { workspace_dialog(); });
  make("export_figure", tr("Export current &figure…"), QKeySequence("Ctrl+Shift+E"), [this] { export_figure_dialog(); });
  make("quit", tr("&Quit"), QKeySequence("Ctrl+Q"), [this] { close(); });

  // No icon: the style's play icon is black and vanishes on a dark toolbar; the word reads in both.
  make("capture", tr("&Capture"), QKeySequence("Ctrl+R"), [this] { capture(); }, QStyle::SP_CustomBase);
  make("recompute_spectra", tr("Recompute &spectra"), QKeySequence(), [this] { workbench_->recompute_spectra(); });
  make("recompute_metrics", tr("Recompute &metrics"), QKeySequence(), [this] { workbench_->recompute_metrics(); });
  make("cancel_all", tr("Cancel &all jobs"), QKeySequence(Qt::Key_Escape), [this] { cancel_all_jobs(); },
       QStyle::SP_BrowserStop);

  const QString tab_names[] = {tr("&Heads"), tr("&Metrics"), tr("&DoF"), tr("&Jobs"), tr("&Train")};
  for (int i = 0; i < kViewCount; ++i)
    make(QString("view_") + view_name(kViews[i]), tab_names[i], QKeySequence(QString("Ctrl+%1").arg(i + 1)),
         [this, i] { tabs_->setCurrentIndex(i); });

  make("shortcuts", tr("&Keyboard shortcuts"), QKeySequence::HelpContents, [this] { show_shortcuts(); });
  make("about", tr("&About attnscope"), QKeySequence(), [this] { show_about(); });
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(action("open_model_folder"));
  file->addAction(action("open_llama2c"));
  file->addAction(action("open_hf"));
  recent_models_menu_ = file->addMenu(tr("Recent &models"));
  connect(recent_models_menu_, &QMenu::aboutToShow, this, [this] { fill_recent(recent_models_menu_, "recent/models", false); });
  file->addSeparator();
  file->addAction(action("open_session"));
  recent_sessions_menu_ = file->addMenu(tr("&Recent sessions"));
  connect(recent_sessions_menu_, &QMenu::aboutToShow, this, [this] { fill_recent(recent_sessions_menu_, "recent/sessions", true); });
  file->addAction(action("save_session"));
  file->addAction(action("save_session_as"));
  file->addSeparator();
  file->addAction(action("export_report"));
  file->addAction(action("export_figure"));
  file->addSeparator();
  file->addAction(action("workspace"));
  file->addSeparator();
  file->addAction(action("quit"));

  QMenu* analysis = menuBar()->addMenu(tr("&Analysis"));
  analysis->addAction(action("capture"));
  analysis->addAction(action("recompute_spectra"));
  analysis->addAction(action("recompute_metrics"));
  analysis->addSeparator();
  analysis->addAction(action("cancel_all"));

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (View v : kViews) view->addAction(action(QString("view_") + view_name(v)));
  view->addSeparator();
  QAction* dock_toggle = model_dock_->toggleViewAction();
  dock_toggle->setText(tr("Model and data panel"));
  dock_toggle->setObjectName("toggle_model_dock");
  view->addAction(dock_toggle);

  QToolBar* bar = addToolBar(tr("Main"));
  bar->setObjectName("main_toolbar");
  bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  for (const char* n : {"open_model_folder", "open_session", "save_session", "capture", "cancel_all"})
    bar->addAction(action(n));
  bar->addSeparator();
  bar->addAction(action("export_figure"));
  bar->addAction(action("export_report"));
  QAction* bar_toggle = bar->toggleViewAction();
  bar_toggle->setText(tr("Toolbar"));
  view->addAction(bar_toggle);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(action("shortcuts"));
  help->addAction(action("about"));
}

void MainWindow::build_status_bar() {
  model_label_ = new QLabel(tr("no model"), this);
  capture_label_ = new QLabel(tr("nothing captured"), this);
  job_label_ = new QLabel(this);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(220);
  progress_->setTextVisible(true);
  cancel_ = new QPushButton(style()->standardIcon(QStyle::SP_BrowserStop), tr("Cancel"), this);
  cancel_->setObjectName("status_cancel");
  cancel_->setToolTip(tr("Cancel the running job"));
  statusBar()->addWidget(model_label_);
  auto* between = new QFrame(this);  // the model's line and the capture's do not run together
  between->setFrameShape(QFrame::VLine);
  between->setFrameShadow(QFrame::Sunken);
  statusBar()->addWidget(between);
  statusBar()->addWidget(capture_label_);
  statusBar()->addPermanentWidget(job_label_);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);
  progress_->hide();
  cancel_->hide();
  connect(cancel_, &QPushButton::clicked, this, [this] {
    if (status_job_) workbench_->cancel(status_job_);
  });
  jobs_timer_ = new QTimer(this);
  jobs_timer_->setInterval(200);  // 5 Hz while something runs
  connect(jobs_timer_, &QTimer::timeout, this, &MainWindow::update_jobs);
}

void MainWindow::connect_workbench() {
  Workbench* w = workbench_;
  connect(w, &Workbench::modelChanged, this, &MainWindow::on_model_changed);
  connect(w, &Workbench::modelOpening, this, [this](const QString& spec) {
    clear_views(tr("Opening %1…").arg(QFileInfo(spec).fileName().isEmpty() ? spec : QFileInfo(spec).fileName()));
    model_label_->setText(tr("opening %1…").arg(spec));
  });
  connect(w, &Workbench::modelOpenFailed, this, &MainWindow::redraw_results);
  connect(w, &Workbench::captureReady, this, &MainWindow::on_capture_ready);
  connect(w, &Workbench::thumbnailsReady, this, [this] { heads_->set_thumbnails(workbench_->thumbnails()); });
  connect(w, &Workbench::spectraReady, this, &MainWindow::on_spectra_ready);
  connect(w, &Workbench::analysisReady, this, &MainWindow::on_analysis_ready);
  connect(w, &Workbench::headDetailReady, this, &MainWindow::on_head_detail_ready);
  connect(w, &Workbench::dofStateChanged, this, &MainWindow::on_dof_state);
  connect(w, &Workbench::sessionLoaded, this, &MainWindow::on_session_loaded);
  connect(w, &Workbench::sessionSaved, this, [this](const QString& path) {
    remember("recent/sessions", path);
    update_title();
    update_commands();
    statusBar()->showMessage(tr("Session saved to %1").arg(path), 5000);
  });
  connect(w, &Workbench::jobsChanged, this, [this] {
    update_jobs();
    if (workbench_->any_job_running() && !jobs_timer_->isActive()) jobs_timer_->start();
  });
  connect(w, &Workbench::trainingChanged, this, &MainWindow::update_training);
  connect(w, &Workbench::message, this, [this](const QString& text) { statusBar()->showMessage(text, 10000); });
  connect(w, &Workbench::error, this, &MainWindow::show_error);
}

void MainWindow::connect_views() {
  connect(model_panel_, &views::ModelPanel::openModelRequested, this, [this](const QString& spec) { open_model(spec); });
  connect(model_panel_, &views::ModelPanel::textFilesChanged, this,
          [this](const QStringList& files) { workbench_->set_texts(files, model_panel_->text()); });
  connect(model_panel_, &views::ModelPanel::addTextFilesRequested, this, &MainWindow::add_text_files);
  connect(model_panel_, &views::ModelPanel::captureRequested, this, &MainWindow::capture);

  connect(training_, &views::TrainingView::linearizeRequested, this, &MainWindow::start_linearize);
  connect(training_, &views::TrainingView::trainRequested, this, &MainWindow::start_training);
  connect(training_, &views::TrainingView::resumeRequested, this, [this] { workbench_->resume_distill(); });
  connect(training_, &views::TrainingView::openModelRequested, this, [this] {
    if (const QString m = workbench_->final_model(); !m.isEmpty()) open_model(m);
  });
  connect(training_, &views::TrainingView::saveModelRequested, this, [this] {
    const QString out = QFileDialog::getSaveFileName(this, tr("Save the final model as a folder"),
                                                     QDir::homePath() + "/" + QFileInfo(workbench_->run_dir()).fileName() + "-model");
    if (!out.isEmpty()) workbench_->save_final_model(out);
  });
  connect(training_, &views::TrainingView::openRunRequested, this, [this] {
    const QString start = workbench_->run_dir().isEmpty() ? workbench_->workspace_root() : workbench_->run_dir() + "/..";
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a linearize or distill run (a folder with job.json)"), start);
    if (dir.isEmpty()) return;
    if (!QFileInfo::exists(dir + "/job.json")) {
      show_error(tr("Open run"), tr("%1 is not a run directory (no job.json)").arg(dir));
      return;
    }
    workbench_->open_run(dir);
  });

  connect(heads_, &views::HeadsView::headSelected, this, &MainWindow::select_head);
  connect(metrics_, &views::MetricsView::headSelected, this, &MainWindow::select_head);
  connect(dof_, &views::DofView::headSelected, this, &MainWindow::select_head);
  connect(heads_, &views::HeadsView::mapChanged, this, [this](const QString& map, qint64 features, qint64 window, bool decayed) {
    if (applying_) return;
    workbench_->set_feature_map(map, features, window, decayed);
    update_commands();
  });
  connect(heads_, &views::HeadsView::seqChanged, this, [this](int seq) {
    if (applying_) return;
    workbench_->set_seq(seq);
    update_commands();
  });
  connect(heads_, &views::HeadsView::scaleChanged, this, [this](ColourScale scale) {
    if (!applying_) workbench_->set_colour_scale(scale);
  });
  connect(heads_, &views::HeadsView::metricChanged, this, [this](GridMetric metric) {
    if (!applying_) workbench_->set_metric(metric);
  });
  // The live path (benchmarked: slider move to redrawn chart < 50 ms): core's DoF and allocation
  // on the UI thread, straight back into the view through dofStateChanged.
  connect(dof_, &views::DofView::settingsChanged, this, [this](double lambda, qint64 budget, AllocStrategy strategy) {
    if (!applying_) workbench_->set_dof_settings(lambda, budget, strategy);
  });
  connect(dof_, &views::DofView::stateShareChanged, this, [this](double share) {
    if (!applying_) workbench_->set_state_share(share);
  });
  connect(jobs_, &views::JobsView::cancelRequested, workbench_, &Workbench::cancel);
  connect(jobs_, &views::JobsView::openRequested, this, &MainWindow::open_job_result);
  connect(tabs_, &QTabWidget::currentChanged, this, [this](int) {
    workbench_->set_view(current_view());
    if (grid_stale_ && current_view() == View::Heads) update_metrics_for_grid();
    update_title();
  });
}

// ---- settings ----

// A window that fits the screen it opens on: at most 1440 x 900, less on a smaller screen (its
// available geometry: without panels and docks), centred there.
void MainWindow::fit_to_screen() {
  QScreen* sc = screen() ? screen() : QGuiApplication::primaryScreen();
  if (!sc) {
    resize(1440, 900);
    return;
  }
  const QRect avail = sc->availableGeometry();
  // The frame (title bar, borders) is not known before the window is shown: leave room for one.
  const QSize frame = isVisible() ? frameGeometry().size() - geometry().size() : QSize(16, 40);
  const QSize size(std::min(1440, avail.width() - frame.width()), std::min(900, avail.height() - frame.height()));
  resize(size.expandedTo(minimumSize()));
  move(avail.x() + (avail.width() - width() - frame.width()) / 2, avail.y() + (avail.height() - height() - frame.height()) / 2);
}

void MainWindow::restore_settings() {
  if (use_settings_) {
    QSettings st;
    QStringList ignored;  // saved values this build cannot read: said in the status bar
    // A geometry saved on a larger screen does not fit this one: fit it instead.
    const QScreen* sc = screen() ? screen() : QGuiApplication::primaryScreen();
    if (!restoreGeometry(st.value("window/geometry").toByteArray()) ||
        (sc && (width() > sc->availableGeometry().width() || height() > sc->availableGeometry().height())))
      fit_to_screen();
    restoreState(st.value("window/state").toByteArray());

    // The choices of the last session, in the session file's format (core's one writer and reader).
    const QString saved = st.value("session/choices").toString();
    if (!saved.isEmpty()) {
      Session c = workbench_->session();
      try {
        read_session_choices(saved.toStdString(), "the saved settings", c);
        workbench_->set_capture_options(c.capture);
        workbench_->set_dof_settings(c.lambda, c.budget, c.strategy);
        workbench_->set_feature_map(q(c.analysis.feature_map), c.analysis.features, c.analysis.window,
                                    c.analysis.decay != Decay::None);
        workbench_->set_colour_scale(c.colour_scale);
        workbench_->set_metric(c.metric);
        workbench_->set_train_settings(c.train);
      } catch (const Error& e) {
        ignored << QString::fromUtf8(e.what());
      }
    }
    if (!ignored.isEmpty())
      statusBar()->showMessage(tr("Saved settings ignored (%1)").arg(ignored.join("; ")), 15000);
  } else {
    fit_to_screen();
  }
  show_choices();
}

void MainWindow::show_choices() {
  const Session& s = workbench_->session();
  applying_ = true;
  model_panel_->set_capture_options(s.capture);
  heads_->set_feature_map(q(s.analysis.feature_map), s.analysis.features, s.analysis.window, s.analysis.decay != Decay::None);
  heads_->set_scale(s.colour_scale);
  heads_->set_metric(s.metric);
  dof_->set_controls(s.lambda, s.budget, s.strategy);
  dof_->set_state_share(s.state_share);
  training_->set_form(s.train);
  applying_ = false;
}

void MainWindow::save_settings() const {
  if (!use_settings_) return;
  QSettings st;
  st.setValue("window/geometry", saveGeometry());
  st.setValue("window/state", saveState());
  Session s = workbench_->session();
  s.capture = model_panel_->capture_options();
  s.train = training_->form();
  st.setValue("session/choices", QString::fromStdString(session_choices_text(s)));
}

void MainWindow::remember(const QString& key, const QString& value) {
  if (value.isEmpty() || !use_settings_) return;
  QSettings st;
  QStringList list = st.value(key).toStringList();
  list.removeAll(value);
  list.prepend(value);
  while (list.size() > kMaxRecent) list.removeLast();
  st.setValue(key, list);
}

QStringList MainWindow::recent_models() const { return QSettings().value("recent/models").toStringList(); }
QStringList MainWindow::recent_sessions() const { return QSettings().value("recent/sessions").toStringList(); }

void MainWindow::fill_recent(QMenu* menu, const QString& key, bool sessions) {
  menu->clear();
  const QStringList list = QSettings().value(key).toStringList();
  for (const QString& item : list) {
    QAction* a = menu->addAction(item);
    connect(a, &QAction::triggered, this, [this, item, sessions] {
      if (sessions) open_session(item);
      else open_model(item);
    });
  }
  if (list.isEmpty()) menu->addAction(tr("(none yet)"))->setEnabled(false);
}

// ---- operations ----

void MainWindow::open_default(const QString& model, const QStringList& texts, const QString& tokenizer) {
  model_panel_->set_texts(texts, {});
  workbench_->set_texts(texts, {});
  workbench_->set_auto_capture(true);
  open_model(model, tokenizer);
}

void MainWindow::open_model(const QString& spec, const QString& tokenizer) {
  workbench_->set_texts(model_panel_->text_files(), model_panel_->text());
  workbench_->set_capture_options(model_panel_->capture_options());
  workbench_->open_model(spec, tokenizer);
}

void MainWindow::add_text_files(const QStringList& files) {
  // Each file read as the capture will read it, when it is added: a missing, empty or malformed
  // file is refused now with core's message, not at Capture (issue 26).
  QStringList all = model_panel_->text_files(), refused;
  for (const QString& f : files) {
    if (all.contains(f)) continue;
    try {
      read_text_documents({f.toStdString()});
      all << f;
    } catch (const std::exception& e) {
      refused << QString::fromStdString(e.what());
    }
  }
  if (!refused.isEmpty()) show_error(tr("Add text files"), tr("Not added:\n%1").arg(refused.join('\n')));
  model_panel_->set_texts(all, model_panel_->text());
  workbench_->set_texts(all, model_panel_->text());
}

bool MainWindow::open_session(const QString& path) {
  if (!workbench_->open_session(path)) return false;
  remember("recent/sessions", QFileInfo(path).absoluteFilePath());
  return true;
}

bool MainWindow::save_session(const QString& path) {
  workbench_->set_texts(model_panel_->text_files(), model_panel_->text());
  workbench_->set_capture_options(model_panel_->capture_options());
  workbench_->set_view(current_view());
  try {
    workbench_->set_train_settings(training_->form());
  } catch (const std::exception& e) {
    show_error(tr("Save session"), message_with_control(e));
    return false;
  }
  return workbench_->save_session(path);
}

void MainWindow::capture() {
  workbench_->set_texts(model_panel_->text_files(), model_panel_->text());
  workbench_->set_capture_options(model_panel_->capture_options());
  if (workbench_->capture() != 0) model_panel_->set_busy(true);
}

void MainWindow::show_view(View view) {
  for (int i = 0; i < kViewCount; ++i)
    if (view == kViews[i]) tabs_->setCurrentIndex(i);
}

View MainWindow::current_view() const {
  const int i = tabs_->currentIndex();
  return i >= 0 && i < kViewCount ? kViews[i] : View::Heads;
}

views::PlotPanel* MainWindow::current_figure() const {
  for (QWidget* w = QApplication::focusWidget(); w; w = w->parentWidget())
    if (auto* p = qobject_cast<views::PlotPanel*>(w)) return p;
  switch (current_view()) {
    case View::Heads: return heads_->panel(MapKind::Softmax);
    case View::Metrics: {
      const auto panels = metrics_->panels();
      return panels.empty() ? nullptr : panels.front();
    }
    case View::Dof: {
      const auto panels = dof_->panels();
      return panels.empty() ? nullptr : panels.front();
    }
    case View::Training: return training_->loss_panel();
    case View::Jobs: return nullptr;
  }
  return nullptr;
}

void MainWindow::open_paths(const QStringList& paths) {
  QStringList texts;
  for (const QString& p : paths) {
    const QString problem = dropped_problem(p);
    if (!problem.isEmpty()) {
      show_error(tr("Cannot open"), problem);
      continue;
    }
    switch (classify_dropped(p)) {
      case DroppedKind::ModelFolder:
      case DroppedKind::Llama2cFile: open_model(p); break;
      case DroppedKind::TextFile: texts << p; break;
      case DroppedKind::SessionFile: open_session(p); break;
      case DroppedKind::Unknown: break;
    }
  }
  if (!texts.isEmpty()) {
    add_text_files(texts);
    statusBar()->showMessage(tr("Added %n text file(s); Capture (Ctrl+R) to use them", "", int(texts.size())), 8000);
  }
}

void MainWindow::show_error(const QString& title, const QString& message) {
  // Window-modal but not blocking: the event loop (and every running job) carries on.
  auto* box = new QMessageBox(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box->setObjectName("error_box");
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setTextInteractionFlags(Qt::TextSelectableByMouse);
  box->open();
  emit errorShown(title, message);
}

QMessageBox* MainWindow::cancel_all_jobs() {
  // What one key would throw away: a training job loses its steps since the last checkpoint, a
  // long analysis its minutes. Short jobs (a map, a quick capture) are cancelled at once.
  constexpr double kLongSeconds = 5;
  QStringList long_jobs;
  for (const JobStatus& j : workbench_->jobs()) {
    if (j.state != JobState::Running && j.state != JobState::Queued) continue;
    const bool training = j.kind == JobKind::Distill || j.kind == JobKind::Finetune || j.kind == JobKind::Linearize;
    if (training || j.elapsed_s > kLongSeconds)
      long_jobs << QString("%1 (%2 s)").arg(QString::fromStdString(j.title)).arg(qRound(j.elapsed_s));
  }
  if (long_jobs.isEmpty()) {
    workbench_->cancel_all();
    return nullptr;
  }
  auto* box = new QMessageBox(QMessageBox::Question, tr("Cancel all jobs"),
                              tr("Cancel every running job?\n\n%1\n\nA training job resumes from its last checkpoint; "
                                 "the steps since then are lost.")
                                  .arg(long_jobs.join('\n')),
                              QMessageBox::Yes | QMessageBox::No, this);
  box->button(QMessageBox::Yes)->setText(tr("Cancel jobs"));
  box->button(QMessageBox::No)->setText(tr("Keep running"));
  for (auto b : {QMessageBox::Yes, QMessageBox::No}) box->button(b)->setIcon(QIcon());  // the style's yes/no icons read backwards here
  box->setDefaultButton(QMessageBox::No);  // a second Esc or Enter keeps them
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::finished, this, [this](int result) {
    if (result == QMessageBox::Yes) workbench_->cancel_all();
  });
  box->open();
  return box;
}

// ---- events ----

void MainWindow::closeEvent(QCloseEvent* event) {
  save_settings();
  workbench_->cancel_all();
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const QMimeData* m = event->mimeData();
  if (!m->hasUrls()) return;
  for (const QUrl& u : m->urls())
    if (!u.isLocalFile()) return;
  event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList paths;
  for (const QUrl& u : event->mimeData()->urls())
    if (u.isLocalFile()) paths << u.toLocalFile();
  event->acceptProposedAction();
  // After the drop returns: opening may show a dialog, which must not run inside the drag.
  QTimer::singleShot(0, this, [this, paths] { open_paths(paths); });
}

// ---- results into the views ----

void MainWindow::select_head(int layer, int head) {
  workbench_->select_head(layer, head);
  const Session& s = workbench_->session();
  heads_->select(s.layer, s.head);
  metrics_->select(s.layer, s.head);
  dof_->select(s.layer, s.head);
  update_commands();
}

void MainWindow::on_model_changed() {
  auto m = workbench_->model();
  if (!m) return;
  const ModelConfig& c = m->model->config();
  QStringList lines;
  const nlohmann::ordered_json shape = model_shape_json(c);
  for (const auto& [key, value] : shape.items()) {
    QString k = q(key);
    k.replace('_', ' ');
    lines << k + ": " + (value.is_string() ? q(value.get<std::string>()) : q(value.dump()));
  }
  lines << "parameters: " + human_count(c.n_params());
  if (!m->tokenizer_path.empty()) lines << "tokenizer: " + q(m->tokenizer_path);
  model_panel_->set_model(q(m->path), lines.join('\n'));
  model_panel_->set_max_seq_len(c.n_ctx);
  // The panel caps L at the context; the capture that follows takes the capped value.
  workbench_->set_capture_options(model_panel_->capture_options());
  model_label_->setText(QString("%1 · %2 · %3 layers × %4 heads, head dim %5")
                            .arg(model_name(workbench_->session().model), q(c.arch_name))
                            .arg(c.n_layer)
                            .arg(c.n_head)
                            .arg(c.head_dim));
  remember("recent/models", q(workbench_->session().model));
  update_title();
}

void MainWindow::clear_views(const QString& note) {
  applying_ = true;
  heads_->clear(note);
  metrics_->clear(note);
  dof_->set_spectra(nullptr);
  applying_ = false;
}

void MainWindow::redraw_results() {
  if (!workbench_->model()) model_label_->setText(tr("no model"));
  on_model_changed();
  on_capture_ready();
  if (workbench_->spectra()) on_spectra_ready();
  if (workbench_->dof_state()) on_dof_state();
  if (workbench_->has_analysis()) on_analysis_ready();
  if (workbench_->head_detail()) on_head_detail_ready();
  if (!workbench_->thumbnails().empty()) heads_->set_thumbnails(workbench_->thumbnails());
}

void MainWindow::on_capture_ready() {
  auto cap = workbench_->capture_store();
  const Session& s = workbench_->session();
  // A new capture (or none): the values, maps and metrics of the one before go; the views say what
  // is being computed until this capture's arrive.
  if (workbench_->model()) {
    const QString name = QFileInfo(q(workbench_->model()->path)).fileName();
    clear_views(cap ? tr("Computing the metrics of %1…").arg(name) : tr("No capture of %1 yet: press Capture").arg(name));
  }
  applying_ = true;
  update_dof_note(/*new_capture=*/true);
  if (cap) {
    heads_->set_shape(cap->num_layers(), cap->num_heads(), cap->num_seqs());
    heads_->grid()->set_head_types(head_type_letters(workbench_->model().get()));
    heads_->set_seq(s.seq);
    heads_->select(s.layer, s.head);
    metrics_->select(s.layer, s.head);
    dof_->select(s.layer, s.head);
    if (cap->num_seqs() < s.capture.num_seqs) {
      // Fewer windows than asked: the text is short (the capture took what it has).
      const QString note = tr("%1 windows of %2 tokens: the text is short").arg(cap->num_seqs()).arg(cap->seq_len());
      capture_label_->setText(note);
      model_panel_->set_capture_note(note);
      statusBar()->showMessage(note, 15000);
    } else {
      capture_label_->setText(QString("captured %1 × %2 tokens").arg(cap->num_seqs()).arg(cap->seq_len()));
      model_panel_->set_capture_note({});
    }
  } else {
    heads_->set_thumbnails({});
    capture_label_->setText(tr("nothing captured"));
    model_panel_->set_capture_note({});
  }
  applying_ = false;
  model_panel_->set_busy(workbench_->capture_running());
  update_commands();
  update_training_allocation();
  update_training();
}

void MainWindow::on_spectra_ready() {
  const Session& s = workbench_->session();
  applying_ = true;
  dof_->set_spectra(workbench_->spectra());
  dof_->set_controls(s.lambda, s.budget, s.strategy);
  dof_->set_state_share(s.state_share);
  applying_ = false;
  update_commands();
}

void MainWindow::on_dof_state() {
  if (const auto& st = workbench_->dof_state()) dof_->show_state(*st);
  update_training_allocation();
  // The grid's DoF tint follows when the heads view is next shown: the sliders live on the DoF
  // tab, and their path to the redrawn bars stays as short as it can be.
  if (current_view() == View::Heads) update_metrics_for_grid();
  else grid_stale_ = true;
  update_commands();
}

void MainWindow::on_analysis_ready() {
  auto cap = workbench_->capture_store();
  if (!cap) return;
  // The metrics view's name of the measured map: the feature map, "untrained" before a learned map
  // (at its random initialization here), "+ window W" for a hybrid.
  const AnalysisOptions& a = workbench_->session().analysis;
  QString map = q(a.feature_map);
  const auto learned = trainable_map_names();
  if (std::find(learned.begin(), learned.end(), a.feature_map) != learned.end()) map = tr("untrained %1").arg(map);
  if (!map.isEmpty() && a.decay != Decay::None) map += tr(", decayed");
  if (!map.isEmpty() && a.window > 0) map += tr(" + window %1").arg(a.window);
  // The panels' titles name the map; the line above them says all of it.
  metrics_->set_analysis(workbench_->analysis(), cap->num_layers(), cap->num_heads(), q(a.feature_map), map);
  update_metrics_for_grid();
  update_commands();
}

void MainWindow::on_head_detail_ready() {
  auto view = workbench_->head_detail();
  heads_->set_head_detail(view);
  if (view) metrics_->set_scatter(monotonicity_scatter(*view, 4000, workbench_->session().analysis.seed), view->layer, view->head);
}

void MainWindow::update_metrics_for_grid() {
  auto cap = workbench_->capture_store();
  if (!cap) return;
  const int S = cap->num_layers(), H = cap->num_heads();
  const auto& analysis = workbench_->analysis();
  const DofAllocation* dof = workbench_->dof_state() ? &*workbench_->dof_state() : nullptr;
  std::map<GridMetric, HeadValues> m;
  for (GridMetric metric : available_grid_metrics(analysis, dof))
    m[metric] = grid_metric_values(metric, analysis, dof, S, H);
  grid_stale_ = false;
  if (m.empty()) return;
  applying_ = true;
  heads_->set_metrics(std::move(m));
  heads_->set_metric(workbench_->session().metric);
  applying_ = false;
}

void MainWindow::on_session_loaded() {
  const Session& s = workbench_->session();
  applying_ = true;
  QStringList files;
  for (const std::string& f : s.texts) files << q(f);
  model_panel_->set_texts(files, q(s.text));
  heads_->set_head_detail(nullptr);
  dof_->set_spectra(nullptr);
  applying_ = false;
  show_choices();
  show_view(s.view);
  update_title();
}

void MainWindow::update_commands() {
  heads_->set_commands(q(workbench_->maps_command()));
  metrics_->set_commands(q(workbench_->metrics_command()));
  dof_->set_commands(q(workbench_->dof_command()), q(workbench_->allocate_command()));
}

void MainWindow::update_title() {
  QString title = "attnscope";
  const std::string& model = workbench_->session().model;
  if (!model.empty()) title += " — " + model_name(model);
  const QString session = workbench_->session_path();
  title += " — " + (session.isEmpty() ? tr("unsaved session") : QFileInfo(session).fileName());
  setWindowTitle(title);
}

// While a capture has no spectra the DoF view says why: they are being computed, or their job
// ended without them.
void MainWindow::update_dof_note(bool new_capture) {
  if (workbench_->spectra()) return;
  if (!workbench_->capture_store() && workbench_->capture_running())
    dof_->show_pending(tr("Capturing: the DoF spectra follow"));
  else if (!workbench_->capture_store())
    dof_->set_spectra(nullptr);
  else if (new_capture || workbench_->spectra_running() || workbench_->capture_running())
    dof_->show_pending(tr("Computing the DoF spectra…"));  // (a new capture's spectra job starts next)
  else
    dof_->show_pending(tr("No DoF spectra: their job did not finish (see the Jobs tab;\nAnalysis > Recompute spectra)"));
}

void MainWindow::update_jobs() {
  update_dof_note();
  const std::vector<JobStatus> jobs = workbench_->jobs();
  jobs_->set_jobs(jobs);
  const JobStatus* shown = nullptr;
  int running = 0;
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it)
    if (!it->finished()) {
      if (!shown) shown = &*it;
      ++running;
    }
  model_panel_->set_busy(workbench_->capture_running());
  if (!shown) {
    status_job_ = 0;
    progress_->hide();
    cancel_->hide();
    job_label_->clear();
    jobs_timer_->stop();
    return;
  }
  status_job_ = shown->id;
  progress_->show();
  cancel_->show();
  progress_->setValue(int(shown->fraction * 1000));
  progress_->setFormat(QString("%1%").arg(int(shown->fraction * 100)));
  QString text = q(shown->title) + (shown->step.empty() ? QString() : ": " + q(shown->step));
  if (shown->seconds_left >= 0) text += ", " + q(time_left_text(shown->seconds_left));
  if (running > 1) text += tr(" (+%1 more running)").arg(running - 1);
  job_label_->setText(text);
}

void MainWindow::start_training() {
  TrainSettings form;
  try {
    form = training_->form();
  } catch (const std::exception& e) {
    show_error(tr("Train"), message_with_control(e));
    return;
  }
  if (workbench_->start_distill(form) != 0)
    statusBar()->showMessage(tr("Training in %1 (progress in the Jobs tab)").arg(workbench_->run_dir()), 8000);
}

void MainWindow::start_linearize() {
  TrainSettings form;
  try {
    form = training_->form();
  } catch (const std::exception& e) {
    show_error(tr("Linearize"), message_with_control(e));
    return;
  }
  if (workbench_->start_linearize(form) != 0)
    statusBar()->showMessage(tr("Linearizing in %1 (progress in the Jobs tab)").arg(workbench_->run_dir()), 8000);
}

void MainWindow::update_training_allocation() {
  const auto& st = workbench_->dof_state();
  if (!st) {
    training_->set_allocation(tr("(the DoF view's spectra are not computed yet)"), false);
    return;
  }
  const Session& s = workbench_->session();
  QString dims;
  for (const int64_t m : st->allocation.layer_dims()) dims += (dims.isEmpty() ? "" : " ") + QString::number(m);
  QString text = tr("%1, C = %2, λ = %3: M = %4")
                     .arg(q(alloc_strategy_name(s.strategy)))
                     .arg(s.budget)
                     .arg(q(lambda_arg(s.lambda)), dims);
  if (s.strategy == AllocStrategy::PerHead) text += tr(" (the layer's largest; every head its own M)");
  if (!st->allocation.types.empty()) {  // the DoF view's "Keep exact" share: Linearize takes it as --state-share
    const int64_t kept = softmax_head_count(st->allocation.types);
    text += tr("; %1 heads kept softmax (state share %2 of the key-value cache)").arg(kept).arg(s.state_share, 0, 'g', 3);
  }
  training_->set_allocation(text, true);
}

void MainWindow::update_training() {
  const std::optional<RunState> state = workbench_->run_state();
  const bool lin = workbench_->linearize_run();
  const RunMetrics& m = workbench_->training_metrics();
  const FinetuneMetrics& f = workbench_->finetune_metrics();
  const auto& report = workbench_->linearize_report();
  const qint64 step = m.last_step(), steps = workbench_->run_steps();
  const qint64 ft_step = f.last_step(), ft_steps = workbench_->finetune_steps();
  // The words are core's (run_status.h), as `attnscope jobs` says them; the numbers are what the
  // window follows live.
  RunStatus rs;
  rs.state = state;
  rs.linearize = lin;
  rs.step = step, rs.steps = steps, rs.finetune_step = ft_step, rs.finetune_steps = ft_steps;
  if (state == RunState::Killed && !lin) {
    try {
      rs.checkpoint_step = workbench_->checkpoint_step();
    } catch (const std::exception& e) {
      rs.checkpoint_error = e.what();
    }
  }
  if (report && !report->lengths.empty()) rs.result = report->lengths.back();
  rs.validation_kl = final_validation_kl(m);  // the run's one number
  const QString status = QString::fromStdString(run_status_text(rs));
  const bool idle = !workbench_->training_running();
  training_->set_frozen(!idle);  // a running job's settings are what the form shows (issue 26)
  const bool can_train = workbench_->capture_store() != nullptr && idle;
  const bool can_linearize = workbench_->model() != nullptr && idle;
  training_->set_run(workbench_->run_dir(), status, can_linearize, can_train, workbench_->can_resume());
  training_->set_final_model(workbench_->final_model());
  training_->set_curves(m, steps);
  training_->set_finetune_curves(f, ft_steps);
  // The table belongs to the run it was made of: gone with a new run or a resume.
  if (report) {
    const Table t = linearize_table(*report);
    if (t.rows != training_->table().rows || t.caption != training_->table().caption) training_->set_comparison(t, report->layer_kl);
  } else if (!training_->table().rows.empty()) {
    training_->set_comparison({}, {});
  }
  training_->set_command(q(workbench_->run_command()));
}

void MainWindow::open_job_result(int id) {
  for (const JobStatus& j : workbench_->jobs()) {
    if (j.id != id) continue;
    switch (j.kind) {
      case JobKind::Report: {
        const auto it = report_dirs_.find(id);
        if (it != report_dirs_.end() && j.state == JobState::Succeeded)
          QDesktopServices::openUrl(QUrl::fromLocalFile(it->second + "/index.md"));
        break;
      }
      case JobKind::Metrics: show_view(View::Metrics); break;
      case JobKind::Spectra: show_view(View::Dof); break;
      case JobKind::Model:
      case JobKind::Capture:
      case JobKind::Maps: show_view(View::Heads); break;
      case JobKind::Distill:
      case JobKind::Convert:
      case JobKind::Eval:
      case JobKind::Finetune:
      case JobKind::Linearize: show_view(View::Training); break;
      case JobKind::Session: break;
    }
  }
}

// ---- dialogs ----

void MainWindow::export_report_dialog() {
  const QString start = QDir::home().filePath(model_name(workbench_->session().model) + "-report");
  const QString dir = QFileDialog::getSaveFileName(this, tr("Export report to a folder (replaced only by a complete report)"),
                                                   start, tr("Report folder (*)"));
  if (dir.isEmpty()) return;
  const int id = workbench_->export_report(dir);
  if (id) {
    report_dirs_[id] = dir;
    statusBar()->showMessage(tr("Writing the report to %1 (see the Jobs tab)").arg(dir), 5000);
  }
}

void MainWindow::export_figure_dialog() {
  views::PlotPanel* panel = current_figure();
  if (!panel) {
    show_error(tr("Export figure"),
               tr("The %1 view has no figure to export: switch to Heads, Metrics, DoF or Train.").arg(view_name(current_view())));
    return;
  }
  panel->export_dialog();
}

void MainWindow::workspace_dialog() {
  auto* d = new WorkspaceDialog(workbench_->workspace_root(), workbench_->workspace_in_use(), this);
  d->setAttribute(Qt::WA_DeleteOnClose);
  connect(d, &WorkspaceDialog::removed, this, [this](quint64 bytes) {
    statusBar()->showMessage(tr("Removed %1 from the workspace").arg(q(human_bytes(bytes))), 8000);
  });
  connect(d, &WorkspaceDialog::failed, this, [this](const QString& message) { show_error(tr("Workspace"), message); });
  d->open();
}

void MainWindow::show_shortcuts() {
  QString html = "<table cellspacing=6>";
  for (QAction* a : findChildren<QAction*>()) {
    if (a->shortcut().isEmpty()) continue;
    QString text = a->text();
    text.remove('&');
    html += "<tr><td><b>" + a->shortcut().toString(QKeySequence::NativeText).toHtmlEscaped() + "</b></td><td>" +
            text.toHtmlEscaped() + "</td></tr>";
  }
  html += "</table><p>Click a thumbnail, a heatmap cell or a DoF cell to select a head; drag the lambda and budget "
          "sliders on the DoF tab; right-click any plot to export it or copy its command line.</p>";
  auto* box = new QMessageBox(QMessageBox::Information, tr("Keyboard shortcuts"), html, QMessageBox::Ok, this);
  box->setObjectName("shortcuts_box");
  box->setTextFormat(Qt::RichText);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

void MainWindow::show_about() {
  auto* box = new QMessageBox(
      QMessageBox::NoIcon, tr("About attnscope"),
      tr("<h3>attnscope %1</h3><p>A workbench for turning softmax-attention transformers into linear-attention "
         "ones: inspect heads, measure their degrees of freedom, allocate feature dimensions (Algorithm 1), and "
         "export figures and tables.</p><p>Everything shown here is also an <tt>attnscope</tt> command: "
         "right-click a plot and choose “Copy as command”.</p>")
          .arg(ATTNSCOPE_VERSION),
      QMessageBox::Ok, this);
  box->setIconPixmap(windowIcon().pixmap(64, 64));
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

}  // namespace attnscope::gui

#include "moc_main_window.cpp"
