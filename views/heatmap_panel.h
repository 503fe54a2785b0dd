// One attention map of the selected head (softmax, linear or their difference) with token labels,
// a colour bar, zoom and pan, and a hover tooltip naming the token pair, q.k and both weights. It
// draws core's map_image (head_view.h): a reduced image (block maxima, at most kMaxPixels a side)
// at overview zoom and exact cells once the visible region fits, so a 4096-token map stays fluid.
#pragma once
#include <memory>

#include "attnscope/head_view.h"
#include "plot_panel.h"

namespace attnscope::views {

class HeatmapPanel : public PlotPanel {
  Q_OBJECT
 public:
  static constexpr int kMaxPixels = 512;

  HeatmapPanel(const QString& title, MapKind kind, QWidget* parent = nullptr);

  void set_view(std::shared_ptr<const HeadView> view);  // null clears the plot
  void set_scale(ColourScale scale);
  MapKind kind() const { return kind_; }
  ColourScale scale() const { return scale_; }

  // Zoom to cells [region] (clipped to the map); the three panels of the heads view call this to
  // stay in step.
  void show_region(const MapRegion& region);
  MapRegion visible_region() const;
  const MapImage& image() const { return image_; }  // what is drawn now (exact or reduced)

  // "query 12 'the' -> key 3 'cat' | q.k/sqrt(d) 2.31 | softmax 0.1200 | linear 0.0940"
  QString hover_text(int query, int key) const;

 signals:
  void regionChanged(const attnscope::MapRegion& region);  // the user zoomed or panned
  void cellHovered(int query, int key);

 private:
  void redraw();
  MapKind kind_;
  ColourScale scale_ = ColourScale::Linear;
  std::shared_ptr<const HeadView> view_;
  MapImage image_;
  class QCPColorMap* map_ = nullptr;
  class QCPColorScale* colour_scale_ = nullptr;
};

}  // namespace attnscope::views
