// The layer x head overview: one small thumbnail of each head's softmax map (head_thumbnails),
// tinted by the value of a chosen metric (entropy, monotonicity, KL, DoF, ...) with the value
// printed under it; click a thumbnail to select that head. Large grids (32 x 32) sit in a scroll
// area (heads_view.h): the tiles keep a readable minimum, Ctrl+wheel or Ctrl+plus and Ctrl+minus
// zoom them (Ctrl+0: fit), and the column labels thin out to every 2nd, 4th ... head where they
// would overlap. The tint's legend (TintLegend, below) is a widget of its own, outside that scroll
// area: the grid of 32 heads is wider than its pane, and a legend as wide as the grid had its high
// end's number out of view.
#pragma once
#include <QImage>
#include <QString>
#include <QWidget>
#include <vector>

#include "attnscope/base/figure.h"

namespace attnscope::views {

class HeadGrid : public QWidget {
  Q_OBJECT
 public:
  explicit HeadGrid(QWidget* parent = nullptr);

  void set_thumbnails(std::vector<std::vector<Matrix>> thumbnails);  // [S][H], values in [0, 1]
  // [S][H] values of the metric that tints the thumbnails (NaN: unknown, drawn grey).
  void set_metric(const QString& name, std::vector<std::vector<double>> values);
  // The grid's shape before thumbnails or metric values arrive (empty tiles).
  void set_shape(int layers, int heads);
  // A converted model's head types (SPEC 7), one letter per head drawn in the tile's corner: S
  // softmax (kept exact), H hybrid, L linear; empty: none drawn (a softmax model, or one type).
  void set_head_types(std::vector<std::vector<QString>> letters);
  QString head_type_letter(int layer, int head) const;  // "" when none is drawn
  // What an empty grid says ("" : "No capture yet: the heads appear here").
  void set_empty_text(const QString& text);
  void select(int layer, int head);  // no signal
  int selected_layer() const { return layer_; }
  int selected_head() const { return head_; }
  int layers() const;
  int heads() const;
  QString metric() const { return metric_; }
  // The tiles' size in pixels: 0 fits them to the widget (at least kMinTile), else this size.
  void set_tile_size(int pixels);
  int tile_size() const { return tile_pref_; }
  int drawn_tile() const;  // the tiles' size as drawn now
  // The height the grid needs at this width (its tiles as wide as the width allows, or the zoomed
  // size): its pane is no taller, so that the legend under it sits under the tiles. 0 while empty.
  int needed_height(int width) const;
  // The heads whose column is labelled now (every head, or every 2nd, 4th ... where they would overlap).
  std::vector<int> labelled_heads() const;
  bool short_labels() const;  // the column labels are bare head numbers ("H" does not fit)
  static constexpr int kMinTile = 14;  // below this a thumbnail shows nothing; the grid scrolls instead
  static constexpr int kMaxTile = 120;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

  // Where a head's thumbnail is drawn now (widget coordinates; empty when out of range).
  QRect tile_rect(int layer, int head) const;
  // The colour the thumbnail of (layer, head) is tinted with: the metric's place between its
  // minimum and maximum over all heads on the sequential gradient; grey for NaN.
  QColor tint(int layer, int head) const;
  // The colour at t in [0, 1] of the legend (the sequential gradient, clipped for the palette).
  QColor gradient_colour(double t) const;
  // The metric's finite range over all heads (NaN without values): the legend's two ends.
  double metric_low() const { return lo_; }
  double metric_high() const { return hi_; }
  // The legend's number for v: the decimals of the values under the tiles, more where the two ends
  // would otherwise print the same.
  QString legend_text(double v) const;

 signals:
  void headSelected(int layer, int head);  // the user clicked a thumbnail (or moved with the arrows)
  void tileSizeChanged(int pixels);        // the user zoomed (the scroll area keeps the selection in view)
  void metricChanged();                    // set_metric (the legend follows)

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  bool event(QEvent* event) override;  // tooltips: head and metric value
  void changeEvent(QEvent* event) override;

 private:
  struct Geometry {
    int left = 0, top = 0, tile = 0, gap = 0, label_h = 0;
  };
  Geometry geometry() const;
  void rebuild_images();
  bool hit(const QPoint& pos, int* layer, int* head) const;
  QString value_text(double v) const;

  std::vector<std::vector<Matrix>> thumbs_;
  std::vector<std::vector<double>> values_;
  std::vector<std::vector<QImage>> images_;  // thumbnails tinted, rebuilt on data or palette change
  QString metric_;
  int shape_layers_ = 0, shape_heads_ = 0;
  double lo_ = 0, hi_ = 0;  // the metric's finite range over all heads
  int layer_ = 0, head_ = 0;
  int tile_pref_ = 0;  // set_tile_size
  std::vector<std::vector<QString>> type_letters_;  // set_head_types
  QString empty_text_;  // what an empty grid says ("": the default)
};

// The legend of a HeadGrid's tint: "tint: <metric>", the colour bar, and under its two ends the
// metric's minimum and maximum over all heads. As wide as its own widget (the grid's pane, up to a
// bar a reader takes in at a glance), so both numbers are in view whatever the grid's width and
// scrolling.
class TintLegend : public QWidget {
  Q_OBJECT
 public:
  explicit TintLegend(const HeadGrid* grid, QWidget* parent = nullptr);
  // The numbers printed at the bar's low and high end ("" while the grid has no values).
  QString low_text() const;
  QString high_text() const;
  // Where the bar and those numbers are drawn (widget coordinates; empty while nothing is drawn).
  QRect bar_rect() const;
  QRect low_rect() const;
  QRect high_rect() const;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  static constexpr int kMaxBar = 480;  // pixels

 protected:
  void paintEvent(QPaintEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  const HeadGrid* grid_;
};

}  // namespace attnscope::views
