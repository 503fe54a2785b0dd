// Layerwise distillation of feature maps on a capture (SPEC 5-6; paper 000 sec. 3.3 and 4, paper
// 004 sec. 4): each layer learns from the captured q, k of the original model (teacher-forced), so
// layers are independent. All heads of a layer train as one batched computation: every parameter
// is stacked over heads ([H, ...]), and layers run concurrently (at::parallel_for).
//
// Trainable maps: learned-prf (z, alpha; lr and lr_alpha), hedgehog (W, b; tied or q.* / k.*),
// t2r (W [d, M], b [M]: ReLU(x W + b); tied or q.* / k.*), flex-stationary (omega [M/2, d], tau)
// and flex-nonstationary (omega1, omega2 [M/2, d], tau); the Fourier kernels can be negative and
// are clamped at 0 like linear attention's (SPEC 5).
// Per-head dimensions: within a layer, the heads that share a feature dimension M form a group and
// train as one stacked LayerMaps, so a layer is a list of groups (one group with per-layer dims).
// Direct training (loss "direct", paper 000's `direct`): the whole frozen model runs with linear
// attention in place (every head its map) on windows of a text, and only the maps learn, from the
// next-token cross-entropy.
// Layerwise losses, per query row i over keys j <= i (A = softmax attention, Ahat = the linear map):
//   kl       mean row KL(A || Ahat)
//   softmax  mean row cross-entropy -sum_j A_ij log Ahat_ij
//   l2       mean squared error of kernel values on sampled pairs (i, j), both scaled by the
//            row's largest softmax kernel value exp(max_j q_i.k_j / sqrt d), which attention
//            ignores and which keeps the values in range
// Everything is computed from log phi (log domain): log Khat_ij = logsumexp_m(log phi_q + log phi_k),
// so exp never overflows on real heads. t2r's features are exactly 0 wherever ReLU cuts, so its
// kernel is formed directly (no exp to overflow) and rows with no positive weight are left out.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/progress.h"

namespace attnscope {

class CaptureStore;
class Model;
struct HeadFeatureMaps;

// The maps distill can train, and the losses it knows.
std::vector<std::string> trainable_feature_maps();  // learned-prf, hedgehog, t2r, flex-stationary, flex-nonstationary
std::vector<std::string> distill_losses();          // kl, softmax, l2, direct

// SPEC 7's name of a head's map parameter: "layers.{s}.heads.{h}.feature_map.{param}".
std::string feature_map_tensor_name(int layer, int head, const std::string& param);

struct DistillOptions {
  std::string capture;      // capture directory (required, except for direct with a model)
  std::string val_capture;  // held-out capture; "" = hold out val_share of the windows
  double val_share = 0.25;
  std::string feature_map = "learned-prf";
  std::string init;                 // "" = the map's default
  bool tied = true;                 // hedgehog
  std::string activation = "exp";   // hedgehog: exp | softmax
  int64_t features = 0;             // M for every layer, or
  std::string allocation;           // `attnscope allocate --json` output: "dims" per layer or per head, or
  std::string strategy;             // fix | dof | dof-clip | per-head: allocate() on the capture's DoF
  int64_t budget = 0;               // C, with strategy
  std::string lambda = "2^-8";      // DoF tolerance, with strategy (parse_lambda's forms)
  int64_t dof_samples = 1024;       // J per head for the spectra, with strategy (DoF seed 0, trace)
  std::vector<int64_t> dims;        // resolved per layer (filled by resolve_dims) when every head of a
                                    // layer has the same M; empty when head_dims is used
  std::vector<std::vector<int64_t>> head_dims;  // resolved per head [S][H] when heads differ, else empty
  std::string loss = "kl";
  std::string text;                 // direct: the training text (windows of seq_len tokens)
  int64_t seq_len = 0;              // direct: tokens per window; 0 = the capture's, else min(128, n_ctx)
  std::string model;                // direct: the model; "" = the capture's model
  int64_t steps = 100;
  double lr = 0.02;        // z (learned-prf), W and b (hedgehog)
  double lr_alpha = 0.2;   // alpha (learned-prf)
  double weight_decay = 0.0;
  std::string schedule = "constant";  // constant | cosine
  int64_t batch = 4;                  // windows per mini-batch
  int64_t l2_pairs = 4096;            // sampled (i, j) pairs per mini-batch for l2
  uint64_t seed = 0;
  int64_t checkpoint_every = 100;
  // cpu | cuda: where the captured q, k, the maps and their AdamW moments live. Checkpoints and
  // outputs are float32 CPU copies either way, so a run resumes on either device. With resume, ""
  // keeps the job's device.
  std::string device = "cpu";
  std::string command;  // the command line, for job.json
};

// Fills options.dims (or head_dims, for per-head dims whose heads differ within a layer) for
// `num_layers` layers from --features or the allocation file. Throws Error naming the file when it
// is unreadable, has no "dims", or the wrong layer count; a usage Error when not exactly one is
// given (a strategy needs the capture: below). The head count of per-head dims is checked by distill.
void resolve_dims(DistillOptions& options, int num_layers);
// The same, and with a strategy: the dims `attnscope allocate --capture DIR --budget C --strategy S
// --lambda X --samples J --json` prints (same spectra settings, same allocation).
void resolve_dims(DistillOptions& options, const CaptureStore& capture);

// Head h of layer s's feature dimension M (from dims or head_dims).
int64_t head_features(const DistillOptions& options, int layer, int64_t head);

// Checks the names (map, loss, schedule, device) and numbers; a fixed map gets an Error naming the trainable
// maps (quantity "feature map"). Throws Error.
void check_distill_options(const DistillOptions& options);

// One layer's maps (or one group of its heads): every parameter stacked over the H heads.
struct LayerMaps {
  std::string map;  // one of trainable_feature_maps()
  std::string activation = "exp";
  int64_t heads = 0, d = 0, features = 0;
  std::vector<std::pair<std::string, at::Tensor>> params;  // e.g. "z" [H, M, d], "alpha" [H, M]
  // Head h's map as a core FeatureMap (copies of the parameters).
  std::unique_ptr<FeatureMap> head_map(int64_t head) const;
  // Head h's map computed from the stacked parameters themselves (no copy, cast to the input's
  // dtype): gradients through its features reach params, e.g. through Model::forward (direct).
  std::shared_ptr<FeatureMap> trainable_head_map(int64_t head) const;
};

// Initial maps of a layer; head h is make_feature_map's map with seed derive_seed(seed, layer, h).
LayerMaps init_layer_maps(const DistillOptions& options, int layer, int64_t heads, int64_t d, int64_t features);

// The heads of a layer that share one feature dimension, trained as one stacked LayerMaps: maps'
// stacked index i is the layer's head heads[i].
struct HeadGroup {
  std::vector<int64_t> heads;
  LayerMaps maps;
};

// Layer s's groups, in order of first head: one group (all heads, in order) when the heads share M.
// Head h's map is init_layer_maps' head h (seed derive_seed(seed, s, h)) whatever its group.
std::vector<HeadGroup> init_layer_groups(const DistillOptions& options, int layer, int64_t heads, int64_t d);

// Linear attention over every head's trainable_head_map (groups[s] is layer s's groups): the model runs with
// the trainable maps in place, and gradients reach their parameters.
std::shared_ptr<HeadFeatureMaps> group_feature_maps(const std::vector<std::vector<HeadGroup>>& groups);

// Direct training's loss: the mean next-token cross-entropy of `model` (as it is: with its linear
// attention) on windows ids [B, L] (int64, L >= 2); differentiable in whatever requires grad.
at::Tensor direct_loss(const Model& model, const at::Tensor& ids);

// The training loss of a mini-batch q, k [B, H, L, d] (float32), averaged over windows, heads and
// rows; differentiable in maps.params. `pairs` (int64 [P, 2], i >= j) are the l2 pairs.
at::Tensor layer_loss(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const std::string& loss,
                      const at::Tensor& pairs = {});
// Mean row KL(A || Ahat) (no gradient).
double layer_kl(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k);

struct DistillLayerResult {
  int layer = 0;
  int64_t features = 0;                     // M; with per-head dims the largest of the layer's
  std::vector<int64_t> head_features;       // M of every head
  double initial_loss = 0, final_loss = 0;  // training loss of the first and last step (layerwise:
                                            // head-weighted mean over groups; direct: the model's)
  double initial_val_kl = 0, val_kl = 0;    // held-out KL before training and at the end
};

struct DistillResult {
  std::vector<DistillLayerResult> layers;
  int64_t steps = 0;
  double seconds = 0;
  std::vector<LayerMaps> maps;                 // layer s's maps with per-layer dims; empty with per-head
  std::vector<std::vector<HeadGroup>> groups;  // [layer][group]: always
  double initial_val_loss = 0, val_loss = 0;   // direct: held-out next-token loss (nats); NaN otherwise
};

// Runs (or with `resume`, continues from RUN's checkpoint) the job in run_dir: job.json first,
// metrics.jsonl per step (layerwise: one line per layer; direct: one line with the model's loss), a checkpoint every checkpoint_every steps, then feature_maps.safetensors
// and report.json. Cancelled from `progress` stops at the next step and leaves the last complete
// checkpoint. With resume, every option is read from RUN/job.json (the given ones are ignored), and
// the run continues from RUN/checkpoints/ (Error naming it when missing).
DistillResult distill(DistillOptions options, const std::string& run_dir, const ProgressFn& progress = nullptr,
                      bool resume = false);

// The options recorded in RUN/job.json (Error naming the file when missing or malformed).
DistillOptions read_distill_job(const std::string& run_dir);

// Benchmark hook (training ms per sample, paper 000 Table 5): the wall time in seconds of `steps`
// training steps exactly as distill() runs them (forward, backward, AdamW update of the maps), after
// one untimed warm-up step, on the device the tensors are on (the clock stops when it has finished). groups[s] are layer s's groups (init_layer_groups), updated in place.
//   loss kl | softmax | l2: q[s], k[s] [B, H, L, d] float32 are layer s's mini-batch (layers run
//                           concurrently, as in distill); model and ids are ignored
//   loss direct:            model (float32 weights, no gradient) runs with the maps in place on
//                           ids [B, L]; q and k are ignored
// options gives lr, lr_alpha, weight_decay, l2_pairs and seed. Throws Error on shape mismatch.
struct DistillBench {
  int steps = 1;  // timed steps after the warm-up: the result is their total time
  DistillOptions options;
  std::vector<std::vector<HeadGroup>> groups;
  std::vector<at::Tensor> q, k;
  const Model* model = nullptr;
  at::Tensor ids;
};
double distill_step_seconds(DistillBench& bench);

}  // namespace attnscope
