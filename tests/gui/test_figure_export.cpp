// Figure export through QCustomPlot, offscreen: every format is written, the picture shows the
// data (colours of low and high cells), and bad paths fail cleanly.
#include <gtest/gtest.h>

#include <QImage>
#include <filesystem>
#include <fstream>

#include "attnscope/base/error.h"
#include "figure_export.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_figure_export {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

views::HeatmapFigure lower_triangle(int n) {
  views::HeatmapFigure f;
  f.title = "test map";
  f.matrix.rows = f.matrix.cols = n;
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) f.matrix.values.push_back(c <= r ? 1.0 : 0.0);
  for (int i = 0; i < n; ++i) f.labels.push_back("tok" + std::to_string(i));
  return f;
}

std::string head_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), n);
  return s;
}

}  // namespace

TEST(FigureExport, HeatmapPngShowsBothEndsOfTheScale) {
  const std::string dir = test::temp_dir("fig");
  views::save_heatmap(lower_triangle(12), dir + "/m.png");
  QImage img(QString::fromStdString(dir + "/m.png"));
  ASSERT_FALSE(img.isNull());
  EXPECT_GT(img.width(), 400);
  bool dark_purple = false, yellow = false;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) {
      const QColor c = img.pixelColor(x, y);
      dark_purple |= c.red() < 90 && c.green() < 20 && c.blue() > 60;  // viridis low (0)
      yellow |= c.red() > 230 && c.green() > 210 && c.blue() < 80;     // viridis high (1)
    }
  EXPECT_TRUE(dark_purple);
  EXPECT_TRUE(yellow);
}

TEST(FigureExport, SvgAndPdfAreWrittenAtomically) {
  const std::string dir = test::temp_dir("fig");
  views::save_heatmap(lower_triangle(5), dir + "/m.svg");
  views::save_heatmap(lower_triangle(5), dir + "/m.pdf");
  EXPECT_NE(head_bytes(dir + "/m.svg", 200).find("<svg"), std::string::npos);
  EXPECT_EQ(head_bytes(dir + "/m.pdf", 5), "%PDF-");
  views::LineFigure lf;
  lf.title = "DoF";
  lf.series.push_back({"layer max", {1, 2, 3}, {4.5, 9.0, 2.25}});
  lf.bars = true;
  views::save_line_figure(lf, dir + "/b.png");
  EXPECT_FALSE(QImage(QString::fromStdString(dir + "/b.png")).isNull());
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

TEST(FigureExport, BadPathsAndDataFail) {
  const std::string dir = test::temp_dir("fig");
  EXPECT_THROW(views::save_heatmap(lower_triangle(3), dir + "/m.bmp"), Error);
  EXPECT_THROW(views::save_heatmap(lower_triangle(3), dir + "/no/such/dir/m.png"), Error);
  views::HeatmapFigure empty;
  EXPECT_THROW(views::save_heatmap(empty, dir + "/e.png"), Error);
  EXPECT_FALSE(fs::exists(dir + "/no/such/dir/m.png.tmp"));
}

// A scatter draws markers where the points are and no line between them: the pixel half-way
// between two far-apart points stays white.
TEST(FigureExport, ScatterDrawsMarkersWithoutLines) {
  const std::string dir = test::temp_dir("fig");
  views::LineFigure lf;
  lf.title = "entropy vs DoF";
  lf.points = true;
  lf.series.push_back({"heads", {0.0, 10.0}, {0.0, 10.0}});
  views::save_line_figure(lf, dir + "/s.png");
  QImage img(QString::fromStdString(dir + "/s.png"));
  ASSERT_FALSE(img.isNull());
  // Find the two blue marker blobs and look at their midpoint.
  int minx = img.width(), maxx = -1, miny = 0, maxy = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      const QColor c = img.pixelColor(x, y);
      if (c.blue() > 150 && c.red() < 80 && c.green() < 150) {
        if (x < minx) minx = x, miny = y;
        if (x > maxx) maxx = x, maxy = y;
      }
    }
  ASSERT_GT(maxx - minx, 200) << "two markers far apart";
  const QColor mid = img.pixelColor((minx + maxx) / 2, (miny + maxy) / 2);
  EXPECT_GT(mid.red(), 200) << "no line between the markers";
  lf.points = false;
  views::save_line_figure(lf, dir + "/l.png");
  QImage line(QString::fromStdString(dir + "/l.png"));
  bool blue_near_mid = false;
  for (int dy = -3; dy <= 3; ++dy)
    for (int dx = -3; dx <= 3; ++dx) {
      const QColor c = line.pixelColor((minx + maxx) / 2 + dx, (miny + maxy) / 2 + dy);
      blue_near_mid |= c.blue() > 150 && c.red() < 120;
    }
  EXPECT_TRUE(blue_near_mid) << "the line figure does join them";
}

}  // namespace gui_test_figure_export
