// What a distillation job is asked to do (SPEC 6): its options, their one table (command line, CLI
// registration, which option sets which quantity), the job.json that records them, and their
// checks. The CLI, the workbench and job.json all go through here.
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/base/options.h"
#include "attnscope/base/device.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/attention/head.h"
#include "attnscope/run/adamw.h"

namespace attnscope {

class CaptureStore;

// The losses distill trains with (SPEC 5), one name table.
//   kl       mean row KL(A || Ahat)
//   softmax  mean row cross-entropy -sum_j A_ij log Ahat_ij
//   l2       mean squared error of kernel values on sampled pairs (i, j)
//   output   mean squared error of the head's output, A V against Ahat V (LoLCATs' attention transfer)
//   block    mean squared error of the layer's output (attention and MLP, the residual stream after
//            it) with Ahat V in place of A V, from the same input (paper 003's hidden-state alignment)
//   direct   next-token cross-entropy of the whole model with the maps in place
enum class DistillLoss { Kl, Softmax, L2, Output, Block, Direct };
DistillLoss parse_distill_loss(const std::string& name);  // else Error (quantity "loss")
const char* distill_loss_name(DistillLoss loss);
std::vector<std::string> distill_loss_names();  // kl, softmax, l2, output, block, direct

struct DistillOptions {
  // What the maps learn from.
  std::string capture;      // capture directory (required, except for direct with a model)
  std::string val_capture;  // held-out capture; "" = hold out val_share of the windows
  double val_share = 0.25;
  std::string text;         // direct: the training text (windows of seq_len tokens)
  int64_t seq_len = 0;      // direct: tokens per window; 0 = the capture's, else min(128, n_ctx)
  std::string model;        // direct: the model; "" = the capture's model
  std::optional<at::ScalarType> compute;  // --dtype (compute_dtype.h); unset: f32 on the CPU, bf16 on CUDA
  // The maps.
  std::string feature_map = "learned-prf";  // one of trainable_map_names() (attention/map_family.h)
  std::string init;                         // "" = the map's default
  bool tied = true;                         // hedgehog, t2r: one layer for queries and keys
  std::string activation = "exp";           // hedgehog: exp | softmax
  int64_t window = 0;                       // hybrid heads (SPEC 5): softmax over the last W keys beside the map; 0: plain linear
  Decay decay = Decay::None;                // decayed heads (SPEC 5): a delta per head, trained with the map
  DecayInit decay_init = DecayInit::Fit;    // fit: from the capture (needs one) | none
  // Their feature dimensions: exactly one of features, allocation, strategy.
  int64_t features = 0;                   // M for every head
  std::string allocation;                 // an allocation file (allocation_file.h)
  std::optional<AllocStrategy> strategy;  // Algorithm 1 on the capture's DoF at lambda, budget C
  int64_t budget = 0;
  double lambda = kDefaultLambda;
  int64_t dof_samples = 1024;  // J per head for the spectra (DoF seed 0, trace normalizer)
  // With a strategy: head types under a state budget (allocation.h's StateBudget) at the capture's
  // window length, bytes per sequence or a share of the original's key-value cache; 0: none.
  int64_t state_budget = 0;
  double state_share = 0;
  // Training.
  DistillLoss loss = DistillLoss::Kl;
  int64_t steps = 100;
  double lr = 0.02;        // every parameter but alpha
  double lr_alpha = 0.2;   // alpha (learned-prf)
  double weight_decay = 0.0;
  LrSchedule schedule = LrSchedule::Constant;
  int64_t batch = 4;        // windows per mini-batch
  int64_t l2_pairs = 4096;  // sampled (i, j) pairs per mini-batch for l2
  uint64_t seed = 0;
  int64_t checkpoint_every = 100;
  // Where the captured q, k, the maps and their AdamW moments live. Checkpoints and outputs are
  // float32 CPU copies either way, so a run resumes on either device.
  Device device = Device::Cpu;
};

// Every option of `attnscope distill` that DistillOptions holds: the catalogue's definitions
// (option_defs.h) bound to its fields.
const OptionTable<DistillOptions>& distill_option_table();

// The command line that reproduces the job: `attnscope distill` with every option set in `o`
// (shell-quoted) and `--out RUN`. job.json records it, `attnscope jobs` and the workbench show it.
std::string distill_command(const DistillOptions& o, const std::string& run_dir);
// `attnscope distill --resume RUN [--device D]`.
std::string distill_resume_command(const std::string& run_dir, std::optional<Device> device = std::nullopt);

// Every check that needs no file: each option by its definition (check_options), then the rules
// between options: exactly one source of dimensions (at most one with dims_given: a job.json's own dims), what direct training needs.
// Throws Error naming the quantity. distill() runs it (and the file checks) before it creates the
// run directory; resume_distill on the job's options.
void check_distill_options(const DistillOptions& o, bool dims_given = false);

// A hybrid head's window W (SPEC 5) must leave keys to the map at the training length L: W < L
// (every key in the window is softmax attention, with nothing to train). Error naming the window.
void check_window_fits(int64_t window, int64_t seq_len);

// The feature dimension of every head [S][H]: from features, the allocation file, or Algorithm 1 on
// the capture's spectra (exactly what `attnscope allocate --capture DIR --budget C --strategy S
// --lambda X --samples J --json` prints; with --multiple-of 2 for maps that need an even M:
// hedgehog and the Fourier maps). Throws Error naming the file or quantity.
// With `types` (optional): the head types of mixed models (SPEC 7), read from an allocation file
// that has them (allocate --state-budget); empty otherwise. A softmax head's dimension is 0.
std::vector<std::vector<int64_t>> distill_dims(const DistillOptions& o, int num_layers, int num_heads,
                                               const CaptureStore* capture,
                                               std::vector<std::vector<HeadType>>* types = nullptr);

// job.json (SPEC 6, formats/job_file.h): the options under their keys, and what the job resolved: the
// dims (per layer when every head of a layer agrees, else per head), the model, the world size,
// the trained length and AdamW's constants.
struct DistillJob {
  DistillOptions options;
  std::vector<std::vector<int64_t>> dims;  // [S][H]; as read from job.json, [S][1] for per-layer dims
  std::vector<std::vector<HeadType>> types;  // [S][H] mixed head types ("head_types"); empty: every head as the window says
  // [S][H] each head's decay (head_decays_for of options.decay; softmax heads none), resolved when
  // the job starts; job.json records it as "head_decays" for --decay mixer (read back on resume).
  std::vector<std::vector<Decay>> decays;
  std::string model;                       // the model the maps are for (resolved path)
  int world_size = 1;
  std::string command;                     // distill_command(options, run) when written
  int64_t trained_length = 0;              // tokens per training window (the capture's, or direct's seq_len)
  std::string file;                        // the job.json it was read from ("" for a new job)

  // dims for a model of n_layer layers and n_head heads (per-layer rows expanded to every head).
  // Throws Error naming the job's file when they do not fit.
  std::vector<std::vector<int64_t>> dims_for(int n_layer, int n_head) const;
  // Whether some head has a gated decay (training then reads the layers' inputs).
  bool has_gates() const;
};
// job.decays must be n_layer x n_head: Error naming the job's file otherwise.
void check_head_decays_of(const DistillJob& job, int n_layer, int n_head);
std::string distill_job_json(const DistillJob& job);
// RUN/job.json; Error naming the file when missing, malformed or out of range.
DistillJob read_distill_job(const std::string& run_dir);

}  // namespace attnscope
