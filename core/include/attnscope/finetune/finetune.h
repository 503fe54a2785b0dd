// Stage 2 of a conversion (SPEC 5, LoLCATs' low-rank finetune): low-rank adapters (rank r) on the
// q, k, v and o projections of a converted model, W' = W + B A (A [r, in], B [out, r], B = 0 at the
// start), trained together with the feature maps on the next-token cross-entropy plus, by default,
// the KL from the original model's next-token distribution (the same weights with softmax
// attention). A job in a run directory (SPEC 6: job.json, metrics.jsonl, checkpoints/, log.txt,
// report.json; resumable after a kill); at the end the adapters are merged into the weights and
// RUN/model is written: an ordinary converted model (SPEC 7, with "finetune": {"rank", "steps"})
// that attnscope and attnscope_linear.py load.
#pragma once
#include <c10/core/ScalarType.h>

#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct LoadedModel;
struct ModelWeights;

struct FinetuneOptions {
  std::string model;               // a converted model directory (attnscope convert's, or a run's model/)
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h); unset: f32 on the CPU, bf16 on CUDA
  std::vector<std::string> texts;  // the training text; a seeded share of its windows is held out
  int64_t rank = 8;                // r of the adapters
  int64_t steps = 200;
  double lr = 1e-3;                // the adapters
  double map_lr = 1e-3;            // the feature maps (trainable families); 0 keeps them as they are
  double kl_weight = 1.0;          // weight of KL(original || converted) per token; 0: cross-entropy alone
  int64_t seq_len = 0;             // tokens per window; 0: the length the maps were trained on, else min(n_ctx, 512)
  int64_t batch = 4;               // windows per step
  double val_share = 0.1;
  uint64_t seed = 0;
  int64_t checkpoint_every = 50;
  std::string python_module;       // attnscope_linear.py, copied into RUN/model (set by the program)
};

// Every option of `attnscope finetune` FinetuneOptions holds (python_module is the program's).
const OptionTable<FinetuneOptions>& finetune_option_table();
// `attnscope finetune ... --out RUN`, every option shell-quoted: what job.json records.
std::string finetune_command(const FinetuneOptions& o, const std::string& run_dir);
// Every check that needs no file: each option by its definition, then what a job needs. Throws
// Error naming the quantity.
void check_finetune_options(const FinetuneOptions& o);
// RUN/job.json of a finetune run, read and checked. Error naming the file.
FinetuneOptions read_finetune_job(const std::string& run_dir);

struct FinetuneResult {
  int64_t steps = 0;
  double seconds = 0;
  int64_t seq_len = 0;
  // Held-out next-token loss (nats): the original (softmax), the converted model before and after.
  double original_val_loss = 0, initial_val_loss = 0, val_loss = 0;
  std::string model_dir;  // RUN/model
};

// Runs the job into run_dir (new or empty). Every check first: the model is converted, the text
// gives at least two windows, the options are in range. Cancelled from `progress` it stops at the
// next step with its last checkpoint whole. Throws Error naming the file or quantity.
FinetuneResult finetune(const FinetuneOptions& options, const std::string& run_dir, const ProgressFn& progress = nullptr);
// Stage 2's recipe (o: texts, rank, steps, learning rate, KL weight, batch, seed, seq_len > 0, the
// same windows and mini-batches) on the ORIGINAL softmax model, in memory: what finetuning alone
// does to it (adaptation to the text), the anchor against which a conversion's cost is read.
// Returns the merged weights. Throws Error naming the quantity.
ModelWeights finetune_softmax(const LoadedModel& original, const FinetuneOptions& o, const ProgressFn& progress = nullptr);

// Continues the killed or cancelled job in run_dir to the result an uninterrupted run gives.
FinetuneResult resume_finetune(const std::string& run_dir, const ProgressFn& progress = nullptr);

}  // namespace attnscope
