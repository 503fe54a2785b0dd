// The workbench's training: linearize the open model (capture, stage 1, conversion, stage 2 and the
// held-out evaluation, core's `linearize`), or distill only on the current capture; follow the run's
// metrics.jsonl files (stage 1's and stage 2's); resume a stopped run (workbench.h). Each is a job on
// the same runner as the analysis, calling the same core functions as `attnscope linearize` and
// `attnscope distill`, with that command line in the jobs list.
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
#include "attnscope/distill/distill.h"
#include "attnscope/pipeline/linearize.h"
#include "attnscope/base/error.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/text_file.h"
#include "attnscope/io/text_source.h"
#include "attnscope/workbench/run_status.h"
#include "command_lines.h"
#include "workbench.h"
#include "qt_strings.h"

namespace fs = std::filesystem;

namespace attnscope::gui {

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
  if (run_state() != RunState::Killed) return false;
  // A linearize run resumes at the stage it stopped in (from the start of a stage without a checkpoint).
  if (linearize_run_) return fs::is_regular_file(to_std(run_dir_) + "/job.json");
  return fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors");
}

int64_t Workbench::checkpoint_step() const { return attnscope::checkpoint_step(to_std(run_dir_)); }

void Workbench::forget_run() {
  run_dir_.clear();
  linearize_run_ = false;
  metrics_tail_ = MetricsTail();
  finetune_tail_ = FinetuneTail();
  linearize_report_.reset();
  run_steps_ = finetune_steps_ = 0;
  run_command_.clear();
}

void Workbench::close_run() {
  supersede(&distill_job_);
  metrics_timer_->stop();
  const bool had = !run_dir_.isEmpty();
  forget_run();
  session_.run_dir.clear();
  if (had) emit trainingChanged();
}

void Workbench::poll_metrics() {
  const bool stage1 = metrics_tail_.poll();
  const bool stage2 = linearize_run_ && finetune_tail_.poll();
  if (stage1 || stage2) emit trainingChanged();
}

void Workbench::distill_ended() {
  metrics_timer_->stop();
  metrics_tail_.poll();
  if (linearize_run_) {
    finetune_tail_.poll();
    try {
      linearize_report_ = read_linearize_report(to_std(run_dir_));
    } catch (const std::exception& e) {
      fail("Linearize", e);
    }
  }
  emit trainingChanged();
}

void Workbench::follow_run(const std::string& run, bool linearize) {
  run_dir_ = to_q(run);
  session_.run_dir = run;
  linearize_run_ = linearize;
  // A linearize run's stage 1 is a distill run in OUT/stage1, its stage 2 a finetune run in OUT/stage2.
  metrics_tail_ = MetricsTail(linearize ? run + "/stage1" : run);
  finetune_tail_ = FinetuneTail(linearize ? run + "/stage2" : std::string());
  linearize_report_.reset();
}

void Workbench::open_run(const QString& dir) {
  forget_run();
  const std::string run = to_std(QFileInfo(dir).absoluteFilePath());
  follow_run(run, is_linearize_run(run));
  metrics_tail_.poll();
  finetune_tail_.poll();
  try {
    // No job.json yet is a run that stopped before it began (its state says so); one that is
    // there must read.
    if (linearize_run_) {
      const LinearizeOptions o = read_linearize_job(run);
      run_steps_ = o.stage1.steps;
      finetune_steps_ = o.stage2.steps;
      run_command_ = linearize_command(o, run);
      linearize_report_ = read_linearize_report(run);
    } else if (fs::is_regular_file(run + "/job.json")) {
      const DistillJob job = read_distill_job(run);
      run_steps_ = job.options.steps;
      run_command_ = job.command;
    }
  } catch (const std::exception& e) {
    fail("Open run", e);
  }
  emit trainingChanged();
}

QString Workbench::new_run_dir(const std::string& name) {
  if (workspace_dir_.isEmpty()) workspace_dir_ = new_workspace();  // a capture of a session, or none yet
  const QString runs = workspace_dir_ + "/runs";
  if (!QDir().mkpath(runs)) throw Error(to_std(runs) + ": cannot create the runs folder");
  // In use again: the workspace's age (what start-up pruning and File > Workspace… go by) is now.
  std::error_code touched;
  fs::last_write_time(to_std(workspace_dir_), fs::file_time_type::clock::now(), touched);
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
  QString dir = runs + "/" + to_q(name) + "-" + stamp;
  for (int i = 2; QFileInfo::exists(dir); ++i) dir = runs + "/" + to_q(name) + "-" + stamp + "-" + QString::number(i);
  return dir;
}

int Workbench::start_run(JobKind kind, const std::string& title, const std::string& command, const std::string& run,
                         int64_t steps, int64_t finetune_steps, std::function<void(Job&)> work) {
  forget_run();
  follow_run(run, kind == JobKind::Linearize);
  run_steps_ = steps;
  finetune_steps_ = finetune_steps;
  run_command_ = command;
  const int id = start(
      kind, title, command,
      [work](Job& job) -> Apply {
        work(job);
        return nullptr;
      },
      &distill_job_, [this](JobState, bool) { distill_ended(); });
  if (id) metrics_timer_->start();
  emit trainingChanged();
  return id;
}

int Workbench::start_linearize(const TrainSettings& t) {
  try {
    if (closing_) return 0;
    session_.train = t;
    if (!model_) throw Error("No model is open: open one first (linearize converts the open model).");
    if (distill_job_ != 0) throw Error("A training job is already running: wait for it or cancel it (Jobs tab).");
    const std::vector<std::string> texts = text_files();
    if (texts.empty())
      throw Error("No sample text: add a text file (linearize trains on its head and evaluates on its held-out tail).");
    if (t.from_allocation && !dof_state_)
      throw Error("The DoF view has no allocation yet (its spectra are still being computed): wait for them, or "
                  "choose a fixed M.");
    // The DoF view's strategy, budget and lambda, computed on the run's own capture as the CLI does.
    LinearizeOptions o = linearize_options_of(t, session_.strategy, session_.budget, session_.lambda, model_->model->config().head_dim,
                                              session_.state_share);
    o.model = model_->path;
    o.texts = texts;
    o.python_module = python_module_;
    const QString dir = new_run_dir("linearize-" + o.stage1.feature_map);
    const std::string run = to_std(dir);
    check_linearize_options(o);
    const std::string command = linearize_command(o, run);

    const std::string title = "linearize " + o.stage1.feature_map + " (" + std::to_string(o.stage1.steps) + " + " +
                              std::to_string(o.stage2.steps) + " finetune steps)";
    return start_run(JobKind::Linearize, title, command, run, o.stage1.steps, o.stage2.steps,
                     [o, run](Job& job) { linearize(o, run, job.progress()); });
  } catch (const std::exception& e) {
    fail("Linearize", e);
    return 0;
  }
}

int Workbench::start_distill(const TrainSettings& t) {
  try {
    if (closing_) return 0;
    session_.train = t;
    if (!capture_) throw Error("Nothing is captured yet: run Analysis > Capture first.");
    if (distill_job_ != 0) throw Error("A training job is already running: wait for it or cancel it (Jobs tab).");
    DistillOptions o = distill_options_of(t);
    o.capture = session_.capture_dir;
    if (o.features <= 0 && !dof_state_)
      throw Error("The DoF view has no allocation yet (its spectra are still being computed): wait for them, or "
                  "choose a fixed M.");
    const QString dir = new_run_dir(o.feature_map);
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

    const std::string title =
        "distill " + o.feature_map + " (" + distill_loss_name(o.loss) + ", " + std::to_string(o.steps) + " steps)";
    return start_run(JobKind::Distill, title, command, run, o.steps, 0, [o, run](Job& job) { distill(o, run, job.progress()); });
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
                      (linearize_run_ || fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors")
                           ? std::string()
                           : std::string(" and has no checkpoint yet (train it again)")));
    const std::string run = to_std(run_dir_);
    linearize_report_.reset();
    const bool lin = linearize_run_;
    const int id = start(
        lin ? JobKind::Linearize : JobKind::Distill, "resume " + fs::path(run).filename().string(),
        lin ? resume_command("linearize", run) : distill_resume_command(run),
        [run, lin](Job& job) -> Apply {
          if (lin) resume_linearize(run, job.progress());
          else attnscope::resume_distill(run, job.progress());  // on the device it was started on
          return nullptr;
        },
        &distill_job_, [this](JobState, bool) { distill_ended(); });
    // The resumed run drops the lines after its checkpoint: read the files again from the start.
    metrics_tail_.reset();
    finetune_tail_.reset();
    if (id) metrics_timer_->start();
    emit trainingChanged();
    return id;
  } catch (const std::exception& e) {
    fail("Resume", e);
    return 0;
  }
}

}  // namespace attnscope::gui
