// A distillation job's checkpoint (train_state.h): every group's maps and AdamW moments, and in its
// metadata the step, the seed (the whole random state is (seed, step): train_state.cpp), the
// elapsed time and each layer's first and last loss. Loading checks that the checkpoint is this
// job's before anything of it is used.
#include <ATen/ATen.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "distill/train_state.h"

namespace attnscope {
namespace {

// Checkpoint name prefix of a group's tensors: "layers.{s}." for a layer of one group (the names of
// per-layer runs), "layers.{s}.m{M}." for the group of heads with M features.
std::string group_prefix(const LayerState& st, int layer, const GroupState& g) {
  const std::string base = "layers." + std::to_string(layer) + ".";
  return st.groups.size() == 1 ? base : base + "m" + std::to_string(g.group.maps.features) + ".";
}

// A metadata value as a number; Error naming the checkpoint and the key otherwise.
double meta_number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& file) {
  const auto it = meta.find(key);
  if (it == meta.end()) fail(file, "has no \"" + key + "\" in its metadata");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || errno == ERANGE) fail(file, "metadata \"" + key + "\" is not a number: '" + it->second + "'");
  return v;
}

}  // namespace

void save_checkpoint(RunDir& run, uint64_t seed, const std::vector<LayerState>& layers, int64_t step, double elapsed_s,
                     const std::map<std::string, std::string>& extra_meta) {
  NamedTensors tensors;
  for (size_t s = 0; s < layers.size(); ++s)
    for (const GroupState& g : layers[s].groups) {
      const LayerMaps& maps = g.group.maps;
      for (size_t i = 0; i < maps.params.size(); ++i) {
        const std::string base = group_prefix(layers[s], int(s), g) + maps.params[i].first;
        tensors.emplace_back(base, maps.params[i].second.detach().to(at::kCPU));
        tensors.emplace_back(base + ".adamw.exp_avg", g.exp_avg[i].to(at::kCPU));
        tensors.emplace_back(base + ".adamw.exp_avg_sq", g.exp_avg_sq[i].to(at::kCPU));
      }
    }
  std::map<std::string, std::string> meta = {{"step", std::to_string(step)},
                                             {"seed", std::to_string(seed)},
                                             {"elapsed_s", num_str(elapsed_s)},
                                             {"rng", "derive_seed(seed, stream, step): the state is (seed, step)"}};
  for (size_t s = 0; s < layers.size(); ++s) {
    meta["loss." + std::to_string(s)] = num_str(layers[s].last_loss, 17);
    meta["first_loss." + std::to_string(s)] = num_str(layers[s].first_loss, 17);
  }
  for (const auto& [key, v] : extra_meta) meta[key] = v;
  run.write_checkpoint(tensors, meta);
  run.log("checkpoint at step " + std::to_string(step));
}

int64_t load_checkpoint(RunDir& run, uint64_t seed, int64_t steps, std::vector<LayerState>& layers, double& elapsed_s) {
  const std::string file = run.checkpoint_path();
  const SafetensorsFile ck(file);
  const auto& meta = ck.metadata();
  const double step_v = meta_number(meta, "step", file);
  if (step_v != std::floor(step_v) || step_v < 0 || step_v > double(steps))
    fail(file, "is at step " + meta.at("step") + ", outside this job's 0.." + std::to_string(steps));
  const auto seed_it = meta.find("seed");
  if (seed_it == meta.end() || seed_it->second != std::to_string(seed))
    fail(file, "belongs to another run: its seed is " + (seed_it == meta.end() ? std::string("missing") : seed_it->second) +
                   ", job.json's " + std::to_string(seed));
  elapsed_s = meta.count("elapsed_s") ? meta_number(meta, "elapsed_s", file) : 0.0;
  size_t used = 0;
  for (size_t s = 0; s < layers.size(); ++s) {
    LayerState& st = layers[s];
    for (GroupState& g : st.groups)
      for (size_t i = 0; i < g.group.maps.params.size(); ++i) {
        const std::string base = group_prefix(st, int(s), g) + g.group.maps.params[i].first;
        const std::vector<std::pair<std::string, at::Tensor*>> parts = {
            {base, &g.group.maps.params[i].second},
            {base + ".adamw.exp_avg", &g.exp_avg[i]},
            {base + ".adamw.exp_avg_sq", &g.exp_avg_sq[i]}};
        for (const auto& [name, dst] : parts) {
          if (!ck.contains(name)) fail(file, "has no tensor " + name + " (a checkpoint of another job?)");
          const at::Tensor t = ck.tensor(name);
          if (t.scalar_type() != at::kFloat) fail(file, "tensor " + name + " is not float32");
          if (t.sizes() != dst->sizes()) fail(file, "tensor " + name + " has the wrong shape (a checkpoint of another job?)");
          if (!at::isfinite(t).all().item<bool>()) fail(file, "tensor " + name + " holds NaN or infinity");
          dst->copy_(t);
          ++used;
        }
      }
    const std::string ls = "loss." + std::to_string(s), fs = "first_loss." + std::to_string(s);
    if (meta.count(ls)) st.last_loss = meta_number(meta, ls, file);
    if (meta.count(fs)) st.first_loss = meta_number(meta, fs, file);
  }
  if (used != ck.entries().size())
    fail(file, "holds " + std::to_string(ck.entries().size() - used) + " tensors this job does not have (a checkpoint of another job?)");
  return int64_t(step_v);
}

int64_t start_training(RunDir& run, bool resume, uint64_t seed, int64_t steps, std::vector<LayerState>& layers,
                       double& elapsed_s) {
  int64_t start_step = 0;
  if (resume && run.has_checkpoint()) {
    start_step = load_checkpoint(run, seed, steps, layers, elapsed_s);
    run.truncate_metrics_after(start_step);
    run.log("resumed at step " + std::to_string(start_step));
  } else if (resume) {
    // Killed before its first checkpoint: job.json holds everything to start again at step 0.
    run.truncate_metrics_after(0);
    run.log("resumed at step 0 (no checkpoint yet)");
  }
  for (auto& st : layers)
    for (auto& g : st.groups)
      for (auto& p : g.group.maps.params) p.second.requires_grad_(true);
  return start_step;
}

}  // namespace attnscope
