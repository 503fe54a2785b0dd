// A workbench session file (.attnscope, JSON): the model, texts, capture, spectra, analysis
// choices, selections, slider positions and the Train tab (its form and its run), so reopening it
// shows the same thing. Paths are stored relative to the session file's directory (a project folder
// moves as a whole) and held absolute in memory. Every name in it is read through its set's one
// name table (names.h) and refused, naming the key, when it is not one of them.
//
//   {"format": "attnscope.session", "version": 1,
//    "model": "...", "tokenizer": "", "texts": ["..."], "text": "typed text, when not from files",
//    "capture": {"dir": "...", "seq_len", "num_seqs", "seed", "pre_rope"},
//    "spectra": "...", "dof": {"samples", "normalize", "seed"},
//    "analysis": {"feature_map", "features", "window", "seed", "mixer_state"},
//    "lambda", "budget", "strategy", "multiple",
//    "selection": {"layer", "head", "seq"}, "colour_scale", "metric", "view",
//    "train": {"run": "...", "feature_map", "loss", "steps", "lr", "lr_alpha", "batch", "schedule",
//              "checkpoint_every", "device", "dimensions": "allocation" | "fixed", "features", "window",
//              "seq_len", "finetune_steps", "rank"}}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/base/device.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/pipeline/linearize.h"

namespace attnscope {

// The window's views (its tabs, in order), one name table: `attnscope gui --view` and the session's
// "view" use these words.
enum class View { Heads, Metrics, Dof, Jobs, Training };
View parse_view(const std::string& name);  // one of view_names(); else Error (quantity "view")
const char* view_name(View view);
std::vector<std::string> view_names();  // heads, metrics, dof, jobs, training

// What tints the heads view's grid: one value per head (workbench/head_grids.h computes them).
//   softmax entropy, softmax normalized entropy   of the softmax map
//   linear entropy, linear monotonicity (Spearman), linear discordant pairs, KL   of the chosen
//                                                  feature map's linear map (they need one)
//   DoF                                            at the session's lambda (needs the spectra)
// Softmax's own monotonicity is not one of them: it is 1 for every head by construction.
enum class GridMetric { SoftmaxEntropy, SoftmaxNormalizedEntropy, LinearEntropy, LinearMonotonicity,
                        LinearDiscordant, Kl, Dof };
GridMetric parse_grid_metric(const std::string& name);  // else Error (quantity "grid metric")
const char* grid_metric_name(GridMetric metric);
std::vector<std::string> grid_metric_names();

// The Train tab's form: what `attnscope linearize` is asked to do with the session's model and
// texts (every field), or `attnscope distill` on the session's capture (stage 1's fields).
struct TrainSettings {
  std::string feature_map = "learned-prf";  // one of trainable_feature_maps()
  DistillLoss loss = DistillLoss::Kl;
  int64_t steps = 100;
  double lr = 0.02, lr_alpha = 0.2;
  int64_t batch = 4;
  LrSchedule schedule = LrSchedule::Constant;
  int64_t checkpoint_every = 20;
  Device device = Device::Cpu;
  bool from_allocation = true;  // the DoF view's allocation (the session's strategy, budget, lambda)
  int64_t features = 64;        // else this M for every head
  int64_t window = 0;           // hybrid heads (SPEC 5): softmax over the last W keys beside the map; 0: plain linear
  // Linearize only.
  int64_t seq_len = 0;          // tokens per window of training and held-out evaluation; 0: the context length, at most 4096
  int64_t finetune_steps = 200; // stage 2 (low-rank finetune); 0: none
  int64_t rank = 8;             // stage 2's adapter rank
};
// The form as distill's options (window included): features = 0 when from_allocation (the caller
// gives the allocation file), no capture yet.
DistillOptions distill_options_of(const TrainSettings& train);
// The form as linearize's options: map, window, fixed M, loss, steps, learning rate, batch, sequence
// length, finetune steps, rank. With from_allocation no dimensions are set (features 0, no strategy):
// the caller gives the allocation file. The model, texts and python module are the caller's too.
LinearizeOptions linearize_options_of(const TrainSettings& train);

struct Session {
  std::string model;                // anything load_model accepts (a path, or an HF cache name kept as is)
  std::string tokenizer;            // "" = the model's own
  std::vector<std::string> texts;   // sample text files
  std::string text;                 // text typed into the editor (used when `texts` is empty)
  CaptureOptions capture;
  std::string capture_dir;          // "" = not captured yet
  std::string spectra;              // a spectra.safetensors; "" = not computed yet
  DofSettings dof;
  AnalysisOptions analysis;
  double lambda = kDefaultLambda;
  int64_t budget = 64;
  AllocStrategy strategy = AllocStrategy::Dof;
  int64_t multiple = 1;
  int layer = 0, head = 0, seq = 0;
  ColourScale colour_scale = ColourScale::Linear;
  GridMetric metric = GridMetric::SoftmaxEntropy;  // what colours the head grid
  View view = View::Heads;
  TrainSettings train;
  std::string run_dir;  // the Train tab's run folder; "" = none
};

// Atomic write; paths made relative to the file's directory. Throws Error naming the path.
void save_session(const std::string& path, const Session& session);
// Throws Error naming the file for a missing or malformed file, a wrong format or version, or a bad
// value (naming the key). Paths come back absolute; a missing capture or spectra path is not an
// error here (the workbench says so and recomputes), nor is a missing run folder (the Train tab says
// so).
Session load_session(const std::string& path);

}  // namespace attnscope
