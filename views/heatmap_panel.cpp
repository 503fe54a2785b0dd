#include "heatmap_panel.h"

#include <QApplication>
#include <QLabel>
#include <QMouseEvent>
#include <QResizeEvent>
#include <QTimer>
#include <QToolTip>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "attnscope/base/error.h"
#include "attnscope/base/table.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

// Token labels wider than this are cut: a long BPE piece must not eat the plot.
constexpr int kMaxLabelChars = 10;

QString short_label(const std::string& label) {
  QString s = QString::fromStdString(label);
  if (s.size() > kMaxLabelChars) s = s.left(kMaxLabelChars - 1) + QChar(0x2026);
  return s;
}

// 1, 2, 5, 10, 20, 50, ...: label strides that stay put while panning (ticks at multiples).
int nice_stride(double wanted) {
  int base = 1;
  while (true) {
    for (int m : {1, 2, 5})
      if (base * m >= wanted) return base * m;
    base *= 10;
  }
}

QString weight_text(double w) {
  if (std::isnan(w)) return QStringLiteral("undefined row");
  if (w != 0 && std::abs(w) < 1e-3) return QString::number(w, 'e', 2);
  return QString::number(w, 'f', 4);
}

}  // namespace

HeatmapPanel::HeatmapPanel(const QString& title, MapKind kind, QWidget* parent)
    : PlotPanel(title, parent), kind_(kind) {
  QCustomPlot* p = plot();
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->setMouseTracking(true);
  map_ = new QCPColorMap(p->xAxis, p->yAxis);
  map_->setInterpolate(false);
  map_->setTightBoundary(false);  // cell i covers [i - 0.5, i + 0.5]
  // The colour bar under the map: three maps side by side are narrow, and a bar beside each would
  // take a third of its width from the square.
  colour_scale_ = new QCPColorScale(p);
  colour_scale_->setType(QCPAxis::atBottom);
  colour_scale_->setBarWidth(8);
  p->plotLayout()->addElement(1, 0, colour_scale_);
  p->plotLayout()->setRowStretchFactor(1, 0.001);
  colour_scale_->axis()->ticker()->setTickCount(4);  // a narrow bar: a few ticks, not a tick a digit apart
  {
    QFont f = QApplication::font();
    f.setPointSizeF(std::max(6.0, f.pointSizeF() * 0.85));
    colour_scale_->axis()->setTickLabelFont(f);
    colour_scale_->axis()->setLabelFont(f);
  }
  map_->setColorScale(colour_scale_);
  auto* margins = new QCPMarginGroup(p);
  p->axisRect()->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
  colour_scale_->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
  // Query rows go down the page, as in every attention-map figure.
  p->yAxis->setRangeReversed(true);
  p->xAxis->setLabel(tr("key"));
  p->yAxis->setLabel(tr("query"));
  p->xAxis->setTickLabelRotation(90);
  QFont small = QApplication::font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.8));
  p->xAxis->setTickLabelFont(small);
  p->yAxis->setTickLabelFont(small);
  p->xAxis->grid()->setVisible(false);
  p->yAxis->grid()->setVisible(false);
  for (QCPAxis* a : {p->xAxis, p->yAxis}) {  // ticks outside the cells they label
    a->setTickLength(0, 3);
    a->setSubTicks(false);
  }
  p->xAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
  p->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
  note_ = new QCPItemText(p);
  note_->setClipToAxisRect(false);
  note_->position->setType(QCPItemPosition::ptAxisRectRatio);
  note_->position->setCoords(0.5, 0.5);
  note_->setPositionAlignment(Qt::AlignCenter);
  note_->setTextAlignment(Qt::AlignCenter);
  connect(p->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { user_range_changed(); });
  connect(p->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { user_range_changed(); });
  connect(p, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) { mouse_moved(e); });
  connect(p, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { reset_zoom(); });
  // Square cells: after each layout the axis rect gets the largest square that fits.
  connect(p, &QCustomPlot::afterLayout, this, [this] { fit_square(); });
  // The label stride follows the pixels per cell: after a resize, space them again for the new
  // axis rect (a small change from the labels' own width does not count, so this settles).
  connect(p, &QCustomPlot::afterReplot, this, [this] {
    const QSize now = plot()->axisRect()->size();
    if (!view_ || !note().isEmpty() || (std::abs(now.width() - labels_size_.width()) < 12 &&
                                        std::abs(now.height() - labels_size_.height()) < 12))
      return;
    update_labels();
    plot()->replot(QCustomPlot::rpQueuedReplot);
  });
  set_csv([this] { return visible_csv(); });
  restyle();  // PlotPanel styled the plot before the colour bar existed
  apply_gradient();
  redraw();
}

QString HeatmapPanel::scale_label() const {
  const bool diff = kind_ == MapKind::Difference;
  switch (scale_) {
    case ColourScale::Linear: return diff ? tr("linear - softmax") : tr("weight");
    case ColourScale::Log: return diff ? tr("symlog10 (linear - softmax)") : tr("log10 weight");
    case ColourScale::RowNormalized: return diff ? tr("difference / row max |diff|") : tr("weight / row max");
  }
  return {};
}

QString HeatmapPanel::note() const { return note_->visible() ? note_->text() : QString(); }

void HeatmapPanel::set_view(std::shared_ptr<const HeadDetail> view) {
  view_ = std::move(view);
  hover_row_ = hover_col_ = -1;
  redraw();
}

void HeatmapPanel::set_scale(ColourScale scale) {
  if (scale == scale_) return;
  scale_ = scale;
  colour_scale_->axis()->setLabel(scale_label());
  if (view_ && note().isEmpty()) {
    update_image(true);
    plot()->replot();
  }
}

void HeatmapPanel::show_note(const QString& text) {
  note_->setText(text);
  note_->setColor(QApplication::palette().color(QPalette::Text));
  note_->setVisible(!text.isEmpty());
}

// Whole map at the overview: the reset after a new head or window.
void HeatmapPanel::redraw() {
  QCustomPlot* p = plot();
  colour_scale_->axis()->setLabel(scale_label());
  const bool drawable = view_ && view_->length() > 0 && (kind_ == MapKind::Softmax || view_->has_linear());
  if (!drawable) {
    image_ = MapImage{};
    map_->data()->clear();
    map_->setVisible(false);
    colour_scale_->setVisible(false);  // a colour bar without a map would show a meaningless range
    show_note(!view_ ? tr("No head selected") : view_->length() == 0 ? tr("Empty map")
                                                  : tr("No feature map chosen:\npick one below to see the linear map"));
    programmatic_ = true;
    p->xAxis->setRange(0, 1);
    p->yAxis->setRange(0, 1);
    programmatic_ = false;
    qSharedPointerCast<QCPAxisTickerText>(p->xAxis->ticker())->clear();
    qSharedPointerCast<QCPAxisTickerText>(p->yAxis->ticker())->clear();
    p->replot();
    return;
  }
  show_note({});
  map_->setVisible(true);
  colour_scale_->setVisible(true);
  const int n = view_->length();
  programmatic_ = true;
  p->xAxis->setRange(-0.5, n - 0.5);
  p->yAxis->setRange(-0.5, n - 0.5);
  programmatic_ = false;
  update_image(true);
  p->replot();
}

MapRegion HeatmapPanel::visible_region() const {
  if (!view_ || view_->length() == 0) return {};
  const int n = view_->length();
  auto cells = [n](const QCPRange& r, int* c0, int* c1) {
    *c0 = std::clamp(int(std::floor(r.lower + 0.5)), 0, n - 1);
    *c1 = std::clamp(int(std::ceil(r.upper + 0.5)), *c0 + 1, n);
  };
  MapRegion reg;
  cells(plot()->xAxis->range(), &reg.col0, &reg.col1);
  cells(plot()->yAxis->range(), &reg.row0, &reg.row1);
  return reg;
}

void HeatmapPanel::show_region(const MapRegion& region) {
  if (!view_ || view_->length() == 0 || !note().isEmpty()) return;
  const int n = view_->length();
  const int c0 = std::clamp(region.col0, 0, n - 1), c1 = std::clamp(region.col1, c0 + 1, n);
  const int r0 = std::clamp(region.row0, 0, n - 1), r1 = std::clamp(region.row1, r0 + 1, n);
  programmatic_ = true;
  plot()->xAxis->setRange(c0 - 0.5, c1 - 0.5);
  plot()->yAxis->setRange(r0 - 0.5, r1 - 0.5);
  clamp_axes();
  programmatic_ = false;
  update_image(false);
  plot()->replot();
}

// The ranges stay inside the map and at least two cells wide (QCustomPlot would zoom out to
// empty space, or in to a fraction of one cell).
void HeatmapPanel::clamp_axes() {
  if (!view_ || view_->length() == 0) return;
  const double n = view_->length();
  for (QCPAxis* a : {plot()->xAxis, plot()->yAxis}) {
    const QCPRange r = a->range();
    const double size = std::clamp(r.size(), std::min(2.0, n), n);
    const double lower = std::clamp(r.lower, -0.5, n - 0.5 - size);
    if (std::abs(lower - r.lower) > 1e-9 || std::abs(size - r.size()) > 1e-9) a->setRange(lower, lower + size);
  }
}

void HeatmapPanel::user_range_changed() {
  if (programmatic_ || !view_ || !note().isEmpty()) return;
  programmatic_ = true;
  clamp_axes();
  programmatic_ = false;
  // A wheel zoom changes x, then y: recompute once, when both have moved.
  if (update_pending_) return;
  update_pending_ = true;
  QTimer::singleShot(0, this, [this] {
    update_pending_ = false;
    if (!view_ || !note().isEmpty()) return;
    update_image(false);
    plot()->replot(QCustomPlot::rpQueuedReplot);
    emit regionChanged(visible_region());
  });
}

void HeatmapPanel::update_image(bool force) {
  if (!view_ || !note().isEmpty()) return;
  const MapRegion want = visible_region();
  const MapRegion& have = image_.region;
  const bool same = have.row0 == want.row0 && have.row1 == want.row1 && have.col0 == want.col0 && have.col1 == want.col1;
  if (force || !same || image_.pixels.rows == 0) {
    image_ = map_image(*view_, kind_, scale_, want, kMaxPixels);
    const Matrix& px = image_.pixels;
    const int cpp = image_.cells_per_pixel;
    // QCustomPlot needs two cells a side to know a cell's width; a one-pixel image gets a NaN
    // (transparent) neighbour.
    const int nc = std::max(2, px.cols), nr = std::max(2, px.rows);
    QCPColorMapData* data = map_->data();
    data->setSize(nc, nr);
    // Pixel p covers cells [start + p cpp, start + (p + 1) cpp): its centre is where those cells'
    // centres average, so exact cells (cpp = 1) sit on their integer coordinates.
    const double k0 = image_.region.col0 + (cpp - 1) / 2.0, v0 = image_.region.row0 + (cpp - 1) / 2.0;
    data->setRange(QCPRange(k0, k0 + double(nc - 1) * cpp), QCPRange(v0, v0 + double(nr - 1) * cpp));
    for (int r = 0; r < nr; ++r)
      for (int c = 0; c < nc; ++c)
        data->setCell(c, r, r < px.rows && c < px.cols ? px.at(r, c) : std::nan(""));
    double lo = image_.lo, hi = image_.hi;
    if (range_ && !image_.diverging && range_->second > range_->first) {
      lo = range_->first;
      hi = range_->second;
    } else if (image_.diverging) {
      const double a = std::max({std::abs(lo), std::abs(hi), 1e-12});
      lo = -a, hi = a;
    } else if (!(hi > lo)) {
      hi = lo + (lo == 0 ? 1 : std::abs(lo) * 1e-6);
    }
    apply_gradient();
    map_->setDataRange(QCPRange(lo, hi));
  }
  update_labels();
}

void HeatmapPanel::set_colour_range(std::optional<std::pair<double, double>> range) { range_ = range; }

void HeatmapPanel::reset_zoom() {
  if (!view_ || view_->length() == 0 || !note().isEmpty()) return;
  const int n = view_->length();
  show_region({0, n, 0, n});
  emit regionChanged(visible_region());
}

int HeatmapPanel::square_height(int width) const {
  // What surrounds the axis rect's square (the title bar, tick and axis labels, the colour bar),
  // as the last fit of the square measured it (the axis rect's margins are only final inside a
  // replot's layout); before one, from the margins there are, or a guess.
  if (fit_across_ > 0) return std::max(120, width - fit_across_ + fit_down_);
  QCustomPlot* p = plot();
  QCPAxisRect* r = p->axisRect();
  if (r->rect().width() < 8 || p->width() < 8) return std::max(120, width - 150 + 110);
  const QMargins m = r->margins(), outer = p->plotLayout()->margins();
  const int bar = colour_scale_->visible() ? colour_scale_->outerRect().height() + p->plotLayout()->rowSpacing() : 0;
  const int across = (this->width() - p->width()) + outer.left() + outer.right() + m.left() + m.right();
  const int down = (this->height() - p->height()) + outer.top() + outer.bottom() + bar + m.top() + m.bottom();
  return std::max(120, width - across + down);
}

void HeatmapPanel::fit_square() {
  const int across = fit_across_, down = fit_down_;
  fit_square_once();
  // The panel's height follows the measure when it changed (next turn of the event loop: not
  // inside a layout); a replot that measures the same (panning, zooming) schedules nothing.
  if (fit_across_ == across && fit_down_ == down) return;
  QTimer::singleShot(0, this, [this] {
    const int cap = square_height(width());
    if (maximumHeight() != cap) setMaximumHeight(cap);
  });
}

void HeatmapPanel::fit_square_once() {
  QCustomPlot* p = plot();
  QCPAxisRect* r = p->axisRect();
  QCPLayoutGrid* layout = p->plotLayout();
  // The margins follow the tick labels, which follow the size: lay out again until the square
  // settles (once or twice), inside this replot, so what is drawn and what the mouse hits agree.
  for (int pass = 0; pass < 4; ++pass) {
    // The room for the axis rect's inner square: the plot less the colour bar's column and the
    // rect's margins (tick labels, axis labels).
    const QMargins m = r->margins();
    const int bar = colour_scale_->visible() ? colour_scale_->outerRect().height() + layout->rowSpacing() : 0;
    const QMargins outer = layout->margins();
    const int w = p->viewport().width() - outer.left() - outer.right() - m.left() - m.right();
    const int h = p->viewport().height() - outer.top() - outer.bottom() - bar - m.top() - m.bottom();
    const int side = std::max(16, std::min(w, h));
    // What surrounds the square across and down, as laid out now: square_height's measure.
    fit_across_ = width() - w;
    fit_down_ = height() - h;
    if (r->maximumSize() == QSize(side, side)) return;
    r->setMaximumSize(side, side);
    colour_scale_->setMaximumSize(side, QWIDGETSIZE_MAX);  // the bar as wide as the map above it
    layout->update(QCPLayoutElement::upPreparation);
    layout->update(QCPLayoutElement::upMargins);
    layout->update(QCPLayoutElement::upLayout);
  }
}

void HeatmapPanel::apply_gradient() {
  // style_plot re-applies the diverging gradient for the palette it draws with (light exports).
  map_->setProperty(kDivergingProperty, kind_ == MapKind::Difference);
  if (kind_ == MapKind::Difference)
    map_->setGradient(diverging_gradient(QApplication::palette()));
  else
    map_->setGradient(sequential_gradient());
}

// Labels of the visible cells only, every `stride`-th so that they do not overlap at this zoom.
void HeatmapPanel::update_labels() {
  if (!view_ || !note().isEmpty()) return;
  const MapRegion reg = visible_region();
  const QFontMetrics fm(plot()->xAxis->tickLabelFont());
  const double spacing = fm.height() + 2;  // x labels are rotated: their height is what stacks
  auto fill = [&](QCPAxis* axis, int c0, int c1, double pixels) {
    auto ticker = qSharedPointerCast<QCPAxisTickerText>(axis->ticker());
    ticker->clear();
    const double per_cell = std::max(1.0, pixels) / std::max(1, c1 - c0);
    const int stride = nice_stride(spacing / per_cell);
    for (int i = (c0 + stride - 1) / stride * stride; i < c1; i += stride) {
      const std::string label = i < int(view_->labels.size()) ? view_->labels[size_t(i)] : std::string();
      // Zoomed to one label per cell: the tokens; at overview strides the position alone (short
      // labels leave the room to the map; hovering a cell names its tokens).
      const QString text = stride == 1 ? short_label(label) : QString::number(i);
      ticker->addTick(i, text);
    }
  };
  labels_size_ = plot()->axisRect()->size();
  fill(plot()->xAxis, reg.col0, reg.col1, plot()->axisRect()->width());
  fill(plot()->yAxis, reg.row0, reg.row1, plot()->axisRect()->height());
}

QString HeatmapPanel::hover_text(int query, int key) const {
  if (!view_ || query < 0 || key < 0 || query >= view_->length() || key >= view_->length()) return {};
  auto tok = [this](int i) {
    return i < int(view_->labels.size()) ? QString::fromStdString(view_->labels[size_t(i)]) : QString();
  };
  QString s = QString("query %1 '%2' -> key %3 '%4'").arg(query).arg(tok(query)).arg(key).arg(tok(key));
  if (key > query) return s + QStringLiteral(" | masked (key after query)");
  if (!view_->q.empty() && !view_->k.empty()) s += QString(" | q.k/sqrt(d) %1").arg(view_->score(query, key), 0, 'f', 2);
  const double a = view_->softmax.at(query, key);
  s += " | softmax " + weight_text(a);
  if (view_->has_linear()) {
    const double b = view_->linear.at(query, key);
    s += " | linear " + weight_text(b);
    if (kind_ == MapKind::Difference && !std::isnan(b))
      s += QString(" | difference %1").arg(b - a >= 0 ? "+" + weight_text(b - a) : weight_text(b - a));
  }
  return s;
}

void HeatmapPanel::mouse_moved(QMouseEvent* event) {
  if (!view_ || !note().isEmpty() || event->buttons() != Qt::NoButton) return;
  const QPointF pos = event->position();
  if (!plot()->axisRect()->rect().contains(pos.toPoint())) {
    QToolTip::hideText();
    hover_row_ = hover_col_ = -1;
    return;
  }
  const int col = int(std::floor(plot()->xAxis->pixelToCoord(pos.x()) + 0.5));
  const int row = int(std::floor(plot()->yAxis->pixelToCoord(pos.y()) + 0.5));
  if (row < 0 || col < 0 || row >= view_->length() || col >= view_->length()) return;
  QToolTip::showText(event->globalPosition().toPoint(), hover_text(row, col), plot());
  if (row != hover_row_ || col != hover_col_) {
    hover_row_ = row, hover_col_ = col;
    emit cellHovered(row, col);
  }
}

// The visible cells, exactly, as weights (the scale is a way of looking, the numbers are the
// map's): the layout of `attnscope maps`' CSV, labels as header and first column.
std::string HeatmapPanel::visible_csv() const {
  if (!view_ || !note().isEmpty()) fail(title().toStdString(), "no map to export");
  const MapRegion reg = visible_region();
  const int side = std::max(reg.row1 - reg.row0, reg.col1 - reg.col0);
  const MapImage exact = map_image(*view_, kind_, ColourScale::Linear, reg, side);
  auto label = [this](int i) {
    return i < int(view_->labels.size()) ? view_->labels[size_t(i)] : std::to_string(i);
  };
  Table t;
  t.header = {"query\\key"};
  for (int j = exact.region.col0; j < exact.region.col1; ++j) t.header.push_back(label(j));
  for (int i = 0; i < exact.pixels.rows; ++i) {
    std::vector<std::string> row = {label(exact.region.row0 + i)};
    for (int j = 0; j < exact.pixels.cols; ++j) row.push_back(fmt_number(exact.pixels.at(i, j), 8));
    t.add_row(std::move(row));
  }
  return to_csv(t);
}

void HeatmapPanel::resizeEvent(QResizeEvent* event) {
  PlotPanel::resizeEvent(event);
  const int cap = square_height(width());
  if (maximumHeight() != cap) setMaximumHeight(cap);
}

void HeatmapPanel::changeEvent(QEvent* event) {
  PlotPanel::changeEvent(event);
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    apply_gradient();  // the difference's neutral middle follows the background
    if (note_->visible()) note_->setColor(QApplication::palette().color(QPalette::Text));
    plot()->replot();
  }
}

}  // namespace attnscope::views
