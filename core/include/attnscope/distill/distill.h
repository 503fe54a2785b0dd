// Distillation of feature maps (SPEC 5-6; paper 000 sec. 3.3 and 4, paper 004 sec. 4), as a job in
// a run directory (run_dir.h). Its options, their table and job.json: distill_options.h.
//
// Layerwise (losses kl, softmax, l2): each layer learns from the captured q, k of the original
// model (teacher-forced), so layers are independent. All heads of a layer that share a feature
// dimension train as one batched computation (every parameter stacked over heads), and layers run
// concurrently, across ranks too (distributed.h).
// Direct (loss direct, paper 000's `direct`): the whole frozen model runs with linear attention in
// place (every head its map) on windows of a text, and only the maps learn, from the next-token
// cross-entropy.
//
// Trainable maps: learned-prf (z, alpha; lr and lr_alpha), hedgehog (W, b; tied or q.* / k.*),
// t2r (W [d, M], b [M]: ReLU(x W + b); tied or q.* / k.*), flex-stationary (omega [M/2, d], tau)
// and flex-nonstationary (omega1, omega2 [M/2, d], tau); the Fourier kernels can be negative and
// are clamped at 0 like linear attention's (SPEC 5).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/base/progress.h"
#include "attnscope/distill/distill_options.h"

namespace attnscope {

struct HeadFeatureMaps;

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
  std::shared_ptr<const HeadFeatureMaps> maps;  // the trained map of every head (float32, CPU)
  double initial_val_loss = 0, val_loss = 0;    // direct: held-out next-token loss (nats); NaN otherwise
};

// Runs the job into run_dir: every check first (options, the capture or model and text, the
// dims), then RUN/job.json, metrics.jsonl per step (layerwise: one line per layer; direct: one
// line with the model's loss), a checkpoint every checkpoint_every steps, then
// feature_maps.safetensors and report.json. Cancelled from `progress` it stops at the next step
// and leaves the last complete checkpoint. Throws Error, naming the quantity or file, before it
// writes anything when the job cannot run.
DistillResult distill(const DistillOptions& options, const std::string& run_dir, const ProgressFn& progress = nullptr);

// Continues the killed or cancelled job in run_dir from its last checkpoint (or from step 0 when
// it was killed before the first one) to the result an uninterrupted run gives: every option is
// RUN/job.json's; `device` moves it to another device. Error naming the file when RUN is no run
// directory or its checkpoint does not belong to its job.
DistillResult resume_distill(const std::string& run_dir, const ProgressFn& progress = nullptr,
                             std::optional<Device> device = std::nullopt);

}  // namespace attnscope
