#include "heads_view.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/base/table.h"
#include "attnscope/workbench/view_data.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

QString scale_title(const std::string& name) {
  if (name == "row") return QObject::tr("row-normalized");
  return QString::fromStdString(name);
}

}  // namespace

HeadsView::HeadsView(QWidget* parent) : QWidget(parent) {
  auto* outer = new QHBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* split = new QSplitter(Qt::Horizontal, this);
  outer->addWidget(split);

  // Left: the overview grid and what tints it.
  auto* left = new QWidget(split);
  auto* lv = new QVBoxLayout(left);
  lv->setContentsMargins(4, 4, 4, 4);
  auto* title = new QLabel(tr("<b>Heads</b> (click one, or use the arrow keys)"), left);
  lv->addWidget(title);
  auto* metric_row = new QHBoxLayout;
  metric_row->addWidget(new QLabel(tr("Tint by"), left));
  metric_box_ = new QComboBox(left);
  metric_box_->setToolTip(tr("The metric that colours the thumbnails and is printed under them"));
  metric_box_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  metric_row->addWidget(metric_box_, 1);
  lv->addLayout(metric_row);
  // Which captured text window the thumbnails and the maps show (not the hybrid's softmax window).
  auto* seq_row = new QHBoxLayout;
  seq_row->addWidget(new QLabel(tr("Text window"), left));
  seq_box_ = new QSpinBox(left);
  seq_box_->setObjectName("text_window");
  seq_box_->setRange(0, 0);
  seq_box_->setKeyboardTracking(false);
  seq_box_->setToolTip(tr("Which captured text window (sequence of L tokens, from 0) the thumbnails and maps show"));
  seq_row->addWidget(seq_box_);
  seq_row->addStretch(1);
  lv->addLayout(seq_row);
  // The grid scrolls within its pane (32 x 32 heads at a readable tile size do not fit a quarter of
  // the window); the maps beside it stay in view.
  grid_scroll_ = new QScrollArea(left);
  grid_scroll_->setWidgetResizable(true);
  grid_scroll_->setFrameShape(QFrame::NoFrame);
  grid_ = new HeadGrid(grid_scroll_);
  grid_scroll_->setWidget(grid_);
  lv->addWidget(grid_scroll_, 1);
  // The tint's legend under the scroll area, not in it: whole and in view however the grid scrolls.
  // The scroll area is no taller than the grid (fit_grid_height): the legend follows the tiles and
  // the pane's spare height goes under it.
  legend_ = new TintLegend(grid_, left);
  lv->addWidget(legend_);
  lv->addStretch(0);
  grid_scroll_->installEventFilter(this);

  // Right: the three maps in step, the choosers, the per-row plot.
  // Right: a splitter, the maps and their choosers above, the per-row plot below (drag to give
  // the maps more room).
  auto* right_split = new QSplitter(Qt::Vertical, split);
  right_split->setObjectName("heads_maps_splitter");
  right_split->setChildrenCollapsible(false);
  auto* right = new QWidget(right_split);
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(4, 4, 4, 4);
  auto* maps = new QHBoxLayout;
  softmax_ = new HeatmapPanel(tr("softmax"), MapKind::Softmax, right);
  linear_ = new HeatmapPanel(tr("linear"), MapKind::Linear, right);
  diff_ = new HeatmapPanel(tr("difference"), MapKind::Difference, right);
  for (HeatmapPanel* p : {softmax_, linear_, diff_}) {
    maps->addWidget(p, 1);
    connect(p, &HeatmapPanel::regionChanged, this, [this, p](const MapRegion& r) { sync_region(p, r); });
  }
  // The maps take most of the height, up to what square maps of their width need (each panel caps
  // its own height); the per-row plot below takes the rest.
  rv->addLayout(maps, 4);

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Feature map"), right));
  map_box_ = new QComboBox(right);
  map_box_->addItem(tr("none (softmax only)"), QString());
  map_box_->setToolTip(tr("The feature map whose linear attention is compared with softmax"));
  controls->addWidget(map_box_);
  controls->addWidget(new QLabel(tr("M"), right));
  features_box_ = new QSpinBox(right);
  features_box_->setRange(0, 1 << 16);
  features_box_->setSpecialValueText(tr("natural"));
  features_box_->setKeyboardTracking(false);  // one change when the number is entered, not per digit
  features_box_->setToolTip(tr("Feature dimension M (natural: the map's own size)"));
  controls->addWidget(features_box_);
  controls->addWidget(new QLabel(tr("Softmax window"), right));
  hybrid_window_box_ = new QSpinBox(right);
  hybrid_window_box_->setObjectName("softmax_window");
  hybrid_window_box_->setRange(0, 1 << 20);
  hybrid_window_box_->setSpecialValueText(tr("off"));
  hybrid_window_box_->setKeyboardTracking(false);
  hybrid_window_box_->setToolTip(
      tr("Hybrid heads: each query attends its last W keys with softmax weights and older keys through the "
         "feature map, under one normalizer, half and half (a trained model learns the balance per head).\n"
         "off (0): the feature map alone; W at least the text length: softmax itself."));
  controls->addWidget(hybrid_window_box_);
  decay_box_ = new QCheckBox(tr("Decay"), right);
  decay_box_->setObjectName("decay");
  decay_box_->setToolTip(tr("Decayed heads: the map's weight of key j in row i times a^(i-j), with each head's a fitted "
                            "to its softmax attention by lag (where training with --decay fixed starts)"));
  controls->addWidget(decay_box_);
  // The second row: how the maps are drawn, and Reset zoom (one row does not fit at 1280 pixels).
  auto* look = new QHBoxLayout;
  look->addWidget(new QLabel(tr("Colour scale"), right));
  scale_box_ = new QComboBox(right);
  for (const std::string& name : colour_scale_names()) scale_box_->addItem(scale_title(name), QString::fromStdString(name));
  scale_box_->setToolTip(tr("linear: the weight; log: log10 of the weight; row-normalized: each query row divided by its maximum"));
  controls->addStretch(1);
  rv->addLayout(controls);
  info_ = new QLabel(right);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  info_->setWordWrap(true);
  look->addWidget(scale_box_);
  reset_zoom_ = new QToolButton(right);
  reset_zoom_->setObjectName("reset_zoom");
  reset_zoom_->setText(tr("Reset zoom"));
  reset_zoom_->setToolTip(tr("Show the whole map again (or double-click a map)"));
  look->addWidget(reset_zoom_);
  look->addStretch(1);
  rv->addLayout(look);
  info_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);  // the height goes to the maps
  rv->addWidget(info_);
  rv->addStretch(1);  // what the maps (square, capped) cannot use

  kl_ = new PlotPanel(tr("per-row KL and entropy"), right);
  QCustomPlot* kp = kl_->plot();
  kp->xAxis->setLabel(tr("query position"));
  // Short axis labels (the plot is short): the legend names the curves.
  kp->yAxis->setLabel(tr("KL (nats)"));
  kp->yAxis2->setLabel(tr("entropy (nats)"));
  kp->yAxis2->setVisible(true);
  // A short plot: a few ticks a side, not a tick label every 12 pixels.
  kp->yAxis->ticker()->setTickCount(4);
  kp->yAxis2->ticker()->setTickCount(4);
  kp->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  kp->axisRect()->setRangeZoom(Qt::Horizontal);
  kp->axisRect()->setRangeDrag(Qt::Horizontal);
  kp->legend->setVisible(true);
  // The legend in one line under the plot: inside, it would hide some rows' values at any zoom.
  legend_below(kp);
  kl_note_ = new QCPItemText(kp);
  kl_note_->position->setType(QCPItemPosition::ptAxisRectRatio);
  kl_note_->position->setCoords(0.5, 0.15);
  kl_note_->setPositionAlignment(Qt::AlignHCenter | Qt::AlignTop);
  kl_note_->setClipToAxisRect(false);
  kl_->set_csv([this] {
    if (!view_) fail("per-row KL", "no head selected");
    Table t;
    t.header = {"query", "token", "kl", "entropy_softmax", "entropy_linear"};
    for (int i = 0; i < view_->length(); ++i) {
      auto at = [i](const std::vector<double>& v) { return i < int(v.size()) ? fmt_number(v[size_t(i)], 8) : std::string(); };
      t.add_row({std::to_string(i), i < int(view_->labels.size()) ? view_->labels[size_t(i)] : "", at(view_->row_kl),
                 at(view_->row_entropy_softmax), at(view_->row_entropy_linear)});
    }
    return to_csv(t);
  });
  kl_->setParent(right_split);
  right_split->addWidget(right);
  right_split->addWidget(kl_);
  right_split->setStretchFactor(0, 3);
  right_split->setStretchFactor(1, 2);

  split->addWidget(left);
  split->addWidget(right_split);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  split->setSizes({360, 1240});  // the grid a quarter of the width, whatever the window's size

  connect(grid_, &HeadGrid::headSelected, this, [this](int layer, int head) {
    show_in_grid(layer, head);
    emit headSelected(layer, head);
  });
  // After a zoom the layout resizes the grid first: then the selection is brought back into view.
  connect(grid_, &HeadGrid::tileSizeChanged, this, [this] {
    fit_grid_height();
    QTimer::singleShot(0, this, [this] { show_in_grid(grid_->selected_layer(), grid_->selected_head()); });
  });
  connect(metric_box_, &QComboBox::currentIndexChanged, this, [this] {
    apply_metric();
    emit metricChanged(metric());
  });
  connect(reset_zoom_, &QToolButton::clicked, this, &HeadsView::reset_zoom);
  connect(map_box_, &QComboBox::currentIndexChanged, this, &HeadsView::on_map_chosen);
  connect(features_box_, &QSpinBox::valueChanged, this, &HeadsView::on_map_chosen);
  connect(hybrid_window_box_, &QSpinBox::valueChanged, this, &HeadsView::on_map_chosen);
  connect(decay_box_, &QCheckBox::toggled, this, &HeadsView::on_map_chosen);
  connect(seq_box_, &QSpinBox::valueChanged, this, [this](int seq) { emit seqChanged(seq); });
  connect(scale_box_, &QComboBox::currentIndexChanged, this, [this] {
    const ColourScale s = scale();
    apply_colour_range();
    for (HeatmapPanel* p : {softmax_, linear_, diff_}) p->set_scale(s);
    emit scaleChanged(s);
  });
  update_titles();
  update_kl();
  update_info();
}

void HeadsView::set_shape(int layers, int heads, int windows) {
  grid_->set_empty_text({});
  grid_->set_shape(layers, heads);
  fit_grid_height();
  widen_pending_ = true;
  widen_grid_pane();
  const QSignalBlocker block(seq_box_);
  seq_box_->setRange(0, std::max(0, windows - 1));
}

void HeadsView::clear(const QString& note) {
  set_head_detail(nullptr);
  set_metrics({});
  grid_->set_thumbnails({});
  grid_->set_shape(0, 0);
  grid_->set_empty_text(note);
}

void HeadsView::set_feature_maps(const QStringList& names, const QStringList& trainable) {
  trainable_ = trainable;
  const QString keep = feature_map();
  const QSignalBlocker block(map_box_);
  while (map_box_->count() > 1) map_box_->removeItem(1);
  for (const QString& n : names) map_box_->addItem(n, n);
  const int i = map_box_->findData(keep);
  map_box_->setCurrentIndex(i < 0 ? 0 : i);
  update_titles();
}

void HeadsView::set_thumbnails(std::vector<std::vector<Matrix>> thumbnails) {
  grid_->set_thumbnails(std::move(thumbnails));
}

void HeadsView::set_metrics(std::map<GridMetric, std::vector<std::vector<double>>> metrics) {
  metrics_ = std::move(metrics);
  const GridMetric keep = metric();
  {
    const QSignalBlocker block(metric_box_);
    metric_box_->clear();
    for (const auto& [m, values] : metrics_) metric_box_->addItem(QString::fromLatin1(grid_metric_name(m)), int(m));
    int i = metric_box_->findData(int(keep));
    if (i < 0) i = metric_box_->findData(int(GridMetric::SoftmaxEntropy));
    metric_box_->setCurrentIndex(std::max(0, i));
  }
  apply_metric();
}

void HeadsView::apply_metric() {
  const auto it = metrics_.find(metric());
  if (metric_box_->count() == 0 || it == metrics_.end())
    grid_->set_metric({}, {});
  else
    grid_->set_metric(QString::fromLatin1(grid_metric_name(it->first)), it->second);
}

void HeadsView::apply_colour_range() {
  std::optional<std::pair<double, double>> range;
  if (view_ && view_->length() > 0) range = shared_map_range(*view_, scale());
  softmax_->set_colour_range(range);
  linear_->set_colour_range(range);
}

void HeadsView::reset_zoom() {
  if (!view_ || view_->length() == 0) return;
  show_region({0, view_->length(), 0, view_->length()});
}

void HeadsView::set_head_detail(std::shared_ptr<const HeadDetail> view) {
  // A new feature map or head on the same window keeps the zoom: the user is comparing tokens.
  const bool keep_zoom = view_ && view && view_->seq == view->seq && view_->length() == view->length();
  const MapRegion region = softmax_->visible_region();
  view_ = std::move(view);
  apply_colour_range();
  for (HeatmapPanel* p : {softmax_, linear_, diff_}) {
    p->set_view(view_);
    if (keep_zoom) p->show_region(region);
  }
  if (view_) select(view_->layer, view_->head);
  update_titles();
  update_kl();
  if (keep_zoom) sync_region(nullptr, region);
  update_info();
}

void HeadsView::select(int layer, int head) {
  grid_->select(layer, head);
  show_in_grid(layer, head);
}

// Many heads: the grid's pane widens (up to 3/8 of the view: the maps beside it are what the view is for) towards the width its tiles want, so
// that the values under them read and more columns show without scrolling sideways. Before the
// view is laid out the splitter has no width yet: then at the next resize.
void HeadsView::widen_grid_pane() {
  auto* split = qobject_cast<QSplitter*>(grid_scroll_->parentWidget()->parentWidget());
  if (!split || !widen_pending_) return;
  const QList<int> sizes = split->sizes();
  const int total = sizes.value(0) + sizes.value(1);
  if (total <= 0 || !split->isVisible()) return;
  widen_pending_ = false;
  const int want = std::min(grid_->sizeHint().width() + 30, total * 3 / 8);
  if (sizes.value(0) < want) split->setSizes({want, total - want});
}

void HeadsView::fit_grid_height() {
  const int width = std::max(grid_scroll_->width(), grid_->minimumSizeHint().width());
  int h = grid_->needed_height(width);
  if (h <= 0) {  // no heads yet: the pane's whole height for the grid's message
    grid_scroll_->setMaximumHeight(QWIDGETSIZE_MAX);
    return;
  }
  if (grid_->minimumSizeHint().width() > grid_scroll_->width()) h += grid_scroll_->horizontalScrollBar()->sizeHint().height();
  if (grid_scroll_->maximumHeight() != h) grid_scroll_->setMaximumHeight(h);
}

bool HeadsView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == grid_scroll_ && event->type() == QEvent::Resize) fit_grid_height();
  return QWidget::eventFilter(watched, event);
}

void HeadsView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  widen_grid_pane();
}

void HeadsView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  QTimer::singleShot(0, this, [this] { widen_grid_pane(); });
}

void HeadsView::show_in_grid(int layer, int head) {
  const QRect r = grid_->tile_rect(layer, head);
  if (r.isEmpty()) return;
  // The tile, its value line and a margin: the selection frame is drawn just outside the tile.
  grid_scroll_->ensureVisible(r.center().x(), r.center().y() + 6, r.width() / 2 + 12, r.height() / 2 + 24);
}

void HeadsView::show_region(const MapRegion& region) {
  softmax_->show_region(region);
  sync_region(softmax_, softmax_->visible_region());
}

QString HeadsView::feature_map() const { return map_box_->currentData().toString(); }
qint64 HeadsView::features() const { return features_box_->value(); }
qint64 HeadsView::hybrid_window() const { return hybrid_window_box_->value(); }
bool HeadsView::decayed() const { return decay_box_->isChecked(); }
int HeadsView::seq() const { return seq_box_->value(); }
ColourScale HeadsView::scale() const { return parse_colour_scale(scale_box_->currentData().toString().toStdString()); }
GridMetric HeadsView::metric() const {
  const QVariant v = metric_box_->currentData();
  return v.isValid() ? GridMetric(v.toInt()) : chosen_metric_;
}

void HeadsView::on_map_chosen() {
  update_titles();
  emit mapChanged(feature_map(), features(), hybrid_window(), decayed());
}

void HeadsView::set_feature_map(const QString& name, qint64 features, qint64 window, bool decayed) {
  {
    const QSignalBlocker b1(map_box_), b2(features_box_), b3(hybrid_window_box_), b4(decay_box_);
    int i = map_box_->findData(name);
    if (i < 0 && !name.isEmpty()) {  // a session may name a map the list does not have yet
      map_box_->addItem(name, name);
      i = map_box_->count() - 1;
    }
    map_box_->setCurrentIndex(std::max(0, i));
    features_box_->setValue(int(features));
    hybrid_window_box_->setValue(int(std::min<qint64>(window, hybrid_window_box_->maximum())));
    decay_box_->setChecked(decayed);
  }
  update_titles();
  update_info();
}

void HeadsView::set_seq(int seq) {
  const QSignalBlocker block(seq_box_);
  seq_box_->setValue(seq);
}

void HeadsView::set_scale(ColourScale s) {
  {
    const QSignalBlocker block(scale_box_);
    scale_box_->setCurrentIndex(std::max(0, scale_box_->findData(QString::fromLatin1(colour_scale_name(s)))));
  }
  apply_colour_range();
  for (HeatmapPanel* p : {softmax_, linear_, diff_}) p->set_scale(s);
}

void HeadsView::set_metric(GridMetric metric) {
  chosen_metric_ = metric;
  {
    const QSignalBlocker block(metric_box_);
    const int i = metric_box_->findData(int(metric));
    if (i >= 0) metric_box_->setCurrentIndex(i);
  }
  apply_metric();
}

void HeadsView::set_commands(const QString& maps_command) {
  for (PlotPanel* p : {static_cast<PlotPanel*>(softmax_), static_cast<PlotPanel*>(linear_),
                       static_cast<PlotPanel*>(diff_), kl_})
    p->set_command(maps_command);
}

HeatmapPanel* HeadsView::panel(MapKind kind) const {
  switch (kind) {
    case MapKind::Softmax: return softmax_;
    case MapKind::Linear: return linear_;
    case MapKind::Difference: return diff_;
  }
  return softmax_;
}

void HeadsView::sync_region(HeatmapPanel* from, const MapRegion& region) {
  for (HeatmapPanel* p : {softmax_, linear_, diff_})
    if (p != from) p->show_region(region);
  // The per-row plot follows the maps' query rows.
  if (view_ && view_->length() > 0) {
    kl_->plot()->xAxis->setRange(region.row0 - 0.5, region.row1 - 0.5);
    kl_->plot()->replot(QCustomPlot::rpQueuedReplot);
  }
}

// Short titles, so that three maps side by side keep them whole: the layer and head are on the
// info line under the maps, the colour bars say what the difference is.
QString HeadsView::map_label() const {
  const QString map = feature_map();
  if (map.isEmpty()) return {};
  const QString m = features() > 0 ? tr("%1 M=%2").arg(map).arg(features()) : map;
  const QString d = decayed() ? tr("%1, decayed").arg(m) : m;
  return hybrid_window() > 0 ? tr("%1 + window %2").arg(d).arg(hybrid_window()) : d;
}

void HeadsView::update_titles() {
  softmax_->set_title(tr("softmax"));
  const QString map = map_label();
  // A plain map's title says it is linear attention; a hybrid's names the map and its softmax window
  // ("hedgehog M=16 + window 8": whole in a third of the view at 1150 pixels; "hybrid" is on the info
  // line and the control's tooltip).
  // A learned map is drawn at its random initialization: "untrained hedgehog M=16" (first, so that
  // a cut title still says it; it stands for "linear:", which the map's name already implies).
  linear_->set_title(map.isEmpty()                          ? tr("linear")
                     : trainable_.contains(feature_map())   ? tr("untrained %1").arg(map)
                     : hybrid_window() > 0                  ? map
                                                            : tr("linear: %1").arg(map));
  diff_->set_title(tr("difference"));
  // The window mixes softmax into a feature map's attention: nothing to mix without one.
  hybrid_window_box_->setEnabled(!feature_map().isEmpty());
  decay_box_->setEnabled(!feature_map().isEmpty());
}

void HeadsView::update_kl() {
  QCustomPlot* p = kl_->plot();
  p->clearGraphs();
  auto add = [&](const std::vector<double>& y, QCPAxis* axis, const QString& name, int colour, Qt::PenStyle style) {
    QVector<double> xs, ys;
    for (size_t i = 0; i < y.size(); ++i)
      if (std::isfinite(y[i])) {  // undefined rows (NaN) are left out, not drawn as 0
        xs.push_back(double(i));
        ys.push_back(y[i]);
      }
    QCPGraph* g = p->addGraph(p->xAxis, axis);
    g->setData(xs, ys, true);
    g->setName(name);
    g->setPen(QPen(series_color(colour), style == Qt::SolidLine ? 1.8 : 1.2, style));
    if (y.size() <= 96) g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
    return g;
  };
  QString note;
  if (view_) {
    if (view_->has_linear() && !view_->row_kl.empty())
      add(view_->row_kl, p->yAxis, tr("KL(A_i || Ahat_i)"), 0, Qt::SolidLine);
    else
      note = tr("KL needs a feature map: choose one above");
    add(view_->row_entropy_softmax, p->yAxis2, tr("entropy, softmax"), 1, Qt::DashLine);
    if (!view_->row_entropy_linear.empty())
      add(view_->row_entropy_linear, p->yAxis2,
          tr("entropy, %1").arg(feature_map().isEmpty() ? tr("linear")
                                : hybrid_window() > 0 ? tr("hybrid") : feature_map()),
          2, Qt::DashLine);
    p->xAxis->setRange(-0.5, view_->length() - 0.5);
    bool found = false;
    QCPRange r = p->graphCount() > 0 && p->graph(0)->valueAxis() == p->yAxis ? p->graph(0)->getValueRange(found) : QCPRange();
    p->yAxis->setRange(found ? QCPRange(std::min(0.0, r.lower), r.upper > 0 ? r.upper * 1.08 : 1) : QCPRange(0, 1));
    double hi = 0;
    for (int i = 0; i < p->graphCount(); ++i)
      if (p->graph(i)->valueAxis() == p->yAxis2) {
        bool ok = false;
        const QCPRange e = p->graph(i)->getValueRange(ok);
        if (ok) hi = std::max(hi, e.upper);
      }
    p->yAxis2->setRange(0, hi > 0 ? hi * 1.08 : 1);
  } else {
    note = tr("No head selected");
  }
  p->yAxis->setVisible(!view_ || view_->has_linear());
  p->legend->setVisible(p->graphCount() > 0);
  kl_note_->setText(note);
  kl_note_->setColor(QApplication::palette().color(QPalette::Text));
  kl_note_->setVisible(!note.isEmpty());
  p->replot();
}

void HeadsView::update_info() {
  if (!view_) {
    info_->setText(tr("No head selected: click a thumbnail."));
    return;
  }
  // A hybrid's line names its map and window in the controls' words ("hedgehog (M = 16), softmax
  // window 16"), short enough that the line stays one at 1680 pixels.
  const bool hybrid = !feature_map().isEmpty() && hybrid_window() > 0;
  QString map = feature_map().isEmpty() ? tr("no feature map")
                : hybrid               ? feature_map()
                                       : tr("feature map %1").arg(feature_map());
  if (!feature_map().isEmpty() && features() > 0) map += tr(" (M = %1)").arg(features());
  if (hybrid) map += tr(", softmax window %1").arg(hybrid_window());
  if (!feature_map().isEmpty() && decayed()) map += tr(", decay fitted per head");
  QString text = tr("layer %1, head %2, text window %3  ·  L = %4 tokens, head dim %5  ·  %6")
                     .arg(view_->layer).arg(view_->head).arg(view_->seq).arg(view_->length()).arg(view_->head_dim).arg(map);
  // "row sums ≤ 0", not "non-positive row sums": a line too long for the view would break at the hyphen.
  if (view_->has_linear())
    text += tr("  ·  undefined rows %1  ·  row sums ≤ 0: %2 %")
                .arg(view_->undefined_rows)
                .arg(100.0 * view_->nonpositive_row_fraction, 0, 'f', 1);
  info_->setText(text);
}

}  // namespace attnscope::views
