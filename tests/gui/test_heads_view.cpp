// The heads view driven as a user would (offscreen): what the heatmaps draw is checked cell by cell
// against the maps of a synthetic capture the test writes (q, k it chose; head_detail() reads it),
// with the colour-scale formulas of head_detail.h written out here; zoom gives exact cells when the
// region fits and a reduced image at overview; hover names the tokens and numbers; the grid
// selects heads by click and arrows; exports write real files.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QImage>
#include <QLabel>
#include <QPalette>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>
#include <QToolTip>
#include <QWheelEvent>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <qcustomplot.h>
#include <random>
#include <set>
#include <sstream>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/io/safetensors.h"
#include "figure_export.h"
#include "head_grid.h"
#include "attnscope/workbench/view_data.h"
#include "heads_view.h"
#include "heatmap_panel.h"
#include "metrics_view.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_heads_view {

using namespace attnscope;
using attnscope::views::HeadGrid;
using attnscope::views::HeadsView;
using attnscope::views::HeatmapPanel;
using attnscope::views::MetricsView;
namespace fs = std::filesystem;

namespace {

// A capture store written by hand: S layers, one window, H heads, L tokens, q, k ~ N(0, scale^2)
// with a local bias (k_j leans towards q_j) so the maps have structure; ids 100 + position, and a
// tokenizer path that does not exist, so the labels are "#<id>".
std::string write_capture(const std::string& tag, int S, int H, int L, int d, double scale, uint32_t seed) {
  const std::string dir = test::temp_dir(tag) + "/cap";
  fs::create_directories(dir);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, float(scale));
  for (int s = 0; s < S; ++s) {
    std::vector<float> q(size_t(H) * L * d), k(q.size());
    for (size_t e = 0; e < q.size(); ++e) q[e] = normal(rng);
    for (size_t e = 0; e < k.size(); ++e) k[e] = 0.6f * q[e] + normal(rng);
    auto t = [&](std::vector<float>& v) { return at::from_blob(v.data(), {1, H, L, d}, at::kFloat).clone(); };
    write_safetensors(dir + "/layer_" + std::to_string(s) + ".safetensors",
                      {{"q", t(q)}, {"k", t(k)}, {"v", at::ones({1, H, L, d})}}, {{"format", "attnscope-capture"}});
  }
  write_safetensors(dir + "/ids.safetensors", {{"ids", (at::arange(L, at::kLong) + 100).reshape({1, L})}},
                    {{"format", "attnscope-capture"}});
  nlohmann::json m = {{"format", "attnscope-capture"},
                      {"version", 2},
                      {"model", {{"path", "/nonexistent/model"}, {"layers", S}, {"heads", H}, {"kv_heads", H},
                                 {"head_dim", d}, {"vocab_size", 100 + L}}},
                      {"tokenization", {{"tokenizer", "hf"}, {"tokenizer_path", "/nonexistent/tokenizer.json"}}},
                      {"seq_len", L},
                      {"num_seqs", 1}};
  std::ofstream(dir + "/manifest.json") << m.dump(2);
  return dir;
}

std::shared_ptr<const HeadDetail> capture_view(const std::string& dir, int layer, int head, const std::string& map) {
  CaptureStore store(dir);
  AnalysisOptions opt;
  opt.feature_map = map;
  return std::make_shared<const HeadDetail>(head_detail(store, layer, head, 0, opt));
}

class HeadsViewTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    ASSERT_TRUE(views::ensure_qt(&why)) << why;
  }
  static std::string small_dir() {
    static const std::string dir = write_capture("heads_small", 3, 4, 40, 8, 1.2, 7);
    return dir;
  }
};

double drawn(const HeatmapPanel& p, int row, int col) {
  // The colour map's data is indexed (key = column, value = row) relative to the image's region.
  return p.colour_map()->data()->cell(col - p.image().region.col0, row - p.image().region.row0);
}

// NaN-aware equality: the drawn cell is the expected number, or both are "draw nothing".
void expect_same(double got, double want, const std::string& where) {
  if (std::isnan(want))
    EXPECT_TRUE(std::isnan(got)) << where << ": " << got;
  else
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << where;
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) cells.push_back(cell), cell.clear();
      else cell += c;
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

// Exact cells: every drawn cell is the map's own number (softmax, linear, linear - softmax), at
// its own integer coordinates, NaN (transparent) above the diagonal; and it is map_image's pixel.
TEST_F(HeadsViewTest, HeatmapCellsAreTheMapsWeightsAtTheirCoordinates) {
  const auto view = capture_view(small_dir(), 1, 2, "relu");
  const int L = view->length();
  ASSERT_EQ(L, 40);
  for (MapKind kind : {MapKind::Softmax, MapKind::Linear, MapKind::Difference}) {
    HeatmapPanel panel("map", kind);
    panel.resize(700, 600);
    panel.set_view(view);
    const MapImage& img = panel.image();
    ASSERT_EQ(img.cells_per_pixel, 1);
    ASSERT_EQ(img.pixels.rows, L);
    QCPColorMapData* data = panel.colour_map()->data();
    ASSERT_EQ(data->keySize(), L);
    ASSERT_EQ(data->valueSize(), L);
    double key = 0, value = 0;
    data->cellToCoord(17, 23, &key, &value);
    EXPECT_DOUBLE_EQ(key, 17);  // cell i centred at i
    EXPECT_DOUBLE_EQ(value, 23);
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) {
        const double a = view->softmax.at(i, j), b = view->linear.at(i, j);
        const double want = j > i ? NAN : kind == MapKind::Softmax ? a : kind == MapKind::Linear ? b : b - a;
        expect_same(drawn(panel, i, j), want, "cell " + std::to_string(i) + "," + std::to_string(j));
        expect_same(drawn(panel, i, j), img.pixels.at(i, j), "image pixel");
      }
    // The colour range is the whole map's: the largest weight is the top of the bar.
    if (kind == MapKind::Softmax) {
      double mx = 0;
      for (double v : view->softmax.values) mx = std::max(mx, v);
      EXPECT_NEAR(panel.colour_map()->dataRange().upper, mx, 1e-12);
    } else if (kind == MapKind::Difference) {
      EXPECT_NEAR(panel.colour_map()->dataRange().lower, -panel.colour_map()->dataRange().upper, 1e-15);
    }
  }
}

// The colour-scale combo, clicked through with the keyboard as a user does: the drawn cells
// become log10(max(w, 1e-6)), then w / (row maximum) — computed here from the softmax matrix.
TEST_F(HeadsViewTest, ColourScaleComboRedrawsLogAndRowNormalizedValues) {
  const auto view = capture_view(small_dir(), 0, 1, "relu");
  HeadsView hv;
  hv.resize(1400, 900);
  hv.set_shape(3, 4, 1);
  hv.set_feature_maps({"elu", "relu"});
  hv.set_feature_map("relu", 0, 0);
  hv.set_head_detail(view);
  QSignalSpy spy(&hv, &HeadsView::scaleChanged);
  HeatmapPanel* sm = hv.panel(MapKind::Softmax);
  const int L = view->length();
  ASSERT_EQ(hv.scale_box()->currentText(), "linear");

  hv.scale_box()->setFocus();
  QTest::keyClick(hv.scale_box(), Qt::Key_Down);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(qvariant_cast<ColourScale>(spy.at(0).at(0)), ColourScale::Log);
  EXPECT_EQ(hv.scale(), ColourScale::Log);
  EXPECT_EQ(sm->scale_label(), "log10 weight");
  EXPECT_EQ(sm->colour_map()->colorScale()->axis()->label(), "log10 weight");
  for (int i = 0; i < L; ++i)
    for (int j = 0; j <= i; ++j)
      expect_same(drawn(*sm, i, j), std::log10(std::max(view->softmax.at(i, j), 1e-6)), "log cell");
  double smallest = 1;
  for (int i = 0; i < L; ++i)
    for (int j = 0; j <= i; ++j) smallest = std::min(smallest, view->softmax.at(i, j));
  EXPECT_LE(sm->colour_map()->dataRange().lower, std::log10(std::max(smallest, 1e-6)) + 1e-12)
      << "the log range reaches the smallest weight of the whole map";
  // Issue 18, defect 8: softmax and linear share one range (core's), so they compare by eye.
  const auto shared = shared_map_range(*view, ColourScale::Log);
  EXPECT_DOUBLE_EQ(sm->colour_map()->dataRange().lower, shared.first);
  EXPECT_DOUBLE_EQ(sm->colour_map()->dataRange().upper, shared.second);
  EXPECT_EQ(hv.panel(MapKind::Linear)->colour_map()->dataRange(), sm->colour_map()->dataRange());

  QTest::keyClick(hv.scale_box(), Qt::Key_Down);
  ASSERT_EQ(spy.count(), 2);
  EXPECT_EQ(hv.scale_box()->currentText(), "row-normalized");
  for (int i = 0; i < L; ++i) {
    double mx = 0;
    for (int j = 0; j <= i; ++j) mx = std::max(mx, view->softmax.at(i, j));
    for (int j = 0; j <= i; ++j) expect_same(drawn(*sm, i, j), view->softmax.at(i, j) / mx, "row cell");
  }
  // The linear panel switched with it: its row maxima are 1.
  HeatmapPanel* lin = hv.panel(MapKind::Linear);
  EXPECT_EQ(lin->scale(), ColourScale::RowNormalized);
  for (int i = 0; i < L; ++i) {
    double mx = 0;
    for (int j = 0; j <= i; ++j) mx = std::max(mx, drawn(*lin, i, j));
    if (!std::isnan(view->linear.at(i, 0))) {
      EXPECT_NEAR(mx, 1.0, 1e-12) << "row " << i;
    }
  }
  // The window restoring a session sets the scale without a signal.
  hv.set_scale(ColourScale::Linear);
  EXPECT_EQ(spy.count(), 2);
  expect_same(drawn(*sm, 5, 3), view->softmax.at(5, 3), "back to linear");
}

// L = 4096: the overview is a reduced image (8 cells a pixel, each the block's maximum); a region
// of at most 512 cells is drawn exactly; show_region does not echo regionChanged.
TEST_F(HeadsViewTest, LongMapIsReducedAtOverviewAndExactWhenZoomed) {
  const std::string dir = write_capture("heads_long", 1, 1, 4096, 8, 1.0, 3);
  const auto view = capture_view(dir, 0, 0, "");
  HeatmapPanel panel("softmax", MapKind::Softmax);
  panel.resize(800, 700);
  panel.show();  // the label stride reads the laid-out axis size
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&panel));
  QSignalSpy spy(&panel, &HeatmapPanel::regionChanged);
  panel.set_view(view);
  EXPECT_EQ(panel.image().cells_per_pixel, 8);
  EXPECT_EQ(panel.image().pixels.rows, 512);
  QCPColorMapData* data = panel.colour_map()->data();
  ASSERT_EQ(data->keySize(), 512);
  double key = 0, value = 0;
  data->cellToCoord(10, 20, &key, &value);
  EXPECT_DOUBLE_EQ(key, 10 * 8 + 3.5);  // pixel 10 covers cells 80..87
  EXPECT_DOUBLE_EQ(value, 20 * 8 + 3.5);
  // A pixel is the largest weight of its 8 x 8 block (causal cells only).
  double mx = 0;
  for (int i = 160; i < 168; ++i)
    for (int j = 80; j < 88; ++j) mx = std::max(mx, view->softmax.at(i, j));
  EXPECT_DOUBLE_EQ(data->cell(10, 20), mx);

  panel.show_region({3000, 3400, 1000, 1300});
  EXPECT_EQ(panel.image().cells_per_pixel, 1);
  EXPECT_EQ(panel.image().region.row0, 3000);
  EXPECT_EQ(panel.image().region.col1, 1300);
  EXPECT_EQ(panel.colour_map()->data()->keySize(), 300);
  for (int i = 3000; i < 3400; i += 37)
    for (int j = 1000; j < 1300; j += 13) expect_same(drawn(panel, i, j), view->softmax.at(i, j), "zoomed cell");
  panel.show_region({0, 1024, 0, 1024});
  EXPECT_EQ(panel.image().cells_per_pixel, 2);
  panel.show_region({100, 612, 100, 612});
  EXPECT_EQ(panel.image().cells_per_pixel, 1) << "512 cells fit exactly";
  QApplication::processEvents();
  EXPECT_EQ(spy.count(), 0);
  // Labels: only visible cells; every token once zoomed in to a few dozen cells.
  panel.show_region({2000, 2020, 2000, 2020});
  panel.plot()->replot();
  const auto ticks = qSharedPointerCast<QCPAxisTickerText>(panel.plot()->xAxis->ticker())->ticks();
  ASSERT_EQ(ticks.size(), 20);
  EXPECT_EQ(ticks.firstKey(), 2000);
  EXPECT_EQ(ticks.value(2007), QString("#%1").arg(100 + 2007));
  panel.show_region({0, 4096, 0, 4096});
  const auto overview = qSharedPointerCast<QCPAxisTickerText>(panel.plot()->yAxis->ticker())->ticks();
  EXPECT_GT(overview.size(), 4);
  EXPECT_LT(overview.size(), 100);
}

// A user's wheel zoom on one map moves the other two and the per-row plot to the same cells.
TEST_F(HeadsViewTest, UserZoomOnOneMapKeepsTheOthersInStep) {
  const auto view = capture_view(small_dir(), 2, 0, "relu");
  HeadsView hv;
  hv.resize(1400, 900);
  hv.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&hv));
  hv.set_head_detail(view);
  HeatmapPanel* sm = hv.panel(MapKind::Softmax);
  QSignalSpy spy(sm, &HeatmapPanel::regionChanged);
  sm->plot()->replot();
  const QPointF at(sm->plot()->xAxis->coordToPixel(30), sm->plot()->yAxis->coordToPixel(30));
  for (int n = 0; n < 3; ++n) {
    QWheelEvent wheel(at, sm->plot()->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(sm->plot(), &wheel);
  }
  QApplication::processEvents();
  ASSERT_GE(spy.count(), 1);
  const MapRegion r = sm->visible_region();
  EXPECT_LT(r.col1 - r.col0, 40) << "zoomed in";
  for (MapKind k : {MapKind::Linear, MapKind::Difference}) {
    const MapRegion o = hv.panel(k)->visible_region();
    EXPECT_EQ(o.row0, r.row0);
    EXPECT_EQ(o.row1, r.row1);
    EXPECT_EQ(o.col0, r.col0);
    EXPECT_EQ(o.col1, r.col1);
  }
  EXPECT_NEAR(hv.kl_panel()->plot()->xAxis->range().lower, r.row0 - 0.5, 1e-9);
}

// Hover: the tooltip names the token pair, q.k / sqrt(d) from the capture's q and k, and both
// weights; moving the mouse over a cell emits cellHovered(query, key).
TEST_F(HeadsViewTest, HoverNamesTokensScoreAndBothWeights) {
  const auto view = capture_view(small_dir(), 1, 3, "relu");
  HeatmapPanel panel("softmax", MapKind::Softmax);
  panel.resize(700, 600);
  panel.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&panel));
  panel.set_view(view);
  double s = 0;
  for (int c = 0; c < view->head_dim; ++c) s += view->q[size_t(12 * view->head_dim + c)] * view->k[size_t(5 * view->head_dim + c)];
  s /= std::sqrt(double(view->head_dim));
  const QString text = panel.hover_text(12, 5);
  EXPECT_TRUE(text.startsWith("query 12 '#112' -> key 5 '#105'")) << text.toStdString();
  EXPECT_TRUE(text.contains(QString("q.k/sqrt(d) %1").arg(s, 0, 'f', 2))) << text.toStdString();
  EXPECT_TRUE(text.contains(QString("softmax %1").arg(view->softmax.at(12, 5), 0, 'f', 4))) << text.toStdString();
  EXPECT_TRUE(text.contains(QString("linear %1").arg(view->linear.at(12, 5), 0, 'f', 4))) << text.toStdString();
  EXPECT_TRUE(panel.hover_text(3, 9).contains("masked"));

  QSignalSpy spy(&panel, &HeatmapPanel::cellHovered);
  panel.plot()->replot();
  const QPoint p(int(panel.plot()->xAxis->coordToPixel(7)), int(panel.plot()->yAxis->coordToPixel(21)));
  QTest::mouseMove(panel.plot(), p);
  QApplication::processEvents();
  ASSERT_GE(spy.count(), 1);
  EXPECT_EQ(spy.last().at(0).toInt(), 21);
  EXPECT_EQ(spy.last().at(1).toInt(), 7);
  EXPECT_EQ(QToolTip::text(), panel.hover_text(21, 7));
}

// An undefined linear row (no positive weight) reads as such in the hover, is left out of the KL
// plot, and is counted in the info line. Built by hand: the capture's maps have none.
TEST_F(HeadsViewTest, UndefinedRowsAreNamedAndLeftOutOfTheKlPlot) {
  auto v = std::make_shared<HeadDetail>();
  const int L = 6;
  v->layer = 1, v->head = 0, v->head_dim = 2;
  v->softmax.rows = v->softmax.cols = L;
  v->linear.rows = v->linear.cols = L;
  for (int i = 0; i < L; ++i) {
    v->labels.push_back("t" + std::to_string(i));
    for (int j = 0; j < L; ++j) {
      v->softmax.values.push_back(j <= i ? 1.0 / (i + 1) : 0.0);
      v->linear.values.push_back(i == 3 && j <= i ? NAN : j <= i ? (j == i ? 0.5 : 0.5 / std::max(1, i)) : 0.0);
    }
    v->q.insert(v->q.end(), {1.0, 0.5});
    v->k.insert(v->k.end(), {0.2 * i, 1.0});
    v->row_kl.push_back(i == 3 ? NAN : 0.1 * i);
    v->row_entropy_softmax.push_back(std::log(i + 1.0));
    v->row_entropy_linear.push_back(i == 3 ? NAN : 0.3 * i);
  }
  v->linear.values[0] = 1.0;  // row 0: its only key
  v->undefined_rows = 1;
  HeadsView hv;
  hv.resize(1400, 900);
  hv.set_head_detail(v);
  EXPECT_TRUE(hv.panel(MapKind::Linear)->hover_text(3, 1).contains("linear undefined row"));
  EXPECT_TRUE(hv.info_label()->text().contains("undefined rows 1"));
  QCPGraph* kl = hv.kl_panel()->plot()->graph(0);
  ASSERT_EQ(kl->name(), "KL(A_i || Ahat_i)");
  std::vector<double> xs, ys;
  for (auto it = kl->data()->constBegin(); it != kl->data()->constEnd(); ++it) xs.push_back(it->key), ys.push_back(it->value);
  EXPECT_EQ(xs, (std::vector<double>{0, 1, 2, 4, 5}));
  EXPECT_DOUBLE_EQ(ys[3], 0.4);
  EXPECT_TRUE(std::isnan(drawn(*hv.panel(MapKind::Linear), 3, 1)));
  // Without a feature map the linear and difference maps say so instead of staying blank.
  auto softmax_only = std::make_shared<HeadDetail>(*v);
  softmax_only->linear = Matrix{};
  softmax_only->row_kl.clear();
  softmax_only->row_entropy_linear.clear();
  hv.set_head_detail(softmax_only);
  EXPECT_TRUE(hv.panel(MapKind::Softmax)->note().isEmpty());
  EXPECT_TRUE(hv.panel(MapKind::Linear)->note().contains("No feature map"));
  EXPECT_TRUE(hv.panel(MapKind::Difference)->note().contains("No feature map"));
  EXPECT_FALSE(hv.panel(MapKind::Linear)->colour_map()->visible());
}

// At the width the heads view gets in a 1440-pixel window (about 1150 beside the model dock) the
// three maps' titles are whole: short ("softmax", "linear: prf M=64", a learned map's "untrained
// hedgehog M=16" (a hybrid's "+ window 8" may be cut), "difference"; the layer and head are on the info line), beside two small buttons. The short per-row plot labels its axes
// "KL (nats)" and "entropy (nats)" whole, and its legend names the curves.
TEST_F(HeadsViewTest, TitlesAndKlAxisLabelsAreShortAndWhole) {
  HeadsView hv;
  hv.set_feature_maps({"elu", "prf", "hedgehog"}, {"hedgehog"});  // hedgehog is learned: drawn untrained
  hv.set_feature_map("prf", 64, 0);
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "linear: prf M=64");
  hv.set_feature_map("elu", 0, 0);
  hv.set_head_detail(capture_view(small_dir(), 1, 2, "elu"));
  hv.resize(1150, 860);
  hv.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&hv));
  QCoreApplication::processEvents();
  EXPECT_EQ(hv.panel(MapKind::Softmax)->title(), "softmax");
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "linear: elu");
  EXPECT_EQ(hv.panel(MapKind::Difference)->title(), "difference");
  EXPECT_TRUE(hv.info_label()->text().contains("layer 1, head 2"));
  for (MapKind k : {MapKind::Softmax, MapKind::Linear, MapKind::Difference}) {
    auto* title = hv.panel(k)->findChild<QLabel*>();
    ASSERT_NE(title, nullptr);
    EXPECT_GE(title->width(), title->fontMetrics().horizontalAdvance(title->text())) << title->text().toStdString();
  }
  // A hybrid's title says the map is untrained and names it, M and the window. Every hybrid map is
  // a learned one; at this width the title is cut after M: the window is in its control beside the
  // maps and on the info line, the whole title in the tooltip.
  hv.set_feature_map("hedgehog", 16, 8);
  QCoreApplication::processEvents();
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "untrained hedgehog M=16 + window 8");
  {
    auto* title = hv.panel(MapKind::Linear)->findChild<QLabel*>();
    ASSERT_NE(title, nullptr);
    EXPECT_GE(title->width(), title->fontMetrics().horizontalAdvance("untrained hedgehog M=16…"));
  }
  // A plain learned map's title is whole.
  hv.set_feature_map("hedgehog", 16, 0);
  QCoreApplication::processEvents();
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "untrained hedgehog M=16");
  {
    auto* title = hv.panel(MapKind::Linear)->findChild<QLabel*>();
    ASSERT_NE(title, nullptr);
    EXPECT_GE(title->width(), title->fontMetrics().horizontalAdvance(title->text())) << title->text().toStdString();
  }
  hv.set_feature_map("elu", 0, 0);
  QCustomPlot* kp = hv.kl_panel()->plot();
  kp->replot();
  EXPECT_EQ(kp->yAxis->label(), "KL (nats)");
  EXPECT_EQ(kp->yAxis2->label(), "entropy (nats)");
  // Whole: the label's extent along the axis fits the axis rect's height.
  const QFontMetrics fm(kp->yAxis->labelFont());
  EXPECT_LE(fm.horizontalAdvance(kp->yAxis2->label()), kp->axisRect()->height());
  QStringList names;
  for (int i = 0; i < kp->graphCount(); ++i) names << kp->graph(i)->name();
  EXPECT_EQ(names, (QStringList{"KL(A_i || Ahat_i)", "entropy, softmax", "entropy, elu"}));
}

// The grid: a click on a tile selects that head (signal with its layer and head), the arrow keys
// move the selection, and each tile's strip is painted in its metric colour (extremes at the two
// ends of the gradient).
TEST_F(HeadsViewTest, GridClickAndArrowsSelectHeadsAndTilesShowTheMetric) {
  CaptureStore store(small_dir());
  HeadsView hv;
  hv.resize(1400, 900);
  hv.set_shape(3, 4, 1);
  hv.set_thumbnails(head_thumbnails(store, 0, 24));
  std::vector<std::vector<double>> metric(3, std::vector<double>(4));
  for (int l = 0; l < 3; ++l)
    for (int h = 0; h < 4; ++h) metric[size_t(l)][size_t(h)] = l * 4 + h;  // 0 .. 11
  metric[1][1] = NAN;
  hv.set_metrics({{GridMetric::SoftmaxEntropy, metric}, {GridMetric::Kl, metric}});
  hv.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&hv));
  HeadGrid* grid = hv.grid();
  EXPECT_EQ(hv.metric(), GridMetric::SoftmaxEntropy);
  QSignalSpy spy(&hv, &HeadsView::headSelected);
  QTest::mouseClick(grid, Qt::LeftButton, {}, grid->tile_rect(2, 3).center());
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toInt(), 2);
  EXPECT_EQ(spy.at(0).at(1).toInt(), 3);
  EXPECT_EQ(grid->selected_layer(), 2);
  QTest::keyClick(grid, Qt::Key_Up);
  QTest::keyClick(grid, Qt::Key_Left);
  ASSERT_EQ(spy.count(), 3);
  EXPECT_EQ(spy.at(2).at(0).toInt(), 1);
  EXPECT_EQ(spy.at(2).at(1).toInt(), 2);
  hv.select(0, 0);
  EXPECT_EQ(spy.count(), 3) << "select() is silent";

  const QImage shot = grid->grab().toImage();
  auto strip = [&](int l, int h) {
    const QRect r = grid->tile_rect(l, h);
    return shot.pixelColor(r.center().x(), r.bottom() - 1);
  };
  // The smallest value takes the legend's low end, the largest its high end (viridis: purple and
  // yellow-green on a light palette), NaN grey.
  EXPECT_EQ(strip(0, 0), grid->gradient_colour(0));
  EXPECT_EQ(strip(2, 3), grid->gradient_colour(1));
  EXPECT_EQ(strip(0, 0), QColor(68, 1, 84));
  EXPECT_GT(strip(2, 3).green(), 200);
  EXPECT_LT(strip(2, 3).blue(), 100);
  EXPECT_EQ(strip(1, 1), QColor(140, 140, 140));
  EXPECT_EQ(strip(1, 2), grid->tint(1, 2));
  // The thumbnail itself shows the head's pattern: the diagonal (a token's own key) differs from
  // the empty upper triangle.
  const QRect t = grid->tile_rect(2, 3);
  EXPECT_NE(shot.pixelColor(t.left() + 2, t.top() + 2), shot.pixelColor(t.right() - 2, t.top() + 2));
}

// The grid scales to 12 x 12 heads in a modest widget: tiles stay inside and do not overlap.
TEST_F(HeadsViewTest, GridFitsTwelveByTwelve) {
  HeadGrid grid;
  grid.set_shape(12, 12);
  grid.resize(grid.sizeHint());
  EXPECT_LE(grid.sizeHint().width(), 700);
  const QRect last = grid.tile_rect(11, 11);
  EXPECT_TRUE(grid.rect().contains(last)) << last.x() << "," << last.y();
  EXPECT_FALSE(grid.tile_rect(0, 0).intersects(grid.tile_rect(0, 1)));
  EXPECT_FALSE(grid.tile_rect(0, 0).intersects(grid.tile_rect(1, 0)));
  EXPECT_GE(grid.tile_rect(0, 0).width(), 20);
}

// The choosers emit what the window listens to; set_* (sessions) do not.
TEST_F(HeadsViewTest, ChoosersEmitTheirSignals) {
  HeadsView hv;
  hv.set_shape(2, 2, 4);
  hv.set_feature_maps({"elu", "hedgehog", "relu"});
  QSignalSpy map_spy(&hv, &HeadsView::mapChanged), seq_spy(&hv, &HeadsView::seqChanged);
  hv.set_feature_map("hedgehog", 32, 8);
  hv.set_seq(2);
  EXPECT_EQ(map_spy.count(), 0);
  EXPECT_EQ(seq_spy.count(), 0);
  EXPECT_EQ(hv.feature_map(), "hedgehog");
  EXPECT_EQ(hv.features(), 32);
  EXPECT_EQ(hv.hybrid_window(), 8);
  EXPECT_EQ(hv.seq(), 2);
  hv.map_box()->setFocus();
  QTest::keyClick(hv.map_box(), Qt::Key_Down);
  ASSERT_EQ(map_spy.count(), 1);
  EXPECT_EQ(map_spy.at(0).at(0).toString(), "relu");
  EXPECT_EQ(map_spy.at(0).at(2).toLongLong(), 8) << "the window stays with the new map";
  QTest::keyClick(hv.seq_box(), Qt::Key_Up);
  ASSERT_EQ(seq_spy.count(), 1);
  EXPECT_EQ(seq_spy.at(0).at(0).toInt(), 3);
  // The softmax window: one signal with the map, M and the new W.
  QTest::keyClick(hv.hybrid_window_box(), Qt::Key_Up);
  ASSERT_EQ(map_spy.count(), 2);
  EXPECT_EQ(map_spy.at(1).at(0).toString(), "relu");
  EXPECT_EQ(map_spy.at(1).at(1).toLongLong(), 32);
  EXPECT_EQ(map_spy.at(1).at(2).toLongLong(), 9);
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "relu M=32 + window 9");
  // Decay (issue 27): one signal with decayed = true, and the title says it.
  QTest::mouseClick(hv.decay_box(), Qt::LeftButton, {}, QPoint(5, hv.decay_box()->height() / 2));
  ASSERT_EQ(map_spy.count(), 3);
  EXPECT_TRUE(map_spy.at(2).at(3).toBool());
  EXPECT_TRUE(hv.decayed());
  EXPECT_EQ(hv.panel(MapKind::Linear)->title(), "relu M=32, decayed + window 9");
  hv.set_feature_map("relu", 32, 9, false);  // a session's choice: no signal
  EXPECT_EQ(map_spy.count(), 3);
  EXPECT_FALSE(hv.decayed());
  // Without a feature map there is nothing to mix softmax into nor to decay: greyed out.
  EXPECT_TRUE(hv.hybrid_window_box()->isEnabled());
  hv.set_feature_map("", 0, 9);
  EXPECT_FALSE(hv.hybrid_window_box()->isEnabled());
  EXPECT_FALSE(hv.decay_box()->isEnabled());
  hv.set_commands("attnscope maps --layer 0");
  EXPECT_EQ(hv.panel(MapKind::Difference)->command(), "attnscope maps --layer 0");
  EXPECT_EQ(hv.kl_panel()->command(), "attnscope maps --layer 0");
}

// Export: the PNG is a real picture of the map (light style, at least 800 x 560 at 2x), SVG and
// PDF are written, and the CSV is the visible cells' weights with the tokens as labels.
TEST_F(HeadsViewTest, ExportWritesPicturesAndTheVisibleCellsAsCsv) {
  const auto view = capture_view(small_dir(), 0, 0, "relu");
  HeatmapPanel panel("softmax", MapKind::Softmax);
  panel.resize(600, 500);
  panel.set_view(view);
  const std::string dir = test::temp_dir("heads_export");
  panel.export_to(QString::fromStdString(dir + "/m.png"));
  const QImage img(QString::fromStdString(dir + "/m.png"));
  ASSERT_FALSE(img.isNull());
  EXPECT_EQ(img.width(), 2 * std::max(800, panel.plot()->width()));
  EXPECT_EQ(img.height(), 2 * std::max(560, panel.plot()->height()));
  std::set<QRgb> colours;
  for (int y = 0; y < img.height(); y += 7)
    for (int x = 0; x < img.width(); x += 7) colours.insert(img.pixel(x, y));
  EXPECT_GT(colours.size(), 20u);
  panel.export_to(QString::fromStdString(dir + "/m.svg"));
  panel.export_to(QString::fromStdString(dir + "/m.pdf"));
  EXPECT_NE(test::read_file(dir + "/m.svg").find("<svg"), std::string::npos);
  EXPECT_EQ(test::read_file(dir + "/m.pdf").substr(0, 5), "%PDF-");

  panel.set_scale(ColourScale::Log);  // the CSV holds weights whatever the colour scale
  panel.show_region({10, 16, 2, 6});
  panel.export_to(QString::fromStdString(dir + "/m.csv"));
  const auto rows = parse_csv(test::read_file(dir + "/m.csv"));
  ASSERT_EQ(rows.size(), 7u);
  ASSERT_EQ(rows[0].size(), 5u);
  EXPECT_EQ(rows[0][0], "query\\key");
  EXPECT_EQ(rows[0][1], "#102");
  EXPECT_EQ(rows[1][0], "#110");
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(std::stod(rows[size_t(i + 1)][size_t(j + 1)]), view->softmax.at(10 + i, 2 + j), 1e-8);
}

// A benchmark, not a test (run with --gtest_also_run_disabled_tests): how long the heads view's
// maps take at L = 4096 to build and redraw at overview, zoomed, panned and re-scaled.
TEST_F(HeadsViewTest, DISABLED_BenchmarkLongMap) {
  const std::string dir = write_capture("heads_bench", 1, 1, 4096, 16, 1.0, 5);
  QElapsedTimer t;
  t.start();
  const auto view = capture_view(dir, 0, 0, "relu");
  std::cout << "head_detail (core, L=4096, relu): " << t.elapsed() << " ms\n";
  HeadsView hv;
  hv.resize(1600, 1000);
  hv.show();
  if (!QTest::qWaitForWindowExposed(&hv)) std::cout << "window not exposed\n";
  t.restart();
  hv.set_head_detail(view);
  QApplication::processEvents();
  std::cout << "set_head_detail (3 panels, overview 512x512, + KL plot): " << t.elapsed() << " ms\n";
  HeatmapPanel* sm = hv.panel(MapKind::Softmax);
  auto time = [&](const char* what, auto&& f, int reps) {
    QElapsedTimer e;
    e.start();
    for (int r = 0; r < reps; ++r) f(r);
    std::cout << what << ": " << double(e.nsecsElapsed()) / 1e6 / reps << " ms each\n";
  };
  // Alternating between two overview regions so every call recomputes the 512 x 512 image.
  time("one panel overview redraw (map_image 4096 -> 512 + replot)", [&](int r) { sm->show_region({0, 4096 - r % 2, 0, 4096 - r % 2}); }, 10);
  time("zoom to 2048 (cpp 4) + replot", [&](int r) { sm->show_region({r, 2048 + r, 0, 2048}); }, 5);
  time("zoomed 512 exact, pan by 16 cells + replot", [&](int r) { sm->show_region({3000 + 16 * r, 3512 + 16 * r, 1000, 1512}); }, 10);
  time("zoomed 64 exact, pan by 4 + replot", [&](int r) { sm->show_region({3000 + 4 * r, 3064 + 4 * r, 2000, 2064}); }, 20);
  time("colour scale change, three panels at overview", [&](int r) {
    hv.set_scale(r % 2 ? ColourScale::Log : ColourScale::RowNormalized);
  }, 4);
  // What the reduced image replaces: every one of the 4096 x 4096 cells in the colour map (the
  // plain QCPColorMap way), filled and drawn once at the same panel size.
  QCustomPlot naive;
  naive.resize(sm->plot()->size());
  auto* full = new QCPColorMap(naive.xAxis, naive.yAxis);
  naive.xAxis->setRange(-0.5, 4095.5);
  naive.yAxis->setRange(-0.5, 4095.5);
  time("naive: all 4096 x 4096 cells into a QCPColorMap + replot", [&](int) {
    full->data()->setSize(4096, 4096);
    full->data()->setRange(QCPRange(0, 4095), QCPRange(0, 4095));
    for (int i = 0; i < 4096; ++i)
      for (int j = 0; j < 4096; ++j) full->data()->setCell(j, i, view->softmax.at(i, j));
    full->rescaleDataRange();
    naive.replot();
  }, 2);
}

// Not a test (run with --gtest_also_run_disabled_tests): renders the heads and metrics views
// filled from a synthetic capture with recognizable heads (local, attention sink, previous token,
// content) at 1600 x 1000 in a light and a dark palette, to $ATTNSCOPE_LOOK_DIR (default
// /tmp/attnscope_look), for a person to look at.
TEST_F(HeadsViewTest, DISABLED_RenderForALook) {
  const int S = 4, H = 4, L = 64, d = 16;
  const std::string dir = test::temp_dir("heads_look") + "/cap";
  fs::create_directories(dir);
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 0.35f);
  for (int s = 0; s < S; ++s) {
    std::vector<float> q(size_t(H) * L * d), k(q.size());
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < L; ++i) {
        float* qi = &q[(size_t(h) * L + i) * d];
        float* ki = &k[(size_t(h) * L + i) * d];
        for (int c = 0; c < d; ++c) qi[c] = noise(rng), ki[c] = noise(rng);
        const int kind = (s * H + h) % 4;
        const float A = 2.0f + 0.4f * s;
        for (int f = 0; f < 4; ++f) {
          const float th = 0.08f * (f + 1);
          if (kind == 0 || kind == 2) {  // local (peak at j = i), previous token (peak at j = i - 1)
            const int at = kind == 0 ? i : i - 1;
            qi[2 * f] += A * std::cos(th * at), qi[2 * f + 1] += A * std::sin(th * at);
            ki[2 * f] += A * std::cos(th * i), ki[2 * f + 1] += A * std::sin(th * i);
          }
        }
        if (kind == 1) {  // a sink on the first token
          qi[0] += 3.0f;
          if (i == 0) ki[0] += 3.0f;
        }
        if (kind == 3)  // content: keys near the query's direction
          for (int c = 0; c < d; ++c) ki[c] = 0.7f * qi[c] + noise(rng);
      }
    auto t = [&](std::vector<float>& v) { return at::from_blob(v.data(), {1, H, L, d}, at::kFloat).clone(); };
    write_safetensors(dir + "/layer_" + std::to_string(s) + ".safetensors",
                      {{"q", t(q)}, {"k", t(k)}, {"v", at::ones({1, H, L, d})}}, {{"format", "attnscope-capture"}});
  }
  write_safetensors(dir + "/ids.safetensors", {{"ids", (at::arange(L, at::kLong) + 100).reshape({1, L})}},
                    {{"format", "attnscope-capture"}});
  nlohmann::json m = {{"format", "attnscope-capture"}, {"version", 2},
                      {"model", {{"path", "/nonexistent/model"}, {"layers", S}, {"heads", H}, {"kv_heads", H},
                                 {"head_dim", d}, {"vocab_size", 100 + L}}},
                      {"tokenization", {{"tokenizer", "hf"}, {"tokenizer_path", "/nonexistent/tokenizer.json"}}},
                      {"seq_len", L}, {"num_seqs", 1}};
  std::ofstream(dir + "/manifest.json") << m.dump(2);

  CaptureStore store(dir);
  AnalysisOptions opt;
  opt.feature_map = "elu";
  opt.mixer_state = 4;
  opt.mixer_iterations = 5;
  const std::vector<HeadAnalysis> heads = analyze_capture(store, opt);
  std::map<GridMetric, std::vector<std::vector<double>>> metrics;
  for (GridMetric m : {GridMetric::SoftmaxEntropy, GridMetric::Kl, GridMetric::LinearMonotonicity}) metrics[m].assign(S, std::vector<double>(H));
  for (const HeadAnalysis& a : heads) {
    metrics[GridMetric::SoftmaxEntropy][size_t(a.layer)][size_t(a.head)] = a.softmax.entropy;
    metrics[GridMetric::Kl][size_t(a.layer)][size_t(a.head)] = a.linear && a.linear->kl ? *a.linear->kl : NAN;
    metrics[GridMetric::LinearMonotonicity][size_t(a.layer)][size_t(a.head)] =
        a.linear && a.linear->monotonicity ? a.linear->monotonicity->spearman : NAN;
  }
  const auto view = std::make_shared<const HeadDetail>(head_detail(store, 1, 2, 0, opt));
  const char* env = std::getenv("ATTNSCOPE_LOOK_DIR");
  const std::string out = env ? env : "/tmp/attnscope_look";
  fs::create_directories(out);
  const QPalette light = QApplication::palette();
  QPalette dark;
  dark.setColor(QPalette::Window, QColor(45, 45, 48));
  dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
  dark.setColor(QPalette::Base, QColor(30, 30, 32));
  dark.setColor(QPalette::AlternateBase, QColor(45, 45, 48));
  dark.setColor(QPalette::Text, QColor(230, 230, 230));
  dark.setColor(QPalette::Button, QColor(55, 55, 58));
  dark.setColor(QPalette::ButtonText, QColor(230, 230, 230));
  dark.setColor(QPalette::Highlight, QColor(42, 130, 218));
  dark.setColor(QPalette::HighlightedText, Qt::white);
  dark.setColor(QPalette::Mid, QColor(90, 90, 90));
  for (const auto& [name, pal] : {std::pair<std::string, QPalette>{"light", light}, {"dark", dark}}) {
    QApplication::setPalette(pal);
    HeadsView hv;
    hv.resize(1600, 1000);
    hv.set_shape(S, H, 1);
    hv.set_feature_maps({"elu", "hedgehog", "relu"});
    hv.set_feature_map("elu", 0, 0);
    hv.set_thumbnails(head_thumbnails(store, 0, 32));
    hv.set_metrics(metrics);
    hv.set_head_detail(view);
    hv.set_scale(ColourScale::Log);
    hv.show();
    if (!QTest::qWaitForWindowExposed(&hv)) std::cout << "not exposed\n";
    QApplication::processEvents();
    hv.grab().save(QString::fromStdString(out + "/heads_" + name + ".png"));
    hv.show_region({20, 44, 10, 34});
    hv.set_scale(ColourScale::RowNormalized);
    QApplication::processEvents();
    hv.grab().save(QString::fromStdString(out + "/heads_zoom_" + name + ".png"));
    MetricsView mv;
    mv.resize(1600, 1000);
    mv.set_analysis(heads, S, H, "elu");
    mv.set_scatter(monotonicity_scatter(*view, 600, 1), 1, 2);
    mv.select(1, 2);
    mv.show();
    if (!QTest::qWaitForWindowExposed(&mv)) std::cout << "not exposed\n";
    QApplication::processEvents();
    mv.grab().save(QString::fromStdString(out + "/metrics_" + name + ".png"));
  }
  // 12 x 12 heads (a GPT-2-sized model), hand-made numbers: do the grid and the value heatmaps
  // stay readable?
  const int S12 = 12, H12 = 12;
  std::mt19937 r12(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<Matrix>> thumbs(S12);
  std::vector<HeadAnalysis> many;
  std::map<GridMetric, std::vector<std::vector<double>>> m12;
  m12[GridMetric::SoftmaxEntropy].assign(S12, std::vector<double>(H12));
  for (int l = 0; l < S12; ++l)
    for (int h = 0; h < H12; ++h) {
      Matrix t;
      t.rows = t.cols = 32;
      const int kind = (l + h) % 3;
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j)
          t.values.push_back(j > i ? NAN : kind == 0 ? (i == j ? 1.0 : 0.1 * u(r12)) : kind == 1 ? (j == 0 ? 1.0 : 0.05) : u(r12));
      thumbs[size_t(l)].push_back(t);
      HeadAnalysis a;
      a.layer = l, a.head = h;
      a.softmax.entropy = 0.5 + 3 * u(r12);
      a.softmax.monotonicity = Monotonicity{1.0, 0.0};
      HeadMetrics lm;
      lm.entropy = a.softmax.entropy + 0.5 * u(r12);
      lm.monotonicity = Monotonicity{u(r12) * 1.6 - 0.6, 0.2};
      lm.kl = 0.3 * u(r12);
      a.linear = lm;
      many.push_back(a);
      m12[GridMetric::SoftmaxEntropy][size_t(l)][size_t(h)] = a.softmax.entropy;
    }
  for (const auto& [name, pal] : {std::pair<std::string, QPalette>{"light", light}, {"dark", dark}}) {
    QApplication::setPalette(pal);
    HeadsView hv;
    hv.resize(1600, 1000);
    hv.set_shape(S12, H12, 1);
    hv.set_thumbnails(thumbs);
    hv.set_metrics(m12);
    hv.set_head_detail(view);
    hv.select(7, 5);
    hv.show();
    if (!QTest::qWaitForWindowExposed(&hv)) std::cout << "not exposed\n";
    QApplication::processEvents();
    hv.grab().save(QString::fromStdString(out + "/heads_12x12_" + name + ".png"));
    MetricsView mv;
    mv.resize(1600, 1000);
    mv.set_analysis(many, S12, H12, "hedgehog");
    mv.select(7, 5);
    mv.show();
    if (!QTest::qWaitForWindowExposed(&mv)) std::cout << "not exposed\n";
    QApplication::processEvents();
    mv.grab().save(QString::fromStdString(out + "/metrics_12x12_" + name + ".png"));
  }
  QApplication::setPalette(light);
  std::cout << "wrote " << out << "/{heads,heads_zoom,metrics,heads_12x12,metrics_12x12}_{light,dark}.png\n";
}

// Found driving the window: with no head (before a capture) the per-row plot shrank to a sliver at
// the left of its panel, because its empty legend's row narrowed the plot's column. Every plot
// with its legend under it keeps its width without series too.
TEST_F(HeadsViewTest, PlotsWithALegendBelowKeepTheirWidthWithoutSeries) {
  HeadsView hv;
  hv.resize(1000, 700);
  hv.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&hv));
  QApplication::processEvents();
  QCustomPlot* p = hv.kl_panel()->plot();
  p->replot();
  EXPECT_GT(p->axisRect()->rect().width(), p->width() * 3 / 4) << p->axisRect()->rect().width() << " of " << p->width();
  // Empty maps show no colour bar (it would show a range of nothing).
  for (MapKind kind : {MapKind::Softmax, MapKind::Linear, MapKind::Difference})
    EXPECT_FALSE(hv.panel(kind)->colour_map()->colorScale()->visible());
}

}  // namespace gui_test_heads_view
