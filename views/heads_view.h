// The heads view: the overview grid, and for the selected head softmax | linear | difference
// heatmaps side by side (square cells, zoom kept in step, Reset zoom; softmax and linear on one
// colour range, core's shared_map_range, so they compare by eye), the per-row KL plot, and the
// choosers: the text window (which captured sequence the grid and maps show, beside the grid), the
// feature map, its dimension M and the softmax window W of hybrid heads (SPEC 5: the last W keys
// with softmax weights, older keys through the map; 0 = the map alone), the colour scale (linear,
// log, row-normalized) and the grid's metric.
#pragma once
#include <QString>
#include <QWidget>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/analysis/head_detail.h"
#include "attnscope/workbench/session.h"
#include "head_grid.h"
#include "heatmap_panel.h"
#include "plot_panel.h"

class QComboBox;
class QCheckBox;
class QSpinBox;
class QToolButton;
class QLabel;
class QScrollArea;
class QCPItemText;

namespace attnscope::views {

class HeadsView : public QWidget {
  Q_OBJECT
 public:
  explicit HeadsView(QWidget* parent = nullptr);

  // After a capture: layers, heads and text windows, and the feature maps offered (feature_map_names()).
  void set_shape(int layers, int heads, int windows);
  // Nothing of an earlier model or capture: no tiles, values or maps; the grid says `note`.
  void clear(const QString& note);
  // `trainable`: the maps distill trains (core's trainable_map_names()); shown here at their
  // random initialization, so their titles say "untrained".
  void set_feature_maps(const QStringList& names, const QStringList& trainable = {});
  void set_thumbnails(std::vector<std::vector<Matrix>> thumbnails);
  // The metrics the grid can be tinted by, [S][H] each (core's grid_metric_values).
  void set_metrics(std::map<GridMetric, std::vector<std::vector<double>>> metrics);
  void set_head_detail(std::shared_ptr<const HeadDetail> view);  // the selected head's maps
  void select(int layer, int head);                          // no signal
  // Zooms the three maps (and the per-row plot) to cells [region], as a user's zoom would; no signal.
  void show_region(const MapRegion& region);
  void reset_zoom();  // the whole map in all three (the Reset zoom button)

  // The choosers (the window sets and reads them for sessions; tests drive them).
  QString feature_map() const;
  qint64 features() const;
  qint64 hybrid_window() const;  // W of the hybrid map; 0 = the feature map alone
  bool decayed() const;          // the map decayed by each head's fitted decay (SPEC 5's fixed decay)
  int seq() const;               // the text window shown
  ColourScale scale() const;
  GridMetric metric() const;
  void set_feature_map(const QString& name, qint64 features, qint64 window, bool decayed = false);
  void set_seq(int seq);
  void set_scale(ColourScale scale);
  void set_metric(GridMetric metric);
  // The command lines of its figures (attnscope maps ...), set by the window.
  void set_commands(const QString& maps_command);

  HeadGrid* grid() const { return grid_; }
  QScrollArea* grid_scroll() const { return grid_scroll_; }  // the grid scrolls in it (32 x 32 heads)
  TintLegend* tint_legend() const { return legend_; }      // under the scroll area
  HeatmapPanel* panel(MapKind kind) const;
  PlotPanel* kl_panel() const { return kl_; }
  QComboBox* scale_box() const { return scale_box_; }
  QComboBox* map_box() const { return map_box_; }
  QSpinBox* features_box() const { return features_box_; }
  QSpinBox* hybrid_window_box() const { return hybrid_window_box_; }
  QCheckBox* decay_box() const { return decay_box_; }
  QSpinBox* seq_box() const { return seq_box_; }
  QComboBox* metric_box() const { return metric_box_; }
  QToolButton* reset_zoom_button() const { return reset_zoom_; }
  QLabel* info_label() const { return info_; }

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;  // the grid's pane resized

 signals:
  void headSelected(int layer, int head);
  // The linear map: feature map, M and the hybrid's window W.
  void mapChanged(const QString& feature_map, qint64 features, qint64 window, bool decayed);
  void seqChanged(int seq);
  void scaleChanged(attnscope::ColourScale scale);
  void metricChanged(attnscope::GridMetric metric);

 private:
  void update_kl();
  void update_info();
  void update_titles();
  void on_map_chosen();
  QString map_label() const;  // "hedgehog M=16", a hybrid's "hedgehog M=16 + window 8"
  void sync_region(HeatmapPanel* from, const MapRegion& region);
  void apply_metric();
  void show_in_grid(int layer, int head);  // scrolls the grid's pane so the head's tile is in view
  void widen_grid_pane();                  // after set_shape, once the view has a width
  void fit_grid_height();                  // the grid's pane no taller than its tiles need
  void apply_colour_range();  // softmax and linear on one range for the current head and scale

  HeadGrid* grid_;
  QScrollArea* grid_scroll_;
  TintLegend* legend_;
  bool widen_pending_ = false;
  HeatmapPanel *softmax_, *linear_, *diff_;
  PlotPanel* kl_;
  QComboBox *map_box_, *scale_box_, *metric_box_;
  QSpinBox *features_box_, *hybrid_window_box_, *seq_box_;
  QCheckBox* decay_box_;
  QToolButton* reset_zoom_;
  QLabel* info_;
  QStringList trainable_;
  std::map<GridMetric, std::vector<std::vector<double>>> metrics_;
  GridMetric chosen_metric_ = GridMetric::SoftmaxEntropy;  // before the box lists any (a session)
  std::shared_ptr<const HeadDetail> view_;
  QCPItemText* kl_note_ = nullptr;  // "KL needs a feature map"
};

}  // namespace attnscope::views
