// A distillation job's checkpoint (train_state.h): every group's maps and AdamW moments through
// the one checkpoint writer and checker (run/checkpoint.h), with each layer's first and last loss
// in its metadata.
#include <ATen/ATen.h>

#include "attnscope/base/error.h"
#include "attnscope/run/checkpoint.h"
#include "distill/train_state.h"

namespace attnscope {
namespace {

// Checkpoint name prefix of a group's tensors: "layers.{s}." for a layer of one group (the names of
// per-layer runs), "layers.{s}.m{M}." for the group of heads with M features; where two groups may
// share M (mixed head types: a hybrid and a linear group; heads of different decays)
// "layers.{s}.h{first head}.".
std::string group_prefix(const LayerState& st, int layer, const GroupState& g) {
  const std::string base = "layers." + std::to_string(layer) + ".";
  if (st.groups.size() == 1) return base;
  bool shared_m = !st.types.empty();
  for (const GroupState& other : st.groups)
    shared_m = shared_m || (&other != &g && other.group.maps.features == g.group.maps.features);
  if (shared_m) return base + "h" + std::to_string(g.group.heads.empty() ? -1 : g.group.heads[0]) + ".";
  return base + "m" + std::to_string(g.group.maps.features) + ".";
}

// Every group's maps with their moments, under their checkpoint names.
std::vector<TrainedTensor> trained_tensors(std::vector<LayerState>& layers) {
  std::vector<TrainedTensor> out;
  for (size_t s = 0; s < layers.size(); ++s)
    for (GroupState& g : layers[s].groups)
      for (size_t i = 0; i < g.group.maps.params.size(); ++i)
        out.push_back({group_prefix(layers[s], int(s), g) + g.group.maps.params[i].first, &g.group.maps.params[i].second,
                       &g.exp_avg[i], &g.exp_avg_sq[i]});
  return out;
}

}  // namespace

void save_checkpoint(RunDir& run, uint64_t seed, const std::vector<LayerState>& layers, int64_t step, double elapsed_s,
                     const std::map<std::string, std::string>& extra_meta) {
  std::map<std::string, std::string> meta = extra_meta;
  for (size_t s = 0; s < layers.size(); ++s) {
    meta["loss." + std::to_string(s)] = num_str(layers[s].last_loss, 17);
    meta["first_loss." + std::to_string(s)] = num_str(layers[s].first_loss, 17);
  }
  write_checkpoint(run, trained_tensors(const_cast<std::vector<LayerState>&>(layers)), seed, step, elapsed_s, meta);
}

int64_t start_training(RunDir& run, bool resume, uint64_t seed, int64_t steps, std::vector<LayerState>& layers,
                       double& elapsed_s) {
  const Checkpoint c = start_from_checkpoint(run, resume, trained_tensors(layers), seed, steps);
  if (c.step > 0 || !c.metadata.empty()) {
    elapsed_s = c.elapsed_s;
    const std::string file = run.checkpoint_path();
    for (size_t s = 0; s < layers.size(); ++s) {
      const std::string ls = "loss." + std::to_string(s), fs = "first_loss." + std::to_string(s);
      if (c.metadata.count(ls)) layers[s].last_loss = checkpoint_number(c.metadata, ls, file);
      if (c.metadata.count(fs)) layers[s].first_loss = checkpoint_number(c.metadata, fs, file);
    }
  }
  for (auto& st : layers)
    for (auto& g : st.groups)
      for (auto& p : g.group.maps.params) p.second.requires_grad_(true);
  return c.step;
}

}  // namespace attnscope
