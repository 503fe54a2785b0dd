// The workbench's training: distill on the current capture, follow the run's metrics.jsonl, resume
// a stopped run, convert a finished one and evaluate the converted model (workbench.h). Each step
// is a job on the same runner as the analysis, calling the same core functions as `attnscope
// distill`, `convert --job` and `eval`, with that command line in the jobs list.
#include <ATen/Context.h>

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QTimer>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation_file.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/distill/distill.h"
#include "attnscope/base/error.h"
#include "attnscope/distill/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/text_file.h"
#include "attnscope/io/text_source.h"
#include "attnscope/workbench/run_results.h"
#include "command_lines.h"
#include "workbench.h"
#include "qt_strings.h"

namespace fs = std::filesystem;

namespace attnscope::gui {

namespace {

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || fs::equivalent(a, b, ec);
}

}  // namespace

QStringList Workbench::distill_devices() {
  QStringList devices = {device_name(Device::Cpu)};
  if (at::hasCUDA()) devices << device_name(Device::Cuda);
  return devices;
}

std::optional<RunState> Workbench::run_state() const {
  if (run_dir_.isEmpty()) return std::nullopt;
  if (distill_job_ != 0) return RunState::Running;
  return attnscope::run_state(to_std(run_dir_));
}

bool Workbench::can_resume() const {
  return run_state() == RunState::Killed &&
         fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors") && !converting();
}

int64_t Workbench::checkpoint_step() const {
  const std::string path = to_std(run_dir_) + "/checkpoints/checkpoint.safetensors";
  if (run_dir_.isEmpty() || !fs::is_regular_file(path)) return 0;
  const SafetensorsFile ck(path);
  const auto it = ck.metadata().find("step");
  if (it == ck.metadata().end()) attnscope::fail(path, "has no \"step\" in its metadata");
  char* end = nullptr;
  errno = 0;
  const long long step = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != 0 || errno == ERANGE || step < 0)
    attnscope::fail(path, "its \"step\" '" + it->second + "' is not a step number");
  return step;
}

bool Workbench::can_convert() const { return run_state() == RunState::Finished && !converting(); }

void Workbench::close_run() {
  supersede(&distill_job_);
  supersede(&convert_job_);
  supersede(&eval_job_);
  metrics_timer_->stop();
  const bool had = !run_dir_.isEmpty();
  run_dir_.clear();
  metrics_tail_ = MetricsTail();
  evaluation_.reset();
  eval_command_.clear();
  run_steps_ = 0;
  run_command_.clear();
  session_.run_dir.clear();
  if (had) emit trainingChanged();
}

void Workbench::poll_metrics() {
  if (metrics_tail_.poll()) emit trainingChanged();
}

void Workbench::distill_ended() {
  metrics_timer_->stop();
  metrics_tail_.poll();
  emit trainingChanged();
}

void Workbench::open_run(const QString& dir) {
  run_dir_ = QFileInfo(dir).absoluteFilePath();
  session_.run_dir = to_std(run_dir_);
  metrics_tail_ = MetricsTail(to_std(run_dir_));
  metrics_tail_.poll();
  evaluation_.reset();
  eval_command_.clear();
  run_steps_ = 0;
  run_command_.clear();
  const std::string run = to_std(run_dir_);
  try {
    // No job.json yet is a run that stopped before it began (its state says so); one that is
    // there must read.
    if (fs::is_regular_file(run + "/job.json")) {
      const DistillJob job = read_distill_job(run);
      run_steps_ = job.options.steps;
      run_command_ = job.command;
    }
    if (const auto e = read_run_evaluation(run)) {
      evaluation_ = std::make_shared<const ConvertedEvaluation>(e->evaluation);
      eval_command_ = e->command;
    }
  } catch (const std::exception& e) {
    fail("Open run", e);
  }
  emit trainingChanged();
  if (evaluation_) emit evaluationReady();
}

int Workbench::start_distill(const TrainSettings& t) {
  try {
    if (closing_) return 0;
    session_.train = t;
    if (!capture_) throw Error("Nothing is captured yet: run Analysis > Capture first.");
    if (distill_job_ != 0) throw Error("A distillation is already running: wait for it or cancel it (Jobs tab).");
    DistillOptions o = distill_options_of(t);
    o.capture = session_.capture_dir;
    if (o.features <= 0 && !dof_state_)
      throw Error("The DoF view has no allocation yet (its spectra are still being computed): wait for them, or "
                  "choose a fixed M.");
    if (workspace_dir_.isEmpty()) workspace_dir_ = new_workspace();  // a capture of a session
    const QString runs = workspace_dir_ + "/runs";
    if (!QDir().mkpath(runs)) throw Error(to_std(runs) + ": cannot create the runs folder");
    // In use again: the workspace's age (what start-up pruning and File > Workspace… go by) is now.
    std::error_code touched;
    fs::last_write_time(to_std(workspace_dir_), fs::file_time_type::clock::now(), touched);
    const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
    QString dir = runs + "/" + to_q(o.feature_map) + "-" + stamp;
    for (int i = 2; QFileInfo::exists(dir); ++i) dir = runs + "/" + to_q(o.feature_map) + "-" + stamp + "-" + QString::number(i);
    const std::string run = to_std(dir);
    if (o.loss == DistillLoss::Direct) {
      // Direct training reads one text file: the session's, or its texts joined beside the run.
      const std::vector<std::string> texts = text_files();
      if (texts.empty()) throw Error("No sample text for direct training: add a text file first.");
      if (texts.size() == 1) {
        o.text = texts.front();
      } else {
        std::string joined;
        for (const TextDocument& d : read_text_documents(texts)) joined += d.text + "\n\n";
        o.text = run + ".text.txt";
        write_text_file(o.text, joined);
      }
    }
    if (o.features <= 0) {
      // The DoF view's allocation as it is shown (per head too), in an allocation file beside the
      // run: the command line reproduces it without the spectra.
      o.features = 0;
      o.allocation = run + ".allocation.json";
      write_allocation_file(o.allocation, *dof_state_);
    }
    const std::string command = distill_command(o, run);

    run_dir_ = dir;
    session_.run_dir = run;
    metrics_tail_ = MetricsTail(run);
    evaluation_.reset();
    eval_command_.clear();
    run_steps_ = o.steps;
    run_command_ = command;
    const std::string title =
        "distill " + o.feature_map + " (" + distill_loss_name(o.loss) + ", " + std::to_string(o.steps) + " steps)";
    const int id = start(
        JobKind::Distill, title, command,
        [o, run](Job& job) -> Apply {
          distill(o, run, job.progress());
          return nullptr;
        },
        &distill_job_, [this](JobState, bool) { distill_ended(); });
    if (id) metrics_timer_->start();
    emit trainingChanged();
    return id;
  } catch (const std::exception& e) {
    fail("Train", e);
    return 0;
  }
}

int Workbench::resume_distill() {
  try {
    if (closing_) return 0;
    if (!can_resume())
      throw Error(run_dir_.isEmpty() ? "There is no run to resume." :
                  to_std(run_dir_) + " cannot be resumed: it is " + run_state_name(*run_state()) +
                      (fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors")
                           ? std::string()
                           : std::string(" and has no checkpoint yet (train it again)")));
    const std::string run = to_std(run_dir_);
    evaluation_.reset();
    eval_command_.clear();
    const int id = start(
        JobKind::Distill, "resume " + fs::path(run).filename().string(), distill_resume_command(run),
        [run](Job& job) -> Apply {
          attnscope::resume_distill(run, job.progress());  // on the device it was started on
          return nullptr;
        },
        &distill_job_, [this](JobState, bool) { distill_ended(); });
    // The resumed run drops the lines after its checkpoint: read the file again from the start.
    metrics_tail_.reset();
    if (id) metrics_timer_->start();
    emit trainingChanged();
    return id;
  } catch (const std::exception& e) {
    fail("Resume", e);
    return 0;
  }
}

int Workbench::convert_and_evaluate() {
  try {
    if (closing_) return 0;
    if (!can_convert())
      throw Error(run_dir_.isEmpty() ? "There is no run to convert: train one first."
                                     : to_std(run_dir_) + " cannot be converted now: it is " + run_state_name(*run_state()) +
                                           (converting() ? ", and a conversion is running" : ""));
    if (text_files().empty()) throw Error("No sample text to evaluate on: add a text file and capture first.");
    const std::string run = to_std(run_dir_), out = to_std(converted_dir());
    auto current = model_;
    const std::string module = python_module_;
    evaluation_.reset();
    eval_command_.clear();
    const int id = start(
        JobKind::Convert, "convert " + fs::path(run).filename().string(), convert_job_command(run, out),
        [run, out, current, module](Job& job) -> Apply {
          job.progress()(0, "reading " + run);
          // The evaluation of the model this conversion replaces goes with it.
          std::error_code ec;
          fs::remove(run + "/evaluation.json", ec);
          const std::string model_path = distill_run_model(run);
          std::shared_ptr<const LoadedModel> m = current;
          if (!m || !same_path(m->path, model_path)) {
            job.progress()(0.1, "loading " + model_path);
            m = std::make_shared<const LoadedModel>(load_model(model_path));
          }
          ConvertOptions opt = distill_run_convert_options(run, m->model->config());
          opt.python_module = module;
          job.progress()(0.3, "writing " + out);
          convert_model(*m, opt, out);
          job.progress()(1, "wrote " + out);
          return nullptr;
        },
        &convert_job_, [this, run](JobState st, bool wanted) {
          if (wanted && st == JobState::Succeeded && to_std(run_dir_) == run) start_evaluation();
          emit trainingChanged();
        });
    emit trainingChanged();
    return id;
  } catch (const std::exception& e) {
    fail("Convert", e);
    return 0;
  }
}

int Workbench::start_evaluation() {
  const std::vector<std::string> texts = text_files();
  ConvertedEvalOptions eo = eval_options_;
  if (eo.seq_len <= 0 && capture_) eo.seq_len = int(capture_->seq_len());
  const std::string dir = to_std(converted_dir()), run = to_std(run_dir_);
  const std::string command = eval_converted_command(dir, texts, eo);
  return start(
      JobKind::Eval, "evaluate " + fs::path(run).filename().string() + "/converted", command,
      [this, dir, run, texts, eo, command](Job& job) -> Apply {
        job.progress()(0, "loading " + dir);
        const LoadedModel m = load_model(dir);
        const std::vector<int64_t> ids = encode_documents(*m.tokenizer, read_text_documents(texts));
        auto e = std::make_shared<const ConvertedEvaluation>(evaluate_converted(*m.model, ids, eo, job.progress()));
        // Kept with the run, so that reopening it (a session, Open run…) shows it again.
        write_run_evaluation(run, RunEvaluation{*e, command});
        return [this, e, run, command] {
          if (to_std(run_dir_) != run) return;  // another run was opened meanwhile
          evaluation_ = e;
          eval_command_ = command;
          emit evaluationReady();
        };
      },
      &eval_job_, [this](JobState, bool) { emit trainingChanged(); });
}

}  // namespace attnscope::gui
