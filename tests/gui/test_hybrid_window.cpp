// Hybrid heads in the window (issue 15 item 3): the heads view's "Softmax window" control, driven
// as a user would on a capture of the bundled model, shows core's hybrid map of the selected head
// (checked against an independent call to hybrid_map on the capture's q, k and the same feature
// map), its difference and per-row KL follow, W >= L shows the softmax map exactly, the metrics are
// measured again on the hybrid, the copied `attnscope maps` command writes the map the view shows,
// the session keeps both windows (the heads view's and the Train form's), and a window the Train
// form cannot train is named in the form's words.
#include <QAbstractButton>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <cmath>
#include <filesystem>
#include <qcustomplot.h>

#include "attnscope/attention/attention.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/capture/capture.h"
#include "attnscope/base/random.h"
#include "heads_view.h"
#include "heatmap_panel.h"
#include "main_window.h"
#include "metrics_view.h"
#include "model_panel.h"
#include "training_view.h"
#include "workbench_fixture.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_hybrid_window {

using namespace attnscope;
using gui::MainWindow;
namespace fs = std::filesystem;

namespace {

class HybridWindowTest : public test::WorkbenchTest {
 protected:
  // A window on the bundled model, 2 text windows x 64 tokens captured, the heads view on hedgehog
  // with M = 16 (chosen in its controls), everything computed.
  std::unique_ptr<MainWindow> captured_window() {
    auto w = std::make_unique<MainWindow>();
    w->workbench()->set_workspace_root(workspace());
    w->workbench()->set_auto_capture(false);
    w->resize(1500, 940);
    w->show();
    w->add_text_files(test::bundled_texts());
    CaptureOptions o;
    o.num_seqs = 2;
    o.seq_len = 64;
    w->model_panel()->set_capture_options(o);
    QSignalSpy model(w->workbench(), &gui::Workbench::modelChanged);
    w->open_model(QString::fromStdString(test::bundled_model()));
    EXPECT_TRUE(wait_until([&] { return model.count() > 0; }));
    QSignalSpy errors(w.get(), &MainWindow::errorShown);
    QTest::mouseClick(w->model_panel()->capture_button(), Qt::LeftButton);
    EXPECT_TRUE(wait_until([&] { return w->workbench()->pipeline_finished() || errors.count() > 0; }));
    EXPECT_EQ(errors.count(), 0);
    views::HeadsView* hv = w->heads_view();
    hv->map_box()->setCurrentIndex(hv->map_box()->findData(QString("hedgehog")));
    hv->features_box()->setValue(16);
    settle(*w);
    return w;
  }

  // Waits for the metrics and the selected head's maps of the current choices.
  void settle(MainWindow& w) {
    ASSERT_TRUE(wait_until([&] { return w.workbench()->pipeline_finished(); }));
    QTest::qWait(50);  // queued replots
  }

  // Core's hybrid map of (layer, head, text window seq) with window W, computed here from the
  // capture's q and k and the heads view's feature map (head_analysis.cpp seeds each head's map with
  // derive_seed(seed, layer, head)).
  static at::Tensor independent_hybrid(const std::string& capture, int layer, int head, int seq, const AnalysisOptions& a,
                                       int64_t W) {
    const CaptureStore store(capture);
    const at::Tensor q = store.layer_tensor(layer, "q")[seq][head].to(at::kDouble);
    const at::Tensor k = store.layer_tensor(layer, "k")[seq][head].to(at::kDouble);
    FeatureMapSpec spec;
    spec.name = a.feature_map;
    spec.d = store.head_dim();
    spec.features = a.features;
    spec.seed = derive_seed(a.seed, layer, head);
    const auto phi = make_feature_map(spec);
    return hybrid_map(phi->scaled_query_features(q), phi->scaled_key_features(k), q, k, {W, at::zeros({}, at::kDouble)});
  }

  static at::Tensor softmax_of(const std::string& capture, int layer, int head, int seq) {
    const CaptureStore store(capture);
    return softmax_map(store.layer_tensor(layer, "q")[seq][head].to(at::kDouble),
                       store.layer_tensor(layer, "k")[seq][head].to(at::kDouble));
  }
};

}  // namespace

TEST_F(HybridWindowTest, SoftmaxWindowShowsCoresHybridMapAndEverythingFollows) {
  auto w = captured_window();
  views::HeadsView* hv = w->heads_view();
  const std::string capture = w->workbench()->session().capture_dir;
  // Another head and text window than the first, chosen in the view.
  QTest::mouseClick(hv->grid(), Qt::LeftButton, Qt::NoModifier, hv->grid()->tile_rect(2, 1).center());
  hv->seq_box()->setValue(1);
  settle(*w);
  ASSERT_TRUE(w->workbench()->head_detail());
  ASSERT_EQ(w->workbench()->head_detail()->layer, 2);
  ASSERT_EQ(w->workbench()->head_detail()->seq, 1);
  const std::vector<double> plain = w->workbench()->head_detail()->linear.values;
  const std::vector<HeadAnalysis> plain_metrics = w->workbench()->analysis();

  // Weights as they are (the window's default scale may be another).
  hv->scale_box()->setCurrentIndex(hv->scale_box()->findData(QString("linear")));
  ASSERT_EQ(hv->scale(), ColourScale::Linear);
  // The user types W = 8 into "Softmax window".
  ASSERT_TRUE(hv->hybrid_window_box()->isEnabled());
  hv->hybrid_window_box()->setValue(8);
  settle(*w);
  const Session& s = w->workbench()->session();
  EXPECT_EQ(s.analysis.window, 8);
  const auto view = w->workbench()->head_detail();
  ASSERT_TRUE(view && view->has_linear());
  EXPECT_EQ(view->layer, 2);
  EXPECT_EQ(view->head, 1);
  EXPECT_EQ(view->seq, 1);
  EXPECT_NE(view->linear.values, plain);
  const int L = view->length();
  ASSERT_EQ(L, 64);

  // What the linear panel draws (exact cells: 64 <= 512 pixels, linear scale) is core's hybrid map.
  const at::Tensor H = independent_hybrid(capture, 2, 1, 1, s.analysis, 8);
  const at::Tensor A = softmax_of(capture, 2, 1, 1);
  const MapImage& shown = hv->panel(MapKind::Linear)->image();
  ASSERT_EQ(shown.cells_per_pixel, 1);
  ASSERT_EQ(shown.pixels.rows, L);
  const MapImage& diff = hv->panel(MapKind::Difference)->image();
  ASSERT_EQ(diff.pixels.rows, L);
  for (int i = 0; i < L; ++i)
    for (int j = 0; j <= i; ++j) {
      EXPECT_EQ(shown.pixels.at(i, j), H[i][j].item<double>()) << i << "," << j;
      EXPECT_EQ(view->linear.at(i, j), H[i][j].item<double>()) << i << "," << j;
      EXPECT_NEAR(diff.pixels.at(i, j), H[i][j].item<double>() - A[i][j].item<double>(), 1e-15) << i << "," << j;
    }
  // Rows whose keys are all within the window are softmax's: no difference there.
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j <= i; ++j) EXPECT_EQ(diff.pixels.at(i, j), 0.0) << i << "," << j;

  // The per-row KL plot draws KL(A_i || H_i) of the hybrid.
  QCustomPlot* kp = hv->kl_panel()->plot();
  ASSERT_GE(kp->graphCount(), 1);
  ASSERT_EQ(kp->graph(0)->name(), "KL(A_i || Ahat_i)");
  ASSERT_EQ(kp->graph(0)->dataCount(), L);
  for (int i = 0; i < L; ++i) {
    double kl = 0;
    for (int j = 0; j <= i; ++j) {
      const double a = A[i][j].item<double>(), h = H[i][j].item<double>();
      if (a > 0) kl += a * (std::log(a) - std::log(h));
    }
    EXPECT_NEAR(kp->graph(0)->data()->at(i)->value, kl, 1e-12) << i;
    if (i < 8) {
      EXPECT_EQ(kp->graph(0)->data()->at(i)->value, 0.0) << i;
    }
  }

  // The titles and the info line say it is the hybrid.
  EXPECT_EQ(hv->panel(MapKind::Linear)->title(), "untrained hedgehog M=16 + window 8");
  EXPECT_TRUE(hv->info_label()->text().contains("text window 1")) << hv->info_label()->text().toStdString();
  EXPECT_TRUE(hv->info_label()->text().contains("hedgehog (M = 16), softmax window 8")) << hv->info_label()->text().toStdString();

  // The metrics were measured again, on the hybrid: analyze_capture with the window.
  const CaptureStore store(capture);
  AnalysisOptions o = s.analysis;
  ASSERT_EQ(o.window, 8);
  const auto direct = analyze_capture(store, o);
  ASSERT_EQ(direct.size(), w->workbench()->analysis().size());
  for (size_t i = 0; i < direct.size(); ++i) {
    EXPECT_DOUBLE_EQ(*direct[i].linear->kl, *w->workbench()->analysis()[i].linear->kl) << i;
    EXPECT_NE(*plain_metrics[i].linear->kl, *w->workbench()->analysis()[i].linear->kl) << i;
  }
  EXPECT_TRUE(w->metrics_view()->panels().front()->command().contains("--window 8"));

  // W >= L: every key is in the window, the map is softmax's, cell for cell, and KL is 0.
  hv->hybrid_window_box()->setValue(L);
  settle(*w);
  const auto all = w->workbench()->head_detail();
  ASSERT_TRUE(all && all->has_linear());
  EXPECT_EQ(all->linear.values, all->softmax.values);
  for (double kl : all->row_kl) EXPECT_EQ(kl, 0.0);
  const MapImage& shown_all = hv->panel(MapKind::Linear)->image();
  for (int i = 0; i < L; ++i)
    for (int j = 0; j <= i; ++j) EXPECT_EQ(shown_all.pixels.at(i, j), A[i][j].item<double>()) << i << "," << j;
  for (const HeadAnalysis& h : w->workbench()->analysis()) EXPECT_EQ(*h.linear->kl, 0.0) << h.layer << "," << h.head;

  // Back to 0 ("off"): the plain linear map again.
  hv->hybrid_window_box()->setValue(0);
  settle(*w);
  EXPECT_EQ(hv->hybrid_window_box()->text(), "off");
  EXPECT_EQ(w->workbench()->head_detail()->linear.values, plain);
  EXPECT_EQ(hv->panel(MapKind::Linear)->title(), "untrained hedgehog M=16");
  EXPECT_FALSE(hv->panel(MapKind::Linear)->command().contains("--window"));
}

// "Copy as command" on the maps: the copied `attnscope maps ... --window 8`, run as it is (in a
// folder of its own: its --out is relative), writes the linear map the view shows (its CSV has 8
// decimals).
TEST_F(HybridWindowTest, CopiedMapsCommandWritesTheMapShown) {
  auto w = captured_window();
  views::HeadsView* hv = w->heads_view();
  hv->hybrid_window_box()->setValue(8);
  settle(*w);
  const QString command = hv->panel(MapKind::Linear)->command();
  ASSERT_TRUE(command.startsWith("attnscope maps ")) << command.toStdString();
  EXPECT_TRUE(command.contains("--feature-map hedgehog --features 16 --window 8")) << command.toStdString();
  const std::string dir = test::temp_dir("hybrid_copied");
  std::string cmd = command.toStdString();
  cmd.replace(0, std::string("attnscope").size(), test::cli_path());
  std::string out;
  ASSERT_EQ(test::run_command("cd '" + dir + "' && " + cmd, &out), 0) << cmd << "\n" << out;
  const auto view = w->workbench()->head_detail();
  const std::string csv = dir + "/layer" + std::to_string(view->layer) + "_head" + std::to_string(view->head) + "_seq" +
                          std::to_string(view->seq) + "_linear.csv";
  ASSERT_TRUE(fs::exists(csv)) << out;
  const std::string text = test::read_file(csv);
  std::vector<std::vector<double>> rows;
  size_t at = text.find('\n') + 1;  // past the header of key labels
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    // The last L fields (a token label may hold commas inside its quotes).
    std::vector<double> row;
    size_t stop = line.size();
    for (int c = 0; c < view->length(); ++c) {
      const size_t comma = line.rfind(',', stop - 1);
      row.insert(row.begin(), std::stod(line.substr(comma + 1, stop - comma - 1)));
      stop = comma;
    }
    rows.push_back(row);
  }
  ASSERT_EQ(int(rows.size()), view->length());
  for (int i = 0; i < view->length(); ++i)
    for (int j = 0; j <= i; ++j)
      EXPECT_NEAR(rows[size_t(i)][size_t(j)], view->linear.at(i, j), 6e-9) << i << "," << j;  // 8 decimals
}

// The session keeps the heads view's softmax window and the Train form's, and a reopened window
// shows both and computes the hybrid again.
TEST_F(HybridWindowTest, SessionKeepsBothWindows) {
  const std::string dir = test::temp_dir("hybrid_session");
  const QString path = QString::fromStdString(dir + "/hybrid.attnscope");
  {
    auto w = captured_window();
    w->heads_view()->hybrid_window_box()->setValue(12);
    w->training_view()->window_box()->setValue(16);
    settle(*w);
    QSignalSpy saved(w->workbench(), &gui::Workbench::sessionSaved);
    ASSERT_TRUE(w->save_session(path));
    ASSERT_TRUE(wait_until([&] { return saved.count() > 0; }));
  }
  auto w = std::make_unique<MainWindow>();
  w->workbench()->set_workspace_root(workspace());
  w->resize(1500, 940);
  w->show();
  ASSERT_TRUE(w->open_session(path));
  ASSERT_TRUE(wait_until([&] { return w->workbench()->pipeline_finished(); }));
  EXPECT_EQ(w->workbench()->session().analysis.window, 12);
  EXPECT_EQ(w->heads_view()->hybrid_window(), 12);
  EXPECT_EQ(w->heads_view()->features(), 16);
  EXPECT_EQ(w->training_view()->window_box()->value(), 16);
  EXPECT_EQ(w->training_view()->form().linearize.stage1.window, 16);
  EXPECT_EQ(distill_options_of(w->training_view()->form()).window, 16);
  const auto view = w->workbench()->head_detail();
  ASSERT_TRUE(view && view->has_linear());
  const at::Tensor H = independent_hybrid(w->workbench()->session().capture_dir, view->layer, view->head, view->seq,
                                          w->workbench()->session().analysis, 12);
  for (int i = 0; i < view->length(); ++i)
    for (int j = 0; j <= i; ++j) ASSERT_EQ(view->linear.at(i, j), H[i][j].item<double>()) << i << "," << j;
}

// A window the Train form cannot train (the l2 loss fits kernel values, not a hybrid's weights) is
// refused naming the form's control.
TEST_F(HybridWindowTest, TrainFormNamesABadWindowInItsWords) {
  auto w = captured_window();
  TrainSettings t = w->training_view()->form();
  t.linearize.stage1.feature_map = "hedgehog";
  t.linearize.stage1.loss = DistillLoss::L2;
  t.linearize.stage1.window = 8;
  t.linearize.stage1.steps = 2;
  t.from_allocation = false;
  t.linearize.stage1.features = 16;
  w->training_view()->set_form(t);
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  QTest::mouseClick(w->training_view()->train_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return errors.count() > 0; }, 60000));
  const QString message = errors.first().at(1).toString();
  EXPECT_TRUE(message.contains("l2 loss")) << message.toStdString();
  EXPECT_TRUE(message.contains("(Train > Softmax window)")) << message.toStdString();
}

}  // namespace gui_test_hybrid_window
