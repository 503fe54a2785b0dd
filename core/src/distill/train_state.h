// What the distillation job's two trainers (layerwise: distill.cpp, direct: distill_direct.cpp)
// share: the training state of a layer and its head groups, AdamW over a group, the seeded draws,
// validation, checkpoints (checkpoint.cpp) and the final outputs. Each helper takes the values it
// uses, not the whole options.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/distill/distill.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/distill/layer_maps.h"

namespace attnscope {

using json = nlohmann::ordered_json;

constexpr uint64_t kSplitStream = 0x5B117;  // train / validation split of the windows
constexpr uint64_t kBatchStream = 0xBA7C4;  // mini-batch of step t
constexpr uint64_t kPairStream = 0x9A125;   // l2 pairs of step t

// A group of heads in training: its maps and their AdamW moments.
struct GroupState {
  HeadGroup group;
  at::Tensor head_index;  // int64 [n] of group.heads
  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  double last_loss = 0;
};

// A layer in training: its groups and its train/validation tensors [T, H, L, d] (layerwise; direct
// keeps only the validation windows' q, k, for the held-out attention KL).
// In a distributed run q, k, val_q, val_k are only on the layer's own rank; the numbers below are
// shared with every rank (distill.cpp).
struct LayerState {
  std::vector<GroupState> groups;
  int64_t heads = 0;
  std::vector<HeadType> types;  // a mixed model's head types (empty: every head as the window says); softmax heads are in no group
  at::Tensor q, k, val_q, val_k;
  at::Tensor v, val_v;  // the values, for the output loss only
  at::Tensor x, val_x;  // the layer's inputs [T, L, D], for gated decays only
  // The block loss only: the residual stream entering the layer [T, L, D], and the model whose
  // layer `layer` (its projections and MLP) the loss runs.
  at::Tensor resid, val_resid;
  const Model* block_model = nullptr;
  int layer = 0;
  double last_loss = 0, first_loss = 0, initial_val_kl = 0;
  bool has_val = false;             // the job holds out windows (report.json gets val_kl)
  double val_loss = 0, val_kl = 0;  // of the last validation
};

// The group's slice of a layer tensor [T, H, L, d] (the tensor itself for a layer of one group).
at::Tensor group_heads(const LayerState& st, const GroupState& g, const at::Tensor& t);

// What AdamW and the schedule read of the options.
struct Optimizer {
  double lr = 0, lr_alpha = 0, weight_decay = 0;
  LrSchedule schedule = LrSchedule::Constant;
  int64_t steps = 1;
};
Optimizer optimizer_of(const DistillOptions& o);
// One AdamW update of a group's maps from their gradients (step is 1-based); the gradients are
// zeroed. alpha (learned-prf) learns at lr_alpha, everything else at lr.
void adamw_step(const Optimizer& opt, GroupState& g, int64_t step);

// A group with zero AdamW moments (its tensors are the group's own, not copies).
GroupState group_state(HeadGroup group);
// Layer s's groups (init_layer_groups) with zero AdamW moments; `softmax_window` is the source
// model's sliding window (LayerMaps::softmax_window: the layerwise losses' targets apply it).
// Decayed heads start at `decay_delta` [H] when given (fitted_decay_delta), else without decay;
// d_model is the layer input's width (gated decays' w).
// `types`: the layer's head types when the model mixes them (softmax heads get no group);
// `decays`: each head's decay (DistillJob::decays), empty: o.decay for every head.
void init_layer_state(const DistillOptions& o, int layer, const std::vector<int64_t>& head_dims, int64_t d,
                      int64_t d_model, int64_t softmax_window, LayerState& st, const at::Tensor& decay_delta = {},
                      const std::vector<HeadType>& types = {}, const std::vector<Decay>& decays = {});
// The layers' head types as a model's table ([S][H]; empty unless the model mixes them).
std::vector<std::vector<HeadType>> layer_types(const std::vector<LayerState>& layers);
// Moves a layer's maps, AdamW moments and head indices to `device`.
void to_device(LayerState& st, const at::Device& device);
// A float32 CPU copy of maps: what callers and files get, whatever the device.
LayerMaps cpu_copy(const LayerMaps& maps);
// Layer states over the given groups' own tensors (the benchmark hook trains them in place).
std::vector<LayerState> bench_layers(const std::vector<std::vector<HeadGroup>>& groups);


// The seeded draws: the mini-batch of `step` (indices into n_train windows), the l2 pairs (i >= j)
// of `step` (-1: validation's), and the train / held-out split of T windows (Error naming `source`
// when too few to hold out a share).
at::Tensor step_batch(uint64_t seed, int64_t batch, int64_t n_train, int64_t step);
at::Tensor step_pairs(uint64_t seed, int64_t pairs, int64_t L, int64_t step);
std::pair<std::vector<int64_t>, std::vector<int64_t>> split_windows(uint64_t seed, double val_share, int64_t T,
                                                                    const std::string& source);

// The head-weighted mean over a layer's groups of a per-group value (exactly the value itself for
// one group).
double head_weighted(const LayerState& st, const std::vector<double>& per_group);
// The block loss (layer_maps.h's block_loss) of a layer on a mini-batch q, k, v [B, H, L, d], x
// (gated decays) and resid [B, L, D]: every group's head outputs put together in head order.
at::Tensor layer_block_loss(const LayerState& st, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& x, const at::Tensor& resid);
// Held-out (loss, KL) of a layer on its val_q, val_k; direct's loss is the KL. `pairs`: l2's.
std::pair<double, double> validate(const LayerState& st, DistillLoss loss, const at::Tensor& pairs);

// checkpoint.cpp, through the one checkpoint writer and checker (run/checkpoint.h): every group's
// maps and AdamW moments at `step`, with the seed, the elapsed time and each layer's first and last
// loss; start_training resumes from it (checked to be this job's: Error naming it) when `resume`
// and there is one (truncating metrics after its step), then sets every map parameter to require
// grad; returns the first step to run.
void save_checkpoint(RunDir& run, uint64_t seed, const std::vector<LayerState>& layers, int64_t step,
                     double elapsed_s, const std::map<std::string, std::string>& extra_meta = {});
int64_t start_training(RunDir& run, bool resume, uint64_t seed, int64_t steps, std::vector<LayerState>& layers,
                       double& elapsed_s);

// feature_maps.safetensors (SPEC 7 names per head), then report.json (with `extra` fields), last;
// fills r.layers and r.maps (CPU copies). val_kl per layer is st.val_kl where st.has_val. Writes
// nothing on a run directory that does not write (ranks other than 0).
void write_outputs(RunDir& run, const DistillOptions& o, std::vector<LayerState>& layers, const json& extra,
                   DistillResult& r);
std::string num_str(double v, int digits = 6);

// A coarse upper bound on the memory a layerwise job needs (every head's maps with their gradients
// and AdamW moments, the captured windows it holds, a mini-batch's features and L x L maps for the
// layers that train at once), checked against this machine's memory before anything is written:
// Error (quantity "feature dimension") saying both numbers.
void check_training_memory(const std::vector<std::vector<int64_t>>& dims, int64_t head_dim, int64_t windows,
                           int64_t batch, int64_t seq_len);

// Direct training (distill_direct.cpp): distill() hands loss direct to it, and
// distill_step_seconds its benchmark step.
DistillResult distill_direct(DistillJob job, const std::string& run_dir, const ProgressFn& progress, bool resume);
double direct_step_seconds(DistillBench& bench);

}  // namespace attnscope
