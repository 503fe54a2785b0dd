// Checkpoints (checkpoint.h).
#include "attnscope/run/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "attnscope/base/command_line.h"
#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"

namespace attnscope {

double checkpoint_number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& file) {
  const auto it = meta.find(key);
  if (it == meta.end()) fail(file, "has no \"" + key + "\" in its metadata");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || errno == ERANGE) fail(file, "metadata \"" + key + "\" is not a number: '" + it->second + "'");
  return v;
}

void write_checkpoint(RunDir& run, const std::vector<TrainedTensor>& tensors, uint64_t seed, int64_t step, double elapsed_s,
                      const std::map<std::string, std::string>& extra) {
  NamedTensors out;
  for (const TrainedTensor& t : tensors) {
    out.emplace_back(t.name, t.value->detach().to(at::kCPU).contiguous().clone());
    out.emplace_back(t.name + ".adamw.exp_avg", t.exp_avg->detach().to(at::kCPU).contiguous().clone());
    out.emplace_back(t.name + ".adamw.exp_avg_sq", t.exp_avg_sq->detach().to(at::kCPU).contiguous().clone());
  }
  std::map<std::string, std::string> meta = {{"step", std::to_string(step)},
                                             {"seed", std::to_string(seed)},
                                             {"elapsed_s", number_arg(elapsed_s)},
                                             {"rng", "derive_seed(seed, stream, step): the state is (seed, step)"}};
  for (const auto& [key, v] : extra) meta[key] = v;
  run.write_checkpoint(out, meta);
  run.log("checkpoint at step " + std::to_string(step));
}

Checkpoint read_checkpoint(const RunDir& run, const std::vector<TrainedTensor>& tensors, uint64_t seed, int64_t steps) {
  const std::string file = run.checkpoint_path();
  const SafetensorsFile ck(file);
  Checkpoint c;
  c.metadata = ck.metadata();
  const auto& meta = c.metadata;
  const double step = checkpoint_number(meta, "step", file);
  if (step != std::floor(step) || step < 0 || step > double(steps))
    fail(file, "is at step " + meta.at("step") + ", outside this job's 0.." + std::to_string(steps));
  const auto seed_it = meta.find("seed");
  if (seed_it == meta.end() || seed_it->second != std::to_string(seed))
    fail(file, "belongs to another run: its seed is " + (seed_it == meta.end() ? std::string("missing") : seed_it->second) +
                   ", job.json's " + std::to_string(seed));
  c.step = int64_t(step);
  c.elapsed_s = meta.count("elapsed_s") ? checkpoint_number(meta, "elapsed_s", file) : 0.0;
  size_t used = 0;
  at::NoGradGuard no_grad;
  for (const TrainedTensor& t : tensors)
    for (const auto& [name, dst] : {std::pair<std::string, at::Tensor*>{t.name, t.value},
                                    {t.name + ".adamw.exp_avg", t.exp_avg},
                                    {t.name + ".adamw.exp_avg_sq", t.exp_avg_sq}}) {
      if (!ck.contains(name)) fail(file, "has no tensor " + name + " (a checkpoint of another job?)");
      const at::Tensor x = ck.tensor(name);
      if (x.scalar_type() != at::kFloat) fail(file, "tensor " + name + " is not float32");
      if (x.sizes() != dst->sizes()) fail(file, "tensor " + name + " has the wrong shape (a checkpoint of another job?)");
      if (!at::isfinite(x).all().item<bool>()) fail(file, "tensor " + name + " holds NaN or infinity");
      dst->copy_(x);
      ++used;
    }
  if (used != ck.entries().size())
    fail(file, "holds " + std::to_string(ck.entries().size() - used) + " tensors this job does not have (a checkpoint of another job?)");
  return c;
}

Checkpoint start_from_checkpoint(RunDir& run, bool resume, const std::vector<TrainedTensor>& tensors, uint64_t seed,
                                 int64_t steps) {
  Checkpoint c;
  if (resume && run.has_checkpoint()) {
    c = read_checkpoint(run, tensors, seed, steps);
    run.truncate_metrics_after(c.step);
    run.log("resumed at step " + std::to_string(c.step));
  } else if (resume) {
    // Killed before its first checkpoint: job.json holds everything to start again at step 0.
    run.truncate_metrics_after(0);
    run.log("resumed at step 0 (no checkpoint yet)");
  }
  return c;
}

}  // namespace attnscope
