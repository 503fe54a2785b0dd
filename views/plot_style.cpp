#include "plot_style.h"

#include <algorithm>

#include <QApplication>
#include <cmath>
#include <qcustomplot.h>

namespace attnscope::views {

bool is_dark(const QPalette& palette) { return palette.color(QPalette::Window).lightness() < 128; }

QPalette light_palette() {
  QPalette p;
  p.setColor(QPalette::Window, Qt::white);
  p.setColor(QPalette::Base, Qt::white);
  p.setColor(QPalette::WindowText, Qt::black);
  p.setColor(QPalette::Text, Qt::black);
  p.setColor(QPalette::Mid, QColor(200, 200, 200));
  return p;
}

void style_plot(QCustomPlot* plot) { style_plot(plot, QApplication::palette()); }

namespace {

void style_axis(QCPAxis* a, const QColor& fg) {
  a->setBasePen(QPen(fg, 1));
  a->setTickPen(QPen(fg, 1));
  a->setSubTickPen(QPen(fg, 1));
  a->setTickLabelColor(fg);
  a->setLabelColor(fg);
}

}  // namespace

void style_plot(QCustomPlot* plot, const QPalette& palette) {
  const QColor bg = palette.color(QPalette::Base);
  const QColor fg = palette.color(QPalette::Text);
  QColor grid = fg;
  grid.setAlpha(is_dark(palette) ? 60 : 40);
  plot->setBackground(bg);
  for (QCPAxisRect* rect : plot->axisRects()) {
    rect->setBackground(bg);
    for (QCPAxis* a : rect->axes()) {
      style_axis(a, fg);
      a->grid()->setPen(QPen(grid, 1, Qt::DotLine));
      a->grid()->setZeroLinePen(Qt::NoPen);
    }
  }
  // Titles, footnotes and colour scales, also inside nested layouts. A colour scale's bar is framed
  // by the four axes of its own axis rect; the one with ticks carries the label.
  for (QCPLayoutElement* e : plot->plotLayout()->elements(true)) {
    if (auto* t = qobject_cast<QCPTextElement*>(e)) {
      t->setTextColor(fg);
      t->setSelectedTextColor(fg);
    } else if (auto* scale = qobject_cast<QCPColorScale*>(e)) {
      if (QCPAxisRect* bar = scale->axis()->axisRect())
        for (QCPAxis* a : bar->axes()) style_axis(a, fg);
      style_axis(scale->axis(), fg);
    }
  }
  QColor box = bg;
  box.setAlpha(225);
  QColor frame = fg;
  frame.setAlpha(110);
  for (int i = 0; i < plot->itemCount(); ++i) {
    auto* t = qobject_cast<QCPItemText*>(plot->item(i));
    if (!t || t->property(kCellTextProperty).toBool()) continue;
    t->setColor(fg);
    t->setSelectedColor(fg);
    if (t->brush().style() != Qt::NoBrush) {  // a boxed label: the box follows the background
      t->setBrush(box);
      t->setPen(QPen(frame));
    }
  }
  for (int i = 0; i < plot->plottableCount(); ++i)
    if (auto* map = qobject_cast<QCPColorMap*>(plot->plottable(i)); map && map->property(kDivergingProperty).toBool())
      map->setGradient(diverging_gradient(palette));
  plot->legend->setBrush(bg);
  plot->legend->setTextColor(fg);
  plot->legend->setBorderPen(QPen(grid));
}

double relative_luminance(const QColor& c) {
  auto linear = [](double v) { return v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * linear(c.redF()) + 0.7152 * linear(c.greenF()) + 0.0722 * linear(c.blueF());
}

// Whichever of black and white contrasts more with the cell (WCAG contrast ratio): on viridis the
// switch is at teal, so the bright greens get black (white on them was hard to read).
QColor cell_ink(const QColor& cell) {
  const double l = relative_luminance(cell);
  return (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) ? QColor(Qt::black) : QColor(Qt::white);
}

void legend_below(QCustomPlot* plot, double scale) {
  QFont f = QApplication::font();
  f.setPointSizeF(std::max(6.0, f.pointSizeF() * scale));
  plot->legend->setFont(f);
  auto* below = new QCPLayoutGrid;
  plot->plotLayout()->addElement(1, 0, below);
  plot->plotLayout()->setRowStretchFactor(1, 0.001);
  below->setMargins(QMargins(4, 0, 4, 2));
  below->setMinimumSize(0, 0);
  plot->axisRect()->insetLayout()->take(plot->legend);
  below->addElement(0, 0, plot->legend);
  // A row's maximum width is its elements': without this stretchable neighbour an empty legend
  // (16 pixels) would narrow the column, and the axis rect above it, to its own width.
  below->addElement(0, 1, new QCPLayoutElement(plot));
  below->setColumnStretchFactor(0, 0.001);
  plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot->legend->setMargins(QMargins(4, 1, 4, 1));
}

QColor series_color(int i) {
  static const QColor colors[] = {QColor(0, 114, 178),  QColor(230, 159, 0), QColor(0, 158, 115),
                                  QColor(213, 94, 0),   QColor(86, 180, 233), QColor(204, 121, 167),
                                  QColor(240, 228, 66), QColor(136, 136, 136)};
  return colors[((i % 8) + 8) % 8];
}

QCPColorGradient sequential_gradient() {
  QCPColorGradient g;
  g.setColorStopAt(0.00, QColor(68, 1, 84));
  g.setColorStopAt(0.25, QColor(59, 82, 139));
  g.setColorStopAt(0.50, QColor(33, 145, 140));
  g.setColorStopAt(0.75, QColor(94, 201, 98));
  g.setColorStopAt(1.00, QColor(253, 231, 37));
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

QCPColorGradient diverging_gradient(const QPalette& palette) {
  QCPColorGradient g;
  g.setColorStopAt(0.0, QColor(33, 102, 172));
  g.setColorStopAt(0.5, palette.color(QPalette::Base));
  g.setColorStopAt(1.0, QColor(214, 47, 39));
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

}  // namespace attnscope::views
