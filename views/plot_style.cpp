#include "plot_style.h"

#include <QApplication>
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

void style_plot(QCustomPlot* plot, const QPalette& palette) {
  const QColor bg = palette.color(QPalette::Base);
  const QColor fg = palette.color(QPalette::Text);
  QColor grid = fg;
  grid.setAlpha(is_dark(palette) ? 60 : 40);
  plot->setBackground(bg);
  for (QCPAxisRect* rect : plot->axisRects()) {
    rect->setBackground(bg);
    for (QCPAxis* a : rect->axes()) {
      a->setBasePen(QPen(fg, 1));
      a->setTickPen(QPen(fg, 1));
      a->setSubTickPen(QPen(fg, 1));
      a->setTickLabelColor(fg);
      a->setLabelColor(fg);
      a->grid()->setPen(QPen(grid, 1, Qt::DotLine));
      a->grid()->setZeroLinePen(Qt::NoPen);
    }
  }
  for (int i = 0; i < plot->plotLayout()->elementCount(); ++i)
    if (auto* t = qobject_cast<QCPTextElement*>(plot->plotLayout()->elementAt(i))) t->setTextColor(fg);
  // Colour scales live in the layout too; their axes need the same pens.
  for (QCPLayoutElement* e : plot->plotLayout()->elements(true))
    if (auto* scale = qobject_cast<QCPColorScale*>(e)) {
      QCPAxis* a = scale->axis();
      a->setBasePen(QPen(fg, 1));
      a->setTickPen(QPen(fg, 1));
      a->setSubTickPen(QPen(fg, 1));
      a->setTickLabelColor(fg);
      a->setLabelColor(fg);
    }
  for (int i = 0; i < plot->plottableCount(); ++i)
    if (auto* map = qobject_cast<QCPColorMap*>(plot->plottable(i)); map && map->property(kDivergingProperty).toBool())
      map->setGradient(diverging_gradient(palette));
  plot->legend->setBrush(bg);
  plot->legend->setTextColor(fg);
  plot->legend->setBorderPen(QPen(grid));
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
