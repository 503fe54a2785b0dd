// `attnscope linearize`: the whole conversion recipe as one resumable job (SPEC 6), each stage in
// the run directory OUT and skipped when a resumed run finds it done:
//
//   OUT/job.json, log.txt       the options and the command line; what happened
//   OUT/texts/                  train.txt and heldout.txt: the text's tail is held out, never trained on
//   OUT/capture/                q, k, v of windows of the training text at the length the model will
//                               be used at (default: its context length, at most 4096)
//   OUT/stage1/                 layerwise distillation (a distill run: spectra and Algorithm 1 by
//                               default, `--strategy dof --budget C`)
//   OUT/converted/              the stage-1 converted model
//   OUT/stage2/                 the low-rank finetune (a finetune run); OUT/stage2/model is the result
//   OUT/model                   the final model (a link to stage2/model, or to converted without stage 2)
//   OUT/linearize.md, .json     how close it is: held-out loss and perplexity of the original, an
//                               untrained map, stage 1 and stage 2 at several lengths, by position,
//                               the stage-1 attention KL per layer, and speed
//
// The final model is OUT/model, whichever stages ran; OUT itself stands for it wherever a model is
// taken (load_model).
#pragma once
#include <c10/core/ScalarType.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/finetune/finetune.h"

namespace attnscope {

// The options of the two jobs linearize runs, as the CLI gives them: the best of docs/RESULTS.md's
// ablation on stories260K (learned-prf beside a 64-token softmax window, DoF allocation at budget =
// head dim, output loss, learning rate 0.01, 200 finetune steps).
DistillOptions linearize_stage1_defaults();

// With a state budget (stage 1's --state-budget/--state-share), what ranks the heads for softmax,
// one name table: kl (stage 1's held-out attention KL per head, measured on the training text after
// stage 1 trained every head; the heads kept softmax lose their maps) | dof (the capture's DoF,
// before stage 1, as distill and allocate rank them).
enum class ExactHeadsBy { Kl, Dof };
ExactHeadsBy parse_exact_heads_by(const std::string& name);  // else Error (quantity "exact heads by")
const char* exact_heads_by_name(ExactHeadsBy by);
std::vector<std::string> exact_heads_by_names();

struct LinearizeOptions {
  std::string model;
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h) of the whole run; unset: f32 on the CPU
  std::vector<std::string> texts;
  double heldout_share = 0.15;
  int64_t seq_len = 0;       // capture and evaluation length; 0: the context length, at most 4096
  int64_t max_windows = 64;  // capture windows of the training text (fewer when it is shorter)
  bool speed = true;         // measure tokens/s at the run's length (each timing twice) for the report
  ExactHeadsBy exact_heads_by = ExactHeadsBy::Kl;  // with a state budget: what ranks the heads kept softmax
  // Stage 1, the distillation job OUT/stage1 runs. Set when the run starts: its capture (OUT/capture),
  // its checkpoint interval, and the budget when a strategy has none (2 x head dim for hedgehog,
  // else head dim). Its batch and seed are linearize's for both stages and the capture.
  DistillOptions stage1 = linearize_stage1_defaults();
  // Stage 2, the finetune job OUT/stage2 runs (steps 0: none). Set when the run starts: its model
  // (OUT/converted), texts (the training share), sequence length, checkpoint interval, batch, seed,
  // the maps' learning rate (its lr) and the dtype (the whole run's).
  FinetuneOptions stage2;
  std::string python_module;  // attnscope_linear.py (set by the program)
};

const OptionTable<LinearizeOptions>& linearize_option_table();
std::string linearize_command(const LinearizeOptions& o, const std::string& out_dir);
// Every check that needs no file: each option by its definition, then the rules between them.
void check_linearize_options(const LinearizeOptions& o);

struct LengthResult {
  int64_t seq_len = 0;
  double original_loss = 0, untrained_loss = 0, stage1_loss = 0, final_loss = 0;  // held-out, nats
  // The original finetuned by stage 2's recipe with softmax attention (finetune_softmax): what the
  // text alone teaches it, so final - adapted is the conversion's own cost. NaN without stage 2.
  double adapted_loss = std::nan("");
};

struct LinearizeResult {
  std::vector<LengthResult> lengths;  // ascending; the last is the run's length
  std::string final_model;            // OUT/model
  std::string report;                 // OUT/linearize.md
  double seconds = 0;
};

// Runs (or with resume, continues) the job in out_dir. Every check first; Error naming the file or
// quantity, nothing left behind for a new run that cannot start.
LinearizeResult linearize(const LinearizeOptions& options, const std::string& out_dir, const ProgressFn& progress = nullptr);
LinearizeResult resume_linearize(const std::string& out_dir, const ProgressFn& progress = nullptr);

// True when `dir` holds a linearize run (its job.json says "kind": "linearize").
bool is_linearize_run(const std::string& dir);
// The options OUT/job.json records. Error naming the file when it is not a linearize job.
LinearizeOptions read_linearize_job(const std::string& out_dir);

// OUT/linearize.json, as the run wrote it.
struct LinearizeReport {
  int64_t seq_len = 0;
  int64_t heldout_tokens = 0;               // the held-out text, never trained on
  double heldout_share = std::nan("");      // its share of the text (NaN in reports that lack it)
  std::string final_model;
  std::vector<LengthResult> lengths;        // held-out losses per length, ascending
  std::vector<double> layer_kl;             // stage 1's attention KL per layer (held-out windows)
  // What perplexity hides (faithfulness.h), against the original: the share of its recall kept per
  // lag, and greedy generation's agreement; the anchor's (original finetuned) beside the final
  // model's, NaN without stage 2. Empty in reports of earlier builds.
  struct Recall {
    int64_t lag = 0;
    double final_kept = 0, adapted_kept = std::nan("");
    bool measurable = true;  // the original copies at this lag (faithfulness.h's RecallBucket::measurable)
  };
  std::vector<Recall> recall;
  struct Generation {
    double token_match = std::nan(""), first_divergence = std::nan(""), free_running_kl = std::nan("");
    int64_t new_tokens = 0;
  };
  std::optional<Generation> final_generation, adapted_generation;
  std::vector<std::pair<std::string, double>> phases;  // each phase this process ran, with its seconds
  double seconds = 0;
};
// Empty while the run has not written linearize.json; Error naming the file when it does not read.
std::optional<LinearizeReport> read_linearize_report(const std::string& out_dir);

}  // namespace attnscope
