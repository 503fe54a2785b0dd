// The Train view end to end, driven as a user would under the offscreen platform: capture the
// bundled model, fill the train form and press Train; the loss curves must be the run's
// metrics.jsonl (read here with a JSON parser of its own), the job's command line must reproduce
// the run headless; Cancel stops a long run without report.json and Resume finishes it; Linearize
// from the tab runs core's linearize with the form's values, draws both stages' curves from their
// metrics.jsonl files and shows linearize.json's held-out perplexities; Cancel stops it.
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QRadioButton>
#include <QMessageBox>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include "attnscope/distill/distill.h"
#include "attnscope/pipeline/linearize.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model.h"
#include "attnscope/run/run_metrics.h"
#include "dof_view.h"
#include "heads_view.h"
#include "heatmap_panel.h"
#include "main_window.h"
#include "metrics_view.h"
#include "model_panel.h"
#include "training_view.h"
#include "workbench_fixture.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_training_view {

using namespace attnscope;
using gui::MainWindow;
namespace fs = std::filesystem;

namespace {

// metrics.jsonl as (layer -> [(step, value)]), parsed line by line here.
struct Curves {
  std::map<int, std::vector<std::pair<double, double>>> loss, val_kl;
};

Curves read_curves(const std::string& run) {
  Curves c;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const int layer = j.at("layer").get<int>();
    const double step = j.at("step").get<double>();
    if (j.contains("loss")) c.loss[layer].emplace_back(step, j["loss"].get<double>());
    if (j.contains("val_kl")) c.val_kl[layer].emplace_back(step, j["val_kl"].get<double>());
  }
  return c;
}

std::vector<std::pair<double, double>> graph_points(QCPGraph* g) {
  std::vector<std::pair<double, double>> out;
  for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) out.emplace_back(it->key, it->value);
  return out;
}

QCPGraph* graph_named(QCustomPlot* p, const QString& name) {
  for (int i = 0; i < p->graphCount(); ++i)
    if (p->graph(i)->name() == name) return p->graph(i);
  return nullptr;
}

class TrainingTest : public test::WorkbenchTest {
 protected:
  std::unique_ptr<MainWindow> make_window() {
    auto w = std::make_unique<MainWindow>(nullptr, /*use_settings=*/false);
    w->workbench()->set_workspace_root(workspace());
    w->workbench()->set_auto_capture(false);
    w->resize(1500, 940);
    w->show();
    return w;
  }

  // The bundled model captured (4 windows x 64 tokens) from `texts` (default: every bundled text),
  // spectra, metrics and maps in.
  void capture_bundled(MainWindow& w, const QStringList& texts = test::bundled_texts()) {
    w.add_text_files(texts);
    CaptureOptions o;
    o.num_seqs = 4;
    o.seq_len = 64;
    w.model_panel()->set_capture_options(o);
    QSignalSpy model(w.workbench(), &gui::Workbench::modelChanged);
    w.open_model(QString::fromStdString(test::bundled_model()));
    ASSERT_TRUE(wait_until([&] { return model.count() > 0; }));
    QSignalSpy errors(&w, &MainWindow::errorShown);
    QTest::mouseClick(w.model_panel()->capture_button(), Qt::LeftButton);
    ASSERT_TRUE(wait_until([&] { return w.workbench()->pipeline_finished() || errors.count() > 0; }));
    ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  }

  // The form as a user sets it: a fixed M (or the DoF view's allocation with M = 0), steps,
  // checkpoint interval; then Train.
  static void train(MainWindow& w, int steps, int features, int checkpoint_every) {
    w.show_view(View::Training);
    views::TrainingView* t = w.training_view();
    TrainSettings f = t->form();
    f.linearize.stage1.steps = steps;
    f.from_allocation = features == 0;
    if (features > 0) f.linearize.stage1.features = features;
    f.linearize.stage1.checkpoint_every = checkpoint_every;
    f.linearize.stage1.window = 0;  // plain linear heads: the form's default window (linearize's 64) spans these captures
    t->set_form(f);
    ASSERT_TRUE(t->train_button()->isEnabled());
    QTest::mouseClick(t->train_button(), Qt::LeftButton);
    ASSERT_TRUE(w.workbench()->training_running());
  }

  static std::string temp_dir_file(const std::string& name) { return test::temp_dir("training") + "/" + name; }

  static JobStatus last_job(MainWindow& w, const std::string& kind) {
    JobStatus out;
    for (const JobStatus& j : w.workbench()->jobs())
      if (j.kind == parse_job_kind(kind)) out = j;
    return out;
  }
};

}  // namespace

TEST_F(TrainingTest, ShortRunDrawsMetricsJsonlAndItsCommandReproducesIt) {
  auto w = make_window();
  capture_bundled(*w);
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  train(*w, 6, 16, 3);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  const std::string run = w->workbench()->run_dir().toStdString();
  ASSERT_TRUE(fs::is_regular_file(run + "/report.json"));
  EXPECT_TRUE(run.rfind(workspace_, 0) == 0) << run << " is not under the workspace " << workspace_;
  EXPECT_EQ(w->workbench()->run_state(), RunState::Finished);
  EXPECT_TRUE(w->training_view()->linearize_button()->isEnabled());
  EXPECT_FALSE(w->training_view()->resume_button()->isEnabled());
  EXPECT_TRUE(w->training_view()->run_label()->text().startsWith("Finished"));

  // Every layer's line is its training loss per step, its dots the validation KL.
  const Curves c = read_curves(run);
  ASSERT_EQ(c.loss.size(), 4u);
  QCustomPlot* p = w->training_view()->loss_panel()->plot();
  for (const auto& [layer, points] : c.loss) {
    EXPECT_EQ(points.size(), 6u);
    QCPGraph* g = graph_named(p, QString("layer %1").arg(layer));
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(graph_points(g), points) << "layer " << layer;
    QCPGraph* v = graph_named(p, QString("layer %1 validation KL").arg(layer));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(graph_points(v), c.val_kl.at(layer)) << "layer " << layer;
    EXPECT_EQ(c.val_kl.at(layer).size(), 2u);  // at the checkpoints, steps 3 and 6
  }
  EXPECT_EQ(p->yAxis->scaleType(), QCPAxis::stLogarithmic);
  // The figure exports like every figure, its numbers included.
  const std::string csv = temp_dir_file("curves.csv");
  w->training_view()->loss_panel()->export_to(QString::fromStdString(csv));
  EXPECT_NE(test::read_file(csv).find("train_loss,3,6,"), std::string::npos);

  // The job row's command is `attnscope distill ...`: run headless, it trains the same maps.
  const JobStatus job = last_job(*w, "distill");
  EXPECT_EQ(job.state, JobState::Succeeded);
  const std::string suffix = " --out " + run;
  ASSERT_GE(job.command.size(), suffix.size());
  ASSERT_EQ(job.command.substr(job.command.size() - suffix.size()), suffix) << job.command;
  const std::string cli_run = test::temp_dir("cli_run") + "/run";
  std::string out;
  const size_t program = std::string("attnscope").size();
  const std::string cmd =
      test::cli_path() + job.command.substr(program, job.command.size() - suffix.size() - program) + " --out " + cli_run;
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
  const Curves cli = read_curves(cli_run);
  ASSERT_EQ(cli.loss.size(), c.loss.size());
  for (const auto& [layer, points] : c.loss)
    for (size_t i = 0; i < points.size(); ++i)
      EXPECT_NEAR(cli.loss.at(layer)[i].second, points[i].second, 1e-5 * points[i].second) << "layer " << layer;
}

TEST_F(TrainingTest, DofViewAllocationGivesTheRunItsDims) {
  auto w = make_window();
  capture_bundled(*w);
  // Spectra came after the form was built: the allocation is offered, and chosen by default.
  ASSERT_TRUE(w->training_view()->allocation_radio()->isEnabled());
  EXPECT_TRUE(w->training_view()->allocation_radio()->isChecked());
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  train(*w, 2, 0, 2);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  std::ifstream in(w->workbench()->run_dir().toStdString() + "/job.json");
  const auto job = nlohmann::json::parse(in);
  // The dims the DoF view draws as bars, from its sliders.
  std::vector<int64_t> shown;
  for (const double d : w->dof_view()->drawn_layer_dims()) shown.push_back(int64_t(d));
  EXPECT_EQ(job.at("dims").get<std::vector<int64_t>>(), shown);
  // The run gets the dims the view has, as an allocation file with the view's strategy and budget
  // (issue 18: no lambda string for distill to turn back into spectra).
  std::ifstream alloc_in(job.at("allocation").get<std::string>());
  const auto alloc = nlohmann::json::parse(alloc_in);
  EXPECT_EQ(alloc.at("dims").get<std::vector<int64_t>>(), shown);
  EXPECT_EQ(alloc.at("strategy").get<std::string>(), alloc_strategy_name(w->dof_view()->strategy()));
  EXPECT_EQ(alloc.at("budget").get<int64_t>(), w->dof_view()->budget());
}

TEST_F(TrainingTest, CancelledRunHasNoReportAndResumeFinishesIt) {
  auto w = make_window();
  capture_bundled(*w);
  const int steps = 150;
  train(*w, steps, 16, 2);
  const std::string run = w->workbench()->run_dir().toStdString();
  // Cancel (the status bar's button) once a checkpoint is there.
  ASSERT_TRUE(wait_until([&] { return fs::is_regular_file(run + "/checkpoints/checkpoint.safetensors"); }));
  ASSERT_TRUE(w->cancel_button()->isVisible());
  QTest::mouseClick(w->cancel_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  EXPECT_EQ(last_job(*w, "distill").state, JobState::Cancelled);
  EXPECT_FALSE(fs::exists(run + "/report.json"));
  EXPECT_FALSE(fs::exists(run + "/feature_maps.safetensors"));
  EXPECT_EQ(w->workbench()->run_state(), RunState::Killed);  // stopped: cancelled or killed
  const int64_t stopped_at = read_run_metrics(run).last_step();
  EXPECT_LT(stopped_at, steps);
  EXPECT_TRUE(w->training_view()->run_label()->text().startsWith("Stopped at step")) << w->training_view()->run_label()->text().toStdString();
  ASSERT_TRUE(w->training_view()->resume_button()->isEnabled());

  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  QTest::mouseClick(w->training_view()->resume_button(), Qt::LeftButton);
  ASSERT_TRUE(w->workbench()->training_running());
  EXPECT_EQ(last_job(*w, "distill").command, "attnscope distill --resume " + run);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  EXPECT_TRUE(fs::is_regular_file(run + "/report.json"));
  EXPECT_EQ(w->workbench()->run_state(), RunState::Finished);
  EXPECT_FALSE(w->training_view()->resume_button()->isEnabled());
  // One uninterrupted curve: steps 1..150 once per layer, as the plot shows them.
  const Curves c = read_curves(run);
  QCustomPlot* p = w->training_view()->loss_panel()->plot();
  for (const auto& [layer, points] : c.loss) {
    ASSERT_EQ(points.size(), size_t(steps)) << "layer " << layer;
    for (int i = 0; i < steps; ++i) EXPECT_EQ(points[size_t(i)].first, double(i + 1));
    EXPECT_EQ(graph_points(graph_named(p, QString("layer %1").arg(layer))), points);
  }
}

// Linearize from the tab (issue 15 item 6) with tiny settings: core's linearize runs as a job with
// the form's values; stage 1's curves are OUT/stage1/metrics.jsonl, stage 2's OUT/stage2/metrics.jsonl;
// the table is linearize.json's held-out perplexity per length, and says what it was measured on.
TEST_F(TrainingTest, LinearizeDrawsBothStagesAndShowsTheHeldOutTable) {
  auto w = make_window();
  capture_bundled(*w);
  w->show_view(View::Training);
  views::TrainingView* t = w->training_view();
  TrainSettings f = t->form();
  f.linearize.stage1.feature_map = "hedgehog";
  f.linearize.stage1.window = 16;
  f.from_allocation = false;
  f.linearize.stage1.features = 16;
  f.linearize.stage1.steps = 6;
  f.linearize.stage1.batch = 2;
  f.linearize.seq_len = 64;
  f.linearize.stage2.steps = 4;
  f.linearize.stage2.rank = 2;
  t->set_form(f);
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  ASSERT_TRUE(t->linearize_button()->isEnabled());
  QTest::mouseClick(t->linearize_button(), Qt::LeftButton);
  ASSERT_TRUE(w->workbench()->training_running());
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }, 600000));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  const std::string run = w->workbench()->run_dir().toStdString();
  EXPECT_TRUE(run.rfind(workspace_ + "/", 0) == 0) << run;
  EXPECT_NE(fs::path(run).filename().string().find("linearize-hedgehog-"), std::string::npos) << run;
  ASSERT_TRUE(fs::is_regular_file(run + "/linearize.json"));
  EXPECT_EQ(w->workbench()->run_state(), RunState::Finished);
  EXPECT_TRUE(t->run_label()->text().startsWith("Finished: held-out perplexity")) << t->run_label()->text().toStdString();

  // The job is `attnscope linearize` with the form's values.
  const JobStatus job = last_job(*w, "linearize");
  EXPECT_EQ(job.state, JobState::Succeeded);
  for (const char* arg : {"--feature-map hedgehog", "--window 16", "--features 16", "--steps 6", "--batch 2", "--seq-len 64",
                          "--finetune-steps 4", "--rank 2"})
    EXPECT_NE(job.command.find(arg), std::string::npos) << arg << " not in " << job.command;
  EXPECT_EQ(job.command.substr(job.command.size() - run.size() - 7), " --out " + run);

  // Stage 1: every layer's line and dots are OUT/stage1/metrics.jsonl's.
  const Curves c = read_curves(run + "/stage1");
  ASSERT_EQ(c.loss.size(), 4u);
  QCustomPlot* p = t->loss_panel()->plot();
  for (const auto& [layer, points] : c.loss) {
    EXPECT_EQ(points.size(), 6u);
    EXPECT_EQ(graph_points(graph_named(p, QString("layer %1").arg(layer))), points) << "layer " << layer;
    EXPECT_EQ(graph_points(graph_named(p, QString("layer %1 validation KL").arg(layer))), c.val_kl.at(layer));
  }
  // Stage 2: the cross-entropy per step and the held-out loss, OUT/stage2/metrics.jsonl's.
  std::vector<std::pair<double, double>> ce, val;
  {
    std::ifstream in(run + "/stage2/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("ce")) ce.emplace_back(j["step"].get<double>(), j["ce"].get<double>());
      if (j.contains("val_loss")) val.emplace_back(j["step"].get<double>(), j["val_loss"].get<double>());
    }
  }
  ASSERT_EQ(ce.size(), 4u);
  ASSERT_FALSE(val.empty());
  QCustomPlot* p2 = t->finetune_panel()->plot();
  QCPGraph* ce_graph = graph_named(p2, "stage 2 (finetune) cross-entropy");
  QCPGraph* val_graph = graph_named(p2, "stage 2 (finetune) held-out loss");
  ASSERT_NE(ce_graph, nullptr);
  ASSERT_NE(val_graph, nullptr);
  EXPECT_EQ(graph_points(ce_graph), ce);
  EXPECT_EQ(graph_points(val_graph), val);

  // The table: linearize.json's held-out perplexities, per length, each column named.
  const auto j = nlohmann::json::parse(test::read_file(run + "/linearize.json"));
  QTableWidget* table = t->comparison_table();
  // Below the lengths: each lag's recall kept, then greedy agreement and the free-running KL.
  const int n_lengths = int(j.at("lengths").size()), n_recall = int(j.at("recall").size());
  ASSERT_EQ(table->rowCount(), n_lengths + n_recall + 2);
  const std::vector<std::pair<std::string, std::string>> columns = {
      {"original", "original_loss"},   {"original finetuned", "adapted_loss"}, {"untrained map", "untrained_loss"},
      {"stage 1", "stage1_loss"},      {"final", "final_loss"}};
  std::map<std::string, int> column;
  for (int c2 = 0; c2 < table->columnCount(); ++c2) column[table->horizontalHeaderItem(c2)->text().toStdString()] = c2;
  for (int i = 0; i < n_recall; ++i) {
    const auto& x = j["recall"][size_t(i)];
    EXPECT_EQ(table->item(n_lengths + i, 0)->text().toStdString(), "recall kept, lag " + std::to_string(x.at("lag").get<int>()));
    if (!x.at("measurable").get<bool>()) {  // the original does not copy there: no share shown
      EXPECT_EQ(table->item(n_lengths + i, column["final"])->text().toStdString(), "-");
      EXPECT_EQ(table->item(n_lengths + i, column["original"])->text().toStdString(), "no recall");
      continue;
    }
    EXPECT_NEAR(table->item(n_lengths + i, column["final"])->text().toDouble(), x.at("final_kept").get<double>(), 0.00051);
    EXPECT_NEAR(table->item(n_lengths + i, column["original finetuned"])->text().toDouble(), x.at("adapted_kept").get<double>(), 0.00051);
  }
  EXPECT_NEAR(table->item(n_lengths + n_recall, column["final"])->text().toDouble(),
              j["generation"]["final"].at("token_match").get<double>(), 0.00051);
  for (int r = 0; r < n_lengths; ++r) {
    const auto& len = j["lengths"][size_t(r)];
    EXPECT_EQ(table->item(r, 0)->text().toLongLong(), len.at("seq_len").get<int64_t>());
    for (const auto& [name, key] : columns) {
      ASSERT_TRUE(column.count(name)) << name;
      const double shown = table->item(r, column[name])->text().toDouble();
      EXPECT_NEAR(shown, std::exp(len.at(key).get<double>()), 0.0051) << name << " at " << len["seq_len"];
    }
  }
  const QString caption = t->table_caption()->text();
  EXPECT_TRUE(caption.contains("Held-out")) << caption.toStdString();
  EXPECT_TRUE(caption.contains(QString::number(j.at("heldout_tokens").get<int64_t>()) + " tokens never trained on"))
      << caption.toStdString();
  EXPECT_TRUE(caption.contains("anchor")) << caption.toStdString();
  // Stage 1's attention KL per layer is linearize.json's.
  auto* bars = static_cast<QCPBars*>(t->kl_panel()->plot()->plottable(0));
  std::vector<double> kl;
  for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) kl.push_back(it->value);
  ASSERT_EQ(kl.size(), j.at("layers").size());
  for (size_t l = 0; l < kl.size(); ++l) EXPECT_DOUBLE_EQ(kl[l], j["layers"][l].at("attention_kl").get<double>());

  // The run opened again (a session, Open run…) shows the same table and curves.
  t->set_comparison({}, {});
  w->workbench()->open_run(QString::fromStdString(run));
  EXPECT_EQ(table->rowCount(), n_lengths + n_recall + 2);
  EXPECT_EQ(graph_points(graph_named(t->finetune_panel()->plot(), "stage 2 (finetune) cross-entropy")), ce);
  EXPECT_EQ(errors.count(), 0);

  // Issue 26: where the final model is, and keeping it. The tab names RUN/model; Save model as…
  // copies it byte for byte outside the workspace; Open model opens it in the workbench.
  EXPECT_EQ(t->final_model_text(), QString::fromStdString("Final model: " + run + "/model"));
  ASSERT_TRUE(t->save_model_button()->isEnabled());
  const std::string kept = test::temp_dir("training_saved_model") + "/kept";
  QSignalSpy messages(w->workbench(), &gui::Workbench::message);
  ASSERT_GT(w->workbench()->save_final_model(QString::fromStdString(kept)), 0);
  ASSERT_TRUE(wait_until([&] { return last_job(*w, "convert").state == JobState::Succeeded || errors.count() > 0; }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  const fs::path model = fs::canonical(run + "/model");
  int files = 0;
  for (const auto& e : fs::directory_iterator(model)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(test::read_file(e.path().string()), test::read_file(kept + "/" + e.path().filename().string())) << e.path();
  }
  EXPECT_GE(files, 4);
  EXPECT_NEAR(load_model(kept).model->mean_loss(std::vector<int64_t>(65, 5), 64),
              load_model(model.string()).model->mean_loss(std::vector<int64_t>(65, 5), 64), 1e-9);
  QSignalSpy opened(w->workbench(), &gui::Workbench::modelChanged);
  QTest::mouseClick(t->open_model_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return opened.count() > 0 || errors.count() > 0; }));
  EXPECT_EQ(fs::canonical(w->workbench()->model()->path), model);
}

// Cancel stops a linearize run (here with the DoF view's allocation) in stage 1: no report, no
// stage 2; Resume is offered.
TEST_F(TrainingTest, CancelStopsALinearizeRun) {
  auto w = make_window();
  capture_bundled(*w, {test::bundled_texts().front(), test::bundled_texts().back()});
  w->show_view(View::Training);
  views::TrainingView* t = w->training_view();
  TrainSettings f = t->form();
  f.from_allocation = true;  // the DoF view's strategy, budget and lambda, on the run's own capture (issue 25)
  f.linearize.stage1.window = 8;
  f.linearize.stage1.steps = 100000;
  f.linearize.stage1.batch = 2;
  f.linearize.seq_len = 32;
  f.linearize.stage2.steps = 4;
  f.linearize.stage2.rank = 2;
  t->set_form(f);
  QTest::mouseClick(t->linearize_button(), Qt::LeftButton);
  ASSERT_TRUE(w->workbench()->training_running());
  const std::string run = w->workbench()->run_dir().toStdString();
  EXPECT_NE(last_job(*w, "linearize").command.find("--strategy dof"), std::string::npos) << last_job(*w, "linearize").command;
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  ASSERT_TRUE(wait_until([&] { return !read_run_metrics(run + "/stage1").training.empty() || errors.count() > 0; }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  EXPECT_TRUE(t->run_label()->text().startsWith("Linearizing: stage 1 (distill) step")) << t->run_label()->text().toStdString();
  EXPECT_FALSE(t->linearize_button()->isEnabled());
  // Issue 26: Esc (Cancel all jobs) asks before it stops a training job; "Keep running" keeps it.
  w->action("cancel_all")->trigger();
  QMessageBox* confirm = nullptr;
  ASSERT_TRUE(wait_until([&] {
    for (QMessageBox* b : w->findChildren<QMessageBox*>())
      if (b->isVisible()) confirm = b;
    return confirm != nullptr;
  }));
  EXPECT_TRUE(confirm->text().contains("Cancel every running job")) << confirm->text().toStdString();
  EXPECT_EQ(confirm->defaultButton(), confirm->button(QMessageBox::No));
  QTest::mouseClick(confirm->button(QMessageBox::No), Qt::LeftButton);
  QTest::qWait(300);
  ASSERT_TRUE(w->workbench()->training_running());
  EXPECT_EQ(last_job(*w, "linearize").state, JobState::Running);
  QTest::mouseClick(w->cancel_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  EXPECT_EQ(last_job(*w, "linearize").state, JobState::Cancelled);
  EXPECT_FALSE(fs::exists(run + "/linearize.json"));
  EXPECT_FALSE(fs::exists(run + "/stage2"));
  EXPECT_EQ(w->workbench()->run_state(), RunState::Killed);
  EXPECT_TRUE(t->run_label()->text().startsWith("Stopped at stage 1 (distill) step")) << t->run_label()->text().toStdString();
  EXPECT_TRUE(t->resume_button()->isEnabled());
  EXPECT_TRUE(t->linearize_button()->isEnabled());
  EXPECT_EQ(t->comparison_table()->rowCount(), 0);
}

// Issue 26: Linearize pressed before the DoF spectra arrive runs a fixed M; when the spectra arrive
// during the run the form used to flip to "DoF view's allocation", and the saved session recorded
// that, not what ran. A running job's settings are frozen: the form shows what runs.
TEST_F(TrainingTest, TheFormKeepsWhatRunsUntilTheRunEnds) {
  auto w = make_window();
  capture_bundled(*w, {test::bundled_texts().front(), test::bundled_texts().back()});
  w->show_view(View::Training);
  views::TrainingView* t = w->training_view();
  TrainSettings f = t->form();
  f.from_allocation = true;  // the form's default choice, which the spectra's absence overrides
  f.linearize.stage1.window = 8;
  f.linearize.stage1.steps = 100000;
  f.linearize.stage1.batch = 2;
  f.linearize.seq_len = 32;
  f.linearize.stage2.rank = 2;
  t->set_form(f);
  t->set_allocation("(the DoF view's spectra are not computed yet)", false);  // as before the spectra
  ASSERT_FALSE(t->form().from_allocation);
  QTest::mouseClick(t->linearize_button(), Qt::LeftButton);
  ASSERT_TRUE(w->workbench()->training_running());
  EXPECT_TRUE(t->frozen());
  EXPECT_FALSE(w->findChild<QSpinBox*>("train_steps")->isEnabled());
  // The spectra arrive while it runs.
  QSignalSpy dof(w->workbench(), &gui::Workbench::dofStateChanged);
  w->workbench()->recompute_spectra();
  ASSERT_TRUE(wait_until([&] { return dof.count() > 0 && w->workbench()->dof_state(); }));
  QTest::qWait(100);
  EXPECT_FALSE(t->form().from_allocation) << "the form flipped to the allocation while the run used a fixed M";
  EXPECT_EQ(t->form().linearize.stage1.steps, 100000);
  QTest::mouseClick(w->cancel_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  EXPECT_FALSE(t->frozen());
  EXPECT_TRUE(w->findChild<QSpinBox*>("train_steps")->isEnabled());
}

// Issue 15 item 6: the heads and metrics views draw a learned map (hedgehog, learned-prf, t2r, flex)
// at its random initialization, and say so ("untrained hedgehog M=16"); a fixed map (prf) is what
// it is, no label.
TEST_F(TrainingTest, LearnedMapsInTheHeadsAndMetricsViewsAreLabelledUntrained) {
  auto w = make_window();
  capture_bundled(*w, {test::bundled_texts().front()});
  views::HeadsView* hv = w->heads_view();
  const auto metrics_titles = [&] {
    QStringList titles;
    for (views::PlotPanel* p : w->metrics_view()->panels()) titles << p->title();
    return titles.join("\n");
  };
  hv->map_box()->setCurrentIndex(hv->map_box()->findData(QString("hedgehog")));
  hv->features_box()->setValue(16);
  ASSERT_TRUE(wait_until([&] { return w->workbench()->pipeline_finished(); }));
  QTest::qWait(50);
  EXPECT_EQ(hv->panel(MapKind::Linear)->title(), "untrained hedgehog M=16");
  // The metrics view says it once, above its panels, whose titles name the map (issue 26: titles
  // with every qualifier were cut, "untrained hedgehog + wi…").
  auto* side = w->metrics_view()->findChild<QLabel*>("metrics_linear_side");
  ASSERT_NE(side, nullptr);
  EXPECT_TRUE(side->text().contains("untrained hedgehog")) << side->text().toStdString();
  EXPECT_TRUE(metrics_titles().contains("hedgehog entropy")) << metrics_titles().toStdString();
  EXPECT_TRUE(metrics_titles().contains("KL(softmax || hedgehog)")) << metrics_titles().toStdString();

  hv->map_box()->setCurrentIndex(hv->map_box()->findData(QString("prf")));
  ASSERT_TRUE(wait_until([&] { return w->workbench()->pipeline_finished(); }));
  QTest::qWait(50);
  EXPECT_EQ(hv->panel(MapKind::Linear)->title(), "linear: prf M=16");
  EXPECT_FALSE(side->text().contains("untrained")) << side->text().toStdString();
  EXPECT_TRUE(metrics_titles().contains("prf entropy")) << metrics_titles().toStdString();
}

TEST_F(TrainingTest, TrainWithoutACaptureIsRefusedWithAMessage) {
  auto w = make_window();
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  w->show_view(View::Training);
  EXPECT_FALSE(w->training_view()->train_button()->isEnabled());
  TrainSettings o;
  o.from_allocation = false;
  o.linearize.stage1.features = 16;
  EXPECT_EQ(w->workbench()->start_distill(o), 0);
  ASSERT_EQ(errors.count(), 1);
  EXPECT_TRUE(errors.first().at(1).toString().contains("Nothing is captured")) << errors.first().at(1).toString().toStdString();
  EXPECT_EQ(w->workbench()->resume_distill(), 0);
  EXPECT_FALSE(w->training_view()->linearize_button()->isEnabled());
  EXPECT_EQ(w->workbench()->start_linearize(o), 0);
  EXPECT_EQ(errors.count(), 3);
  EXPECT_TRUE(errors.last().at(1).toString().contains("No model is open")) << errors.last().at(1).toString().toStdString();
}

TEST_F(TrainingTest, AKilledRunOfAnotherProcessOpensAndResumes) {
  auto w = make_window();
  capture_bundled(*w);
  // A run stopped after step 5 (checkpoints every 2 steps), its process gone without a word: the
  // pid file of a kill -9 is left behind.
  const std::string run = test::temp_dir("killed_run") + "/run";
  DistillOptions o;
  o.capture = w->workbench()->session().capture_dir;
  o.features = 16;
  o.steps = 12;
  o.checkpoint_every = 2;
  EXPECT_THROW(distill(o, run,
                       [](double fraction, const std::string&) {
                         if (fraction >= 5.0 / 12 - 1e-9) throw Cancelled();
                       }),
               Cancelled);
  std::ofstream(run + "/running") << "999999999\n";

  w->show_view(View::Training);
  w->workbench()->open_run(QString::fromStdString(run));
  EXPECT_EQ(w->workbench()->run_state(), RunState::Killed);  // stopped: cancelled or killed
  EXPECT_EQ(w->training_view()->run_label()->text().toStdString(),
            "Stopped at step 5 of 12: Resume continues from the checkpoint at step 4");
  EXPECT_EQ(graph_points(graph_named(w->training_view()->loss_panel()->plot(), "layer 0")).size(), 5u);
  ASSERT_TRUE(w->training_view()->resume_button()->isEnabled());
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  QTest::mouseClick(w->training_view()->resume_button(), Qt::LeftButton);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  EXPECT_EQ(w->workbench()->run_state(), RunState::Finished);
  EXPECT_TRUE(fs::is_regular_file(run + "/report.json"));
  const Curves c = read_curves(run);
  for (const auto& [layer, points] : c.loss) {
    ASSERT_EQ(points.size(), 12u) << "layer " << layer;
    for (size_t i = 0; i < points.size(); ++i) EXPECT_EQ(points[i].first, double(i + 1));
  }
}

TEST_F(TrainingTest, PerHeadAllocationAndDirectTrainingFromTheForm) {
  auto w = make_window();
  capture_bundled(*w, {test::bundled_texts().front()});
  // per-head in the DoF view: every head its own M, as the view's allocation has them.
  w->dof_view()->strategy_box()->setCurrentIndex(w->dof_view()->strategy_box()->findText("per-head"));
  ASSERT_EQ(w->workbench()->session().strategy, AllocStrategy::PerHead);
  QSignalSpy errors(w.get(), &MainWindow::errorShown);
  train(*w, 2, 0, 2);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  {
    std::ifstream in(w->workbench()->run_dir().toStdString() + "/job.json");
    const auto job = nlohmann::json::parse(in);
    const auto dims = job.at("dims");
    const Allocation& shown = w->workbench()->dof_state()->allocation;
    ASSERT_EQ(dims.size(), shown.dims.size());
    for (size_t s = 0; s < shown.dims.size(); ++s)
      EXPECT_EQ(dims[s].is_array() ? dims[s].get<std::vector<int64_t>>() : std::vector<int64_t>(shown.dims[s].size(), dims[s].get<int64_t>()),
                shown.dims[s])
          << "layer " << s;
  }

  // Direct training: the whole model's next-token loss is one more line, read from the lines of
  // metrics.jsonl that name no layer.
  TrainSettings f = w->training_view()->form();
  f.linearize.stage1.loss = DistillLoss::Direct;
  w->training_view()->set_form(f);
  train(*w, 3, 16, 3);
  EXPECT_NE(last_job(*w, "distill").command.find("--loss direct"), std::string::npos);
  EXPECT_NE(last_job(*w, "distill").command.find("--text " + test::bundled_texts().front().toStdString()), std::string::npos);
  ASSERT_TRUE(wait_until([&] { return !w->workbench()->training_running(); }));
  ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  std::vector<std::pair<double, double>> model_loss;
  std::ifstream in(w->workbench()->run_dir().toStdString() + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("layer") && j.contains("loss")) model_loss.emplace_back(j["step"].get<double>(), j["loss"].get<double>());
  }
  ASSERT_EQ(model_loss.size(), 3u);
  QCPGraph* g = graph_named(w->training_view()->loss_panel()->plot(), "model (next-token loss)");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(graph_points(g), model_loss);
}

// Issue 27: the form's Decay and Decay start set stage 1's decay (what linearize runs, its command
// line), and Decay start is greyed out while there is no decay to start.
TEST_F(TrainingTest, DecayRowsSetStageOnesDecay) {
  views::TrainingView t;
  t.set_choices({"learned-prf", "hedgehog"}, {"cpu"});
  auto* decay = t.findChild<QComboBox*>("train_decay");
  auto* start = t.findChild<QComboBox*>("train_decay_init");
  ASSERT_TRUE(decay && start);
  EXPECT_EQ(decay->currentText(), "none");
  EXPECT_FALSE(start->isEnabled());
  decay->setCurrentText("fixed");
  EXPECT_TRUE(start->isEnabled());
  start->setCurrentText("none");
  const TrainSettings f = t.form();
  EXPECT_EQ(f.linearize.stage1.decay, Decay::Fixed);
  EXPECT_EQ(f.linearize.stage1.decay_init, DecayInit::None);
  const std::string cmd = command_for("linearize", linearize_option_table(), f.linearize, {});
  EXPECT_NE(cmd.find("--decay fixed --decay-init none"), std::string::npos) << cmd;
  // mixer: each head the student the Metrics view's mixer panel names (training resolves them from the capture).
  ASSERT_GE(decay->findText("mixer"), 0);
  decay->setCurrentText("mixer");
  EXPECT_TRUE(start->isEnabled());
  EXPECT_TRUE(decay->toolTip().contains("mixer panel"));
  const TrainSettings per_head = t.form();
  EXPECT_EQ(per_head.linearize.stage1.decay, Decay::Mixer);
  const std::string per_head_cmd = command_for("linearize", linearize_option_table(), per_head.linearize, {});
  EXPECT_NE(per_head_cmd.find("--decay mixer"), std::string::npos) << per_head_cmd;
  TrainSettings back;
  t.set_form(back);
  EXPECT_EQ(decay->currentText(), "none");
  EXPECT_FALSE(start->isEnabled());
}

}  // namespace gui_test_training_view
