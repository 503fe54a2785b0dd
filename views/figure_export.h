// Figures of core results, drawn with QCustomPlot and saved as PNG, SVG or PDF (by extension).
// The GUI shows the same plots; the CLI (`maps`, `report`) saves them without a window.
// Plain data in (attnscope/figure.h), no tensors: views draw what core computed and nothing else.
#pragma once
#include <string>
#include <vector>

#include "attnscope/base/figure.h"

class QCustomPlot;

namespace attnscope::views {

using attnscope::HeatmapFigure;
using attnscope::LineFigure;
using attnscope::Matrix;
using attnscope::Series;

// Sets XDG_RUNTIME_DIR to /tmp/runtime-UID (made 0700) when unset, as Qt would, so Qt does not
// warn about it on every start (headless machines, CI, root shells). Call before QApplication.
void ensure_runtime_dir();

// Creates a QApplication when none exists, on the offscreen platform when there is no display, so
// command-line programs can render. Returns false (and says why in *why) when Qt cannot start.
bool ensure_qt(std::string* why);

// Save by extension: .png, .svg or .pdf. Throws attnscope::Error naming the path on failure.
void save_heatmap(const HeatmapFigure& fig, const std::string& path);
void save_line_figure(const LineFigure& fig, const std::string& path);

// Saves a plot as drawn, by extension (.png at 2x, .svg, .pdf), through PATH.tmp and a rename.
// Throws attnscope::Error naming the path.
void save_plot(QCustomPlot& plot, const std::string& path, int width, int height);

// The FigureWriter core's report and map export use in the Qt build.
class QtFigureWriter : public FigureWriter {
 public:
  void heatmap(const HeatmapFigure& fig, const std::string& path) const override { save_heatmap(fig, path); }
  void line(const LineFigure& fig, const std::string& path) const override { save_line_figure(fig, path); }
};

}  // namespace attnscope::views
