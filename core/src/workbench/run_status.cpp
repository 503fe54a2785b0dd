// Where a run stands, in words (run_status.h).
#include "attnscope/workbench/run_status.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "attnscope/base/command_line.h"
#include "attnscope/base/error.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/run/run_metrics.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

std::string run_status_text(const RunStatus& s) {
  if (!s.state) return "No run yet: choose the options and press Linearize";
  const auto of = [](int64_t a, int64_t b) { return std::to_string(a) + " of " + std::to_string(b); };
  // Where a linearize run is: stage 2 once its metrics begin, else stage 1.
  const std::string where = !s.linearize ? "step " + of(s.step, s.steps)
                            : s.finetune_step > 0 ? "stage 2 (finetune) step " + of(s.finetune_step, s.finetune_steps)
                                                  : "stage 1 (distill) step " + of(s.step, s.steps);
  switch (*s.state) {
    case RunState::Running: return (s.linearize ? "Linearizing: " : s.finetune ? "Finetuning: " : "Training: ") + where;
    case RunState::Killed: {
      std::string text = "Stopped at " + where;
      if (s.linearize) return text + ": Resume continues that stage";
      if (!s.checkpoint_error.empty()) return text + ": its checkpoint cannot be read (" + s.checkpoint_error + ")";
      return text + (s.checkpoint_step > 0 ? ": Resume continues from the checkpoint at step " + std::to_string(s.checkpoint_step)
                                            : ": no checkpoint yet, train it again");
    }
    case RunState::Finished: {
      if (s.linearize && s.result) {
        const LengthResult& at = *s.result;
        std::string text = "Finished: held-out perplexity " + fixed2(std::exp(at.final_loss)) + " at " +
                           std::to_string(at.seq_len) + " tokens (original " + fixed2(std::exp(at.original_loss)) + ")";
        if (std::isfinite(at.adapted_loss)) text += ", original finetuned " + fixed2(std::exp(at.adapted_loss));
        return text;
      }
      std::string text = "Finished: " + std::to_string(s.steps) + " steps";
      if (std::isfinite(s.validation_kl)) text += ", validation KL " + short_number(s.validation_kl) + " (mean of layers)";
      return text;
    }
    case RunState::Failed: return "Failed before training began (see the Jobs tab)";
  }
  return "";
}

int64_t checkpoint_step(const std::string& run_dir) {
  const std::string path = run_dir + "/checkpoints/checkpoint.safetensors";
  if (run_dir.empty() || !fs::is_regular_file(path)) return 0;
  const SafetensorsFile ck(path);
  const auto it = ck.metadata().find("step");
  if (it == ck.metadata().end()) fail(path, "has no \"step\" in its metadata");
  char* end = nullptr;
  errno = 0;
  const long long step = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != 0 || errno == ERANGE || step < 0)
    fail(path, "its \"step\" '" + it->second + "' is not a step number");
  return step;
}

RunStatus read_run_status(const std::string& dir) {
  RunStatus s;
  s.state = run_state(dir);
  const std::string kind = job_kind(dir);
  if (!kind.empty() && kind != "distill" && kind != "finetune" && kind != "linearize")
    fail(job_file(dir), "its kind '" + kind + "' is not distill, finetune or linearize");
  s.linearize = kind == "linearize";
  s.finetune = kind == "finetune";
  if (s.linearize) {
    const LinearizeOptions o = read_linearize_job(dir);
    s.steps = o.stage1.steps;
    s.finetune_steps = o.stage2.steps;
    s.step = read_run_metrics(dir + "/stage1").last_step();
    s.finetune_step = read_finetune_metrics(dir + "/stage2").last_step();
    if (const auto report = read_linearize_report(dir); report && !report->lengths.empty()) s.result = report->lengths.back();
    return s;
  }
  if (kind.empty()) return s;  // stopped before it began
  if (s.finetune) {
    s.steps = read_finetune_job(dir).steps;
    s.step = read_finetune_metrics(dir).last_step();
  } else {
    s.steps = read_distill_job(dir).options.steps;
    const RunMetrics m = read_run_metrics(dir);
    s.step = m.last_step();
    s.validation_kl = final_validation_kl(m);
  }
  try {
    s.checkpoint_step = checkpoint_step(dir);
  } catch (const std::exception& e) {
    s.checkpoint_error = e.what();
  }
  return s;
}

}  // namespace attnscope
