// The workbench window end to end, driven as a user would under the offscreen platform: open the
// bundled model, press Capture, wait for the spectra and metrics, click a head in the grid, move the
// lambda and budget sliders and compare the bars with core's allocation of the saved spectra,
// switch colour scales, export a figure, save a session and reopen it in a new window, cancel a
// running capture, survive a bad model, run the DoF view's "Copy as command" with the real CLI,
// drop files on the window, and keep settings between windows.
#include <QAbstractButton>
#include <QAction>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <nlohmann/json.hpp>
#include <QSignalSpy>
#include <QSlider>
#include <QTabWidget>
#include <QTableWidget>
#include <QUrl>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnscope/allocation/allocation.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/model/model.h"
#include "dof_view.h"
#include "head_grid.h"
#include "heads_view.h"
#include "heatmap_panel.h"
#include "jobs_view.h"
#include "main_window.h"
#include "metrics_view.h"
#include "model_panel.h"
#include "workbench_fixture.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_main_window {

using namespace attnscope;
using gui::MainWindow;
namespace fs = std::filesystem;

namespace {

class MainWindowTest : public test::WorkbenchTest {
 protected:
  // A window on the bundled model with a small capture (2 windows x 64 tokens), nothing captured
  // until the test presses Capture.
  std::unique_ptr<MainWindow> make_window() {
    auto w = std::make_unique<MainWindow>();
    w->workbench()->set_workspace_root(workspace());
    w->workbench()->set_auto_capture(false);
    w->resize(1500, 940);
    w->show();
    return w;
  }

  void open_bundled(MainWindow& w) {
    w.add_text_files(test::bundled_texts());
    CaptureOptions o;
    o.num_seqs = 2;
    o.seq_len = 64;
    w.model_panel()->set_capture_options(o);
    QSignalSpy model(w.workbench(), &gui::Workbench::modelChanged);
    w.open_model(QString::fromStdString(test::bundled_model()));
    ASSERT_TRUE(wait_until([&] { return model.count() > 0; }));
  }

  // Presses the Capture button and waits for capture, spectra, metrics and the head's maps.
  void capture_and_wait(MainWindow& w) {
    QSignalSpy errors(&w, &MainWindow::errorShown);
    QTest::mouseClick(w.model_panel()->capture_button(), Qt::LeftButton);
    ASSERT_TRUE(wait_until([&] { return w.workbench()->pipeline_finished() || errors.count() > 0; }));
    ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
    QTest::qWait(50);  // queued replots
  }

  // Core's allocation of the spectra file the window saved, at the DoF view's settings.
  static Allocation core_allocation(MainWindow& w) {
    const DofSpectra sp = load_spectra(w.workbench()->session().spectra);
    AllocOptions o;
    o.strategy = w.dof_view()->strategy();
    o.budget = w.dof_view()->budget();
    o.head_dim = sp.head_dim;
    o.multiple = w.workbench()->session().multiple;
    return allocate(dof_values(head_dofs(sp, w.dof_view()->lambda())), o);
  }

  static std::vector<double> as_double(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

  static QMessageBox* error_box(MainWindow& w) {
    for (QMessageBox* b : w.findChildren<QMessageBox*>("error_box"))
      if (b->isVisible()) return b;
    return nullptr;
  }
};

// Table 1 of `attnscope allocate --markdown`: the dimensions of the layers, in order.
std::vector<double> markdown_layer_dims(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.rfind("| Model |", 0) == 0) header = true;
    else if (header && line.rfind("|---", 0) != 0 && line.rfind("| ", 0) == 0) {
      std::vector<std::string> cells;
      std::stringstream row(line);
      std::string cell;
      while (std::getline(row, cell, '|')) cells.push_back(cell);
      // "", model, strategy, cost, dims..., mean
      std::vector<double> dims;
      for (size_t i = 4; i + 1 < cells.size(); ++i) {
        std::string c = cells[i];
        c.erase(std::remove(c.begin(), c.end(), '*'), c.end());
        dims.push_back(std::stod(c));
      }
      return dims;
    }
  }
  return {};
}

}  // namespace

TEST_F(MainWindowTest, CaptureButtonFillsEveryView) {
  auto w = make_window();
  open_bundled(*w);
  EXPECT_TRUE(w->model_label()->text().contains("brown-gpt2-mini"));
  EXPECT_TRUE(w->windowTitle().contains("brown-gpt2-mini"));
  capture_and_wait(*w);

  EXPECT_EQ(w->capture_label()->text(), "captured 2 × 64 tokens");
  // The choosers show what the maps and metrics were computed with.
  const Session& s = w->workbench()->session();
  EXPECT_EQ(w->heads_view()->feature_map().toStdString(), s.analysis.feature_map);
  EXPECT_EQ(w->heads_view()->features(), s.analysis.features);
  EXPECT_EQ(w->heads_view()->scale(), s.colour_scale);
  EXPECT_EQ(w->workbench()->head_detail()->has_linear(), !s.analysis.feature_map.empty());
  // Heads: a 4 x 4 grid tinted by the softmax entropy the metrics measured.
  views::HeadGrid* grid = w->heads_view()->grid();
  EXPECT_EQ(grid->layers(), 4);
  EXPECT_EQ(grid->heads(), 4);
  EXPECT_EQ(grid->metric(), "softmax entropy");
  // The softmax map of the selected head is drawn from the head view core computed.
  views::HeatmapPanel* softmax = w->heads_view()->panel(MapKind::Softmax);
  EXPECT_TRUE(softmax->note().isEmpty()) << softmax->note().toStdString();
  EXPECT_EQ(softmax->image().region.row1, 64);
  // DoF: the bars are core's allocation of the saved spectra at the view's settings.
  EXPECT_EQ(w->dof_view()->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));
  // Jobs: one row per job, none running; the status bar's progress is hidden again.
  EXPECT_EQ(w->jobs_view()->table()->rowCount(), int(w->workbench()->jobs().size()));
  EXPECT_FALSE(w->progress_bar()->isVisible());
  // Copy as command is set on every view.
  EXPECT_TRUE(softmax->command().startsWith("attnscope maps --capture "));
  EXPECT_TRUE(w->metrics_view()->panels().front()->command().startsWith("attnscope metrics --capture "));
}

// A converted model with mixed head types: the heads grid badges each head with its type (S, H, L),
// the softmax heads' badge in the highlight colour; the original model's grid has no badges.
TEST_F(MainWindowTest, TheHeadGridMarksAMixedModelsHeadTypes) {
  const std::string dir = workspace().toStdString() + "/mixed_model";
  {
    LoadedModel original = load_model(test::bundled_model());
    const ModelConfig& c = original.model->config();
    std::vector<std::vector<HeadType>> types(size_t(c.n_layer), std::vector<HeadType>(size_t(c.n_head), HeadType::Hybrid));
    types[0][0] = types[2][3] = HeadType::Softmax;
    types[1][2] = HeadType::Linear;
    ConvertOptions co;
    co.map.name = "hedgehog";
    co.dims = std::vector<std::vector<int64_t>>(size_t(c.n_layer), std::vector<int64_t>(size_t(c.n_head), 8));
    co.window = 8;
    co.types = types;
    co.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
    convert_model(original, co, dir);
  }
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  views::HeadGrid* grid = w->heads_view()->grid();
  EXPECT_EQ(grid->head_type_letter(0, 0), QString()) << "a softmax model has no badges";
  // The DoF view's "Keep exact" share reaches the allocation and the Train tab's description of it.
  w->dof_view()->state_share_box()->setValue(0.9);
  ASSERT_TRUE(w->workbench()->dof_state().has_value());
  EXPECT_FALSE(w->workbench()->dof_state()->allocation.types.empty());
  bool described = false;
  for (QLabel* l : w->findChildren<QLabel*>()) described = described || l->text().contains("heads kept softmax (state share 0.9");
  EXPECT_TRUE(described) << "the Train tab does not say which heads stay softmax";
  // A share the maps alone exceed: no error box, no types, and the DoF view's caption says why.
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  w->dof_view()->state_share_box()->setValue(0.1);
  EXPECT_EQ(errors.count(), 0);
  ASSERT_TRUE(w->workbench()->dof_state().has_value());
  EXPECT_TRUE(w->workbench()->dof_state()->allocation.types.empty());
  EXPECT_TRUE(w->dof_view()->allocation_caption().contains("below the cheapest model")) << w->dof_view()->allocation_caption().toStdString();
  w->dof_view()->state_share_box()->setValue(0);
  QSignalSpy model(w->workbench(), &gui::Workbench::modelChanged);
  w->open_model(QString::fromStdString(dir));
  ASSERT_TRUE(wait_until([&] { return model.count() > 0; }));
  capture_and_wait(*w);
  EXPECT_EQ(grid->head_type_letter(0, 0), "S");
  EXPECT_EQ(grid->head_type_letter(2, 3), "S");
  EXPECT_EQ(grid->head_type_letter(1, 2), "L");
  EXPECT_EQ(grid->head_type_letter(3, 1), "H");
  // Drawn: the highlight colour in the softmax tile's top-left corner, not in the hybrid one's.
  const QImage img = grid->grab().toImage();
  const QColor hl = grid->palette().color(QPalette::Highlight);
  const auto has_highlight = [&](int layer, int head) {
    const QRect r = grid->tile_rect(layer, head);
    for (int y = r.top() + 2; y < r.top() + 16; ++y)
      for (int x = r.left() + 2; x < r.left() + 14; ++x)
        if (QColor(img.pixel(x, y)) == hl) return true;
    return false;
  };
  EXPECT_TRUE(has_highlight(2, 3));
  EXPECT_FALSE(has_highlight(3, 1));
}

TEST_F(MainWindowTest, ClickingAThumbnailSelectsTheHeadInEveryView) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  views::HeadGrid* grid = w->heads_view()->grid();
  const QRect tile = grid->tile_rect(2, 3);
  ASSERT_FALSE(tile.isEmpty());
  QTest::mouseClick(grid, Qt::LeftButton, Qt::NoModifier, tile.center());
  ASSERT_TRUE(wait_until([&] {
    auto v = w->workbench()->head_detail();
    return v && v->layer == 2 && v->head == 3 && !w->workbench()->any_job_running();
  }));
  QTest::qWait(50);
  EXPECT_EQ(grid->selected_layer(), 2);
  EXPECT_EQ(grid->selected_head(), 3);
  EXPECT_EQ(w->dof_view()->selected_layer(), 2);
  EXPECT_EQ(w->dof_view()->selected_head(), 3);
  EXPECT_TRUE(w->heads_view()->panel(MapKind::Softmax)->command().contains("--layer 2 --head 3"));
  // The heatmap shows that head: its image is core's map_image of core's head view.
  const CaptureStore store(w->workbench()->session().capture_dir);
  const HeadDetail direct = head_detail(store, 2, 3, 0, w->workbench()->session().analysis);
  views::HeatmapPanel* panel = w->heads_view()->panel(MapKind::Softmax);
  const MapImage expected = map_image(direct, MapKind::Softmax, panel->scale(), panel->image().region,
                                      views::HeatmapPanel::kMaxPixels);
  ASSERT_EQ(panel->image().pixels.values.size(), expected.pixels.values.size());
  for (size_t i = 0; i < expected.pixels.values.size(); ++i) {
    const double a = panel->image().pixels.values[i], b = expected.pixels.values[i];
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(a));
    else EXPECT_DOUBLE_EQ(a, b);
  }
}

TEST_F(MainWindowTest, SlidersRedrawCoresAllocation) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  w->show_view(View::Dof);
  views::DofView* dof = w->dof_view();
  QSlider* lambda = dof->lambda_slider();
  lambda->setFocus();
  const double before = dof->lambda();
  for (int i = 0; i < 6; ++i) QTest::keyClick(lambda, Qt::Key_Right);
  EXPECT_DOUBLE_EQ(dof->lambda(), before * std::pow(2.0, 6 / 4.0));
  EXPECT_DOUBLE_EQ(w->workbench()->session().lambda, dof->lambda());
  EXPECT_EQ(dof->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));

  QSlider* budget = dof->budget_slider();
  budget->setFocus();
  QTest::keyClick(budget, Qt::Key_PageUp);
  EXPECT_NE(dof->budget(), 64);
  EXPECT_EQ(w->workbench()->session().budget, dof->budget());
  EXPECT_EQ(dof->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));

  // Dragged far: every step of the way the bars are core's.
  for (int v : {lambda->minimum(), (lambda->minimum() + lambda->maximum()) / 2, lambda->maximum()}) {
    lambda->setValue(v);
    EXPECT_EQ(dof->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims())) << "slider at " << v;
  }
  QComboBox* strategy = dof->strategy_box();
  strategy->setCurrentIndex(strategy->findText("per-head"));
  EXPECT_EQ(w->workbench()->session().strategy, AllocStrategy::PerHead);
  EXPECT_EQ(dof->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));
  EXPECT_TRUE(w->dof_view()->panels().back()->command().contains("--strategy per-head"));
}

TEST_F(MainWindowTest, ColourScaleComboRedrawsInThatScale) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  views::HeatmapPanel* panel = w->heads_view()->panel(MapKind::Softmax);
  QComboBox* box = w->heads_view()->scale_box();
  for (ColourScale scale : {ColourScale::RowNormalized, ColourScale::Linear, ColourScale::Log}) {
    box->setCurrentIndex(box->findData(QString(colour_scale_name(scale))));
    EXPECT_EQ(panel->scale(), scale);
    EXPECT_EQ(w->workbench()->session().colour_scale, scale);
    const MapImage expected = map_image(*w->workbench()->head_detail(), MapKind::Softmax, scale, panel->image().region,
                                        views::HeatmapPanel::kMaxPixels);
    EXPECT_DOUBLE_EQ(panel->image().hi, expected.hi) << colour_scale_name(scale);
    EXPECT_DOUBLE_EQ(panel->image().lo, expected.lo) << colour_scale_name(scale);
    // Row-normalized: every row's largest cell is 1.
    if (scale == ColourScale::RowNormalized) {
      const Matrix& m = panel->image().pixels;
      for (int r = 0; r < m.rows; ++r) {
        double top = 0;
        for (int c = 0; c < m.cols; ++c)
          if (!std::isnan(m.at(r, c))) top = std::max(top, m.at(r, c));
        EXPECT_DOUBLE_EQ(top, 1.0) << "row " << r;
      }
    }
  }
}

TEST_F(MainWindowTest, ExportedFigureIsAPngOfThePlot) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  const std::string dir = test::temp_dir("export");
  views::PlotPanel* bars = w->dof_view()->panels().back();
  const QString path = QString::fromStdString(dir + "/allocation.png");
  bars->export_to(path);
  EXPECT_EQ(test::read_file(path.toStdString()).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  QImage img(path);
  ASSERT_FALSE(img.isNull());
  EXPECT_GE(img.width(), 800);
  EXPECT_GE(img.height(), 560);
  // The bars in the first series colour (plot_style's Okabe-Ito blue) on the light export background.
  int blue = 0, white = 0;
  for (int y = 0; y < img.height(); y += 3)
    for (int x = 0; x < img.width(); x += 3) {
      const QColor c = img.pixelColor(x, y);
      blue += c.blue() > 150 && c.red() < 60 && c.green() > 80 && c.green() < 150;
      white += c.red() > 245 && c.green() > 245 && c.blue() > 245;
    }
  EXPECT_GT(blue, 500);
  EXPECT_GT(white, img.width() * img.height() / 40);
  // The heatmap exports too, with viridis' two ends.
  views::HeatmapPanel* softmax = w->heads_view()->panel(MapKind::Softmax);
  softmax->export_to(QString::fromStdString(dir + "/softmax.png"));
  QImage map(QString::fromStdString(dir + "/softmax.png"));
  ASSERT_FALSE(map.isNull());
  bool low = false, high = false;
  for (int y = 0; y < map.height(); y += 2)
    for (int x = 0; x < map.width(); x += 2) {
      const QColor c = map.pixelColor(x, y);
      low |= c.red() < 90 && c.green() < 40 && c.blue() > 60;
      high |= c.red() > 200 && c.green() > 200 && c.blue() < 90;
    }
  EXPECT_TRUE(low);
  EXPECT_TRUE(high);
}

TEST_F(MainWindowTest, SavedSessionReopensInANewWindow) {
  const std::string dir = test::temp_dir("session");
  const QString path = QString::fromStdString(dir + "/study.attnscope");
  std::string capture_dir;
  double lambda = 0;
  {
    auto w = make_window();
    open_bundled(*w);
    capture_and_wait(*w);
    QTest::mouseClick(w->heads_view()->grid(), Qt::LeftButton, Qt::NoModifier, w->heads_view()->grid()->tile_rect(3, 1).center());
    ASSERT_TRUE(wait_until([&] { return w->workbench()->head_detail()->layer == 3 && !w->workbench()->any_job_running(); }));
    w->dof_view()->lambda_slider()->setValue(w->dof_view()->lambda_slider()->value() - 5);
    w->dof_view()->budget_slider()->setValue(40);
    w->dof_view()->strategy_box()->setCurrentIndex(w->dof_view()->strategy_box()->findText("dof-clip"));
    QComboBox* scale = w->heads_view()->scale_box();
    scale->setCurrentIndex(scale->findData(QString("row")));
    w->show_view(View::Dof);
    lambda = w->dof_view()->lambda();
    QSignalSpy saved(w->workbench(), &gui::Workbench::sessionSaved);
    ASSERT_TRUE(w->save_session(path));
    ASSERT_TRUE(wait_until([&] { return saved.count() > 0; }));
    capture_dir = w->workbench()->session().capture_dir;
    EXPECT_TRUE(w->windowTitle().contains("study.attnscope"));
  }
  EXPECT_EQ(capture_dir, dir + "/study.data/capture");

  auto w = make_window();
  ASSERT_TRUE(w->open_session(path));
  ASSERT_TRUE(wait_until([&] { return w->workbench()->pipeline_finished(); }));
  QTest::qWait(50);
  const Session& s = w->workbench()->session();
  EXPECT_EQ(s.model, test::bundled_model());
  EXPECT_EQ(s.capture_dir, capture_dir);
  EXPECT_EQ(w->current_view(), View::Dof);
  EXPECT_DOUBLE_EQ(w->dof_view()->lambda(), lambda);
  EXPECT_EQ(w->dof_view()->budget(), 40);
  EXPECT_EQ(w->dof_view()->strategy(), AllocStrategy::DofClip);
  EXPECT_EQ(w->heads_view()->scale(), ColourScale::RowNormalized);
  EXPECT_EQ(w->heads_view()->panel(MapKind::Softmax)->scale(), ColourScale::RowNormalized);
  EXPECT_EQ(w->heads_view()->grid()->selected_layer(), 3);
  EXPECT_EQ(w->heads_view()->grid()->selected_head(), 1);
  EXPECT_EQ(w->dof_view()->selected_layer(), 3);
  EXPECT_EQ(w->workbench()->head_detail()->layer, 3);
  EXPECT_EQ(w->dof_view()->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));
  EXPECT_EQ(w->capture_label()->text(), "captured 2 × 64 tokens");
  EXPECT_TRUE(w->windowTitle().contains("study.attnscope"));
  EXPECT_EQ(w->recent_sessions().value(0), path);
}

TEST_F(MainWindowTest, CancellingARunningCaptureLeavesNothingBehind) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  const int before = workspace_entries();
  CaptureOptions big;
  big.num_seqs = 16;
  big.seq_len = 256;
  w->model_panel()->set_capture_options(big);
  QTest::mouseClick(w->model_panel()->capture_button(), Qt::LeftButton);
  ASSERT_TRUE(w->workbench()->capture_running());
  // The status bar shows the capture with its Cancel button; the user presses it.
  ASSERT_TRUE(w->cancel_button()->isVisible());
  QTest::mouseClick(w->cancel_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->capture_running(); }));
  JobStatus capture;
  for (const JobStatus& j : w->workbench()->jobs())
    if (j.kind == JobKind::Capture) capture = j;
  EXPECT_EQ(capture.state, JobState::Cancelled);
  EXPECT_EQ(workspace_entries(), before);
  EXPECT_TRUE(w->model_panel()->capture_button()->isEnabled());
  EXPECT_EQ(w->capture_label()->text(), "captured 2 × 64 tokens");  // the earlier capture stays
  EXPECT_EQ(error_box(*w), nullptr);  // cancelling is not an error
}

TEST_F(MainWindowTest, ABadModelShowsAnErrorAndTheWindowCarriesOn) {
  auto w = make_window();
  open_bundled(*w);
  QSignalSpy shown(w.get(), &MainWindow::errorShown);
  const QString bad = QString::fromStdString(test::temp_dir("bad") + "/no-such-model");
  w->open_model(bad);
  ASSERT_TRUE(wait_until([&] { return shown.count() > 0; }));
  QMessageBox* box = error_box(*w);
  ASSERT_NE(box, nullptr);
  EXPECT_TRUE(box->text().contains(bad)) << box->text().toStdString();
  box->close();
  // Still the bundled model, and Capture still works.
  EXPECT_EQ(w->workbench()->session().model, test::bundled_model());
  capture_and_wait(*w);
  EXPECT_TRUE(w->workbench()->capture_store());
}

TEST_F(MainWindowTest, CopiedAllocateCommandPrintsTheAllocationShown) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  w->dof_view()->lambda_slider()->setValue(w->dof_view()->lambda_slider()->value() + 3);  // 2^-7.25
  w->dof_view()->budget_slider()->setValue(48);
  QString command;
  for (views::PlotPanel* p : w->dof_view()->panels())
    if (p->command().startsWith("attnscope allocate")) command = p->command();
  ASSERT_FALSE(command.isEmpty());
  EXPECT_TRUE(command.contains("--budget 48"));
  std::string cmd = command.toStdString();
  cmd.replace(0, std::string("attnscope").size(), test::cli_path());
  std::string out;
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
  EXPECT_EQ(markdown_layer_dims(out), w->dof_view()->drawn_layer_dims()) << cmd << "\n" << out;
}

TEST_F(MainWindowTest, DroppedFilesOpenAsWhatTheyAre) {
  auto w = make_window();
  open_bundled(*w);
  const std::string dir = test::temp_dir("drop");
  const std::string text = dir + "/notes.txt";
  std::ofstream(text) << "The cat sat on the mat, and the dog sat on the log.";
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(QString::fromStdString(text))});
  QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &drop);
  ASSERT_TRUE(wait_until([&] { return w->model_panel()->text_files().contains(QString::fromStdString(text)); }, 5000));
  EXPECT_EQ(w->workbench()->text_files().back(), text);

  // Something attnscope does not open: an error naming it.
  const std::string odd = dir + "/picture.jpeg";
  std::ofstream(odd) << "x";
  QSignalSpy shown(w.get(), &MainWindow::errorShown);
  QMimeData mime2;
  mime2.setUrls({QUrl::fromLocalFile(QString::fromStdString(odd))});
  QDragEnterEvent enter2(QPoint(50, 50), Qt::CopyAction, &mime2, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &enter2);
  QDropEvent drop2(QPointF(50, 50), Qt::CopyAction, &mime2, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &drop2);
  ASSERT_TRUE(wait_until([&] { return shown.count() > 0; }, 5000));
  EXPECT_TRUE(shown.first().at(1).toString().contains("picture.jpeg"));
  EXPECT_EQ(w->workbench()->session().model, test::bundled_model());
}

TEST_F(MainWindowTest, SettingsCarryCaptureOptionsSlidersAndRecentModels) {
  {
    auto w = make_window();
    open_bundled(*w);
    capture_and_wait(*w);
    w->dof_view()->budget_slider()->setValue(80);
    w->close();  // saves the settings
  }
  QSettings st;
  // One store (issue 25): the session's choices in the session file's format, not a second set of keys.
  const auto choices = nlohmann::json::parse(st.value("session/choices").toString().toStdString());
  EXPECT_EQ(choices["capture"]["num_seqs"], 2);
  EXPECT_FALSE(st.contains("capture/num_seqs"));
  EXPECT_EQ(st.value("recent/models").toStringList().value(0), QString::fromStdString(test::bundled_model()));
  auto w = make_window();
  EXPECT_EQ(w->model_panel()->capture_options().seq_len, 64);
  EXPECT_EQ(w->model_panel()->capture_options().num_seqs, 2);
  EXPECT_EQ(w->dof_view()->budget(), 80);
  EXPECT_EQ(w->workbench()->session().budget, 80);
  EXPECT_EQ(w->recent_models().value(0), QString::fromStdString(test::bundled_model()));
}

TEST_F(MainWindowTest, ShortcutsSwitchViewsAndMenusHoldTheActions) {
  auto w = make_window();
  w->activateWindow();
  for (const auto& [key, view] : std::vector<std::pair<Qt::Key, QString>>{
           {Qt::Key_3, "dof"}, {Qt::Key_2, "metrics"}, {Qt::Key_4, "jobs"}, {Qt::Key_1, "heads"}, {Qt::Key_5, "training"}}) {
    w->action("view_" + view)->trigger();
    EXPECT_EQ(view_name(w->current_view()), view);
    EXPECT_EQ(w->action("view_" + view)->shortcut(), QKeySequence(Qt::CTRL | key));
  }
  EXPECT_EQ(w->action("capture")->shortcut(), QKeySequence("Ctrl+R"));
  EXPECT_EQ(w->action("save_session")->shortcut(), QKeySequence::keyBindings(QKeySequence::Save).value(0));
  EXPECT_EQ(w->action("cancel_all")->shortcut(), QKeySequence(Qt::Key_Escape));
  EXPECT_EQ(w->action("export_report")->shortcut(), QKeySequence("Ctrl+E"));
  EXPECT_EQ(w->action("quit")->shortcut(), QKeySequence("Ctrl+Q"));
}

TEST_F(MainWindowTest, WithoutSettingsTheChoosersShowTheDefaultsAndNothingIsWritten) {
  {
    QSettings st;
    st.setValue("heads/scale", "row");
    st.setValue("dof/budget", 96);
  }
  MainWindow w(nullptr, /*use_settings=*/false);
  const Session& s = w.workbench()->session();
  EXPECT_EQ(w.heads_view()->feature_map().toStdString(), s.analysis.feature_map);
  EXPECT_EQ(s.analysis.feature_map, "prf");  // the report's default linear map
  EXPECT_EQ(w.heads_view()->features(), 64);
  EXPECT_EQ(w.heads_view()->scale(), ColourScale::Log);
  EXPECT_EQ(w.dof_view()->budget(), 64);
  EXPECT_EQ(w.model_panel()->capture_options().seq_len, s.capture.seq_len);
  w.close();
  EXPECT_EQ(QSettings().value("dof/budget").toInt(), 96);
  EXPECT_FALSE(QSettings().contains("window/geometry"));
}

TEST_F(MainWindowTest, JobsViewCancelsAndOpensResults) {
  auto w = make_window();
  open_bundled(*w);
  capture_and_wait(*w);
  w->show_view(View::Jobs);
  QTableWidget* table = w->jobs_view()->table();
  // Double-clicking the finished metrics job opens the metrics view.
  int metrics_row = -1;
  for (int r = 0; r < table->rowCount(); ++r)
    if (table->item(r, views::JobsView::KindColumn)->text() == "metrics") metrics_row = r;
  ASSERT_GE(metrics_row, 0);
  const QRect cell = table->visualItemRect(table->item(metrics_row, views::JobsView::TitleColumn));
  // (An item view takes a double click on the item its press selected: press first, as a hand does.)
  QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
  QTest::mouseDClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
  EXPECT_EQ(w->current_view(), View::Metrics);

  // A running capture's row has a cancel button; pressing it cancels the capture.
  w->show_view(View::Jobs);
  CaptureOptions big;
  big.num_seqs = 16;
  big.seq_len = 256;
  w->model_panel()->set_capture_options(big);
  w->capture();
  ASSERT_TRUE(w->workbench()->capture_running());
  const int last = table->rowCount() - 1;
  ASSERT_EQ(table->item(last, views::JobsView::KindColumn)->text(), "capture");
  auto* cancel = qobject_cast<QAbstractButton*>(table->cellWidget(last, views::JobsView::CancelColumn));
  ASSERT_NE(cancel, nullptr);
  QTest::mouseClick(cancel, Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->capture_running(); }));
  EXPECT_EQ(w->workbench()->jobs().back().state, JobState::Cancelled);
  QTest::qWait(300);  // the timer's last refresh
  EXPECT_EQ(table->item(last, views::JobsView::StateColumn)->text(), "cancelled");
}

TEST_F(MainWindowTest, ADroppedLlama2cCheckpointOpensAndCaptures) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  auto w = make_window();
  w->add_text_files(test::bundled_texts());
  CaptureOptions o;
  o.num_seqs = 2;
  o.seq_len = 64;
  w->model_panel()->set_capture_options(o);
  QSignalSpy model(w->workbench(), &gui::Workbench::modelChanged);
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(QString::fromStdString(bin))});
  QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &enter);
  QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(w.get(), &drop);
  ASSERT_TRUE(wait_until([&] { return model.count() > 0; }));
  EXPECT_EQ(w->workbench()->session().model, bin);
  EXPECT_TRUE(w->model_label()->text().contains("stories260K.bin")) << w->model_label()->text().toStdString();
  capture_and_wait(*w);
  // Grouped-query attention: 4 key/value heads expanded to the 8 query heads of each of 5 layers.
  EXPECT_EQ(w->heads_view()->grid()->layers(), 5);
  EXPECT_EQ(w->heads_view()->grid()->heads(), 8);
  EXPECT_EQ(w->dof_view()->drawn_layer_dims(), as_double(core_allocation(*w).layer_dims()));
}

}  // namespace gui_test_main_window
