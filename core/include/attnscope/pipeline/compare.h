// `attnscope compare`: the three dimension-selection strategies of paper 000 (fix, dof, dof-clip)
// end to end at one budget, and tables in the shape of its Tables 3-5 and 7. For each strategy:
// capture of the model on the text's training share -> DoF spectra -> allocation -> layerwise
// distillation -> conversion -> evaluation on the held-out share (converted_eval.h).
//
//   DIR/texts/train.txt, heldout.txt   the text split (characters, at a whitespace)
//   DIR/capture/                       the capture of the training share (attnscope capture)
//   DIR/runs/{fix,dof,dof-clip}/       the distillation jobs (SPEC 6)
//   DIR/models/{fix,dof,dof-clip}/     the converted models (SPEC 7; weights by reference)
//   DIR/quality.{md,tex,csv}           Table 3's shape: held-out loss, perplexity, attention KL
//   DIR/speed.{md,tex,csv}             Table 4's shape: seconds per generated sequence, tokens/s
//   DIR/training.{md,tex,csv}          Table 5's shape: training ms per sample
//   DIR/next_token.{md,tex,csv}        Table 7's shape: next-token loss, strategy x loss, baselines
//   DIR/compare.json                   every number above
// DIR appears whole or not at all (OutputDir).
#pragma once
#include <c10/core/ScalarType.h>

#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/convert/converted_eval.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct CompareOptions {
  std::string model;                    // a model load_model accepts
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h); unset: f32 on the CPU, bf16 on CUDA
  std::vector<std::string> texts;       // text files (read_text_documents)
  int64_t budget = 0;                   // C: the mean feature dimension per layer
  double lambda = kDefaultLambda;       // DoF tolerance
  std::string feature_map = "learned-prf";
  DistillLoss loss = DistillLoss::Softmax;  // distillation loss (layerwise)
  int64_t steps = 100;                  // distillation steps per strategy
  std::string features_from = "capture";  // where the DoF spectra come from: the capture (only)
  double heldout_share = 0.25;          // the text's tail, never captured or trained on
  int seq_len = 0;                      // capture and evaluation windows; 0 = min(n_ctx, 256)
  int num_seqs = 8;                     // capture windows
  int64_t dof_samples = 1024;           // J per head for the spectra
  int closeness_windows = 4;            // eval's closeness sample
  double min_seconds = 0.2;             // eval's timings
  uint64_t seed = 0;
  std::string python_module;            // attnscope_linear.py, copied into each converted model
};

// Every option of `attnscope compare` (compare_options.cpp): the catalogue's definitions bound to
// CompareOptions.
const OptionTable<CompareOptions>& compare_option_table();

struct StrategyResult {
  std::string strategy;          // fix | dof | dof-clip
  std::vector<int64_t> dims;     // M per layer, as `attnscope allocate --json` prints them
  double train_ms_per_sample = 0;  // distillation wall time / (steps x windows per step)
  ConvertedEvaluation eval;      // evaluate_converted on the held-out share
  double mean_attention_kl() const;
};

struct Comparison {
  DistillLoss loss = DistillLoss::Softmax;
  int64_t budget = 0;
  double lambda = 0;
  std::vector<StrategyResult> strategies;  // fix, dof, dof-clip
};

// The strategies compare runs, in order.
std::vector<std::string> compare_strategies();

// Runs everything and writes `out_dir`. Throws Error (nothing written) for a bad budget, a missing
// text, a text too short for the windows, or any failing stage.
Comparison compare(const CompareOptions& options, const std::string& out_dir, const ProgressFn& progress = nullptr);

}  // namespace attnscope
