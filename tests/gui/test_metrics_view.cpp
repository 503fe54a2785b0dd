// The metrics view (offscreen): every heatmap cell and its printed value is the HeadAnalysis
// field it stands for, the histograms count every head, the monotonicity scatter draws exactly
// the points it was given, clicking a cell selects that head, and every panel exports; a dark
// palette gives light colour-bar captions while cell values contrast with their cells; the view
// fits a 1500-pixel window without scrolling sideways.
#include <gtest/gtest.h>

#include <QApplication>
#include <QImage>
#include <QLabel>
#include <QSignalSpy>
#include <QTest>
#include <algorithm>

#include "value_heatmap.h"
#include <cmath>
#include <map>
#include <qcustomplot.h>
#include <random>
#include <set>
#include <sstream>

#include "attnscope/analysis/head_detail.h"
#include "figure_export.h"
#include "metrics_view.h"
#include "plot_style.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_metrics_view {

using namespace attnscope;
using attnscope::views::MetricsView;
using attnscope::views::PlotPanel;
using attnscope::views::ValueHeatmap;

namespace {

constexpr int S = 3, H = 4;

// Distinct, recognizable numbers per head: entropy 1.LH, monotonicity 0.9 - 0.1 L - 0.01 H, ...
std::vector<HeadAnalysis> analysis(bool linear, bool mixers) {
  std::vector<HeadAnalysis> out;
  for (int l = 0; l < S; ++l)
    for (int h = 0; h < H; ++h) {
      HeadAnalysis a;
      a.layer = l, a.head = h;
      a.softmax.entropy = 1.0 + 0.1 * l + 0.01 * h;
      a.softmax.monotonicity = Monotonicity{1.0 - 0.001 * (l * H + h), 0.0};
      if (linear) {
        HeadMetrics m;
        m.entropy = 2.0 + 0.2 * l - 0.03 * h;
        m.monotonicity = Monotonicity{0.9 - 0.1 * l - 0.01 * h, 0.1};
        if (!(l == 2 && h == 1)) m.kl = 0.05 * (l + 1) + 0.002 * h;  // one head without KL: NaN
        a.linear = m;
      }
      if (mixers) {
        MixerDistances d;
        d.state_size = 4;
        d.toeplitz = 0.5 + 0.01 * h, d.causal_low_rank = 0.3 + 0.02 * l, d.retnet = 0.6;
        d.ssd = 0.25 + 0.01 * (l + h), d.ssd_d = 0.2, d.semiseparable = 0.1 + 0.001 * h;
        a.mixers = d;
      }
      out.push_back(a);
    }
  return out;
}

class MetricsViewTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    ASSERT_TRUE(views::ensure_qt(&why)) << why;
  }
};

PlotPanel* panel(const MetricsView& v, const QString& title_start) {
  for (PlotPanel* p : v.panels())
    if (p->title().startsWith(title_start)) return p;
  ADD_FAILURE() << "no panel titled " << title_start.toStdString();
  return nullptr;
}

QCPColorMap* colour_map(PlotPanel* p) {
  for (int i = 0; i < p->plot()->plottableCount(); ++i)
    if (auto* m = qobject_cast<QCPColorMap*>(p->plot()->plottable(i))) return m;
  return nullptr;
}

// The text printed at cell (col, row), "" when none.
QString cell_text(PlotPanel* p, int col, int row) {
  for (int i = 0; i < p->plot()->itemCount(); ++i)
    if (auto* t = qobject_cast<QCPItemText*>(p->plot()->item(i)))
      if (t->position->type() == QCPItemPosition::ptPlotCoords && t->position->coords() == QPointF(col, row)) return t->text();
  return {};
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    for (char c : line) {
      if (c == ',') cells.push_back(cell), cell.clear();
      else if (c != '"') cell += c;
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_F(MetricsViewTest, HeatmapCellsAndPrintedValuesAreTheAnalysisFields) {
  MetricsView v;
  v.resize(1600, 1000);
  const auto heads = analysis(true, true);
  v.set_analysis(heads, S, H, "hedgehog");
  struct Field {
    QString title;
    std::function<double(const HeadAnalysis&)> get;
    int decimals;
  };
  const std::vector<Field> fields = {
      {"softmax entropy", [](const HeadAnalysis& a) { return a.softmax.entropy; }, 2},
      {"hedgehog entropy", [](const HeadAnalysis& a) { return a.linear->entropy; }, 2},
      {"hedgehog monotonicity", [](const HeadAnalysis& a) { return a.linear->monotonicity->spearman; }, 2},
      {"hedgehog discordant pairs", [](const HeadAnalysis& a) { return a.linear->monotonicity->discordant_fraction; }, 3},
      {"KL(softmax || hedgehog)", [](const HeadAnalysis& a) { return a.linear->kl ? *a.linear->kl : NAN; }, 3},
  };
  for (const Field& f : fields) {
    PlotPanel* p = panel(v, f.title);
    ASSERT_NE(p, nullptr);
    QCPColorMap* m = colour_map(p);
    ASSERT_NE(m, nullptr) << f.title.toStdString();
    ASSERT_EQ(m->data()->keySize(), H);
    ASSERT_EQ(m->data()->valueSize(), S);
    for (const HeadAnalysis& a : heads) {
      const double want = f.get(a);
      const double got = m->data()->cell(a.head, a.layer);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.title.toStdString();
        EXPECT_EQ(cell_text(p, a.head, a.layer), "–");
      } else {
        EXPECT_DOUBLE_EQ(got, want) << f.title.toStdString() << " L" << a.layer << " H" << a.head;
        EXPECT_EQ(cell_text(p, a.head, a.layer), QString::number(want, 'f', f.decimals)) << f.title.toStdString();
      }
    }
  }
  // Monotonicity on [-1, 1]; the two entropy maps share one range. Softmax's own monotonicity has
  // no panel: it is 1 in every head by construction (issue 18, defect 6).
  EXPECT_EQ(colour_map(panel(v, "hedgehog monotonicity"))->dataRange(), QCPRange(-1, 1));
  for (PlotPanel* p : v.panels()) EXPECT_FALSE(p->title().startsWith("softmax monotonicity")) << p->title().toStdString();
  EXPECT_EQ(colour_map(panel(v, "softmax entropy"))->dataRange(), colour_map(panel(v, "hedgehog entropy"))->dataRange());

  // Mixers: one row per head (layer-major), one column per class.
  PlotPanel* mp = panel(v, "mixer distances");
  EXPECT_TRUE(mp->title().contains("N = 4"));
  QCPColorMap* mm = colour_map(mp);
  ASSERT_EQ(mm->data()->valueSize(), S * H);
  ASSERT_EQ(mm->data()->keySize(), 6);
  const HeadAnalysis& a = heads[size_t(1 * H + 3)];
  EXPECT_DOUBLE_EQ(mm->data()->cell(0, 1 * H + 3), a.mixers->toeplitz);
  EXPECT_DOUBLE_EQ(mm->data()->cell(3, 1 * H + 3), a.mixers->ssd);
  EXPECT_DOUBLE_EQ(mm->data()->cell(5, 1 * H + 3), a.mixers->semiseparable);
  // Each row names the student that fits its head best, and the title the --decay most heads point at.
  int counts[3] = {0, 0, 0};
  for (const HeadAnalysis& h : heads) ++counts[int(best_decay_student(*h.mixers))];
  const int most = int(std::max_element(counts, counts + 3) - counts);
  EXPECT_TRUE(mp->toolTip().contains(QString("most heads: --decay ") + decay_name(Decay(most)))) << mp->toolTip().toStdString();
  EXPECT_TRUE(mp->toolTip().contains(QString("none %1, fixed %2, gated %3").arg(counts[0]).arg(counts[1]).arg(counts[2])));
  EXPECT_TRUE(mp->toolTip().contains("each head its own: --decay mixer")) << mp->toolTip().toStdString();
  const QString row = QString("L1 H3 → ") + decay_name(best_decay_student(*a.mixers));
  auto* hm = dynamic_cast<ValueHeatmap*>(mp);
  ASSERT_NE(hm, nullptr);
  EXPECT_NE(hm->values_csv("head").find("\n" + row.toStdString() + ","), std::string::npos) << hm->values_csv("head");
}

// With the window class measured (metrics --window W beside --mixer-state): a seventh column, and the
// heads whose window takes kWindowGain off their student's distance end "→ window + <decay>".
TEST_F(MetricsViewTest, TheWindowClassIsAColumnAndNamesTheHeadsThatNeedIt) {
  std::vector<HeadAnalysis> heads = analysis(false, true);
  int windows = 0;
  for (HeadAnalysis& a : heads) {
    a.mixers->window_size = 16;
    a.mixers->window = a.head == 0 ? 0.01 : a.mixers->ssd - 0.01;  // head 0 of every layer gains far more than 0.05
    windows += best_student(*a.mixers).window;
  }
  ASSERT_EQ(windows, S);
  MetricsView v;
  v.resize(1600, 1000);
  v.set_analysis(heads, S, H, "");
  PlotPanel* mp = panel(v, "mixer distances");
  QCPColorMap* mm = colour_map(mp);
  ASSERT_EQ(mm->data()->keySize(), 7);
  EXPECT_DOUBLE_EQ(mm->data()->cell(6, 1 * H + 0), 0.01);
  auto* hm = dynamic_cast<ValueHeatmap*>(mp);
  ASSERT_NE(hm, nullptr);
  const std::string csv = hm->values_csv("head");
  EXPECT_NE(csv.find("window 16 + SSD"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nL1 H0 → window + " + student_name({best_decay_student(*heads[size_t(H)].mixers), false}) + ","),
            std::string::npos) << csv;
  EXPECT_NE(csv.find("\nL1 H1 → " + std::string(decay_name(best_decay_student(*heads[size_t(H + 1)].mixers))) + ","),
            std::string::npos) << csv;
  EXPECT_TRUE(mp->toolTip().contains(QString("window heads: %1").arg(S))) << mp->toolTip().toStdString();
  EXPECT_TRUE(mp->toolTip().contains("with --window 16 the window for the " + QString::number(S) + " heads that need it"))
      << mp->toolTip().toStdString();
}

TEST_F(MetricsViewTest, WithoutAFeatureMapTheLinearPanelsSaySo) {
  MetricsView v;
  v.resize(1600, 1000);
  v.set_analysis(analysis(false, false), S, H, "");
  for (const QString& t : {QString("linear entropy"), QString("linear monotonicity"), QString("KL(softmax || linear)")}) {
    PlotPanel* p = panel(v, t);
    ASSERT_NE(p, nullptr);
    EXPECT_FALSE(colour_map(p)->visible());
    bool note = false;
    for (int i = 0; i < p->plot()->itemCount(); ++i)
      if (auto* x = qobject_cast<QCPItemText*>(p->plot()->item(i))) note |= x->visible() && x->text().contains("No feature map");
    EXPECT_TRUE(note) << t.toStdString();
  }
  PlotPanel* mp = panel(v, "mixer distances");
  EXPECT_FALSE(colour_map(mp)->visible());
  EXPECT_TRUE(colour_map(panel(v, "softmax entropy"))->visible());
}

// The histograms count every head once, over common bins spanning both series' values (issue 18,
// defect 8: each series had its own bins), with the legend under the plot, not over the bars.
TEST_F(MetricsViewTest, EntropyHistogramsCountEveryHead) {
  MetricsView v;
  v.resize(1600, 1000);
  const auto heads = analysis(true, false);
  v.set_analysis(heads, S, H, "hedgehog");
  PlotPanel* p = panel(v, "per-head entropy");
  ASSERT_EQ(p->plot()->plottableCount(), 2);
  double lo = INFINITY, hi = -INFINITY;
  for (const HeadAnalysis& a : heads)
    for (double e : {a.softmax.entropy, a.linear->entropy}) lo = std::min(lo, e), hi = std::max(hi, e);
  std::vector<std::vector<double>> keys(2);
  for (int s = 0; s < 2; ++s) {
    auto* bars = qobject_cast<QCPBars*>(p->plot()->plottable(s));
    ASSERT_NE(bars, nullptr);
    double total = 0, first = INFINITY, last = -INFINITY;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) {
      total += it->value;
      keys[size_t(s)].push_back(it->key);
      first = std::min(first, it->key), last = std::max(last, it->key);
    }
    EXPECT_EQ(total, S * H);
    EXPECT_NEAR(first - bars->width() / 2, lo, 1e-12);
    EXPECT_NEAR(last + bars->width() / 2, hi, 1e-12);
  }
  EXPECT_EQ(keys[0], keys[1]) << "both series over the same bins";
  EXPECT_DOUBLE_EQ(qobject_cast<QCPBars*>(p->plot()->plottable(0))->width(),
                   qobject_cast<QCPBars*>(p->plot()->plottable(1))->width());
  EXPECT_EQ(p->plot()->plottable(1)->name(), "hedgehog");
  p->plot()->replot();
  EXPECT_FALSE(p->plot()->axisRect()->insetLayout()->elements(false).contains(p->plot()->legend))
      << "the legend sits outside the bars";
  EXPECT_FALSE(QRectF(p->plot()->axisRect()->rect()).intersects(QRectF(p->plot()->legend->outerRect())));
}

// The scatter draws the points it was given: (score, softmax weight) and (score, linear weight),
// undefined (NaN) linear weights left out.
TEST_F(MetricsViewTest, ScatterDrawsTheGivenPoints) {
  ScatterPoints pts;
  std::mt19937 rng(4);
  std::normal_distribution<double> n(0, 1);
  for (int i = 0; i < 60; ++i) {
    pts.score.push_back(n(rng));
    pts.softmax.push_back(std::exp(pts.score.back()) / 20);
    pts.linear.push_back(i % 10 == 3 ? NAN : 0.05 + 0.01 * n(rng));
  }
  MetricsView v;
  v.resize(1600, 1000);
  v.set_analysis(analysis(true, false), S, H, "hedgehog");
  v.set_scatter(pts, 2, 1);
  PlotPanel* p = panel(v, "weight vs q.k: L2 H1");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->plot()->graphCount(), 2);
  auto points = [](QCPGraph* g) {
    std::multiset<std::pair<double, double>> s;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) s.insert({it->key, it->value});
    return s;
  };
  std::multiset<std::pair<double, double>> want_sm, want_lin;
  for (size_t i = 0; i < pts.score.size(); ++i) {
    want_sm.insert({pts.score[i], pts.softmax[i]});
    if (!std::isnan(pts.linear[i])) want_lin.insert({pts.score[i], pts.linear[i]});
  }
  EXPECT_EQ(points(p->plot()->graph(0)), want_sm);
  EXPECT_EQ(points(p->plot()->graph(1)), want_lin);
  EXPECT_EQ(want_lin.size(), 54u);
  EXPECT_EQ(p->plot()->graph(0)->lineStyle(), QCPGraph::lsNone);
  EXPECT_EQ(p->plot()->graph(1)->name(), "hedgehog");
  // Issue 26: the legend covered the densest points; it sits under the plot.
  v.show();
  p->plot()->replot();
  EXPECT_FALSE(p->plot()->axisRect()->insetLayout()->elements(false).contains(p->plot()->legend));
  EXPECT_FALSE(QRectF(p->plot()->axisRect()->rect()).intersects(QRectF(p->plot()->legend->outerRect())));
}

// Clicking a heatmap cell selects that head (signal) and frames it in every heatmap.
TEST_F(MetricsViewTest, ClickingACellSelectsItsHead) {
  MetricsView v;
  v.resize(1600, 1000);
  v.set_analysis(analysis(true, true), S, H, "hedgehog");
  v.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&v));
  QSignalSpy spy(&v, &MetricsView::headSelected);
  PlotPanel* p = panel(v, "hedgehog monotonicity");
  p->plot()->replot();
  const QPoint at(int(p->plot()->xAxis->coordToPixel(3)), int(p->plot()->yAxis->coordToPixel(1)));
  QTest::mouseClick(p->plot(), Qt::LeftButton, {}, at);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toInt(), 1);
  EXPECT_EQ(spy.at(0).at(1).toInt(), 3);
  PlotPanel* other = panel(v, "softmax entropy");
  QCPItemRect* frame = nullptr;
  for (int i = 0; i < other->plot()->itemCount(); ++i)
    if (auto* r = qobject_cast<QCPItemRect*>(other->plot()->item(i))) frame = r;
  ASSERT_NE(frame, nullptr);
  EXPECT_TRUE(frame->visible());
  EXPECT_EQ(frame->topLeft->coords(), QPointF(2.5, 0.5));
  // A click on the mixer table selects the head of the row.
  PlotPanel* mp = panel(v, "mixer distances");
  mp->plot()->replot();
  QTest::mouseClick(mp->plot(), Qt::LeftButton, {},
                    QPoint(int(mp->plot()->xAxis->coordToPixel(2)), int(mp->plot()->yAxis->coordToPixel(2 * H + 2))));
  ASSERT_EQ(spy.count(), 2);
  EXPECT_EQ(spy.at(1).at(0).toInt(), 2);
  EXPECT_EQ(spy.at(1).at(1).toInt(), 2);
}

// Every panel exports PNG (a picture with many colours, 2x the export size) and CSV that parses
// back to its numbers; the command reaches every panel.
TEST_F(MetricsViewTest, EveryPanelExportsPictureAndNumbers) {
  MetricsView v;
  v.resize(1600, 1000);
  const auto heads = analysis(true, true);
  v.set_analysis(heads, S, H, "hedgehog");
  ScatterPoints pts{{0.1, 0.5, 1.5}, {0.2, 0.3, 0.5}, {0.3, 0.3, 0.4}};
  v.set_scatter(pts, 0, 0);
  v.set_commands("attnscope metrics --feature-map hedgehog");
  const std::string dir = test::temp_dir("metrics_export");
  int n = 0;
  for (PlotPanel* p : v.panels()) {
    EXPECT_EQ(p->command(), "attnscope metrics --feature-map hedgehog");
    const std::string base = dir + "/p" + std::to_string(n++);
    p->export_to(QString::fromStdString(base + ".png"));
    const QImage img(QString::fromStdString(base + ".png"));
    ASSERT_FALSE(img.isNull()) << p->title().toStdString();
    EXPECT_GE(img.width(), 1600);
    std::set<QRgb> colours;
    for (int y = 0; y < img.height(); y += 5)
      for (int x = 0; x < img.width(); x += 5) colours.insert(img.pixel(x, y));
    EXPECT_GT(colours.size(), 5u) << p->title().toStdString();
    ASSERT_TRUE(p->has_csv());
    p->export_to(QString::fromStdString(base + ".csv"));
    EXPECT_FALSE(test::read_file(base + ".csv").empty());
  }
  const auto kl = parse_csv(test::read_file(dir + "/p4.csv"));  // KL: layers x heads
  ASSERT_EQ(kl.size(), size_t(S + 1));
  EXPECT_EQ(kl[0][0], "layer");
  EXPECT_EQ(kl[0][4], "H3");
  EXPECT_EQ(kl[3][0], "L2");
  EXPECT_NEAR(std::stod(kl[1][3]), *heads[2].linear->kl, 1e-6);
  EXPECT_EQ(kl[3][2], "nan");
  const auto sc = parse_csv(test::read_file(dir + "/p6.csv"));
  ASSERT_EQ(sc.size(), 4u);
  EXPECT_NEAR(std::stod(sc[3][0]), 1.5, 1e-9);
  EXPECT_NEAR(std::stod(sc[3][1]), 0.5, 1e-9);
  const auto hist = parse_csv(test::read_file(dir + "/p5.csv"));
  double total = 0;
  for (size_t r = 1; r < hist.size(); ++r)
    if (hist[r][0] == "softmax") total += std::stod(hist[r][3]);
  EXPECT_EQ(total, S * H);
}

namespace {

QPalette dark_palette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(45, 45, 48));
  p.setColor(QPalette::WindowText, QColor(230, 230, 230));
  p.setColor(QPalette::Base, QColor(30, 30, 32));
  p.setColor(QPalette::Text, QColor(230, 230, 230));
  p.setColor(QPalette::Button, QColor(55, 55, 58));
  p.setColor(QPalette::ButtonText, QColor(230, 230, 230));
  p.setColor(QPalette::Highlight, QColor(42, 130, 218));
  return p;
}

QCPColorScale* colour_scale(PlotPanel* p) {
  for (QCPLayoutElement* e : p->plot()->plotLayout()->elements(true))
    if (auto* s = qobject_cast<QCPColorScale*>(e)) return s;
  return nullptr;
}

}  // namespace

// A dark palette: every colour bar's caption ("entropy (nats)", "Spearman", "KL (nats)", ...) and
// ticks are light, so is a missing value's "–", also when the view was hidden at the change; a
// value on a cell contrasts with that cell (at least 4.5 : 1, black on the bright greens). Back to
// light: dark captions.
TEST_F(MetricsViewTest, DarkPaletteGivesLightCaptionsAndCellValuesContrastWithTheirCells) {
  const QPalette saved = QApplication::palette();
  {
    // Built hidden, the palette changes, then it is shown (a tab not shown when the theme changed).
    MetricsView v;
    v.resize(1600, 1000);
    v.set_analysis(analysis(true, true), S, H, "hedgehog");
    QApplication::setPalette(dark_palette());
    v.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&v));
    QStringList captions;
    for (PlotPanel* p : v.panels()) {
      QCPColorScale* scale = colour_scale(p);
      if (!scale) continue;
      captions << scale->axis()->label();
      EXPECT_GT(scale->axis()->labelColor().lightness(), 180) << scale->axis()->label().toStdString();
      EXPECT_GT(scale->axis()->tickLabelColor().lightness(), 180) << scale->axis()->label().toStdString();
      QCPColorMap* map = colour_map(p);
      for (int i = 0; i < p->plot()->itemCount(); ++i) {
        auto* t = qobject_cast<QCPItemText*>(p->plot()->item(i));
        if (!t || t->position->type() != QCPItemPosition::ptPlotCoords) continue;
        const double x = map->data()->cell(int(t->position->coords().x()), int(t->position->coords().y()));
        if (std::isnan(x)) {
          EXPECT_EQ(t->text(), "–");
          EXPECT_GT(t->color().lightness(), 180);  // on the dark background
          continue;
        }
        const QColor cell = QColor::fromRgb(map->gradient().color(x, map->dataRange()));
        const double a = views::relative_luminance(cell), b = views::relative_luminance(t->color());
        EXPECT_GE((std::max(a, b) + 0.05) / (std::min(a, b) + 0.05), 4.5) << t->text().toStdString() << " on " << cell.name().toStdString();
      }
    }
    EXPECT_EQ(captions.size(), 6);
    EXPECT_TRUE(captions.contains("Spearman"));
    EXPECT_TRUE(captions.contains("KL (nats)"));
    QApplication::setPalette(saved);
    QCoreApplication::processEvents();
    for (PlotPanel* p : v.panels()) {
      if (QCPColorScale* scale = colour_scale(p)) {
        EXPECT_LT(scale->axis()->labelColor().lightness(), 80);
      }
    }
  }
  QApplication::setPalette(saved);
}

// Four panels a row fit the tab of a 1500-pixel window (about 1200 pixels beside the model dock):
// the view's minimum width is well under it, and at 1200 pixels every panel shows its title whole.
TEST_F(MetricsViewTest, FitsA1500PixelWindowWithoutScrollingSideways) {
  MetricsView v;
  v.set_analysis(analysis(true, true), S, H, "hedgehog");
  v.set_scatter(ScatterPoints{{0.1, 0.5, 1.5}, {0.2, 0.3, 0.5}, {0.3, 0.3, 0.4}}, 2, 1);
  EXPECT_LE(v.minimumSizeHint().width(), 900);
  v.resize(1200, 800);
  v.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&v));
  QCoreApplication::processEvents();
  for (PlotPanel* p : v.panels()) {
    auto* title = p->findChild<QLabel*>();
    ASSERT_NE(title, nullptr);
    EXPECT_GE(title->width(), title->fontMetrics().horizontalAdvance(p->title())) << p->title().toStdString();
    EXPECT_GE(p->plot()->width(), 200) << p->title().toStdString();
  }
}

// The scatter may arrive before the analysis names the feature map: its legend then still names
// the map, not "linear".
TEST_F(MetricsViewTest, ScatterLegendNamesTheMapWhenTheAnalysisComesLater) {
  MetricsView v;
  v.set_scatter(ScatterPoints{{0.1, 0.5, 1.5}, {0.2, 0.3, 0.5}, {0.3, 0.3, 0.4}}, 0, 0);
  PlotPanel* p = panel(v, "weight vs q.k");
  ASSERT_EQ(p->plot()->graphCount(), 2);
  EXPECT_EQ(p->plot()->graph(1)->name(), "linear");
  v.set_analysis(analysis(true, false), S, H, "prf");
  EXPECT_EQ(p->plot()->graph(1)->name(), "prf");
}

}  // namespace gui_test_metrics_view
