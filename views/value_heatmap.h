// A heatmap whose cells carry their value as text (a paper's table as a picture): layer x head
// (the metrics view's entropies, monotonicity, KL; the DoF view's Table 2) or head x mixer class.
// Rows go down the page like a table. One widget for every such figure: the values, their colour
// range and the printed text come from core; it draws them, sizes the texts to the cells (one
// decimal fewer, then none, as cells shrink), frames the selected cell (or row) in an outline that
// reads on every colour, and says which cell was clicked or hovered. Large grids (32 x 32 heads)
// zoom and pan (wheel, drag; double-click: the whole map), the tick labels and the texts following
// the cells in view: zoomed in far enough the numbers appear; a hover names the cell and its value.
#pragma once
#include <QPoint>
#include <QString>
#include <QStringList>
#include <functional>
#include <string>
#include <vector>

#include "plot_panel.h"

class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
class QCPItemText;
class QCPTextElement;
class QMouseEvent;

namespace attnscope::views {

class ValueHeatmap : public PlotPanel {
  Q_OBJECT
 public:
  // `value_label`: the colour bar's caption ("entropy (nats)", "DoF").
  ValueHeatmap(const QString& title, const QString& value_label, QWidget* parent = nullptr);

  // values [rows][cols] (NaN: none, printed "–"), the row and column names (tick labels), the
  // colour range lo..hi and the decimals printed. Clears any note.
  // `extras`: the cell texts, bold and marked cells of the setters below in one pass (the DoF
  // view's lambda slider redraws its 1024 cells once, not once per setter).
  struct Extras {
    std::vector<std::vector<QString>> texts;
    std::vector<std::vector<bool>> bold, marked;
  };
  void set_values(std::vector<std::vector<double>> values, QStringList rows, QStringList cols, double lo, double hi,
                  int decimals, Extras extras = {});
  // What is printed in each cell instead of the number (the DoF view's "12.3*"), [rows][cols]; bold
  // and outlined (dashed, in the accent colour) cells. Set after set_values; empty: none.
  void set_cell_texts(std::vector<std::vector<QString>> texts);
  void set_bold(std::vector<std::vector<bool>> bold);
  void set_marked(std::vector<std::vector<bool>> marked);
  // A line of text under the map (a footnote: what bold and '*' mean).
  void set_footnote(const QString& text);
  // A message instead of the map ("No analysis yet", "Computing the DoF spectra…"): the cells, the
  // colour bar and the selection go until set_values.
  void show_note(const QString& text);
  QString note() const;  // "" while values are drawn

  void select(int row, int col);  // frames one cell (panning a zoomed map to it); out of range: no frame
  void select_row(int row);       // frames a whole row (the mixer table's head)

  // Zoom: the cells [row0, row0 + rows) x [col0, col0 + cols) fill the map (clamped to the grid),
  // as a user's wheel and drag would; reset_zoom shows the whole grid (double-click does too).
  void zoom_to(int row0, int col0, int rows, int cols);
  void reset_zoom();
  bool zoomed() const;
  // The cells in view: first and last row and column (inclusive).
  void visible_cells(int* row0, int* row1, int* col0, int* col1) const;
  // Whether the cell texts are drawn now (false when the cells are too small for them).
  bool texts_shown() const { return !texts_.empty() && font_px_ >= kMinTextPx; }
  int text_pixels() const { return font_px_; }
  // How many times the cells were filled (set_values): the DoF view's tests count redraws.
  int fills() const { return fills_; }
  static constexpr int kMinTextPx = 8;  // cell texts below this size are hidden

  const std::vector<std::vector<double>>& values() const { return values_; }
  int rows() const { return int(values_.size()); }
  int cols() const { return values_.empty() ? 0 : int(values_.front().size()); }
  QString cell_text(int row, int col) const;  // "" outside the grid or under a note
  QCPColorMap* colour_map() const { return map_; }
  QCPColorScale* colour_scale() const { return scale_; }
  // The cell under a widget position of plot(); false outside the cells.
  bool cell_at(const QPoint& pos, int* row, int* col) const;
  // The values as CSV: `corner`, the column names; a row per row name (Error when there are none).
  std::string values_csv(const std::string& corner) const;
  // What a hover shows ("" hides the tooltip); default: the row and column names and the value.
  void set_tooltip(std::function<QString(int row, int col)> tooltip) { tooltip_ = std::move(tooltip); }

 signals:
  void cellClicked(int row, int col);

 private:
  void label_axes();
  void clamp_ranges();
  void update_hint();
  void apply_extras(Extras extras);
  bool fit_texts();  // true when the texts' size or decimals changed
  void frame(double x0, double y0, double x1, double y1);
  void mouse_pressed(QMouseEvent* e);
  void mouse_released(QMouseEvent* e);
  void mouse_moved(QMouseEvent* e);

  QCPColorMap* map_ = nullptr;
  QCPColorScale* scale_ = nullptr;
  QCPItemText* note_ = nullptr;
  QCPTextElement* footnote_ = nullptr;
  QString footnote_text_;
  QCPItemRect *frame_outer_ = nullptr, *frame_inner_ = nullptr;
  std::vector<QCPItemText*> texts_;  // [r * cols + c]
  std::vector<QCPItemRect*> marks_;
  std::vector<std::vector<double>> values_;
  std::vector<std::vector<QString>> custom_;  // set_cell_texts
  std::vector<std::vector<bool>> bold_;
  QStringList row_names_, col_names_;
  double lo_ = 0, hi_ = 1;
  int decimals_ = 2;
  // The cell texts' size now; kUnfitted: not yet sized to the cells (set_values, set_cell_texts,
  // set_bold), so that fit_texts sizes, fills and shows or hides every text whatever size it finds.
  // Cells under a pixel (512 heads of the mixer panel) give size 0; with 0 as the mark of "unfitted"
  // fit_texts took that for "unchanged" and left the new texts visible at the default font: black
  // and white vertical stripes of overlapping numbers over the map.
  static constexpr int kUnfitted = -1;
  int font_px_ = 0;
  int shown_decimals_ = 0;  // decimals printed now
  std::function<QString(int, int)> tooltip_;
  int fills_ = 0;
  bool clamping_ = false;
  QPoint press_{-1, -1};  // where the left button went down
};

}  // namespace attnscope::views
