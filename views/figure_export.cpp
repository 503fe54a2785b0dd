#include "figure_export.h"

#include <QApplication>
#include <QPainter>
#include <QSvgGenerator>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>
#include <qcustomplot.h>

#include "attnscope/base/error.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

enum class Format { Png, Svg, Pdf };

Format format_of(const std::string& path) {
  auto ends = [&](const char* s) {
    const std::string e(s);
    return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".png")) return Format::Png;
  if (ends(".svg")) return Format::Svg;
  if (ends(".pdf")) return Format::Pdf;
  fail(path, "unknown figure format (use .png, .svg or .pdf)");
}

// Writes to path.tmp and renames, like every other attnscope output.
void save_plot_impl(QCustomPlot& plot, const std::string& path, int w, int h) {
  const Format f = format_of(path);
  const QString tmp = QString::fromStdString(path + ".tmp");
  bool ok = false;
  switch (f) {
    case Format::Png: ok = plot.saveRastered(tmp, w, h, 2.0, "PNG", -1, 144); break;
    case Format::Pdf: ok = plot.savePdf(tmp, w, h); break;
    case Format::Svg: {
      QSvgGenerator gen;
      gen.setFileName(tmp);
      gen.setSize(QSize(w, h));
      gen.setViewBox(QRect(0, 0, w, h));
      QCPPainter painter;
      ok = painter.begin(&gen);
      if (ok) {
        plot.toPainter(&painter, w, h);
        ok = painter.end();
      }
      break;
    }
  }
  if (!ok || std::rename(tmp.toStdString().c_str(), path.c_str()) != 0) {
    std::remove(tmp.toStdString().c_str());
    fail(path, "cannot write figure");
  }
}

QSharedPointer<QCPAxisTickerText> label_ticker(const std::vector<std::string>& labels, int stride) {
  auto t = QSharedPointer<QCPAxisTickerText>::create();
  for (size_t i = 0; i < labels.size(); i += stride) t->addTick(double(i), QString::fromStdString(labels[i]));
  return t;
}


}  // namespace

void save_plot(QCustomPlot& plot, const std::string& path, int width, int height) {
  save_plot_impl(plot, path, width, height);
}

void ensure_runtime_dir() {
  // Qt wants a private runtime directory and warns on every run without one (headless machines,
  // CI); give it one under the temp dir, as it would pick itself, but silently.
  if (std::getenv("XDG_RUNTIME_DIR")) return;
  const std::string dir = "/tmp/runtime-" + std::to_string(getuid());
  mkdir(dir.c_str(), 0700);
  struct stat st{};
  if (stat(dir.c_str(), &st) == 0 && st.st_uid == getuid() && (st.st_mode & 0077) == 0)
    setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
}

bool ensure_qt(std::string* why) {
  if (QApplication::instance()) return true;
  const char* display = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  if (!std::getenv("QT_QPA_PLATFORM") && !(display && *display) && !(wayland && *wayland))
    setenv("QT_QPA_PLATFORM", "offscreen", 1);
  ensure_runtime_dir();
  static int argc = 1;
  static char name[] = "attnscope";
  static char* argv[] = {name, nullptr};
  // Deliberately never destroyed: a QApplication torn down by static destructors after main()
  // returns crashes (Qt's own lazily created globals are already gone by then; CI saw SIGSEGV at
  // exit). The process is ending anyway, so nothing is lost.
  new QApplication(argc, argv);
  if (!QApplication::instance()) {
    if (why) *why = "Qt could not start";
    return false;
  }
  return true;
}

void save_heatmap(const HeatmapFigure& fig, const std::string& path) {
  format_of(path);
  std::string why;
  if (!ensure_qt(&why)) fail(path, why);
  const Matrix& m = fig.matrix;
  if (m.rows <= 0 || m.cols <= 0 || m.values.size() != size_t(m.rows) * m.cols) fail(path, "empty or malformed matrix");

  QCustomPlot plot;
  plot.plotLayout()->insertRow(0);
  plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, QString::fromStdString(fig.title), QFont("sans", 11, QFont::Bold)));
  auto* map = new QCPColorMap(plot.xAxis, plot.yAxis);
  map->data()->setSize(m.cols, m.rows);
  map->data()->setRange(QCPRange(0, m.cols - 1), QCPRange(0, m.rows - 1));
  double lo = 0, hi = 0;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      const double v = m.at(r, c);
      map->data()->setCell(c, r, v);
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  auto* scale = new QCPColorScale(&plot);
  plot.plotLayout()->addElement(1, 1, scale);
  scale->axis()->setLabel(QString::fromStdString(fig.value_label));
  map->setColorScale(scale);
  if (fig.diverging) {
    const double a = std::max({std::abs(lo), std::abs(hi), 1e-12});
    QCPColorGradient g;
    g.setColorStopAt(0, QColor(33, 102, 172));
    g.setColorStopAt(0.5, Qt::white);
    g.setColorStopAt(1, QColor(178, 24, 43));
    map->setGradient(g);
    map->setDataRange(QCPRange(-a, a));
  } else {
    map->setGradient(sequential_gradient());
    map->setDataRange(QCPRange(lo, hi > lo ? hi : lo + 1));
  }
  map->setInterpolate(false);
  // Query rows go down the page, as in every attention-map figure.
  plot.yAxis->setRangeReversed(true);
  plot.xAxis->setRange(-0.5, m.cols - 0.5);
  plot.yAxis->setRange(-0.5, m.rows - 0.5);
  plot.xAxis->setLabel("key");
  plot.yAxis->setLabel("query");
  if (!fig.labels.empty()) {
    const int stride = std::max<int>(1, int(fig.labels.size()) / 48);  // at most ~48 readable labels
    plot.xAxis->setTicker(label_ticker(fig.labels, stride));
    plot.yAxis->setTicker(label_ticker(fig.labels, stride));
    plot.xAxis->setTickLabelRotation(90);
    QFont small("sans", 6);
    plot.xAxis->setTickLabelFont(small);
    plot.yAxis->setTickLabelFont(small);
  }
  auto* margins = new QCPMarginGroup(&plot);
  plot.axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  const int side = 520 + std::min(m.rows, 256);
  save_plot_impl(plot, path, side + 90, side);
}

void save_line_figure(const LineFigure& fig, const std::string& path) {
  format_of(path);
  std::string why;
  if (!ensure_qt(&why)) fail(path, why);
  if (fig.series.empty()) fail(path, "nothing to plot");
  QCustomPlot plot;
  plot.plotLayout()->insertRow(0);
  plot.plotLayout()->addElement(0, 0, new QCPTextElement(&plot, QString::fromStdString(fig.title), QFont("sans", 11, QFont::Bold)));
  plot.xAxis->setLabel(QString::fromStdString(fig.x_label));
  plot.yAxis->setLabel(QString::fromStdString(fig.y_label));
  static const QColor palette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                                   QColor(214, 39, 40),  QColor(148, 103, 189), QColor(140, 86, 75)};
  if (fig.bars) {
    auto* bars = new QCPBars(plot.xAxis, plot.yAxis);
    const Series& s = fig.series.front();
    QVector<double> x(s.y.size()), y(s.y.begin(), s.y.end());
    for (int i = 0; i < x.size(); ++i) x[i] = i;
    bars->setData(x, y);
    bars->setBrush(palette[0]);
    bars->setName(QString::fromStdString(s.name));
    plot.xAxis->setRange(-0.7, x.size() - 0.3);
  } else {
    for (size_t i = 0; i < fig.series.size(); ++i) {
      const Series& s = fig.series[i];
      auto* g = plot.addGraph();
      g->setData(QVector<double>(s.x.begin(), s.x.end()), QVector<double>(s.y.begin(), s.y.end()));
      g->setName(QString::fromStdString(s.name));
      g->setPen(QPen(palette[i % 6], 1.6));
      if (fig.points) {
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
      }
    }
    plot.rescaleAxes();
    if (fig.points) {  // markers on the frame would be cut in half
      auto pad = [](QCPAxis* a) {
        const QCPRange r = a->range();
        const double m = std::max(r.size() * 0.05, 1e-9);
        a->setRange(r.lower - m, r.upper + m);
      };
      pad(plot.xAxis);
      pad(plot.yAxis);
    }
  }
  if (fig.log_x) {
    plot.xAxis->setScaleType(QCPAxis::stLogarithmic);
    plot.xAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  }
  if (fig.log_y) {
    plot.yAxis->setScaleType(QCPAxis::stLogarithmic);
    plot.yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  }
  if (fig.bars) plot.yAxis->rescale();
  plot.yAxis->setRange(plot.yAxis->range().lower, plot.yAxis->range().upper * 1.05);
  if (fig.series.size() > 1) plot.legend->setVisible(true);
  save_plot_impl(plot, path, 720, 440);
}

}  // namespace attnscope::views
