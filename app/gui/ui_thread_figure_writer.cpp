#include "ui_thread_figure_writer.h"

#include <QCoreApplication>
#include <QMetaObject>
#include <QThread>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "attnscope/base/error.h"
#include "figure_export.h"

namespace attnscope::gui {

namespace {

// What the job thread and the UI thread share for one figure. The UI thread's call may run after
// the job stopped waiting (cancelled): it then finds `abandoned` and draws nothing.
struct Handoff {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, abandoned = false;
  std::exception_ptr failure;
};

// Runs `draw` on the application's thread and rethrows here what it threw there.
void on_ui_thread(std::function<void()> draw, const std::function<bool()>& cancelled) {
  QCoreApplication* app = QCoreApplication::instance();
  if (!app) throw Error("figures: no QApplication is running");
  if (QThread::currentThread() == app->thread()) {
    draw();
    return;
  }
  auto h = std::make_shared<Handoff>();
  QMetaObject::invokeMethod(
      app,
      [h, draw = std::move(draw)] {
        {
          std::lock_guard<std::mutex> lock(h->mu);
          if (h->abandoned) return;
        }
        std::exception_ptr failure;
        try {
          draw();
        } catch (...) {
          failure = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(h->mu);
        h->failure = failure;
        h->done = true;
        h->cv.notify_all();
      },
      Qt::QueuedConnection);
  std::unique_lock<std::mutex> lock(h->mu);
  while (!h->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return h->done; })) {
    if (cancelled && cancelled()) {
      h->abandoned = true;
      throw Cancelled();
    }
  }
  if (h->failure) std::rethrow_exception(h->failure);
}

}  // namespace

void UiThreadFigureWriter::heatmap(const HeatmapFigure& fig, const std::string& path) const {
  on_ui_thread([fig, path] { views::save_heatmap(fig, path); }, cancelled_);
}

void UiThreadFigureWriter::line(const LineFigure& fig, const std::string& path) const {
  on_ui_thread([fig, path] { views::save_line_figure(fig, path); }, cancelled_);
}

}  // namespace attnscope::gui
