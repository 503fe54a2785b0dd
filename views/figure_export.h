// Figures of core results, drawn with QCustomPlot and saved as PNG, SVG or PDF (by extension).
// The GUI shows the same plots; the CLI (`maps`, `report`) saves them without a window.
// Plain data in, no tensors: views draw what core computed and nothing else.
#pragma once
#include <string>
#include <vector>

namespace attnscope::views {

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<double> values;  // row-major
  double at(int r, int c) const { return values[size_t(r) * cols + c]; }
};

struct HeatmapFigure {
  std::string title;
  Matrix matrix;                       // row = query position, col = key position
  std::vector<std::string> labels;     // token labels for both axes (may be empty)
  std::string value_label = "weight";  // colour-scale caption
  bool diverging = false;              // symmetric blue-white-red scale around 0 (differences)
};

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct LineFigure {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log_x = false, log_y = false;
  bool bars = false;  // draw the (first) series as bars, x = categories 0..n-1
  bool points = false;  // scatter: markers only, no connecting line
};

// Creates a QApplication when none exists, on the offscreen platform when there is no display, so
// command-line programs can render. Returns false (and says why in *why) when Qt cannot start.
bool ensure_qt(std::string* why);

// Save by extension: .png, .svg or .pdf. Throws attnscope::Error naming the path on failure.
void save_heatmap(const HeatmapFigure& fig, const std::string& path);
void save_line_figure(const LineFigure& fig, const std::string& path);

}  // namespace attnscope::views
