// A heatmap whose cells carry their value as text (a paper's table as a picture): layer x head
// (the metrics view's entropies, monotonicity, KL; the DoF view's Table 2) or head x mixer class.
// Rows go down the page like a table. One widget for every such figure: the values, their colour
// range and the printed text come from core; it draws them, sizes the texts to the cells (one
// decimal fewer, then none, as cells shrink), frames the selected cell (or row) in an outline that
// reads on every colour, and says which cell was clicked or hovered.
#pragma once
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
  void set_values(std::vector<std::vector<double>> values, QStringList rows, QStringList cols, double lo, double hi,
                  int decimals);
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

  void select(int row, int col);  // frames one cell; out of range: no frame
  void select_row(int row);       // frames a whole row (the mixer table's head)

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
  // What a hover shows ("" hides the tooltip); default: none.
  void set_tooltip(std::function<QString(int row, int col)> tooltip) { tooltip_ = std::move(tooltip); }

 signals:
  void cellClicked(int row, int col);

 private:
  void label_axes();
  bool fit_texts();  // true when the texts' size or decimals changed
  void frame(double x0, double y0, double x1, double y1);
  void mouse_pressed(QMouseEvent* e);
  void mouse_moved(QMouseEvent* e);

  QCPColorMap* map_ = nullptr;
  QCPColorScale* scale_ = nullptr;
  QCPItemText* note_ = nullptr;
  QCPTextElement* footnote_ = nullptr;
  QCPItemRect *frame_outer_ = nullptr, *frame_inner_ = nullptr;
  std::vector<QCPItemText*> texts_;  // [r * cols + c]
  std::vector<QCPItemRect*> marks_;
  std::vector<std::vector<double>> values_;
  std::vector<std::vector<QString>> custom_;  // set_cell_texts
  std::vector<std::vector<bool>> bold_;
  QStringList row_names_, col_names_;
  double lo_ = 0, hi_ = 1;
  int decimals_ = 2;
  int font_px_ = 0;         // the cell texts' size now
  int shown_decimals_ = 0;  // decimals printed now
  std::function<QString(int, int)> tooltip_;
};

}  // namespace attnscope::views
