// The workbench's training: distill on the current capture, follow the run's metrics.jsonl, resume
// a stopped run, convert a finished one and evaluate the converted model (workbench.h). Each step
// is a job on the same runner as the analysis, calling the same core functions as `attnscope
// distill`, `convert --job` and `eval`, with that command line in the jobs list.
#include <ATen/Context.h>

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QTimer>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/convert/convert_job.h"
#include "attnscope/base/error.h"
#include "attnscope/distill/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/text_file.h"
#include "attnscope/io/text_source.h"
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
  QStringList devices = {"cpu"};
  if (at::hasCUDA()) devices << "cuda";
  return devices;
}

QString Workbench::run_state() const {
  if (run_dir_.isEmpty()) return {};
  if (distill_job_ != 0) return "running";
  const std::string dir = to_std(run_dir_);
  if (!fs::is_regular_file(dir + "/job.json")) return "failed";  // stopped before it began
  const std::string s = attnscope::run_state(dir);
  return s == "killed" ? "stopped" : to_q(s);
}

bool Workbench::can_resume() const {
  return run_state() == "stopped" && fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors") &&
         !converting();
}

int64_t Workbench::checkpoint_step() const {
  const std::string path = to_std(run_dir_) + "/checkpoints/checkpoint.safetensors";
  if (run_dir_.isEmpty() || !fs::is_regular_file(path)) return 0;
  try {
    const SafetensorsFile ck(path);
    const auto it = ck.metadata().find("step");
    return it == ck.metadata().end() ? 0 : std::stoll(it->second);
  } catch (const std::exception&) {
    return 0;  // unreadable: Resume will say why
  }
}

bool Workbench::can_convert() const { return run_state() == "finished" && !converting(); }

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
  metrics_tail_ = MetricsTail(to_std(run_dir_));
  metrics_tail_.poll();
  evaluation_.reset();
  eval_command_.clear();
  run_steps_ = 0;
  run_command_.clear();
  try {
    const DistillOptions o = read_distill_job(to_std(run_dir_));
    run_steps_ = o.steps;
    run_command_ = o.command;
  } catch (const std::exception&) {
    // Not written yet (a run just starting) or not a distillation: the state line says so.
  }
  emit trainingChanged();
}

int Workbench::start_distill(DistillOptions o, const QString& device) {
  try {
    if (closing_) return 0;
    if (!capture_) throw Error("Nothing is captured yet: run Analysis > Capture first.");
    if (distill_job_ != 0) throw Error("A distillation is already running: wait for it or cancel it (Jobs tab).");
    o.device = to_std(device);
    o.capture = session_.capture_dir;
    if (o.features <= 0 && !dof_state_)
      throw Error("The DoF view has no allocation yet (its spectra are still being computed): wait for them, or "
                  "choose a fixed M.");
    if (workspace_dir_.isEmpty()) workspace_dir_ = new_workspace();  // a capture of a session
    const QString runs = workspace_dir_ + "/runs";
    if (!QDir().mkpath(runs)) throw Error(to_std(runs) + ": cannot create the runs folder");
    const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
    QString dir = runs + "/" + to_q(o.feature_map) + "-" + stamp;
    for (int i = 2; QFileInfo::exists(dir); ++i) dir = runs + "/" + to_q(o.feature_map) + "-" + stamp + "-" + QString::number(i);
    const std::string run = to_std(dir);
    if (o.loss == "direct") {
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
      o.features = 0;
      const DofSettings defaults;
      const DofSettings& d = session_.dof;
      if (session_.multiple == 1 && d.normalize == defaults.normalize && d.seed == defaults.seed &&
          d.exact_limit == defaults.exact_limit && d.top_k == defaults.top_k) {
        // distill computes the DoF view's spectra from the capture itself: the command needs no file.
        o.strategy = alloc_strategy_name(session_.strategy);
        o.budget = session_.budget;
        o.lambda = lambda_arg(session_.lambda);
        o.dof_samples = d.samples;
      } else {
        // Spectra settings or a multiple distill does not take: the allocation shown, as a file
        // in `attnscope allocate --json`'s shape, beside the run.
        o.allocation = run + ".allocation.json";
        const nlohmann::json a = {{"strategy", alloc_strategy_name(session_.strategy)},
                                  {"lambda", session_.lambda},
                                  {"budget", session_.budget},
                                  {"multiple", session_.multiple},
                                  {"dims", session_.strategy == AllocStrategy::PerHead
                                               ? nlohmann::json(dof_state_->allocation.dims)
                                               : nlohmann::json(dof_state_->allocation.layer_dims())}};
        write_text_file(o.allocation, a.dump(2) + "\n");
      }
    }
    o.command = distill_command(o, run);

    run_dir_ = dir;
    metrics_tail_ = MetricsTail(run);
    evaluation_.reset();
    eval_command_.clear();
    run_steps_ = o.steps;
    run_command_ = o.command;
    const std::string title = "distill " + o.feature_map + " (" + o.loss + ", " + std::to_string(o.steps) + " steps)";
    const int id = start(
        "distill", title, o.command,
        [o, run](Job& job) -> Apply {
          distill(o, run, job.progress(), /*resume=*/false);
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
                  to_std(run_dir_) + " cannot be resumed: it is " + to_std(run_state()) +
                      (fs::is_regular_file(to_std(run_dir_) + "/checkpoints/checkpoint.safetensors")
                           ? std::string()
                           : std::string(" and has no checkpoint yet (train it again)")));
    const std::string run = to_std(run_dir_);
    evaluation_.reset();
    eval_command_.clear();
    const int id = start(
        "distill", "resume " + fs::path(run).filename().string(), distill_resume_command(run),
        [run](Job& job) -> Apply {
          DistillOptions same_device;
          same_device.device.clear();  // "": the run continues on the device it was started on
          distill(same_device, run, job.progress(), /*resume=*/true);
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
                                     : to_std(run_dir_) + " cannot be converted now: it is " + to_std(run_state()) +
                                           (converting() ? ", and a conversion is running" : ""));
    if (text_files().empty()) throw Error("No sample text to evaluate on: add a text file and capture first.");
    const std::string run = to_std(run_dir_), out = to_std(converted_dir());
    auto current = model_;
    const std::string module = python_module_;
    evaluation_.reset();
    eval_command_.clear();
    const int id = start(
        "convert", "convert " + fs::path(run).filename().string(), convert_job_command(run, out),
        [run, out, current, module](Job& job) -> Apply {
          job.progress()(0, "reading " + run);
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
      "eval", "evaluate " + fs::path(run).filename().string() + "/converted", command,
      [this, dir, run, texts, eo, command](Job& job) -> Apply {
        job.progress()(0, "loading " + dir);
        const LoadedModel m = load_model(dir);
        const std::vector<int64_t> ids = encode_documents(*m.tokenizer, read_text_documents(texts));
        auto e = std::make_shared<const ConvertedEvaluation>(evaluate_converted(*m.model, ids, eo, job.progress()));
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
