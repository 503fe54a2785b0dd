#include "head_grid.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "plot_style.h"

namespace attnscope::views {

namespace {

constexpr int kGap = 4;          // between tiles
constexpr int kLegendBar = 10;   // height of the legend's colour bar

QColor mix(const QColor& a, const QColor& b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  return QColor::fromRgbF(float(a.redF() + (b.redF() - a.redF()) * t), float(a.greenF() + (b.greenF() - a.greenF()) * t),
                          float(a.blueF() + (b.blueF() - a.blueF()) * t));
}

}  // namespace

HeadGrid::HeadGrid(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

int HeadGrid::layers() const {
  return std::max({shape_layers_, int(thumbs_.size()), int(values_.size())});
}

int HeadGrid::heads() const {
  int h = shape_heads_;
  for (const auto& row : thumbs_) h = std::max(h, int(row.size()));
  for (const auto& row : values_) h = std::max(h, int(row.size()));
  return h;
}

void HeadGrid::set_head_types(std::vector<std::vector<QString>> letters) {
  type_letters_ = std::move(letters);
  setToolTip(type_letters_.empty() ? QString()
                                   : tr("The converted model's head types: S softmax (kept exact, its key-value cache), "
                                        "H hybrid (a softmax window beside a map), L linear (a map)"));
  update();
}

QString HeadGrid::head_type_letter(int layer, int head) const {
  if (layer < 0 || layer >= int(type_letters_.size()) || head < 0 || head >= int(type_letters_[size_t(layer)].size())) return {};
  return type_letters_[size_t(layer)][size_t(head)];
}

void HeadGrid::set_shape(int layers, int heads) {
  shape_layers_ = std::max(0, layers);
  shape_heads_ = std::max(0, heads);
  layer_ = std::clamp(layer_, 0, std::max(0, this->layers() - 1));
  head_ = std::clamp(head_, 0, std::max(0, this->heads() - 1));
  updateGeometry();
  update();
}

void HeadGrid::set_empty_text(const QString& text) {
  empty_text_ = text;
  update();
}

void HeadGrid::set_thumbnails(std::vector<std::vector<Matrix>> thumbnails) {
  thumbs_ = std::move(thumbnails);
  rebuild_images();
  updateGeometry();
  update();
}

void HeadGrid::set_metric(const QString& name, std::vector<std::vector<double>> values) {
  metric_ = name;
  values_ = std::move(values);
  lo_ = hi_ = std::nan("");
  for (const auto& row : values_)
    for (double v : row)
      if (std::isfinite(v)) {
        lo_ = std::isnan(lo_) ? v : std::min(lo_, v);
        hi_ = std::isnan(hi_) ? v : std::max(hi_, v);
      }
  rebuild_images();
  updateGeometry();
  update();
  emit metricChanged();
}

void HeadGrid::select(int layer, int head) {
  layer_ = layer;
  head_ = head;
  update();
}

QColor HeadGrid::tint(int layer, int head) const {
  const double v = layer < int(values_.size()) && head < int(values_[size_t(layer)].size())
                       ? values_[size_t(layer)][size_t(head)]
                       : std::nan("");
  if (!std::isfinite(v) || std::isnan(lo_)) return QColor(140, 140, 140);
  const double t = hi_ > lo_ ? (v - lo_) / (hi_ - lo_) : 0.5;
  return gradient_colour(t);
}

// The part of the gradient that stands out from the background: viridis' dark purple end
// vanishes on a dark base and its yellow end on a white one. The legend shows the same part.
QColor HeadGrid::gradient_colour(double t) const {
  const bool dark = is_dark(palette());
  const double from = dark ? 0.22 : 0.0, to = dark ? 1.0 : 0.9;
  return QColor::fromRgb(sequential_gradient().color(from + (to - from) * std::clamp(t, 0.0, 1.0), QCPRange(0, 1)));
}

// Each thumbnail cell mixes the palette's base colour with the head's tint in proportion to its
// weight (row-normalized by core): the pattern reads as the shape, the tint as the metric.
void HeadGrid::rebuild_images() {
  const QColor base = palette().color(QPalette::Base);
  images_.assign(thumbs_.size(), {});
  for (size_t l = 0; l < thumbs_.size(); ++l) {
    images_[l].resize(thumbs_[l].size());
    for (size_t h = 0; h < thumbs_[l].size(); ++h) {
      const Matrix& m = thumbs_[l][h];
      if (m.rows <= 0 || m.cols <= 0) continue;
      const QColor c = tint(int(l), int(h));
      QImage img(m.cols, m.rows, QImage::Format_RGB32);
      for (int r = 0; r < m.rows; ++r) {
        auto* line = reinterpret_cast<QRgb*>(img.scanLine(r));
        for (int k = 0; k < m.cols; ++k) {
          const double v = m.at(r, k);
          line[k] = std::isfinite(v) ? mix(base, c, v).rgb() : base.rgb();
        }
      }
      images_[l][h] = std::move(img);
    }
  }
}

HeadGrid::Geometry HeadGrid::geometry() const {
  const QFontMetrics fm(font());
  Geometry g;
  g.gap = kGap;
  g.left = fm.horizontalAdvance(QStringLiteral("L00")) + 8;
  g.top = fm.height() + 4;
  g.label_h = fm.height() + 1;
  const int S = std::max(1, layers()), H = std::max(1, heads());
  const int w = (width() - g.left - 4 - (H - 1) * g.gap) / H;
  const int h = (height() - g.top - 4 - S * (g.label_h + g.gap)) / S;
  g.tile = tile_pref_ > 0 ? tile_pref_ : std::clamp(std::min(w, h), kMinTile, kMaxTile);
  return g;
}

int HeadGrid::needed_height(int width) const {
  const int S = layers(), H = heads();
  if (S == 0 || H == 0) return 0;
  const QFontMetrics fm(font());
  const int left = fm.horizontalAdvance(QStringLiteral("L00")) + 8, top = fm.height() + 4, label_h = fm.height() + 1;
  const int w = (width - left - 4 - (H - 1) * kGap) / H;  // as geometry()
  const int tile = tile_pref_ > 0 ? tile_pref_ : std::clamp(w, kMinTile, kMaxTile);
  return top + 4 + S * (tile + label_h + kGap);
}

QRect HeadGrid::tile_rect(int layer, int head) const {
  if (layer < 0 || head < 0 || layer >= layers() || head >= heads()) return {};
  const Geometry g = geometry();
  return QRect(g.left + head * (g.tile + g.gap), g.top + layer * (g.tile + g.label_h + g.gap), g.tile, g.tile);
}

QSize HeadGrid::sizeHint() const {
  const QFontMetrics fm(font());
  const int S = std::max(1, layers()), H = std::max(1, heads());
  const int tile = tile_pref_ > 0 ? tile_pref_ : std::clamp(400 / std::max(S, H), 28, 72);
  return {fm.horizontalAdvance(QStringLiteral("L00")) + 12 + H * (tile + kGap),
          fm.height() + 8 + S * (tile + fm.height() + 1 + kGap)};
}

// At least the minimum tile (or the zoomed one) a side: a scroll area around the grid scrolls
// instead of shrinking the thumbnails to nothing.
QSize HeadGrid::minimumSizeHint() const {
  const QFontMetrics fm(font());
  const int S = std::max(1, layers()), H = std::max(1, heads());
  const int tile = tile_pref_ > 0 ? tile_pref_ : kMinTile;
  return {fm.horizontalAdvance(QStringLiteral("L00")) + 12 + H * (tile + kGap),
          fm.height() + 8 + S * (tile + fm.height() + 1 + kGap)};
}

void HeadGrid::set_tile_size(int pixels) {
  pixels = pixels <= 0 ? 0 : std::clamp(pixels, kMinTile, kMaxTile);
  if (pixels == tile_pref_) return;
  tile_pref_ = pixels;
  updateGeometry();
  update();
}

int HeadGrid::drawn_tile() const { return geometry().tile; }

// "H7" where every label fits its column; the bare number (under an "L\\H" corner) where only
// that fits; else every 2nd, 4th ... column labelled.
bool HeadGrid::short_labels() const {
  const Geometry g = geometry();
  const QFontMetrics fm(font());
  return fm.horizontalAdvance(QString("H%1").arg(std::max(0, heads() - 1))) + 4 > g.tile + g.gap;
}

std::vector<int> HeadGrid::labelled_heads() const {
  const Geometry g = geometry();
  const QFontMetrics fm(font());
  const int H = heads();
  const int widest = fm.horizontalAdvance(QString(short_labels() ? "%1" : "H%1").arg(std::max(0, H - 1))) + 4;
  int stride = 1;
  while (stride < H && stride * (g.tile + g.gap) < widest) stride *= 2;
  std::vector<int> out;
  for (int h = 0; h < H; h += stride) out.push_back(h);
  return out;
}

namespace {
// The decimals of the values under the tiles: fewer as the values grow.
int tile_decimals(double lo, double hi) {
  const double mag = std::max(std::abs(std::isnan(lo) ? 0 : lo), std::abs(std::isnan(hi) ? 0 : hi));
  return mag >= 100 ? 0 : mag >= 10 ? 1 : 2;
}
}  // namespace

QString HeadGrid::value_text(double v) const {
  if (!std::isfinite(v)) return QStringLiteral("–");
  return QString::number(v, 'f', tile_decimals(lo_, hi_));
}

QString HeadGrid::legend_text(double v) const {
  if (!std::isfinite(v)) return QStringLiteral("–");
  int decimals = tile_decimals(lo_, hi_);
  if (std::isfinite(lo_) && std::isfinite(hi_) && hi_ > lo_)
    while (decimals < 6 && QString::number(lo_, 'f', decimals) == QString::number(hi_, 'f', decimals)) ++decimals;
  return QString::number(v, 'f', decimals);
}

void HeadGrid::paintEvent(QPaintEvent* event) {
  QPainter p(this);
  const QPalette pal = palette();
  const QColor fg = pal.color(QPalette::WindowText);
  const QColor base = pal.color(QPalette::Base);
  QColor frame = fg;
  frame.setAlpha(70);
  const Geometry g = geometry();
  const QFontMetrics fm(font());
  const int S = layers(), H = heads();
  if (S == 0 || H == 0) {
    p.setPen(fg);
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               empty_text_.isEmpty() ? tr("No capture yet: the heads appear here") : empty_text_);
    return;
  }
  p.setPen(fg);
  // Column labels centred on their tile, as wide as they need (every 2nd, 4th ... where they would overlap).
  const bool bare = short_labels();
  for (int h : labelled_heads()) {
    const int cx = g.left + h * (g.tile + g.gap) + g.tile / 2, half = g.tile / 2 + g.gap + 16;
    p.drawText(QRect(cx - half, 0, 2 * half, g.top), Qt::AlignHCenter | Qt::AlignBottom,
               bare ? QString::number(h) : QString("H%1").arg(h));
  }
  if (bare)  // which axis is which, where the labels are bare numbers
    p.drawText(QRect(0, 0, g.left - 4, g.top), Qt::AlignRight | Qt::AlignBottom, QStringLiteral("L\\H"));
  // The values under the tiles: the widget's font, or smaller where the tiles are narrow.
  QFont value_font = font();
  {
    double widest = 1;
    for (const auto& row : values_)
      for (double v : row) widest = std::max(widest, double(fm.horizontalAdvance(value_text(v))));
    const double fit = std::min(1.0, (g.tile + g.gap - 2) / widest);
    value_font.setPointSizeF(std::floor(font().pointSizeF() * fit * 2) / 2);
  }
  auto tile_at = [&g](int l, int h) {
    return QRect(g.left + h * (g.tile + g.gap), g.top + l * (g.tile + g.label_h + g.gap), g.tile, g.tile);
  };
  const QRect exposed = event->rect();  // in a scroll area only the part in view is painted
  for (int l = 0; l < S; ++l) {
    const QRect row_tile = tile_at(l, 0);
    if (row_tile.top() > exposed.bottom() || row_tile.bottom() + g.label_h < exposed.top()) continue;
    p.setPen(fg);
    p.drawText(QRect(0, row_tile.top(), g.left - 6, g.tile), Qt::AlignRight | Qt::AlignVCenter, QString("L%1").arg(l));
    for (int h = 0; h < H; ++h) {
      const QRect r = tile_at(l, h);
      if (r.left() > exposed.right() || r.right() + g.gap < exposed.left()) continue;
      p.fillRect(r, base);
      const bool has_img = l < int(images_.size()) && h < int(images_[size_t(l)].size()) && !images_[size_t(l)][size_t(h)].isNull();
      if (has_img) p.drawImage(r, images_[size_t(l)][size_t(h)]);  // nearest: the cells stay crisp
      p.setPen(QPen(frame, 1));
      p.drawRect(r.adjusted(0, 0, -1, -1));
      // The metric's colour as a strip along the tile's bottom edge: readable even where the
      // thumbnail is mostly background.
      const QColor c = tint(l, h);
      p.fillRect(QRect(r.left(), r.bottom() - std::max(2, g.tile / 10) + 1, r.width(), std::max(2, g.tile / 10)), c);
      const double v = l < int(values_.size()) && h < int(values_[size_t(l)].size()) ? values_[size_t(l)][size_t(h)] : std::nan("");
      const QString text = value_text(v);
      if (!values_.empty() && value_font.pointSizeF() >= 6) {
        p.setPen(fg);
        p.setFont(value_font);
        p.drawText(QRect(r.left() - g.gap / 2, r.bottom() + 1, g.tile + g.gap, g.label_h), Qt::AlignCenter, text);
        p.setFont(font());
      }
      const QString letter = head_type_letter(l, h);
      if (!letter.isEmpty() && g.tile >= 24) {  // the head's type in a badge at the tile's top left corner
        QFont bf = font();
        bf.setBold(true);
        const QFontMetrics bm(bf);
        const QRect badge(r.left() + 1, r.top() + 1, bm.horizontalAdvance(letter) + 6, bm.height());
        p.fillRect(badge, pal.color(QPalette::Window));
        p.setPen(letter == QStringLiteral("S") ? pal.color(QPalette::Highlight) : fg);
        p.setFont(bf);
        p.drawText(badge, Qt::AlignCenter, letter);
        p.setFont(font());
      }
    }
  }
  // The selection: a thick frame in the palette's highlight colour, outside the tile so the
  // thumbnail stays visible.
  const QRect sel = tile_rect(layer_, head_);
  if (!sel.isEmpty()) {
    p.setPen(QPen(pal.color(QPalette::Highlight), 3));
    p.setBrush(Qt::NoBrush);
    p.drawRect(sel.adjusted(-2, -2, 1, 1));
  }
  if (hasFocus()) {
    QColor f = pal.color(QPalette::Highlight);
    f.setAlpha(90);
    p.setPen(QPen(f, 1, Qt::DashLine));
    p.drawRect(rect().adjusted(0, 0, -1, -1));
  }
}

bool HeadGrid::hit(const QPoint& pos, int* layer, int* head) const {
  const Geometry g = geometry();
  const int pitch_x = g.tile + g.gap, pitch_y = g.tile + g.label_h + g.gap;
  if (pos.x() < g.left || pos.y() < g.top) return false;
  const int h = (pos.x() - g.left) / pitch_x, l = (pos.y() - g.top) / pitch_y;
  if (l >= layers() || h >= heads()) return false;
  // The tile and the value printed under it; not the gaps between tiles.
  if ((pos.x() - g.left) % pitch_x >= g.tile || (pos.y() - g.top) % pitch_y >= g.tile + g.label_h) return false;
  *layer = l, *head = h;
  return true;
}

void HeadGrid::mousePressEvent(QMouseEvent* event) {
  int l = 0, h = 0;
  if (event->button() != Qt::LeftButton || !hit(event->position().toPoint(), &l, &h)) return QWidget::mousePressEvent(event);
  setFocus(Qt::MouseFocusReason);
  select(l, h);
  emit headSelected(l, h);
}

void HeadGrid::keyPressEvent(QKeyEvent* event) {
  if (event->modifiers() & Qt::ControlModifier) {
    const int now = drawn_tile();
    switch (event->key()) {
      case Qt::Key_Plus:
      case Qt::Key_Equal: set_tile_size(std::max(now + 1, now * 5 / 4)); emit tileSizeChanged(tile_pref_); return;
      case Qt::Key_Minus: set_tile_size(std::min(now - 1, now * 4 / 5)); emit tileSizeChanged(tile_pref_); return;
      case Qt::Key_0: set_tile_size(0); emit tileSizeChanged(0); return;
      default: break;
    }
  }
  int l = layer_, h = head_;
  switch (event->key()) {
    case Qt::Key_Up: --l; break;
    case Qt::Key_Down: ++l; break;
    case Qt::Key_Left: --h; break;
    case Qt::Key_Right: ++h; break;
    default: return QWidget::keyPressEvent(event);
  }
  l = std::clamp(l, 0, std::max(0, layers() - 1));
  h = std::clamp(h, 0, std::max(0, heads() - 1));
  if (l == layer_ && h == head_) return;
  select(l, h);
  emit headSelected(l, h);
}

// Ctrl+wheel zooms the tiles; a plain wheel scrolls the scroll area around the grid.
void HeadGrid::wheelEvent(QWheelEvent* event) {
  if (!(event->modifiers() & Qt::ControlModifier) || event->angleDelta().y() == 0) return QWidget::wheelEvent(event);
  const int now = drawn_tile();
  set_tile_size(event->angleDelta().y() > 0 ? std::max(now + 1, now * 5 / 4) : std::min(now - 1, now * 4 / 5));
  emit tileSizeChanged(tile_pref_);
  event->accept();
}

bool HeadGrid::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    int l = 0, h = 0;
    if (hit(help->pos(), &l, &h)) {
      QString text = tr("layer %1, head %2").arg(l).arg(h);
      if (!metric_.isEmpty() && l < int(values_.size()) && h < int(values_[size_t(l)].size()))
        text += QString("\n%1: %2").arg(metric_).arg(values_[size_t(l)][size_t(h)], 0, 'g', 4);
      QToolTip::showText(help->globalPos(), text, this);
    } else {
      QToolTip::hideText();
    }
    return true;
  }
  return QWidget::event(e);
}

void HeadGrid::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    rebuild_images();
    update();
  }
  QWidget::changeEvent(event);
}

// --- TintLegend ---

TintLegend::TintLegend(const HeadGrid* grid, QWidget* parent) : QWidget(parent), grid_(grid) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
  connect(grid, &HeadGrid::metricChanged, this, [this] { update(); });
}

QString TintLegend::low_text() const {
  return grid_->metric().isEmpty() || std::isnan(grid_->metric_low()) ? QString() : grid_->legend_text(grid_->metric_low());
}

QString TintLegend::high_text() const {
  return grid_->metric().isEmpty() || std::isnan(grid_->metric_high()) ? QString() : grid_->legend_text(grid_->metric_high());
}

// The bar starts where the grid's tiles do (after its row labels) and spans the widget, up to
// kMaxBar, and never less than its two numbers side by side.
QRect TintLegend::bar_rect() const {
  if (grid_->metric().isEmpty()) return {};
  const QFontMetrics fm(font());
  const int x0 = fm.horizontalAdvance(QStringLiteral("L00")) + 8;
  const int ends = fm.horizontalAdvance(low_text()) + fm.horizontalAdvance(high_text()) + 16;
  const int w = std::max({60, ends, std::min(width() - x0 - 8, kMaxBar)});
  return QRect(x0, fm.height() + 2, w, kLegendBar);
}

QRect TintLegend::low_rect() const {
  const QRect bar = bar_rect();
  const QString t = low_text();
  if (bar.isEmpty() || t.isEmpty()) return {};
  const QFontMetrics fm(font());
  return QRect(bar.left(), bar.bottom() + 2, fm.horizontalAdvance(t), fm.height());
}

QRect TintLegend::high_rect() const {
  const QRect bar = bar_rect();
  const QString t = high_text();
  if (bar.isEmpty() || t.isEmpty()) return {};
  const QFontMetrics fm(font());
  const int w = fm.horizontalAdvance(t);
  return QRect(bar.right() + 1 - w, bar.bottom() + 2, w, fm.height());
}

QSize TintLegend::sizeHint() const {
  const QFontMetrics fm(font());
  return {fm.horizontalAdvance(QStringLiteral("L00")) + 16 + kMaxBar, 2 * fm.height() + kLegendBar + 6};
}

QSize TintLegend::minimumSizeHint() const {
  const QFontMetrics fm(font());
  return {fm.horizontalAdvance(QStringLiteral("L00")) + 16 + 60, 2 * fm.height() + kLegendBar + 6};
}

void TintLegend::paintEvent(QPaintEvent*) {
  const QRect bar = bar_rect();
  if (bar.isEmpty()) return;
  QPainter p(this);
  const QFontMetrics fm(font());
  const QColor fg = palette().color(QPalette::WindowText);
  QColor frame = fg;
  frame.setAlpha(70);
  p.setPen(fg);
  p.drawText(QRect(bar.left(), 0, bar.width(), fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
             fm.elidedText(tr("tint: %1").arg(grid_->metric()), Qt::ElideRight, bar.width()));
  QLinearGradient lg(bar.left(), 0, bar.right() + 1, 0);
  for (int i = 0; i <= 8; ++i) lg.setColorAt(i / 8.0, grid_->gradient_colour(i / 8.0));
  p.fillRect(bar, lg);
  p.setPen(QPen(frame, 1));
  p.drawRect(bar.adjusted(0, 0, -1, -1));
  p.setPen(fg);
  if (low_text().isEmpty()) {
    p.drawText(QRect(bar.left(), bar.bottom() + 2, bar.width(), fm.height()), Qt::AlignLeft | Qt::AlignTop, tr("no values"));
    return;
  }
  p.drawText(low_rect(), Qt::AlignLeft | Qt::AlignTop, low_text());
  p.drawText(high_rect(), Qt::AlignRight | Qt::AlignTop, high_text());
}

void TintLegend::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange ||
      event->type() == QEvent::FontChange)
    update();
  QWidget::changeEvent(event);
}

}  // namespace attnscope::views
