#include "value_heatmap.h"

#include <QApplication>
#include <QMouseEvent>
#include <QToolTip>
#include <algorithm>
#include <cmath>
#include <limits>
#include <qcustomplot.h>

#include "attnscope/base/error.h"
#include "attnscope/base/table.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

QString number(double v, int decimals) { return std::isfinite(v) ? QString::number(v, 'f', decimals) : QStringLiteral("–"); }

}  // namespace

ValueHeatmap::ValueHeatmap(const QString& title, const QString& value_label, QWidget* parent) : PlotPanel(title, parent) {
  QCustomPlot* p = plot();
  map_ = new QCPColorMap(p->xAxis, p->yAxis);
  map_->setName(value_label);
  map_->setInterpolate(false);
  map_->setTightBoundary(false);
  scale_ = new QCPColorScale(p);
  scale_->setType(QCPAxis::atRight);
  scale_->setBarWidth(8);
  scale_->axis()->setLabel(value_label);
  p->plotLayout()->addElement(0, 1, scale_);
  map_->setColorScale(scale_);
  map_->setGradient(sequential_gradient());
  auto* group = new QCPMarginGroup(p);
  p->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  p->yAxis->setRangeReversed(true);
  p->xAxis->grid()->setVisible(false);
  p->yAxis->grid()->setVisible(false);
  for (QCPAxis* a : {p->xAxis, p->yAxis}) {  // ticks outside: inside they read as minus signs
    a->setTickLength(0, 3);
    a->setSubTicks(false);
  }
  p->xAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
  p->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
  note_ = new QCPItemText(p);
  note_->position->setType(QCPItemPosition::ptAxisRectRatio);
  note_->position->setCoords(0.5, 0.5);
  note_->setPositionAlignment(Qt::AlignCenter);
  note_->setTextAlignment(Qt::AlignCenter);
  note_->setClipToAxisRect(false);
  note_->setVisible(false);
  // The selection: a dark and a light outline read on every cell colour, on a layer of their own
  // so that the cell texts (made later) never cover them.
  p->addLayer("selection", p->layer("main"), QCustomPlot::limAbove);
  frame_outer_ = new QCPItemRect(p);
  frame_outer_->setPen(QPen(Qt::black, 4));
  frame_inner_ = new QCPItemRect(p);
  frame_inner_->setPen(QPen(Qt::white, 1.5));
  for (QCPItemRect* r : {frame_outer_, frame_inner_}) {
    r->setLayer("selection");
    r->setBrush(Qt::NoBrush);
    r->setVisible(false);
  }
  connect(p, &QCustomPlot::mousePress, this, &ValueHeatmap::mouse_pressed);
  connect(p, &QCustomPlot::mouseRelease, this, &ValueHeatmap::mouse_released);
  connect(p, &QCustomPlot::mouseMove, this, &ValueHeatmap::mouse_moved);
  // Zoom and pan within the grid (a 32 x 32 map has cells too small for their numbers); the tick
  // labels follow the cells in view, the texts their size (below).
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  connect(p, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) { reset_zoom(); });
  for (QCPAxis* a : {p->xAxis, p->yAxis})
    connect(a, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
      if (clamping_) return;
      clamp_ranges();
      if (!values_.empty()) label_axes();
    });
  // The texts follow the cells' size.
  connect(p, &QCustomPlot::afterReplot, this, [this] {
    if (fit_texts()) plot()->replot(QCustomPlot::rpQueuedReplot);
  });
  restyle();  // PlotPanel styled the plot before the colour bar existed
}

void ValueHeatmap::set_footnote(const QString& text) {
  footnote_text_ = text;
  update_hint();
}

// The footnote, and under it how to read the values while the cells are too small for them.
void ValueHeatmap::update_hint() {
  QString text = footnote_text_;
  if (!values_.empty() && !texts_.empty() && font_px_ < kMinTextPx) {
    if (!text.isEmpty()) text += '\n';
    text += tr("values: hover or zoom");  // short: it sits under a narrow map
  }
  QCustomPlot* p = plot();
  if (!footnote_) {
    if (text.isEmpty()) return;
    footnote_ = new QCPTextElement(p, text);
    QFont f = footnote_->font();
    f.setPointSizeF(8);
    footnote_->setFont(f);
    p->plotLayout()->insertRow(1);
    p->plotLayout()->addElement(1, 0, footnote_);
    p->plotLayout()->setRowStretchFactor(1, 0.001);
    restyle();
  }
  if (footnote_->text() != text) footnote_->setText(text);
}

void ValueHeatmap::show_note(const QString& text) {
  QCustomPlot* p = plot();
  values_.clear();
  custom_.clear();
  bold_.clear();
  map_->data()->clear();
  map_->setVisible(false);
  for (QCPItemText* t : texts_) p->removeItem(t);
  texts_.clear();
  for (QCPItemRect* r : marks_) p->removeItem(r);
  marks_.clear();
  frame_outer_->setVisible(false);
  frame_inner_->setVisible(false);
  note_->setText(text);
  note_->setColor(QApplication::palette().color(QPalette::Text));
  note_->setVisible(true);
  scale_->setVisible(false);  // a colour bar without data would show a meaningless range
  qSharedPointerCast<QCPAxisTickerText>(p->xAxis->ticker())->clear();
  qSharedPointerCast<QCPAxisTickerText>(p->yAxis->ticker())->clear();
  font_px_ = 0;
  update_hint();
  p->replot();
}

QString ValueHeatmap::note() const { return note_->visible() ? note_->text() : QString(); }

void ValueHeatmap::set_values(std::vector<std::vector<double>> v, QStringList rows, QStringList cols, double lo,
                              double hi, int decimals, Extras extras) {
  QCustomPlot* p = plot();
  const int old_r = this->rows(), old_c = this->cols();
  values_ = std::move(v);
  custom_.clear();
  bold_.clear();
  row_names_ = std::move(rows);
  col_names_ = std::move(cols);
  decimals_ = decimals;
  const int R = int(values_.size()), C = R > 0 ? int(values_[0].size()) : 0;
  if (R == 0 || C == 0) return show_note(tr("No heads"));
  ++fills_;
  note_->setVisible(false);
  map_->setVisible(true);
  scale_->setVisible(true);
  // QCustomPlot needs two cells a side to know a cell's size: a single row or column gets a
  // transparent neighbour.
  const int nc = std::max(2, C), nr = std::max(2, R);
  map_->data()->setSize(nc, nr);
  map_->data()->setRange(QCPRange(0, nc - 1), QCPRange(0, nr - 1));
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c) map_->data()->setCell(c, r, r < R && c < C ? values_[size_t(r)][size_t(c)] : kNaN);
  if (!(hi > lo)) hi = lo + 1;
  lo_ = lo, hi_ = hi;
  map_->setDataRange(QCPRange(lo, hi));
  // The same shape keeps its zoom (a slider moving redraws the same heads); another shows it all.
  const bool same_shape = R == old_r && C == old_c && int(texts_.size()) == R * C;
  if (!same_shape) {
    const QSignalBlocker bx(p->xAxis), by(p->yAxis);
    p->xAxis->setRange(-0.5, C - 0.5);
    p->yAxis->setRange(-0.5, R - 0.5);
  }
  // The same shape reuses its text items: 1024 of them made anew per slider step cost more than
  // the texts themselves.
  if (!same_shape) {
    for (QCPItemText* t : texts_) p->removeItem(t);
    texts_.clear();
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        auto* t = new QCPItemText(p);
        t->position->setCoords(c, r);
        t->setPositionAlignment(Qt::AlignCenter);
        t->setClipToAxisRect(true);
        t->setVisible(false);  // fit_texts shows them where they fit
        texts_.push_back(t);
      }
  }
  QCPColorGradient g = map_->gradient();  // color() is not const
  const QColor none_ink = QApplication::palette().color(QPalette::Text);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const double x = values_[size_t(r)][size_t(c)];
      QCPItemText* t = texts_[size_t(r) * size_t(C) + size_t(c)];
      t->setText(number(x, decimals));
      // On a coloured cell the ink follows the cell; a missing value ("–") sits on the background
      // and follows the palette (style_plot restyles it).
      t->setProperty(kCellTextProperty, std::isfinite(x));
      t->setColor(std::isfinite(x) ? cell_ink(QColor::fromRgb(g.color(x, QCPRange(lo, hi)))) : none_ink);
    }
  custom_ = std::move(extras.texts);
  bold_ = std::move(extras.bold);
  apply_extras({{}, {}, std::move(extras.marked)});
  font_px_ = kUnfitted;
  shown_decimals_ = decimals;
  label_axes();
  fit_texts();
  p->replot();
}

// The marked cells' dashed outlines (the only extra that makes items of its own).
void ValueHeatmap::apply_extras(Extras extras) {
  QCustomPlot* p = plot();
  for (QCPItemRect* m : marks_) p->removeItem(m);
  marks_.clear();
  const auto& marked = extras.marked;
  for (size_t r = 0; r < marked.size() && r < values_.size(); ++r)
    for (size_t c = 0; c < marked[r].size() && c < values_[r].size(); ++c) {
      if (!marked[r][c]) continue;
      auto* m = new QCPItemRect(p);
      m->topLeft->setCoords(double(c) - 0.46, double(r) - 0.46);
      m->bottomRight->setCoords(double(c) + 0.46, double(r) + 0.46);
      m->setPen(QPen(series_color(3), 2, Qt::DashLine));  // vermillion: the accent of the DoF view
      m->setBrush(Qt::NoBrush);
      marks_.push_back(m);
    }
}

void ValueHeatmap::set_cell_texts(std::vector<std::vector<QString>> texts) {
  custom_ = std::move(texts);
  font_px_ = kUnfitted;  // sized again for the new texts
  fit_texts();
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

void ValueHeatmap::set_bold(std::vector<std::vector<bool>> bold) {
  bold_ = std::move(bold);
  font_px_ = kUnfitted;
  fit_texts();
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

void ValueHeatmap::set_marked(std::vector<std::vector<bool>> marked) {
  apply_extras({{}, {}, std::move(marked)});
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

QString ValueHeatmap::cell_text(int row, int col) const {
  if (row < 0 || col < 0 || row >= rows() || col >= cols() || texts_.empty()) return {};
  return texts_[size_t(row) * size_t(cols()) + size_t(col)]->text();
}

// Tick labels on the rows and columns in view, every `stride` of them so they do not overlap.
void ValueHeatmap::label_axes() {
  QCustomPlot* p = plot();
  const QFontMetrics fm(p->yAxis->tickLabelFont());
  auto fill = [&](QCPAxis* axis, const QStringList& names, double pixels, double each) {
    auto ticker = qSharedPointerCast<QCPAxisTickerText>(axis->ticker());
    ticker->clear();
    const int n = int(names.size());
    const QCPRange r = axis->range();
    const int first = std::clamp(int(std::ceil(r.lower)), 0, std::max(0, n - 1));
    const int last = std::clamp(int(std::floor(r.upper)), 0, std::max(0, n - 1));
    const int shown = std::max(1, last - first + 1);
    int stride = std::max(1, int(std::ceil(each * shown / std::max(1.0, pixels))));
    // Round strides (1, 2, 4, 5, 8, 10, 16, ...) so the labels read as a scale, starting at a multiple;
    // powers of two past 16, as head counts are (a 16 x 32-head model's rows step by layer, not by 25).
    for (int s : {1, 2, 4, 5, 8, 10, 16, 32, 64, 128, 256})
      if (s >= stride) { stride = s; break; }
    for (int i = (first + stride - 1) / stride * stride; i <= last && i < n; i += stride) ticker->addTick(i, names[i]);
  };
  fill(p->yAxis, row_names_, p->axisRect()->height(), fm.height() + 1);
  int widest = 0;
  for (const QString& s : col_names_) widest = std::max(widest, fm.horizontalAdvance(s));
  // Rotated column labels stack by their height (plus the slant), level ones by their width.
  const double rot = std::abs(p->xAxis->tickLabelRotation());
  fill(p->xAxis, col_names_, p->axisRect()->width(), rot > 1 ? fm.height() * 1.5 : widest + 6);
}

void ValueHeatmap::clamp_ranges() {
  QCustomPlot* p = plot();
  clamping_ = true;
  auto clamp = [](QCPAxis* a, int n) {
    const double lo = -0.5, hi = std::max(1, n) - 0.5;
    QCPRange r = a->range();
    double size = std::clamp(r.size(), std::min(1.0, hi - lo), hi - lo);  // at most the grid, at least a cell
    double l = std::clamp(r.center() - size / 2, lo, hi - size);
    if (std::abs(l - r.lower) > 1e-9 || std::abs(l + size - r.upper) > 1e-9) a->setRange(l, l + size);
  };
  clamp(p->xAxis, cols());
  clamp(p->yAxis, rows());
  clamping_ = false;
}

void ValueHeatmap::zoom_to(int row0, int col0, int nrows, int ncols) {
  if (values_.empty()) return;
  QCustomPlot* p = plot();
  nrows = std::clamp(nrows, 1, rows());
  ncols = std::clamp(ncols, 1, cols());
  row0 = std::clamp(row0, 0, rows() - nrows);
  col0 = std::clamp(col0, 0, cols() - ncols);
  p->xAxis->setRange(col0 - 0.5, col0 + ncols - 0.5);
  p->yAxis->setRange(row0 - 0.5, row0 + nrows - 0.5);
  p->replot();  // texts and labels follow (afterReplot)
}

void ValueHeatmap::reset_zoom() {
  if (values_.empty()) return;
  zoom_to(0, 0, rows(), cols());
}

bool ValueHeatmap::zoomed() const {
  if (values_.empty()) return false;
  const QCustomPlot* p = plot();
  return p->xAxis->range().size() < cols() - 1e-6 || p->yAxis->range().size() < rows() - 1e-6;
}

void ValueHeatmap::visible_cells(int* row0, int* row1, int* col0, int* col1) const {
  const QCustomPlot* p = plot();
  const QCPRange x = p->xAxis->range(), y = p->yAxis->range();
  *col0 = std::clamp(int(std::floor(x.lower + 0.5)), 0, std::max(0, cols() - 1));
  *col1 = std::clamp(int(std::ceil(x.upper - 0.5)), 0, std::max(0, cols() - 1));
  *row0 = std::clamp(int(std::floor(y.lower + 0.5)), 0, std::max(0, rows() - 1));
  *row1 = std::clamp(int(std::ceil(y.upper - 0.5)), 0, std::max(0, rows() - 1));
}

// Cell texts sized to the widest text at `decimals`, then with one decimal fewer when that is what
// keeps them readable (12 x 12 heads in a quarter of a window); hidden below 8 px.
bool ValueHeatmap::fit_texts() {
  if (texts_.empty()) return false;
  QCustomPlot* p = plot();
  const int R = rows(), C = cols();
  // The cells as drawn now: zoomed in they are larger than the axis rect over the grid.
  const double cw = p->axisRect()->width() / std::max(1e-9, p->xAxis->range().size());
  const double ch = p->axisRect()->height() / std::max(1e-9, p->yAxis->range().size());
  // Pixel sizes, not points: the plot's buffer and a widget's metrics may not share a DPI.
  QFont f = QApplication::font();
  const int base_px = QFontInfo(f).pixelSize();
  f.setPixelSize(base_px);
  QFont fb = f;
  fb.setBold(true);
  const bool custom = !custom_.empty();
  auto text_at = [&](int r, int c, int digits) {
    if (custom && size_t(r) < custom_.size() && size_t(c) < custom_[size_t(r)].size()) return custom_[size_t(r)][size_t(c)];
    return number(values_[size_t(r)][size_t(c)], digits);
  };
  auto is_bold = [&](int r, int c) { return size_t(r) < bold_.size() && size_t(c) < bold_[size_t(r)].size() && bold_[size_t(r)][size_t(c)]; };
  auto size_for = [&](int digits) {
    const QFontMetricsF fm(f), fmb(fb);
    double widest = 0;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) widest = std::max(widest, (is_bold(r, c) ? fmb : fm).horizontalAdvance(text_at(r, c, digits)));
    const double fit = std::min({cw * 0.88 / std::max(widest, 1.0), ch * 0.8 / fm.height(), 1.0});
    return int(std::floor(base_px * fit));
  };
  int digits = decimals_;
  int px = size_for(digits);
  while (!custom && px < kMinTextPx && digits > 1 && size_for(digits - 1) > px) px = size_for(--digits);
  // Marked cells: a dashed 2-pixel outline reads on cells of 18 pixels and more; on smaller ones
  // the dashes turn into noise, so a thin solid one.
  // Below 4 pixels an outline covers its cell and the marks of many rows merge into stripes (the
  // mixer panel of 512 heads): hidden until the user zooms in.
  const bool small_cells = std::min(cw, ch) < 18, tiny_cells = std::min(cw, ch) < 4;
  for (QCPItemRect* m : marks_) {
    m->setPen(QPen(series_color(3), small_cells ? 1 : 2, small_cells ? Qt::SolidLine : Qt::DashLine));
    m->setVisible(!tiny_cells);
  }
  if (px == font_px_ && digits == shown_decimals_) return false;
  font_px_ = px;
  shown_decimals_ = digits;
  const bool visible = px >= kMinTextPx;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      QCPItemText* t = texts_[size_t(r) * size_t(C) + size_t(c)];
      QFont tf = is_bold(r, c) ? fb : f;
      tf.setPixelSize(std::max(px, 1));
      t->setFont(tf);
      t->setText(text_at(r, c, digits));
      t->setVisible(visible);
    }
  label_axes();
  update_hint();
  return true;
}

void ValueHeatmap::frame(double x0, double y0, double x1, double y1) {
  for (QCPItemRect* r : {frame_outer_, frame_inner_}) {
    r->topLeft->setCoords(x0, y0);
    r->bottomRight->setCoords(x1, y1);
    r->setVisible(true);
  }
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

void ValueHeatmap::select(int row, int col) {
  if (values_.empty() || row < 0 || col < 0 || row >= rows() || col >= cols()) {
    frame_outer_->setVisible(false);
    frame_inner_->setVisible(false);
    plot()->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  // A zoomed map pans to the selected cell when it is out of view.
  int r0, r1, c0, c1;
  visible_cells(&r0, &r1, &c0, &c1);
  if (zoomed() && (row < r0 || row > r1 || col < c0 || col > c1)) {
    QCustomPlot* p = plot();
    const double w = p->xAxis->range().size(), h = p->yAxis->range().size();
    const QSignalBlocker bx(p->xAxis), by(p->yAxis);
    p->xAxis->setRange(col - w / 2, col + w / 2);
    p->yAxis->setRange(row - h / 2, row + h / 2);
    clamp_ranges();
    label_axes();
  }
  frame(col - 0.5, row - 0.5, col + 0.5, row + 0.5);
}

void ValueHeatmap::select_row(int row) {
  if (values_.empty() || row < 0 || row >= rows()) return select(-1, -1);
  frame(-0.5, row - 0.5, cols() - 0.5, row + 0.5);
}

bool ValueHeatmap::cell_at(const QPoint& pos, int* row, int* col) const {
  QCustomPlot* p = plot();
  if (values_.empty() || !p->axisRect()->rect().contains(pos)) return false;
  const int c = int(std::floor(p->xAxis->pixelToCoord(pos.x()) + 0.5));
  const int r = int(std::floor(p->yAxis->pixelToCoord(pos.y()) + 0.5));
  if (r < 0 || c < 0 || r >= rows() || c >= cols()) return false;
  *row = r;
  *col = c;
  return true;
}

// A click selects the cell under it; a drag (panning a zoomed map) selects nothing.
void ValueHeatmap::mouse_pressed(QMouseEvent* e) {
  press_ = e->button() == Qt::LeftButton ? e->position().toPoint() : QPoint(-1, -1);
}

void ValueHeatmap::mouse_released(QMouseEvent* e) {
  int r, c;
  const QPoint at = e->position().toPoint();
  if (e->button() != Qt::LeftButton || press_.x() < 0 || (at - press_).manhattanLength() > 4) return;
  press_ = QPoint(-1, -1);
  if (cell_at(at, &r, &c)) emit cellClicked(r, c);
}

void ValueHeatmap::mouse_moved(QMouseEvent* e) {
  int r, c;
  QString text;
  if (cell_at(e->position().toPoint(), &r, &c)) {
    if (tooltip_) {
      text = tooltip_(r, c);
    } else {
      // The row and the column as the axes name them ("layer 3, head 7"), and the value.
      const QCustomPlot* p = plot();
      auto named = [](const QString& axis, const QString& name) { return axis.isEmpty() ? name : axis + ' ' + name; };
      const double v = values_[size_t(r)][size_t(c)];
      text = QStringLiteral("%1, %2: %3")
                 .arg(named(p->yAxis->label(), row_names_.value(r)), named(p->xAxis->label(), col_names_.value(c)),
                      std::isfinite(v) ? QString::number(v, 'f', std::max(decimals_, 2)) : QStringLiteral("–"));
    }
  }
  if (text.isEmpty()) QToolTip::hideText();
  else QToolTip::showText(e->globalPosition().toPoint(), text, plot());
}

std::string ValueHeatmap::values_csv(const std::string& corner) const {
  if (values_.empty()) fail(title().toStdString(), "no values to export");
  Table t;
  t.header = {corner};
  for (const QString& c : col_names_) t.header.push_back(c.toStdString());
  for (size_t r = 0; r < values_.size(); ++r) {
    std::vector<std::string> row = {row_names_.value(int(r)).toStdString()};
    for (double x : values_[r]) row.push_back(fmt_number(x, 6));
    t.add_row(std::move(row));
  }
  return to_csv(t);
}

}  // namespace attnscope::views
