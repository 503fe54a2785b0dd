// What every workbench figure offers (PlotPanel): exports in the light style whatever the window's
// palette (a dark window's difference map exports with a white, not a dark grey, zero), CSV of its
// numbers, "Copy as command" on the clipboard, and a clear error for a bad path.
#include <gtest/gtest.h>

#include <QApplication>
#include <QClipboard>
#include <QImage>
#include <QPalette>
#include <qcustomplot.h>

#include <string>

#include "attnscope/error.h"
#include "figure_export.h"
#include "plot_panel.h"
#include "plot_style.h"
#include "test_support.h"

using attnscope::views::PlotPanel;
namespace test = attnscope::test;

namespace {

QPalette dark_palette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(40, 40, 40));
  p.setColor(QPalette::Base, QColor(30, 30, 30));
  p.setColor(QPalette::WindowText, QColor(230, 230, 230));
  p.setColor(QPalette::Text, QColor(230, 230, 230));
  return p;
}

// A 3 x 3 map of zeros drawn with the diverging gradient: every cell is the gradient's middle.
QCPColorMap* zero_map(PlotPanel& panel) {
  QCustomPlot* plot = panel.plot();
  auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
  map->data()->setSize(3, 3);
  map->data()->setRange(QCPRange(0, 2), QCPRange(0, 2));
  map->data()->fill(0.0);
  map->setProperty(attnscope::views::kDivergingProperty, true);
  map->setGradient(attnscope::views::diverging_gradient(QApplication::palette()));
  map->setDataRange(QCPRange(-1, 1));
  map->setInterpolate(false);
  plot->xAxis->setRange(-0.5, 2.5);
  plot->yAxis->setRange(-0.5, 2.5);
  return map;
}

int lightness(QRgb c) { return QColor(c).lightness(); }

QColor centre_of_plot(const QImage& img) { return img.pixelColor(img.width() / 2, img.height() / 2); }

}  // namespace

TEST(PlotPanel, DarkWindowExportsALightFigureAndKeepsItsOwnColours) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  const QPalette saved = QApplication::palette();
  QApplication::setPalette(dark_palette());
  {
    PlotPanel panel("difference");
    panel.resize(500, 500);
    QCPColorMap* map = zero_map(panel);
    panel.restyle();
    // On screen the zero of a difference blends into the dark background...
    EXPECT_LT(lightness(map->gradient().color(0.0, QCPRange(-1, 1))), 60);
    const std::string path = test::temp_dir("plotpanel") + "/diff.png";
    panel.export_to(QString::fromStdString(path));
    // ...and in the exported figure it is white, on a white page.
    const QImage img(QString::fromStdString(path));
    ASSERT_FALSE(img.isNull());
    EXPECT_GE(img.width(), 800);
    EXPECT_GT(QColor(centre_of_plot(img)).lightness(), 245) << centre_of_plot(img).name().toStdString();
    EXPECT_GT(img.pixelColor(2, 2).lightness(), 245);
    // The window keeps its dark style after the export.
    EXPECT_LT(lightness(map->gradient().color(0.0, QCPRange(-1, 1))), 60);
    EXPECT_LT(panel.plot()->toPixmap(200, 200).toImage().pixelColor(2, 2).lightness(), 60);
  }
  QApplication::setPalette(saved);
}

TEST(PlotPanel, CsvCommandAndBadPaths) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  PlotPanel panel("numbers");
  const std::string dir = test::temp_dir("plotpanel_csv");
  const std::string err = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/x.csv")); });
  EXPECT_NE(err.find(dir + "/x.csv"), std::string::npos) << err;
  EXPECT_NE(err.find("no data"), std::string::npos) << err;

  panel.set_csv([] { return std::string("layer,dof\n0,43.4\n"); });
  panel.export_to(QString::fromStdString(dir + "/x.csv"));
  EXPECT_EQ(test::read_file(dir + "/x.csv"), "layer,dof\n0,43.4\n");

  const std::string bad = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/x.bmp")); });
  EXPECT_NE(bad.find("x.bmp"), std::string::npos) << bad;
  const std::string missing = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/no/such/dir/x.png")); });
  EXPECT_NE(missing.find("no/such/dir/x.png"), std::string::npos) << missing;

  panel.set_command("attnscope dof --spectra s.safetensors --lambda 2^-8 --json");
  panel.copy_command();
  EXPECT_EQ(QApplication::clipboard()->text().toStdString(), "attnscope dof --spectra s.safetensors --lambda 2^-8 --json");
}
