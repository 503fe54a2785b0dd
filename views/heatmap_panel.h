// One attention map of the selected head (softmax, linear or their difference) with token labels,
// a colour bar, zoom and pan (double-click: the whole map again), and a hover tooltip naming the
// token pair, q.k and both weights. It draws core's map_image (head_detail.h): a reduced image
// (block maxima, at most kMaxPixels a side) at overview zoom and exact cells once the visible region
// fits, so a 4096-token map stays fluid. Its cells are square: the map's area is the largest square
// the panel holds.
#pragma once
#include <QSize>
#include <memory>
#include <optional>
#include <utility>

#include "attnscope/analysis/head_detail.h"
#include "plot_panel.h"

class QCPColorMap;
class QCPColorScale;
class QCPItemText;
class QCPRange;
class QMouseEvent;

namespace attnscope::views {

// Lets a panel's title be cut instead of setting the panel's minimum width (views with several

class HeatmapPanel : public PlotPanel {
  Q_OBJECT
 public:
  static constexpr int kMaxPixels = 512;

  HeatmapPanel(const QString& title, MapKind kind, QWidget* parent = nullptr);

  void set_view(std::shared_ptr<const HeadDetail> view);  // null clears the plot
  void set_scale(ColourScale scale);
  // The colour range to draw with instead of the map's own (core's shared_map_range, so that softmax
  // and linear compare by eye); none: the map's own. Applies from the next drawing (set_view,
  // set_scale) on. Not for the difference, whose range is symmetric around 0.
  void set_colour_range(std::optional<std::pair<double, double>> range);
  // The whole map again (what a double-click does); emits regionChanged.
  void reset_zoom();
  MapKind kind() const { return kind_; }
  ColourScale scale() const { return scale_; }

  // Zoom to cells [region] (clipped to the map); the three panels of the heads view call this to
  // stay in step.
  void show_region(const MapRegion& region);
  MapRegion visible_region() const;
  const MapImage& image() const { return image_; }  // what is drawn now (exact or reduced)

  // The height a square map of this width needs (the title, tick labels and colour bar around it).
  // The panel is never taller (its maximum height follows its width), so a row of panels leaves its
  // spare height to what is below it.
  int square_height(int width) const;

  // "query 12 'the' -> key 3 'cat' | q.k/sqrt(d) 2.31 | softmax 0.1200 | linear 0.0940"
  QString hover_text(int query, int key) const;

  // The colour map QCustomPlot draws (tests read its cells) and the note shown instead of a map
  // (no head, or no feature map for the linear and difference maps); "" when a map is drawn.
  QCPColorMap* colour_map() const { return map_; }
  QString note() const;
  // The caption of the colour bar for the current kind and scale ("log10 weight", ...).
  QString scale_label() const;

 signals:
  void regionChanged(const attnscope::MapRegion& region);  // the user zoomed or panned
  void cellHovered(int query, int key);

 protected:
  void changeEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void redraw();
  // Recomputes the image when the visible cells are not what it covers (or `force`), then the
  // colour map, the token labels and the colour range.
  void update_image(bool force);
  void update_labels();
  void apply_gradient();
  void show_note(const QString& text);
  void user_range_changed();
  void clamp_axes();
  void mouse_moved(QMouseEvent* event);
  void fit_square();  // the axis rect's largest square in the plot (after a layout), then the cap
  void fit_square_once();
  int fit_across_ = 0, fit_down_ = 0;  // the panel's size less the square's room, as last fitted
  std::string visible_csv() const;

  MapKind kind_;
  ColourScale scale_ = ColourScale::Linear;
  std::shared_ptr<const HeadDetail> view_;
  MapImage image_;
  QCPColorMap* map_ = nullptr;  // global-scope QCustomPlot types (declared above)
  QCPColorScale* colour_scale_ = nullptr;
  QCPItemText* note_ = nullptr;
  bool programmatic_ = false;    // axis ranges being set by code, not by the user
  bool update_pending_ = false;  // a user zoom/pan waits for the event loop (x and y come apart)
  int hover_row_ = -1, hover_col_ = -1;
  QSize labels_size_;  // the axis rect size the token labels were spaced for
  std::optional<std::pair<double, double>> range_;  // set_colour_range
};

}  // namespace attnscope::views
