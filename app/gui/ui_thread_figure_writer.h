// Figures drawn on the UI thread for work running on a job thread. QCustomPlot is a QWidget, and
// widgets may only be created on the thread that runs the QApplication; the report job writes its
// figures through this writer, which hands each one to the UI thread and waits for it.
#pragma once
#include <functional>

#include "attnscope/base/figure.h"

namespace attnscope::gui {

class UiThreadFigureWriter : public FigureWriter {
 public:
  // Draws with views::QtFigureWriter on the QApplication's thread (directly when called there).
  // While it waits, `cancelled` is polled: once it returns true the wait ends with Cancelled (the
  // figure is then not drawn), so a job never holds up a window that is closing and waiting for
  // the job's thread.
  explicit UiThreadFigureWriter(std::function<bool()> cancelled = nullptr) : cancelled_(std::move(cancelled)) {}
  void heatmap(const HeatmapFigure& fig, const std::string& path) const override;
  void line(const LineFigure& fig, const std::string& path) const override;

 private:
  std::function<bool()> cancelled_;
};

}  // namespace attnscope::gui
