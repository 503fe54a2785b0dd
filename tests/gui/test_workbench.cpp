// The workbench's document and its jobs, without the window: the bundled model opens, the capture
// runs in the background and the spectra, metrics and maps follow on their own; results equal
// core's for the same inputs; a superseded or cancelled job leaves nothing behind; sessions
// round-trip with their data copied out of the cache; errors arrive as signals, never exceptions;
// and the command lines it prints are what the CLI accepts.
#include <QSignalSpy>
#include <filesystem>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/workbench/session.h"
#include "command_lines.h"
#include "workbench.h"
#include "workbench_fixture.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_workbench {

using namespace attnscope;
using gui::Workbench;
namespace fs = std::filesystem;

namespace {

class WorkbenchPipeline : public test::WorkbenchTest {
 protected:
  void SetUp() override {
    test::WorkbenchTest::SetUp();
    wb_ = std::make_unique<Workbench>();
    wb_->set_workspace_root(workspace());
    wb_->set_texts(test::bundled_texts(), {});
    CaptureOptions o;
    o.num_seqs = 2;
    o.seq_len = 64;
    wb_->set_capture_options(o);
  }

  // Opens the bundled model; the capture, spectra, metrics and maps follow by themselves.
  void open_and_wait() {
    QSignalSpy errors(wb_.get(), &Workbench::error);
    ASSERT_NE(wb_->open_model(QString::fromStdString(test::bundled_model())), 0);
    ASSERT_TRUE(wait_until([&] { return wb_->pipeline_finished() || errors.count() > 0; }))
        << "the first analysis did not finish";
    ASSERT_EQ(errors.count(), 0) << errors.first().at(1).toString().toStdString();
  }

  std::unique_ptr<Workbench> wb_;
};

JobStatus job_of(const Workbench& wb, const std::string& kind) {
  for (const JobStatus& j : wb.jobs())
    if (j.kind == parse_job_kind(kind)) return j;
  return {};
}

}  // namespace

TEST_F(WorkbenchPipeline, OpeningTheModelRunsCaptureSpectraMetricsAndMaps) {
  QSignalSpy finished(wb_.get(), &Workbench::pipelineFinished);
  open_and_wait();
  EXPECT_EQ(finished.count(), 1);

  auto cap = wb_->capture_store();
  ASSERT_TRUE(cap);
  EXPECT_EQ(cap->num_seqs(), 2);
  EXPECT_EQ(cap->seq_len(), 64);
  EXPECT_EQ(cap->num_layers(), 4);
  EXPECT_EQ(cap->num_heads(), 4);
  // The capture is in a fresh workspace folder under the root, with the spectra beside it.
  EXPECT_TRUE(fs::path(cap->dir()).parent_path() == fs::path(wb_->workspace_dir().toStdString()));
  EXPECT_EQ(fs::path(wb_->workspace_dir().toStdString()).parent_path(), fs::path(workspace_));
  ASSERT_FALSE(wb_->session().spectra.empty());
  EXPECT_TRUE(fs::exists(wb_->session().spectra));

  // The spectra kept in memory are the ones saved: DoF of every head agrees at a new lambda.
  const DofSpectra saved = load_spectra(wb_->session().spectra);
  const auto mem = head_dofs(*wb_->spectra(), 1.0 / 64), disk = head_dofs(saved, 1.0 / 64);
  ASSERT_EQ(mem.size(), 4u);
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(mem[s][h].value, disk[s][h].value);

  // Metrics of all 16 heads with the report's default PRF map, thumbnails, the selected head's maps.
  ASSERT_EQ(wb_->analysis().size(), 16u);
  EXPECT_TRUE(wb_->analysis()[5].linear.has_value());
  ASSERT_EQ(wb_->thumbnails().size(), 4u);
  ASSERT_EQ(wb_->thumbnails()[0].size(), 4u);
  EXPECT_LE(wb_->thumbnails()[0][0].rows, Workbench::kThumbnailPixels);
  auto view = wb_->head_detail();
  ASSERT_TRUE(view);
  EXPECT_EQ(view->layer, 0);
  EXPECT_EQ(view->length(), 64);
  EXPECT_TRUE(view->has_linear());

  // Every stage ran as a job with its command line, and none is left running.
  for (const char* kind : {"model", "capture", "spectra", "metrics", "maps"}) {
    const JobStatus j = job_of(*wb_, kind);
    EXPECT_EQ(j.state, JobState::Succeeded) << kind << ": " << j.error;
    EXPECT_EQ(j.command.rfind("attnscope ", 0), 0u) << kind << ": " << j.command;
  }
  EXPECT_NE(job_of(*wb_, "capture").command.find("--num-seqs 2"), std::string::npos);
  EXPECT_FALSE(wb_->any_job_running());
}

TEST_F(WorkbenchPipeline, DofSettingsAreCoresAllocationOfTheSavedSpectra) {
  open_and_wait();
  QSignalSpy changed(wb_.get(), &Workbench::dofStateChanged);
  const double lambda = std::pow(2.0, -5.75);
  const auto state = wb_->set_dof_settings(lambda, 48, AllocStrategy::DofClip);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(changed.count(), 1);

  const DofSpectra sp = load_spectra(wb_->session().spectra);
  AllocOptions o;
  o.strategy = AllocStrategy::DofClip;
  o.budget = 48;
  o.head_dim = sp.head_dim;
  const Allocation expected = allocate(dof_values(head_dofs(sp, lambda)), o);
  EXPECT_EQ(state->allocation.layer_dims(), expected.layer_dims());
  EXPECT_DOUBLE_EQ(state->allocation.mean_cost, expected.mean_cost);
  EXPECT_EQ(wb_->session().budget, 48);
  EXPECT_EQ(wb_->session().strategy, AllocStrategy::DofClip);
  // The command line names the same lambda: parse_lambda reads back the slider's double.
  const std::string cmd = wb_->allocate_command();
  EXPECT_NE(cmd.find("--lambda 2^-5.75"), std::string::npos) << cmd;
  EXPECT_EQ(parse_lambda(lambda_arg(lambda)), lambda);

  // A budget of 0 is core's error, reported as a signal, not thrown.
  QSignalSpy errors(wb_.get(), &Workbench::error);
  EXPECT_FALSE(wb_->set_dof_settings(lambda, 0, AllocStrategy::Dof).has_value());
  ASSERT_EQ(errors.count(), 1);
  EXPECT_TRUE(errors.first().at(1).toString().contains("budget"));

  // A budget or strategy move at the same lambda reallocates without evaluating the DoF of every
  // head again, and gives what the whole path gives; a new lambda evaluates them once.
  const int evaluations = wb_->dof_evaluations();
  const auto per_head = wb_->set_dof_settings(lambda, 24, AllocStrategy::PerHead);
  ASSERT_TRUE(per_head.has_value());
  EXPECT_EQ(wb_->dof_evaluations(), evaluations);
  o.strategy = AllocStrategy::PerHead;
  o.budget = 24;
  EXPECT_EQ(per_head->allocation.dims, allocate(dof_values(head_dofs(sp, lambda)), o).dims);
  ASSERT_TRUE(wb_->set_dof_settings(lambda / 2, 24, AllocStrategy::PerHead).has_value());
  EXPECT_EQ(wb_->dof_evaluations(), evaluations + 1);
  EXPECT_EQ(wb_->dof_state()->allocation.dims, allocate(dof_values(head_dofs(sp, lambda / 2)), o).dims);
}

TEST_F(WorkbenchPipeline, SelectingHeadsSupersedesOlderRequests) {
  open_and_wait();
  QSignalSpy views(wb_.get(), &Workbench::headDetailReady);
  // Three requests in a row: only the last head's maps end up shown.
  wb_->select_head(1, 1);
  wb_->select_head(2, 3);
  wb_->select_head(3, 2);
  ASSERT_TRUE(wait_until([&] { return wb_->head_detail() && wb_->head_detail()->layer == 3 && !wb_->any_job_running(); }));
  EXPECT_EQ(wb_->head_detail()->head, 2);
  // The middle request never ran: the first was running when it came, and the last replaced it.
  int maps_jobs = 0;
  for (const JobStatus& j : wb_->jobs())
    if (j.kind == JobKind::Maps) ++maps_jobs;
  EXPECT_EQ(maps_jobs, 3);  // the start-up's, (1, 1) and (3, 2)
  EXPECT_LE(views.count(), 2);
  // The head view equals core's for that head.
  const CaptureStore store(wb_->session().capture_dir);
  const HeadDetail direct = head_detail(store, 3, 2, 0, wb_->session().analysis);
  EXPECT_EQ(direct.softmax.values, wb_->head_detail()->softmax.values);
}

TEST_F(WorkbenchPipeline, ChangingTheFeatureMapRecomputesMetricsAndMaps) {
  open_and_wait();
  wb_->set_feature_map("elu", 0, 0);
  ASSERT_TRUE(wait_until([&] { return wb_->pipeline_finished(); }));
  EXPECT_EQ(wb_->session().analysis.feature_map, "elu");
  ASSERT_TRUE(wb_->head_detail()->has_linear());
  // elu's map differs from PRF's: the KL of the metrics follows the new map.
  const CaptureStore store(wb_->session().capture_dir);
  AnalysisOptions o = wb_->session().analysis;
  const auto direct = analyze_capture(store, o);
  ASSERT_EQ(direct.size(), wb_->analysis().size());
  EXPECT_DOUBLE_EQ(*direct[7].linear->kl, *wb_->analysis()[7].linear->kl);
  EXPECT_NE(wb_->metrics_command().find("--feature-map elu"), std::string::npos);
}

// A burst of feature-map and M changes restarts the metrics job once (after the debounce), not once
// per change, and its result is that of the last setting.
TEST_F(WorkbenchPipeline, ABurstOfFeatureMapChangesRestartsMetricsOnce) {
  open_and_wait();
  auto metrics_jobs = [&] {
    int n = 0;
    for (const JobStatus& j : wb_->jobs()) n += j.kind == JobKind::Metrics;
    return n;
  };
  const int before = metrics_jobs();
  wb_->set_feature_map("elu", 0, 0);
  wb_->set_feature_map("prf", 32, 0);
  wb_->set_feature_map("prf", 16, 0);
  EXPECT_FALSE(wb_->has_analysis());  // the old analysis is out of date at once
  ASSERT_TRUE(wait_until([&] { return wb_->pipeline_finished(); }));
  EXPECT_EQ(metrics_jobs(), before + 1);
  const CaptureStore store(wb_->session().capture_dir);
  const auto direct = analyze_capture(store, wb_->session().analysis);
  ASSERT_EQ(direct.size(), wb_->analysis().size());
  EXPECT_DOUBLE_EQ(*direct[1].linear->kl, *wb_->analysis()[1].linear->kl);
}

TEST_F(WorkbenchPipeline, CancellingACaptureLeavesNoDirectoryBehind) {
  open_and_wait();
  const int before = workspace_entries();
  const std::string old_capture = wb_->session().capture_dir;
  CaptureOptions big;
  big.num_seqs = 16;
  big.seq_len = 256;
  wb_->set_capture_options(big);
  const int id = wb_->capture();
  ASSERT_NE(id, 0);
  EXPECT_TRUE(wb_->capture_running());
  wb_->cancel(id);
  ASSERT_TRUE(wait_until([&] { return !wb_->capture_running(); }));
  EXPECT_EQ(wb_->runner().find(id)->state(), JobState::Cancelled);
  // The new workspace folder is gone; the earlier capture is untouched.
  EXPECT_EQ(workspace_entries(), before);
  EXPECT_TRUE(fs::exists(old_capture + "/manifest.json"));
}

TEST_F(WorkbenchPipeline, ABadModelIsAnErrorSignalAndTheOpenModelStays) {
  open_and_wait();
  QSignalSpy errors(wb_.get(), &Workbench::error);
  const std::string bad = test::temp_dir("badmodel");
  std::ofstream(bad + "/config.json") << "{\"architectures\": [\"BertModel\"]}";
  wb_->open_model(QString::fromStdString(bad));
  ASSERT_TRUE(wait_until([&] { return errors.count() > 0; }));
  EXPECT_TRUE(errors.first().at(1).toString().contains(QString::fromStdString(bad))) << errors.first().at(1).toString().toStdString();
  EXPECT_EQ(wb_->session().model, test::bundled_model());
  EXPECT_TRUE(wb_->model());
  EXPECT_TRUE(wb_->capture_store());
}

TEST_F(WorkbenchPipeline, SavedSessionsCarryTheirDataAndReopen) {
  open_and_wait();
  wb_->select_head(2, 1);
  ASSERT_TRUE(wait_until([&] { return wb_->head_detail() && wb_->head_detail()->layer == 2 && !wb_->any_job_running(); }));
  wb_->set_dof_settings(std::pow(2.0, -7.5), 40, AllocStrategy::PerHead);
  wb_->set_colour_scale(ColourScale::Log);

  const std::string dir = test::temp_dir("session");
  const QString path = QString::fromStdString(dir + "/study.attnscope");
  QSignalSpy saved(wb_.get(), &Workbench::sessionSaved);
  ASSERT_TRUE(wb_->save_session(path));
  ASSERT_TRUE(wait_until([&] { return saved.count() > 0; }));
  // The capture and spectra were copied beside the file, and the file names them relatively.
  EXPECT_TRUE(fs::exists(dir + "/study.data/capture/manifest.json"));
  EXPECT_TRUE(fs::exists(dir + "/study.data/spectra.safetensors"));
  const std::string text = test::read_file(dir + "/study.attnscope");
  EXPECT_NE(text.find("\"study.data/capture\""), std::string::npos) << text;

  Workbench again;
  again.set_workspace_root(workspace());
  QSignalSpy loaded(&again, &Workbench::sessionLoaded);
  ASSERT_TRUE(again.open_session(path));
  EXPECT_EQ(loaded.count(), 1);
  ASSERT_TRUE(wait_until([&] { return again.pipeline_finished(); }));
  EXPECT_EQ(again.session().capture_dir, dir + "/study.data/capture");
  EXPECT_EQ(again.session().spectra, dir + "/study.data/spectra.safetensors");
  EXPECT_EQ(again.session().layer, 2);
  EXPECT_EQ(again.session().head, 1);
  EXPECT_EQ(again.session().budget, 40);
  EXPECT_EQ(again.session().strategy, AllocStrategy::PerHead);
  EXPECT_EQ(again.session().colour_scale, ColourScale::Log);
  EXPECT_EQ(again.head_detail()->layer, 2);
  // Nothing was captured again: the spectra came from the session's file.
  for (const JobStatus& j : again.jobs()) EXPECT_NE(j.kind, JobKind::Capture);
  ASSERT_TRUE(again.dof_state().has_value());
  EXPECT_EQ(again.dof_state()->allocation.dims, wb_->dof_state()->allocation.dims);
}

TEST_F(WorkbenchPipeline, AMissingSessionCaptureIsCapturedAgain) {
  open_and_wait();
  const std::string dir = test::temp_dir("session");
  Session s = wb_->session();
  s.capture_dir = dir + "/gone/capture";
  s.spectra = dir + "/gone/spectra.safetensors";
  save_session(dir + "/s.attnscope", s);
  Workbench again;
  again.set_workspace_root(workspace());
  QSignalSpy messages(&again, &Workbench::message);
  ASSERT_TRUE(again.open_session(QString::fromStdString(dir + "/s.attnscope")));
  ASSERT_TRUE(wait_until([&] { return again.pipeline_finished(); }));
  EXPECT_GE(messages.count(), 1);
  EXPECT_TRUE(fs::exists(again.session().capture_dir + "/manifest.json"));
}

TEST_F(WorkbenchPipeline, AMalformedSessionIsAnError) {
  const std::string dir = test::temp_dir("session");
  std::ofstream(dir + "/broken.attnscope") << "{\"format\": \"something else\"}";
  QSignalSpy errors(wb_.get(), &Workbench::error);
  EXPECT_FALSE(wb_->open_session(QString::fromStdString(dir + "/broken.attnscope")));
  ASSERT_EQ(errors.count(), 1);
  EXPECT_TRUE(errors.first().at(1).toString().contains("broken.attnscope"));
}

TEST_F(WorkbenchPipeline, ExportReportWritesFiguresDrawnOnTheUiThread) {
  open_and_wait();
  const std::string out = test::temp_dir("report") + "/report";
  QSignalSpy messages(wb_.get(), &Workbench::message);
  const int id = wb_->export_report(QString::fromStdString(out));
  ASSERT_NE(id, 0);
  // The job ends on its thread; its result reaches the UI thread (the message) after that.
  ASSERT_TRUE(wait_until([&] { return messages.count() > 0 || wb_->runner().find(id)->state() == JobState::Failed; }, 300000));
  ASSERT_EQ(wb_->runner().find(id)->state(), JobState::Succeeded) << wb_->runner().find(id)->status().error;
  EXPECT_TRUE(fs::exists(out + "/index.md"));
  int pngs = 0;
  for (const auto& e : fs::directory_iterator(out + "/figures")) pngs += e.path().extension() == ".png";
  EXPECT_GE(pngs, 3);
  EXPECT_TRUE(messages.first().at(0).toString().endsWith("/index.md"));
}

// Issue 25's defect: Export report built its options field by field and dropped the session's
// hybrid window, while the job's command line passed --window. One ReportOptions now makes both:
// the report measures the hybrid heads the command line names.
TEST_F(WorkbenchPipeline, ExportedReportRunsTheHybridWindowItsCommandLineNames) {
  open_and_wait();
  wb_->set_feature_map("hedgehog", 16, 8);
  const std::string out = test::temp_dir("report_hybrid") + "/report";
  const int id = wb_->export_report(QString::fromStdString(out));
  ASSERT_NE(id, 0);
  ASSERT_TRUE(wait_until([&] { return wb_->runner().find(id)->status().finished(); }, 300000));
  ASSERT_EQ(wb_->runner().find(id)->state(), JobState::Succeeded) << wb_->runner().find(id)->status().error;
  const std::string command = wb_->runner().find(id)->status().command;
  EXPECT_NE(command.find("--feature-map hedgehog --features 16 --window 8"), std::string::npos) << command;
  const auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
  ASSERT_TRUE(metrics.contains("feature_map")) << metrics.dump();
  EXPECT_EQ(metrics["feature_map"]["name"], "hedgehog");
  EXPECT_EQ(metrics["feature_map"]["window"], 8) << "the report ran without the window its command line names";
}

TEST_F(WorkbenchPipeline, OldWorkspacesArePrunedRecentOnesKept) {
  const std::string old_dir = workspace_ + "/20200101-000000-000", new_dir = workspace_ + "/fresh";
  fs::create_directories(old_dir + "/capture");
  std::ofstream(old_dir + "/capture/manifest.json") << "{}";
  fs::create_directories(new_dir);
  fs::last_write_time(old_dir, fs::file_time_type::clock::now() - std::chrono::hours(24 * 30));
  EXPECT_EQ(Workbench::prune_workspaces(workspace(), 14), 1);
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_TRUE(fs::exists(new_dir));
}

TEST(CommandLines, QuoteOnlyWhatTheShellWouldSplit) {
  EXPECT_EQ(shell_quote("/a/b-c_d.txt"), "/a/b-c_d.txt");
  EXPECT_EQ(shell_quote("my texts/a b.txt"), "'my texts/a b.txt'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(lambda_arg(1.0 / 256), "2^-8");
  EXPECT_EQ(lambda_arg(std::pow(2.0, -8.25)), "2^-8.25");
  EXPECT_EQ(parse_lambda(lambda_arg(0.003)), 0.003);
  for (int q = -48; q <= 0; ++q) EXPECT_EQ(parse_lambda(lambda_arg(std::pow(2.0, q / 4.0))), std::pow(2.0, q / 4.0)) << q;
}

TEST(CommandLines, NameTheOptionsTheCliTakes) {
  Session s;
  s.model = "/m/gpt";
  s.texts = {"/t/a.txt", "/t/b c.txt"};
  s.capture.num_seqs = 3;
  s.capture.seq_len = 32;
  s.capture.pre_rope = true;
  EXPECT_EQ(gui::capture_command(s, s.texts, "/w/capture"),
            "attnscope capture --model /m/gpt --text /t/a.txt --text '/t/b c.txt' --seq-len 32 --num-seqs 3 --seed 0 "
            "--pre-rope --out /w/capture");
  AnalysisOptions a;
  a.feature_map = "prf";
  a.features = 64;
  a.mixer_state = 16;
  EXPECT_EQ(gui::metrics_command("/c", a), "attnscope metrics --capture /c --feature-map prf --features 64 --seed 0 --mixer-state 16 --csv");
  EXPECT_EQ(gui::maps_command("/c", 1, 2, 3, a),
            "attnscope maps --capture /c --layer 1 --head 2 --seq 3 --feature-map prf --features 64 --seed 0 --out layer1_head2_seq3");
  EXPECT_EQ(gui::allocate_command("/s.safetensors", 1.0 / 256, 64, AllocStrategy::DofClip, 8),
            "attnscope allocate --spectra /s.safetensors --lambda 2^-8 --budget 64 --strategy dof-clip --multiple-of 8 --markdown");
  EXPECT_EQ(gui::dof_command("/s.safetensors", 0.0625), "attnscope dof --spectra /s.safetensors --lambda 2^-4 --json");
}

}  // namespace gui_test_workbench
