// The trainer's maps and losses (inside core: distill.cpp, distill_direct.cpp, the training
// benchmark, and the tests): one layer's maps stacked over heads, the groups of heads that share a
// feature dimension, and the layerwise losses in the log domain.
//
// Layerwise losses, per query row i over keys j <= i (A = softmax attention as the model ran it,
// within its sliding window if any (LayerMaps::softmax_window); Ahat = the linear map):
//   kl       mean row KL(A || Ahat)
//   softmax  mean row cross-entropy -sum_j A_ij log Ahat_ij
//   l2       mean squared error of kernel values on sampled pairs (i, j), both scaled by the
//            row's largest softmax kernel value exp(max_j q_i.k_j / sqrt d), which attention
//            ignores and which keeps the values in range
//   output   mean squared error of the head's outputs, (A V - Ahat V)^2 over rows and d_v
//            (LoLCATs' attention transfer)
// Everything is computed from log phi (log domain): log Khat_ij = logsumexp_m(log phi_q + log phi_k),
// so exp never overflows on real heads. t2r's features are exactly 0 wherever ReLU cuts, so its
// kernel is formed directly (no exp to overflow) and rows with no positive weight are left out; in a
// hybrid head (window > 0, head.h's rule) every row is defined and a kernel value of 0 has its log
// floored at log(1e-30).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/stacked_maps.h"
#include "attnscope/distill/distill_options.h"

namespace attnscope {

class CaptureStore;
class Model;
struct HeadFeatureMaps;
struct ModelConfig;

// The stacked parameter of hybrid heads' balances gamma [H] (LayerMaps::params, with window > 0).
constexpr const char* kGammaParam = "gamma";

// The stacked parameter of decayed heads' deltas [H] (LayerMaps::params with DistillOptions::decay
// fixed): a = sigmoid(delta) (SPEC 5).
constexpr const char* kDecayParam = "decay.delta";
// The stacked parameters of gated heads (DistillOptions::decay gated): a_t = sigmoid(w.x_t + b),
// w [H, d_model] (starts at 0) and b [H] (starts where a fixed decay's delta would).
constexpr const char* kGateWeightParam = "decay.w";
constexpr const char* kGateBiasParam = "decay.b";

// SPEC 7's name of a head's map parameter: "layers.{s}.heads.{h}.feature_map.{param}" (and
// "layers.{s}.heads.{h}.gamma" for kGammaParam, "layers.{s}.heads.{h}.decay.delta" for kDecayParam,
// "...decay.w" and "...decay.b" for the gate's).
std::string feature_map_tensor_name(int layer, int head, const std::string& param);

// One layer's maps (or one group of its heads): every parameter stacked over the H heads.
struct LayerMaps : StackedMaps {
  int64_t window = 0;  // hybrid heads (SPEC 5) when > 0: params then hold kGammaParam [H]
  // The teacher's sliding window (the source model's ModelConfig::sliding_window, 0 = none): the
  // softmax targets A of the layerwise losses see key j from query i only when i - j < it. Not
  // a parameter of the maps (not saved); set by init_layer_state from the capture or the model.
  int64_t softmax_window = 0;
  // Head h's map as a core FeatureMap (copies of the parameters).
  std::unique_ptr<FeatureMap> head_map(int64_t head) const;
  // Head h's map computed from the stacked parameters themselves (no copy, cast to the input's
  // dtype): gradients through its features reach params, e.g. through Model::forward (direct).
  std::shared_ptr<FeatureMap> trainable_head_map(int64_t head) const;
};

// Initial maps of a layer; head h is make_feature_map's map with seed derive_seed(seed, layer, h).
// o gives the map, its activation, init, tying and seed; d_model the layer input's width (gated
// decays' w; Error when o.decay is gated and it is 0).
LayerMaps init_layer_maps(const DistillOptions& o, int layer, int64_t heads, int64_t d, int64_t features,
                          int64_t d_model = 0);

// The heads of a layer that share one feature dimension, trained as one stacked LayerMaps: maps'
// stacked index i is the layer's head heads[i].
struct HeadGroup {
  std::vector<int64_t> heads;
  LayerMaps maps;
};

// Layer s's groups for head dims `head_dims` (one M per head), in order of first head: one group
// (all heads, in order) when the heads share M. Head h's map is init_layer_maps' head h (seed
// derive_seed(seed, s, h)) whatever its group. With head types (mixed models, one per head) the
// heads group by type and M: a hybrid group has o.window, a linear one none, and softmax heads are
// in no group (they are exact: nothing to train). With `decays` (one per head: head_decays_for)
// heads group by decay too; empty: o.decay for every head (Error for mixer, which needs them).
std::vector<HeadGroup> init_layer_groups(const DistillOptions& o, int layer, const std::vector<int64_t>& head_dims,
                                         int64_t d, int64_t d_model = 0, const std::vector<HeadType>& types = {},
                                         const std::vector<Decay>& decays = {});

// A per-head parameter of the layer's groups (kGammaParam, kDecayParam, the gate's) as [H, ...] in
// head order for a layer of n_heads heads, gathered from its groups (differentiable in theirs); 0
// for heads in no group with it (softmax heads; linear heads' gamma); undefined when no group has it.
at::Tensor layer_head_param(const std::vector<HeadGroup>& layer, const char* name, int64_t n_heads);

// Decayed heads' start (DistillOptions::decay_init fit): layer s's delta [H] (float32), each head's
// fit_decay_to_softmax (analysis/structured_mixers.h) over every window of the capture (one number
// per head, so the held-out windows are read too), within the model's sliding window. The
// untrained model linearize reports starts from the same.
at::Tensor fitted_decay_delta(const CaptureStore& capture, int layer);
// Where decayed heads of layer s start, delta [H] for the layer's heads' decays `decays`:
// fitted_decay_delta for decay_init fit (Error naming the decay initialization without a capture),
// kUndecayedDelta for none; undefined when no head of the layer decays. Distill's start and
// linearize's untrained model.
at::Tensor initial_decay_delta(const std::vector<Decay>& decays, DecayInit init, const CaptureStore* capture, int layer);
// Each head's decay [S][H] for --decay `choice`: that kind for every map head (softmax heads
// none), or for mixer each map head's best_student of its mixer distances on the capture
// (head_mixer_distances at N = kStudentMixerState: the metrics view's mixer panel at --mixer-state
// 16); Error naming the decay for mixer without a capture. For mixer beside a window W > 0 the
// students also choose the types (in and out; empty in: every head a map head): each map head
// hybrid where its window class (W) takes kWindowGain off its student's distance, else linear; the
// softmax heads stay. types are left as they are otherwise.
std::vector<std::vector<Decay>> head_decays_for(Decay choice, int64_t window, std::vector<std::vector<HeadType>>& types,
                                                const CaptureStore* capture, int n_layer, int n_head);
// Untrained decayed heads where training would start them: every layer's deltas (fixed heads) or
// gates (gated: w = 0 [H, d_model], b = the delta: the same decay) from initial_decay_delta, for
// each head's decay `decays` [S][H] (head_decays_for; maps.decays set when they differ). Nothing
// when no head decays. linearize's untrained model and `convert --decay`.
void add_initial_decays(HeadFeatureMaps& maps, const std::vector<std::vector<Decay>>& decays, DecayInit init,
                        const CaptureStore* capture, int n_layer, int64_t n_head, int64_t d_model);
// A capture must be of `model` (named so in the message): its layers, heads, head dim and (when it
// records one) width; Error naming the capture `where` otherwise.
void check_capture_of(const CaptureStore& cap, const ModelConfig& model, const std::string& where,
                      const std::string& model_name);
// Sets the groups' deltas (fixed) or gate biases b (gated, w = 0: the same decay) to delta [H] (head order).
void set_layer_decay(std::vector<HeadGroup>& layer, const at::Tensor& delta);

// Every head's trainable_head_map (groups[s] is layer s's groups) with the per-head parameters
// (balances, decays): the model runs with the trainable maps in place, and gradients reach their
// parameters. copy: every head's own FeatureMap (head_map) and detached copies instead, what a
// finished job hands on.
// types (optional, [S][H]): a mixed model's head types; the heads in no group must be its softmax heads.
std::shared_ptr<HeadFeatureMaps> group_feature_maps(const std::vector<std::vector<HeadGroup>>& groups, bool copy = false,
                                                    const std::vector<std::vector<HeadType>>& types = {});

// Direct training's loss: the mean next-token cross-entropy of `model` (as it is: with its linear
// attention) on windows ids [B, L] (int64, L >= 2); differentiable in whatever requires grad.
at::Tensor direct_loss(const Model& model, const at::Tensor& ids);

// The training loss of a mini-batch q, k [B, H, L, d] (float32), averaged over windows, heads and
// rows; differentiable in maps.params. `pairs` (int64 [P, 2], i >= j) are the l2 pairs; `v`
// [B, H, L, d_v] the values, for output; `x` [B, L, D] the layer's inputs, for gated decays. A
// layerwise loss (not direct).
at::Tensor layer_loss(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, DistillLoss loss,
                      const at::Tensor& pairs = {}, const at::Tensor& v = {}, const at::Tensor& x = {});
// A layer's (or group's) head outputs [B, H, L, d_v] from q, k, v [B, H, L, d]: y = A V (the
// softmax the model ran) and y_hat = Ahat V (the maps'; 0 on rows without weight), as the output
// loss compares them; differentiable in maps.params. x: gated decays' layer inputs.
struct LayerOutputs {
  at::Tensor y, y_hat;
};
LayerOutputs layer_outputs(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& x = {});
// The block loss (paper 003's hidden-state alignment, SPEC 5): the mean squared error over tokens
// and d_model of layer s's output (the residual stream after its attention and MLP,
// Model::layer_output) with the maps' head outputs in place of softmax's, from the same input
// resid [B, L, D]. `heads` are every head of the layer, in order ([B, H, L, d]); differentiable in
// heads.y_hat.
at::Tensor block_loss(const Model& model, int layer, const at::Tensor& resid, const LayerOutputs& heads);

// Mean row KL(A || Ahat) (no gradient).
double layer_kl(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& x = {});

// Benchmark hook (training ms per sample, paper 000 Table 5): the wall time in seconds of `steps`
// training steps exactly as distill() runs them (forward, backward, AdamW update of the maps), after
// one untimed warm-up step, on the device the tensors are on (the clock stops when it has finished).
// groups[s] are layer s's groups (init_layer_groups), updated in place.
//   loss kl | softmax | l2: q[s], k[s] [B, H, L, d] float32 are layer s's mini-batch (layers run
//                           concurrently, as in distill); model and ids are ignored
//   loss direct:            model (float32 weights, no gradient) runs with the maps in place on
//                           ids [B, L]; q and k are ignored
// options gives lr, lr_alpha, weight_decay, schedule, steps, l2_pairs and seed. Throws Error on shape mismatch.
struct DistillBench {
  int steps = 1;  // timed steps after the warm-up: the result is their total time
  DistillOptions options;
  std::vector<std::vector<HeadGroup>> groups;
  std::vector<at::Tensor> q, k, v, x;  // v: for the output loss; x: gated decays' layer inputs
  const Model* model = nullptr;
  at::Tensor ids;
};
double distill_step_seconds(DistillBench& bench);

}  // namespace attnscope
