// Figure export through QCustomPlot, offscreen: every format is written, the picture shows the
// data (colours of low and high cells), and bad paths fail cleanly.
#include <gtest/gtest.h>

#include <QImage>
#include <filesystem>
#include <fstream>

#include "attnscope/error.h"
#include "figure_export.h"
#include "test_support.h"

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
