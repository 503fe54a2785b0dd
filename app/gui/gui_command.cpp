// `attnscope gui`: opens the workbench window (app/gui/main_window.h) on the bundled model and
// sample texts, a model and texts of the user's, or a session file, with the analysis already
// running. --screenshot FILE waits for the first analysis (capture, spectra, metrics and the
// selected head's maps; with --view training also a linearize run with the Train form's settings,
// up to its held-out table), shows the chosen view, saves a picture of the whole window and exits: it
// runs without a display (offscreen), which is how the README's screenshots are made. A session that
// does not load, and any error the window shows while --screenshot waits, end it at once with exit 1.
#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QPixmap>
#include <QScrollArea>
#include <QTabWidget>
#include <QString>
#include <QTimer>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "attnscope/base/error.h"
#include "attnscope/workbench/gui_options.h"
#include "attnscope/workbench/session.h"
#include "figure_export.h"
#include "cli/common.h"
#include "main_window.h"
#include "model_panel.h"

namespace fs = std::filesystem;

namespace attnscope::cli {

namespace {

bool has_display() {
  for (const char* var : {"DISPLAY", "WAYLAND_DISPLAY"})
    if (const char* v = std::getenv(var); v && *v) return true;
  return false;
}

// Saves a picture of the window once the first analysis is in; quits the event loop with 0, or
// with 1 and *failure set on an error, a failed save or the timeout.
void arm_screenshot(gui::MainWindow& w, const GuiOptions& a, std::string* failure) {
  const QString path = QString::fromStdString(a.screenshot);
  const View view = parse_view(a.view);
  // Queued: an error shown before the event loop runs (QApplication::exit does nothing then) ends
  // it as soon as it starts, instead of the timeout. The first failure is the one said.
  auto quit_with = [failure](const std::string& why) {
    if (failure->empty()) *failure = why;
    QMetaObject::invokeMethod(qApp, [] { QApplication::exit(1); }, Qt::QueuedConnection);
  };
  QObject::connect(&w, &gui::MainWindow::errorShown, &w, [quit_with](const QString& title, const QString& message) {
    quit_with((title + ": " + message).toStdString());
  });
  auto shoot = [&w, path, view, quit_with] {
    w.show_view(view);
    // Wide enough that the view needs no scroll bar (the views scroll in a narrower window).
    if (auto* scroll = qobject_cast<QScrollArea*>(w.tabs()->currentWidget()); scroll && scroll->widget()) {
      const int need = w.width() - scroll->viewport()->width() + scroll->widget()->minimumSizeHint().width();
      if (need > w.width()) w.resize(need, w.height());
    }
    // Let the view lay out and draw (QCustomPlot replots are queued) before the picture is taken.
    QTimer::singleShot(700, &w, [&w, path, quit_with] {
      QApplication::processEvents();
      const QPixmap shot = w.grab();
      if (shot.isNull()) return quit_with("the window could not be drawn");
      if (!shot.save(path, "PNG")) return quit_with(path.toStdString() + ": cannot write the screenshot");
      std::cerr << "screenshot of the " << view_name(w.current_view()) << " view (" << shot.width() << " x "
                << shot.height() << ") saved to " << path.toStdString() << "\n";
      QApplication::exit(0);
    });
  };
  if (view != View::Training) {
    QObject::connect(w.workbench(), &gui::Workbench::pipelineFinished, &w, shoot);
  } else {
    // The train view with something in it: a session's finished run as it is; else, once the
    // analysis is in, linearize with the form's settings, and the picture is taken when the
    // held-out table is shown.
    gui::Workbench* wb = w.workbench();
    auto shot = std::make_shared<bool>(false);
    QObject::connect(wb, &gui::Workbench::pipelineFinished, &w, [&w, wb, shoot, shot] {
      w.show_view(View::Training);
      if (wb->linearize_report()) {
        if (!*shot) *shot = true, shoot();
        return;
      }
      w.start_linearize();
    });
    QObject::connect(wb, &gui::Workbench::trainingChanged, &w, [wb, shoot, shot] {
      if (*shot || !wb->linearize_report()) return;
      *shot = true;
      shoot();
    });
  }
  QTimer::singleShot(int(a.timeout * 1000), &w, [quit_with, a] {
    quit_with("the first analysis did not finish within " + number_arg(a.timeout) + " s");
  });
}

void run_gui(GuiOptions& a) {
  if (!a.screenshot.empty()) {
    const fs::path parent = fs::absolute(a.screenshot).parent_path();
    if (!fs::is_directory(parent)) fail(a.screenshot, "the folder for the screenshot does not exist");
    if (fs::path(a.screenshot).extension() != ".png") fail(a.screenshot, "screenshots are PNG files: name it FILE.png");
    if (!has_display() && !std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  } else if (!has_display() && !std::getenv("QT_QPA_PLATFORM")) {
    fail("gui",
         "no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set). Run it in a desktop "
         "session, over `ssh -X`, or in a virtual display (`xvfb-run -a attnscope gui`). Without a display, "
         "`attnscope gui --screenshot FILE.png --view heads|metrics|dof|jobs|training` saves a picture of the window and "
         "`attnscope report --out DIR` writes the whole analysis");
  }
  // With --screenshot a session that does not load fails here, naming the file and the problem
  // (the picture would wait for an analysis that never starts). A window opens anyway and says it
  // in a message box (and here), so the user can open another.
  if (!a.session.empty() && !a.screenshot.empty()) {
    if (!fs::is_regular_file(a.session)) fail(a.session, "no such session file");
    load_session(a.session);
  }

  views::ensure_runtime_dir();
  static int argc = 1;
  static char name[] = "attnscope";
  static char* argv[] = {name, nullptr};
  QApplication app(argc, argv);
  QApplication::setOrganizationName("attnscope");
  QApplication::setApplicationName("attnscope");
  QApplication::setApplicationVersion(ATTNSCOPE_VERSION);
  QApplication::setDesktopFileName("attnscope");

  // A screenshot shows the defaults (or the session), not this machine's last window.
  gui::MainWindow w(nullptr, /*use_settings=*/a.screenshot.empty());
  gui::Workbench::prune_workspaces(w.workbench()->workspace_root(), 14);
  std::string failure;
  if (!a.screenshot.empty()) {
    w.resize(1680, 1000);  // the README's pictures: one size, whatever the last session's window was
    arm_screenshot(w, a, &failure);
  }
  if (a.seq_len > 0 || a.num_seqs > 0) {
    CaptureOptions o = w.model_panel()->capture_options();
    if (a.seq_len > 0) o.seq_len = a.seq_len;
    if (a.num_seqs > 0) o.num_seqs = a.num_seqs;
    w.model_panel()->set_capture_options(o);
  }
  if (!a.session.empty()) {
    std::string session_error;
    const QMetaObject::Connection c = QObject::connect(
        &w, &gui::MainWindow::errorShown, &w, [&session_error](const QString&, const QString& m) { session_error = m.toStdString(); });
    const bool opened = w.open_session(QString::fromStdString(a.session));
    QObject::disconnect(c);
    if (!opened) {
      if (!a.screenshot.empty()) throw Error(failure.empty() ? a.session + ": the session could not be opened" : failure);
      std::cerr << "attnscope: " << (session_error.empty() ? a.session + ": the session could not be opened" : session_error)
                << " (the window says so; open another session or a model there)\n";
    }
  } else {
    std::vector<std::string> texts = a.texts;
    if (texts.empty()) {
      try {
        texts = default_texts();
      } catch (const Error&) {  // none bundled: the window opens without texts and says so below
      }
    }
    QStringList files;
    for (const std::string& t : texts) files << QString::fromStdString(fs::absolute(t).string());
    const std::string model = fs::exists(a.model.model) ? fs::absolute(a.model.model).string() : a.model.model;
    if (files.isEmpty())
      std::cerr << "gui: no sample texts found under " << resources_dir() << "/texts: add one in the window\n";
    w.open_default(QString::fromStdString(model), files, QString::fromStdString(a.model.tokenizer));
    w.show_view(parse_view(a.view));
  }
  w.show();
  const int rc = app.exec();
  if (rc != 0) fail("gui", failure.empty() ? "the window closed with an error" : failure);
}

}  // namespace

void register_gui(CLI::App& app) {
  auto* cmd = app.add_subcommand("gui", "Open the attnscope workbench window (or save a screenshot of it)");
  auto a = std::make_shared<GuiOptions>();
  a->model.model = default_model();
  add_option_table(cmd, gui_option_table(), a);  // the window computes in float32: no --dtype
  exclusive(cmd, {"--session", "--text"});
  cmd->callback([a] { run_gui(*a); });
}

}  // namespace attnscope::cli
