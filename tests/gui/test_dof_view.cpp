// The DoF view driven as a user would (offscreen): the lambda and budget sliders emit the settings
// at once, the window's answer (core's head_dofs, head_convergence, allocate -> show_state) is what
// the bars and the heatmap cells show, the spectrum's lambda line sits at core's shifted ridge, a
// click on a cell selects its head, and set_controls stays silent; on a dark palette every text is
// light (cell values excepted: they contrast with their cell), and the DoF label of the
// DoF-against-lambda plot stays inside the plot and off its legend at every lambda.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QImage>
#include <QLabel>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QTest>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <qcustomplot.h>

#include "attnscope/allocation/allocation.h"
#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/table.h"
#include "dof_view.h"
#include "workbench.h"
#include "figure_export.h"
#include "plot_style.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_dof_view {

using namespace attnscope;
using views::DofView;

namespace {

// What the DoF view's sliders ask core for (Workbench::set_dof_settings with multiple 1).
DofAllocation dof_allocation(const DofSpectra& s, double lambda, int64_t budget, AllocStrategy strategy) {
  AllocOptions o;
  o.strategy = strategy;
  o.budget = budget;
  return allocation_at(s, lambda, o);
}


// Geometric spectra e_i = r^i (trace-normalized), a different decay per head, so every head has
// its own DoF; the J/2 half of head (1, 2) decays much faster (flagged unconverged; the others'
// halves have the same DoF); heads (2, 1) and (3, 0) are kept in shifted form (log_scale 3 and 400,
// as the samples normalizer gives; exp(400) mu would not fit in a double).
HeadSpectrum geometric(double rate, int J, double log_scale = 0) {
  HeadSpectrum h;
  double sum = 0;
  for (int i = 0; i < J; ++i) sum += std::pow(rate, i);
  for (int i = 0; i < J; ++i) h.eigenvalues.push_back(std::pow(rate, i) / sum);
  h.trace = 1;
  h.samples = J;
  h.log_scale = log_scale;
  return h;
}

std::shared_ptr<DofSpectra> synthetic_spectra(int S, int H, int J) {
  auto sp = std::make_shared<DofSpectra>();
  sp->num_layers = S;
  sp->num_heads = H;
  sp->head_dim = 32;
  sp->model = "/models/toy-gpt";
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      const double rate = 0.5 + 0.45 * double((s * H + h) % 7) / 6;
      const double log_scale = (s == 2 && h == 1) ? 3.0 : (s == 3 && h == 0) ? 400.0 : 0.0;
      HeadSpectrum hs = geometric(rate, J, log_scale);
      // Converged heads: a J/2 spectrum with the same DoF (the same spectrum, samples J/2).
      HeadSpectrum half = (s == 1 && h == 2) ? geometric(0.3, J / 2, log_scale) : geometric(rate, J, log_scale);
      half.samples = J / 2;
      hs.half = std::make_shared<HeadSpectrum>(half);
      sp->heads.push_back(hs);
    }
  return sp;
}

struct Fixture {
  std::shared_ptr<DofSpectra> spectra = synthetic_spectra(4, 5, 96);
  std::unique_ptr<DofView> view;
  DofAllocation last;
  Fixture() {
    views::ensure_qt(nullptr);
    view = std::make_unique<DofView>();
    view->resize(1300, 850);
    view->set_spectra(spectra);
    QObject::connect(view.get(), &DofView::settingsChanged, view.get(),
                     [this](double lambda, qint64 budget, AllocStrategy strategy) {
                       last = dof_allocation(*spectra, lambda, budget, strategy);
                       view->show_state(last);
                     });
    last = dof_allocation(*spectra, view->lambda(), view->budget(), view->strategy());
    view->show_state(last);
    view->show();
    QCoreApplication::processEvents();
  }
};

std::vector<double> as_double(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

QCPItemStraightLine* lambda_line(QCustomPlot* plot) {
  return plot->findChild<QCPItemStraightLine*>("lambda line");
}

QPalette dark_palette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(45, 45, 48));
  p.setColor(QPalette::WindowText, QColor(230, 230, 230));
  p.setColor(QPalette::Base, QColor(30, 30, 32));
  p.setColor(QPalette::AlternateBase, QColor(45, 45, 48));
  p.setColor(QPalette::Text, QColor(230, 230, 230));
  p.setColor(QPalette::Button, QColor(55, 55, 58));
  p.setColor(QPalette::ButtonText, QColor(230, 230, 230));
  p.setColor(QPalette::Highlight, QColor(42, 130, 218));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Mid, QColor(90, 90, 90));
  return p;
}

std::vector<QCPItemText*> item_texts(QCustomPlot* plot) {
  std::vector<QCPItemText*> out;
  for (int i = 0; i < plot->itemCount(); ++i)
    if (auto* t = qobject_cast<QCPItemText*>(plot->item(i))) out.push_back(t);
  return out;
}

double contrast(const QColor& a, const QColor& b) {
  const double x = views::relative_luminance(a), y = views::relative_luminance(b);
  return (std::max(x, y) + 0.05) / (std::min(x, y) + 0.05);
}

// The pixel rectangle a QCPItemText covers (its corner anchors, after a replot).
QRectF text_rect(QCPItemText* t) {
  return QRectF(t->topLeft->pixelPosition(), t->bottomRight->pixelPosition()).normalized();
}

}  // namespace

TEST(DofView, LambdaSliderEmitsQuarterPowersOfTwoAndTheBarsFollowCore) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &DofView::settingsChanged);
  QSlider* slider = f.view->lambda_slider();
  const int start = slider->value();
  slider->setFocus();
  QTest::keyClick(slider, Qt::Key_Right);  // one quarter step up
  ASSERT_EQ(spy.count(), 1);
  EXPECT_DOUBLE_EQ(spy.at(0).at(0).toDouble(), std::exp2((start + 1) / 4.0));
  EXPECT_EQ(spy.at(0).at(1).toLongLong(), f.view->budget());
  QTest::keyClick(slider, Qt::Key_PageDown);  // a whole power of two down
  ASSERT_EQ(spy.count(), 2);
  EXPECT_DOUBLE_EQ(spy.at(1).at(0).toDouble(), std::exp2((start + 1 - 4) / 4.0));
  slider->setValue(-20);
  ASSERT_EQ(spy.count(), 3);
  EXPECT_DOUBLE_EQ(spy.at(2).at(0).toDouble(), 1.0 / 32);
  EXPECT_EQ(f.view->lambda_label()->text(), QStringLiteral("λ = 2^-5 = 0.031"));

  // The allocation drawn is core's for the same inputs, independently recomputed here.
  const DofAllocation expect = dof_allocation(*f.spectra, 1.0 / 32, f.view->budget(), AllocStrategy::Dof);
  EXPECT_EQ(f.view->drawn_layer_dims(), as_double(expect.allocation.layer_dims()));
  EXPECT_EQ(f.view->mean_cost_text(),
            QString("mean cost %1 of budget %2").arg(QString::fromStdString(fmt_number(expect.allocation.mean_cost, 1))).arg(f.view->budget()));
  // The dimensions differ between layers (dof strategy): the comparison is not trivially all-equal.
  const auto dims = expect.allocation.layer_dims();
  EXPECT_NE(*std::min_element(dims.begin(), dims.end()), *std::max_element(dims.begin(), dims.end()));
}

// The "Keep exact" share: one stateShareChanged per edit, nothing from set_state_share; an allocation
// with head types marks its softmax heads "S" in the heatmap (and only those) and Table 1's caption
// counts them with the state against the key-value cache, as core computed them.
TEST(DofView, StateShareMarksTheHeadsKeptSoftmax) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &DofView::stateShareChanged);
  f.view->set_state_share(0.3);
  EXPECT_EQ(spy.count(), 0);
  f.view->state_share_box()->setValue(0.5);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_DOUBLE_EQ(spy.at(0).at(0).toDouble(), 0.5);
  AllocOptions o;
  o.strategy = AllocStrategy::Dof;
  o.budget = f.view->budget();
  o.state = {0, 0.5, 256, 16, 5, 4};
  const DofAllocation typed = reallocate(f.last, f.spectra->head_dim, o);
  f.view->show_state(typed);
  int kept = 0;
  for (int s = 0; s < f.spectra->num_layers; ++s)
    for (int h = 0; h < f.spectra->num_heads; ++h) {
      const bool softmax = typed.allocation.types[size_t(s)][size_t(h)] == HeadType::Softmax;
      kept += softmax;
      EXPECT_EQ(f.view->cell_text(s, h).endsWith(" S"), softmax) << "layer " << s << " head " << h;
    }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, f.spectra->num_layers * f.spectra->num_heads);
  const QString caption = f.view->allocation_caption();
  EXPECT_TRUE(caption.contains(QString("%1 of %2 heads kept softmax").arg(kept).arg(f.spectra->num_layers * f.spectra->num_heads))) << caption.toStdString();
  EXPECT_TRUE(caption.contains(QString::number(100.0 * double(typed.allocation.state_bytes) / double(typed.allocation.original_bytes), 'f', 1) + "%"))
      << caption.toStdString();
  // Back to no budget: no marks.
  f.view->show_state(f.last);
  for (int h = 0; h < f.spectra->num_heads; ++h) EXPECT_FALSE(f.view->cell_text(0, h).endsWith(" S"));
}

TEST(DofView, HeatmapCellsPrintCoreValuesAndMarkUnconvergedHeads) {
  Fixture f;
  f.view->lambda_slider()->setValue(-28);  // 2^-7
  const double lambda = std::exp2(-7);
  const auto hd = head_dofs(*f.spectra, lambda);
  const auto conv = head_convergence(*f.spectra, lambda);
  int flagged = 0;
  for (int s = 0; s < f.spectra->num_layers; ++s)
    for (int h = 0; h < f.spectra->num_heads; ++h) {
      const QString value = QString::fromStdString(fmt_number(hd[s][h].value, 1));
      const bool star = conv[s][h].unconverged();
      flagged += star;
      EXPECT_EQ(f.view->cell_text(s, h), star ? value + "*" : value) << "layer " << s << " head " << h;
    }
  EXPECT_EQ(flagged, 1);  // head (1, 2): its J/2 spectrum decays much faster
  EXPECT_TRUE(f.view->cell_text(1, 2).endsWith("*"));
  EXPECT_EQ(f.view->cell_text(f.spectra->num_layers, 0), QString());
  // The colour map holds the same values.
  auto* map = qobject_cast<QCPColorMap*>(f.view->panels()[0]->plot()->plottable(0));
  ASSERT_NE(map, nullptr);
  EXPECT_DOUBLE_EQ(map->data()->cell(3, 2), hd[2][3].value);
  // Its CSV is Table 2 of the same numbers.
  const std::string dir = test::temp_dir("dofview");
  f.view->panels()[0]->export_to(QString::fromStdString(dir + "/grid.csv"));
  const std::string csv = test::read_file(dir + "/grid.csv");
  EXPECT_NE(csv.find("Layer,0,1,2,3,4,Unconverged"), std::string::npos) << csv;
  EXPECT_NE(csv.find(fmt_number(hd[3][4].value, 1)), std::string::npos);
}

TEST(DofView, SpectrumLambdaLineSitsAtTheShiftedRidge) {
  Fixture f;
  f.view->select(3, 0);  // log_scale 400: drawn in the shifted units e = mu exp(-c)
  f.view->lambda_slider()->setValue(-24);
  QCustomPlot* plot = f.view->panels()[1]->plot();
  QCPItemStraightLine* line = lambda_line(plot);
  ASSERT_NE(line, nullptr);
  const double t = shifted_ridge(1.0 / 64, 400.0);
  ASSERT_GT(t, 0.0);
  EXPECT_DOUBLE_EQ(line->point1->coords().y(), t);
  EXPECT_DOUBLE_EQ(line->point2->coords().y(), t);
  EXPECT_LT(t, 1e-150);  // not lambda itself
  EXPECT_TRUE(line->visible());
  EXPECT_TRUE(f.view->panels()[1]->title().contains("layer 3, head 0"));
  auto* g = plot->graph(1);  // the J spectrum (graph 0 is the J/2 half)
  ASSERT_EQ(g->dataCount(), 96);
  EXPECT_DOUBLE_EQ(g->data()->at(0)->value, f.spectra->head(3, 0).eigenvalues[0]);
  EXPECT_TRUE(plot->yAxis->label().contains("c = 400.0")) << plot->yAxis->label().toStdString();
  // The y range shows both the line and the eigenvalues.
  EXPECT_LT(plot->yAxis->range().lower, t);
  EXPECT_GT(plot->yAxis->range().upper, f.spectra->head(3, 0).eigenvalues[0]);

  // A moderate shift (c = 3) is drawn as Sigma's eigenvalues mu = exp(c) e, the line at lambda.
  f.view->select(2, 1);
  EXPECT_DOUBLE_EQ(line->point1->coords().y(), 1.0 / 64);
  EXPECT_NEAR(g->data()->at(0)->value, std::exp(3.0) * f.spectra->head(2, 1).eigenvalues[0], 1e-12);
  EXPECT_TRUE(plot->yAxis->label().contains("μ"));
  // Both place the line the same way relative to the eigenvalues: as many above it as core counts.
  const double shifted = shifted_ridge(1.0 / 64, 3.0);
  int above_core = 0, above_drawn = 0;
  for (double e : f.spectra->head(2, 1).eigenvalues) above_core += e > shifted;
  for (int i = 0; i < g->dataCount(); ++i) above_drawn += g->data()->at(i)->value > line->point1->coords().y();
  EXPECT_EQ(above_drawn, above_core);
  EXPECT_GT(above_core, 0);

  // DoF against lambda: its vertical line at log2(lambda), the head's curve from core's dof_at.
  QCustomPlot* curve = f.view->panels()[2]->plot();
  EXPECT_DOUBLE_EQ(lambda_line(curve)->point1->coords().x(), -6.0);
  const auto* data = curve->graph(2)->data().data();
  ASSERT_EQ(data->size(), 49);
  EXPECT_DOUBLE_EQ(data->at(0)->key, -12.0);
  EXPECT_DOUBLE_EQ(data->at(24)->value, dof_at(f.spectra->head(2, 1), std::exp2(-6.0)).value);
}

TEST(DofView, ClearingTheSpectraEmptiesEveryPlot) {
  Fixture f;
  f.view->set_spectra(nullptr);
  EXPECT_TRUE(f.view->drawn_layer_dims().empty());
  EXPECT_EQ(f.view->cell_text(0, 0), QString());
  EXPECT_EQ(f.view->panels()[1]->plot()->graph(1)->dataCount(), 0);
  EXPECT_EQ(f.view->mean_cost_text(), QString());
  // And it comes back.
  f.view->set_spectra(f.spectra);
  f.view->lambda_slider()->setValue(f.view->lambda_slider()->value() - 1);
  EXPECT_EQ(f.view->drawn_layer_dims().size(), 4u);
}

TEST(DofView, SetControlsMovesWithoutEmitting) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &DofView::settingsChanged);
  f.view->set_controls(1.0 / 512, 200, AllocStrategy::PerHead);
  EXPECT_EQ(spy.count(), 0);
  EXPECT_DOUBLE_EQ(f.view->lambda(), 1.0 / 512);
  EXPECT_EQ(f.view->budget(), 200);
  EXPECT_EQ(f.view->budget_box()->value(), 200);
  EXPECT_EQ(f.view->strategy(), AllocStrategy::PerHead);
  EXPECT_EQ(f.view->lambda_label()->text(), QStringLiteral("λ = 2^-9 = 0.002"));
  // A budget beyond the slider's range widens it rather than clamping the session's value.
  f.view->set_controls(1.0 / 512, 5000, AllocStrategy::Fix);
  EXPECT_EQ(spy.count(), 0);
  EXPECT_EQ(f.view->budget(), 5000);
}

TEST(DofView, BudgetSpinBoxAndStrategyEmitOnceAndPerHeadDrawsTheLayerMaximum) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &DofView::settingsChanged);
  QSpinBox* box = f.view->budget_box();
  box->selectAll();
  QTest::keyClicks(box, "96");  // "9", then "96": live, as while dragging
  ASSERT_GE(spy.count(), 1);
  EXPECT_EQ(spy.last().at(1).toLongLong(), 96);
  EXPECT_EQ(f.view->budget_slider()->value(), 96);
  const int before = spy.count();
  f.view->strategy_box()->setCurrentIndex(3);
  ASSERT_EQ(spy.count(), before + 1);
  EXPECT_EQ(spy.last().at(2).value<AllocStrategy>(), AllocStrategy::PerHead);
  const DofAllocation expect = dof_allocation(*f.spectra, f.view->lambda(), 96, AllocStrategy::PerHead);
  EXPECT_EQ(f.view->drawn_layer_dims(), as_double(expect.allocation.layer_dims()));
  // The per-head dots are every head's dimension.
  QCustomPlot* plot = f.view->panels()[3]->plot();
  QCPGraph* dots = plot->graph(0);
  ASSERT_EQ(dots->dataCount(), f.spectra->num_layers * f.spectra->num_heads);
  double sum = 0, expect_sum = 0;
  for (int i = 0; i < dots->dataCount(); ++i) sum += dots->data()->at(i)->value;
  for (const auto& row : expect.allocation.dims)
    for (int64_t m : row) expect_sum += double(m);
  EXPECT_DOUBLE_EQ(sum, expect_sum);
  // Slider drag: every value on the way emits.
  const int n = spy.count();
  f.view->budget_slider()->setValue(97);
  f.view->budget_slider()->setValue(98);
  EXPECT_EQ(spy.count(), n + 2);
  EXPECT_EQ(box->value(), 98);
}

TEST(DofView, ClickingACellSelectsItsHead) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &DofView::headSelected);
  QCustomPlot* plot = f.view->panels()[0]->plot();
  plot->replot();
  const QPoint at(int(plot->xAxis->coordToPixel(3)), int(plot->yAxis->coordToPixel(2)));
  QTest::mouseClick(plot, Qt::LeftButton, {}, at);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toInt(), 2);
  EXPECT_EQ(spy.at(0).at(1).toInt(), 3);
  EXPECT_EQ(f.view->selected_layer(), 2);
  EXPECT_EQ(f.view->selected_head(), 3);
  EXPECT_TRUE(f.view->panels()[1]->title().endsWith("layer 2, head 3"));
  // Outside the cells (the colour scale's side): nothing.
  QTest::mouseClick(plot, Qt::LeftButton, {}, QPoint(plot->width() - 3, plot->height() / 2));
  EXPECT_EQ(spy.count(), 1);
  // select() is silent.
  f.view->select(0, 1);
  EXPECT_EQ(spy.count(), 1);
  EXPECT_EQ(f.view->selected_head(), 1);
}

TEST(DofView, TablesExportAsMarkdownLatexAndCsv) {
  Fixture f;
  f.view->lambda_slider()->setValue(-32);
  const std::string dir = test::temp_dir("dofview");
  f.view->export_table(views::DofTable::DofGrid, QString::fromStdString(dir + "/t2.md"));
  f.view->export_table(views::DofTable::Allocation, QString::fromStdString(dir + "/t1.tex"));
  f.view->export_table(views::DofTable::Allocation, QString::fromStdString(dir + "/t1.csv"));
  const std::string md = test::read_file(dir + "/t2.md");
  EXPECT_NE(md.find("lambda = 2^-8"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 |"), std::string::npos);
  EXPECT_NE(md.find("**"), std::string::npos);  // each layer's maximum
  const std::string tex = test::read_file(dir + "/t1.tex");
  EXPECT_NE(tex.find("\\begin{tabular}"), std::string::npos);
  EXPECT_NE(tex.find("toy-gpt"), std::string::npos);  // the model's folder name
  const std::string csv = test::read_file(dir + "/t1.csv");
  const auto dims = f.last.allocation.layer_dims();
  std::string row = "toy-gpt,dof," + std::to_string(f.view->budget());
  for (int64_t m : dims) row += "," + std::to_string(m);
  EXPECT_NE(csv.find(row), std::string::npos) << csv;
  EXPECT_THROW(f.view->export_table(views::DofTable::DofGrid, QString::fromStdString(dir + "/t.docx")), Error);
}

// The rendered view shows data: the viridis cells, the blue bars and the vermillion lambda line.
TEST(DofView, RendersHeatmapBarsAndLines) {
  Fixture f;
  f.view->select(1, 2);
  QCoreApplication::processEvents();
  const QImage img = f.view->grab().toImage();
  const char* shots = std::getenv("ATTNSCOPE_SHOT_DIR");
  if (shots) img.save(QString(shots) + "/dof_view.png");
  int viridis_dark = 0, bar_blue = 0, vermillion = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) {
      const QColor c = img.pixelColor(x, y);
      viridis_dark += c.red() < 90 && c.green() < 90 && c.blue() > 70 && c.blue() < 150 && c.red() > 40;
      bar_blue += c.red() < 10 && std::abs(c.green() - 114) < 8 && std::abs(c.blue() - 178) < 8;
      vermillion += std::abs(c.red() - 213) < 12 && std::abs(c.green() - 94) < 12 && c.blue() < 20;
    }
  EXPECT_GT(viridis_dark, 100);
  EXPECT_GT(bar_blue, 500);
  EXPECT_GT(vermillion, 50);
}

// A dark palette (switched to while the view is open, as a desktop theme change does): the mean
// cost title, the heatmap's footnote, the colour bar's caption and every label on a box read light;
// the values on the cells keep an ink that contrasts with their own cell.
TEST(DofView, DarkPaletteMakesEveryTextLightButCellValuesFollowTheirCells) {
  const QPalette saved = QApplication::palette();
  {
    Fixture f;
    QApplication::setPalette(dark_palette());
    QCoreApplication::processEvents();
    f.view->lambda_slider()->setValue(-28);
    f.view->strategy_box()->setCurrentIndex(2);  // dof-clip: the clip label too
    QCoreApplication::processEvents();
    auto light = [](const QColor& c) { return c.lightness() > 180; };
    QCustomPlot* grid = f.view->panels()[0]->plot();
    QCustomPlot* alloc = f.view->panels()[3]->plot();
    int elements = 0;
    for (QCustomPlot* p : {grid, alloc})
      for (QCPLayoutElement* e : p->plotLayout()->elements(true))
        if (auto* t = qobject_cast<QCPTextElement*>(e)) {
          ++elements;
          EXPECT_TRUE(light(t->textColor())) << t->text().toStdString() << " " << t->textColor().name().toStdString();
        }
    EXPECT_EQ(elements, 2);  // the footnote and "mean cost ... of budget ..."
    QCPColorScale* scale = nullptr;
    for (QCPLayoutElement* e : grid->plotLayout()->elements(true))
      if (auto* s = qobject_cast<QCPColorScale*>(e)) scale = s;
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(scale->axis()->label(), "DoF");
    EXPECT_TRUE(light(scale->axis()->labelColor())) << scale->axis()->labelColor().name().toStdString();
    EXPECT_TRUE(light(scale->axis()->tickLabelColor()));
    int boxed = 0;
    for (views::PlotPanel* panel : f.view->panels())
      for (QCPItemText* t : item_texts(panel->plot())) {
        if (t->property(views::kCellTextProperty).toBool()) continue;
        EXPECT_TRUE(light(t->color())) << t->text().toStdString();
        if (t->brush().style() != Qt::NoBrush) {
          ++boxed;
          EXPECT_LT(t->brush().color().lightness(), 80) << t->text().toStdString();
        }
      }
    EXPECT_EQ(boxed, 2 + 4);  // the two lambda labels, a value over every bar
    // The budget and clip lines are named on the right axis, outside the bars, in light ink.
    auto ticks = qSharedPointerCast<QCPAxisTickerText>(alloc->yAxis2->ticker());
    ASSERT_FALSE(ticks.isNull());
    QStringList names = ticks->ticks().values();
    EXPECT_EQ(names, (QStringList{"clip d = 32", "budget 64"})) << names.join("|").toStdString();
    EXPECT_EQ(ticks->ticks().key("budget 64"), 64.0);
    EXPECT_TRUE(light(alloc->yAxis2->tickLabelColor()));
    EXPECT_EQ(alloc->yAxis2->range(), alloc->yAxis->range());
    // Values on cells: readable on their cell (>= 4.5 : 1), whatever the palette.
    auto* map = qobject_cast<QCPColorMap*>(grid->plottable(0));
    int cells = 0;
    for (QCPItemText* t : item_texts(grid))
      if (t->property(views::kCellTextProperty).toBool()) {
        const QPointF at = t->position->coords();
        const double v = map->data()->cell(int(at.x()), int(at.y()));
        const QColor bg = QColor::fromRgb(map->gradient().color(v, map->dataRange()));
        EXPECT_GE(contrast(t->color(), bg), 4.5) << t->text().toStdString() << " on " << bg.name().toStdString();
        ++cells;
      }
    EXPECT_EQ(cells, f.spectra->num_layers * f.spectra->num_heads);
  }
  QApplication::setPalette(saved);
}

// The DoF label where the lambda line meets the head's curve: inside the plot and clear of the
// legend (under the plot) at every slider position, left and right, for a steep and a flat head.
TEST(DofView, DofLabelStaysInsideThePlotAndOffTheLegend) {
  Fixture f;
  QCustomPlot* plot = f.view->panels()[2]->plot();
  QCPItemText* label = nullptr;
  for (QCPItemText* t : item_texts(plot))
    if (t->text().startsWith("DoF")) label = t;
  ASSERT_NE(label, nullptr);
  for (auto [layer, head] : {std::pair{0, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
    f.view->select(layer, head);
    for (int pos = -48; pos <= 0; pos += 2) {
      f.view->lambda_slider()->setValue(pos);
      plot->replot();
      ASSERT_TRUE(label->visible());
      const QRectF r = text_rect(label);
      const QRectF inside = QRectF(plot->axisRect()->rect()).adjusted(-1, -1, 1, 1);
      EXPECT_TRUE(inside.contains(r)) << "head " << layer << "," << head << " pos " << pos << ": " << r.x() << "," << r.y()
                                      << " " << r.width() << "x" << r.height();
      EXPECT_FALSE(r.intersects(QRectF(plot->legend->outerRect()))) << "pos " << pos;
      EXPECT_TRUE(label->text().startsWith("DoF "));
    }
  }
  EXPECT_FALSE(QRectF(plot->axisRect()->rect()).intersects(QRectF(plot->legend->outerRect())));
  // The legend names the head first, then its J/2 check, then the layer.
  ASSERT_EQ(plot->legend->itemCount(), 3);
  auto name = [&](int i) { return qobject_cast<QCPPlottableLegendItem*>(plot->legend->item(i))->plottable()->name(); };
  EXPECT_EQ(name(0), "head (J = 96)");
  EXPECT_EQ(name(1), "head, J/2 = 48");
  EXPECT_EQ(name(2), "layer max over heads");
}

// Not a test (run with --gtest_also_run_disabled_tests): the DoF view at the size it has in the
// window, drawn light, then switched to a dark palette while open (as a desktop theme change does),
// to $ATTNSCOPE_LOOK_DIR (default /tmp/attnscope_look)/dof_{light,dark}.png, for a person to look
// at. The jobs view's counterpart is in test_jobs_view.cpp, heads and metrics in test_heads_view.cpp.
TEST(DofView, DISABLED_RenderForALook) {
  const char* env = std::getenv("ATTNSCOPE_LOOK_DIR");
  const QString out = env ? env : "/tmp/attnscope_look";
  std::filesystem::create_directories(out.toStdString());
  const QPalette light = QApplication::palette();
  Fixture f;
  f.view->resize(1390, 880);
  f.view->select(1, 2);
  f.view->lambda_slider()->setValue(-26);
  QCoreApplication::processEvents();
  f.view->grab().save(out + "/dof_light.png");
  QApplication::setPalette(dark_palette());
  f.view->strategy_box()->setCurrentIndex(2);  // dof-clip: the clip line and its label
  f.view->lambda_slider()->setValue(-6);        // near the right edge: the DoF label flips left
  QCoreApplication::processEvents();
  f.view->grab().save(out + "/dof_dark.png");
  QApplication::setPalette(light);
  std::cout << "wrote " << out.toStdString() << "/dof_{light,dark}.png\n";
}

}  // namespace gui_test_dof_view
