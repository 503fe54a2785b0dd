// Figures as plain data: what core computed, laid out for a plot, with no drawing code. views/
// draws them (QCustomPlot, PNG/SVG/PDF); core hands them to a FigureWriter that the program
// supplies, so the report writes figures in the Qt build and only tables without it.
#pragma once
#include <string>
#include <vector>

namespace attnscope {

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
  bool bars = false;    // draw the (first) series as bars, x = categories 0..n-1
  bool points = false;  // scatter: markers only, no connecting line
};

// Saves figures by the path's extension (.png, .svg, .pdf); throws Error naming the path.
class FigureWriter {
 public:
  virtual ~FigureWriter() = default;
  virtual void heatmap(const HeatmapFigure& fig, const std::string& path) const = 0;
  virtual void line(const LineFigure& fig, const std::string& path) const = 0;
};

}  // namespace attnscope
