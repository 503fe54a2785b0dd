// Layerwise distillation of feature maps on a capture (SPEC 5-6; paper 000 sec. 3.3 and 4, paper
// 004 sec. 4): each layer learns from the captured q, k of the original model (teacher-forced), so
// layers are independent. All heads of a layer train as one batched computation: every parameter
// is stacked over heads ([H, ...]), and layers run concurrently (at::parallel_for).
//
// Trainable maps: learned-prf (z, alpha; lr and lr_alpha), hedgehog (W, b; tied or q.* / k.*),
// t2r (W [d, M], b [M]: ReLU(x W + b); tied or q.* / k.*), flex-stationary (omega [M/2, d], tau;
// its kernel can be negative and is clamped at 0 like linear attention's, SPEC 5).
// Losses, per query row i over keys j <= i (A = softmax attention, Ahat = the linear map):
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

#include "attnscope/feature_map.h"
#include "attnscope/progress.h"

namespace attnscope {

class CaptureStore;

// The maps distill can train, and the losses it knows.
std::vector<std::string> trainable_feature_maps();  // learned-prf, hedgehog, t2r, flex-stationary
std::vector<std::string> distill_losses();          // kl, softmax, l2

// SPEC 7's name of a head's map parameter: "layers.{s}.heads.{h}.feature_map.{param}".
std::string feature_map_tensor_name(int layer, int head, const std::string& param);

struct DistillOptions {
  std::string capture;      // capture directory (required)
  std::string val_capture;  // held-out capture; "" = hold out val_share of the windows
  double val_share = 0.25;
  std::string feature_map = "learned-prf";
  std::string init;                 // "" = the map's default
  bool tied = true;                 // hedgehog
  std::string activation = "exp";   // hedgehog: exp | softmax
  int64_t features = 0;             // M for every layer, or
  std::string allocation;           // `attnscope allocate --json` output: per-layer "dims", or
  std::string strategy;             // fix | dof | dof-clip: allocate() on the capture's DoF (per-head: Error)
  int64_t budget = 0;               // C, with strategy
  std::string lambda = "2^-8";      // DoF tolerance, with strategy (parse_lambda's forms)
  int64_t dof_samples = 1024;       // J per head for the spectra, with strategy (DoF seed 0, trace)
  std::vector<int64_t> dims;        // resolved per layer (filled by resolve_dims)
  std::string loss = "kl";
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

// Fills options.dims for `num_layers` layers from --features or the allocation file. Throws Error
// naming the file when it is unreadable, has no per-layer "dims", per-head dims, or the wrong layer
// count; a usage Error when not exactly one is given (a strategy needs the capture: below).
void resolve_dims(DistillOptions& options, int num_layers);
// The same, and with a strategy: the dims `attnscope allocate --capture DIR --budget C --strategy S
// --lambda X --samples J --json` prints (same spectra settings, same allocation). per-head is an
// Error naming the per-layer strategies, as distill trains one dimension per layer.
void resolve_dims(DistillOptions& options, const CaptureStore& capture);

// Checks the names (map, loss, schedule, device) and numbers; a fixed map gets an Error naming the trainable
// maps (quantity "feature map"). Throws Error.
void check_distill_options(const DistillOptions& options);

// One layer's maps: every parameter stacked over the H heads.
struct LayerMaps {
  std::string map;  // learned-prf | hedgehog
  std::string activation = "exp";
  int64_t heads = 0, d = 0, features = 0;
  std::vector<std::pair<std::string, at::Tensor>> params;  // e.g. "z" [H, M, d], "alpha" [H, M]
  // Head h's map as a core FeatureMap (copies of the parameters).
  std::unique_ptr<FeatureMap> head_map(int64_t head) const;
};

// Initial maps of a layer; head h is make_feature_map's map with seed derive_seed(seed, layer, h).
LayerMaps init_layer_maps(const DistillOptions& options, int layer, int64_t heads, int64_t d, int64_t features);

// The training loss of a mini-batch q, k [B, H, L, d] (float32), averaged over windows, heads and
// rows; differentiable in maps.params. `pairs` (int64 [P, 2], i >= j) are the l2 pairs.
at::Tensor layer_loss(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const std::string& loss,
                      const at::Tensor& pairs = {});
// Mean row KL(A || Ahat) (no gradient).
double layer_kl(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k);

struct DistillLayerResult {
  int layer = 0;
  int64_t features = 0;
  double initial_loss = 0, final_loss = 0;  // training loss of the first and last step
  double initial_val_kl = 0, val_kl = 0;    // held-out KL before training and at the end
};

struct DistillResult {
  std::vector<DistillLayerResult> layers;
  int64_t steps = 0;
  double seconds = 0;
  std::vector<LayerMaps> maps;
};

// Runs (or with `resume`, continues from RUN's checkpoint) the job in run_dir: job.json first,
// metrics.jsonl per step, a checkpoint every checkpoint_every steps, then feature_maps.safetensors
// and report.json. Cancelled from `progress` stops at the next step and leaves the last complete
// checkpoint. With resume, every option is read from RUN/job.json (the given ones are ignored), and
// the run continues from RUN/checkpoints/ (Error naming it when missing).
DistillResult distill(DistillOptions options, const std::string& run_dir, const ProgressFn& progress = nullptr,
                      bool resume = false);

// The options recorded in RUN/job.json (Error naming the file when missing or malformed).
DistillOptions read_distill_job(const std::string& run_dir);

}  // namespace attnscope
