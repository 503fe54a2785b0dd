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
//    "train": {"run": "...", "dimensions": "allocation" | "fixed", ...train_option_table()'s keys:
//              "feature_map", "features", "window", "loss", "steps", "lr", "batch", "seq_len",
//              "finetune_steps", "rank", "lr_alpha", "schedule", "checkpoint_every", "device", ...}}
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
#include "attnscope/pipeline/report.h"

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
enum class GridMetric { SoftmaxEntropy, SoftmaxNormalizedEntropy, SoftmaxDecay, LinearEntropy, LinearMonotonicity,
                        LinearDiscordant, Kl, Dof };
GridMetric parse_grid_metric(const std::string& name);  // else Error (quantity "grid metric")
const char* grid_metric_name(GridMetric metric);
std::vector<std::string> grid_metric_names();

// The Train tab's form: the `attnscope linearize` job it runs on the session's model and texts, as
// LinearizeOptions (so its defaults are the CLI's by construction), of which stage 1 is also what
// Distill only runs on the session's capture; and where the feature dimensions come from.
struct TrainSettings {
  LinearizeOptions linearize;
  // The dimensions: Algorithm 1 at the DoF view's strategy, budget and lambda (Linearize: on the
  // run's own capture, as the CLI; Distill only: the DoF view's allocation itself), or
  // linearize.stage1.features for every head.
  bool from_allocation = true;
};

// The Train form's options: linearize's rows, then stage 1's rows that Distill only also uses (alpha
// learning rate, schedule, checkpoint interval, device); the session's "train" object is written and
// read through them. The form's controls set these rows.
const OptionTable<TrainSettings>& train_option_table();

// The form as distill's options on the session's capture: stage 1, with features = 0 when
// from_allocation (the caller gives the DoF view's allocation file); no capture yet.
DistillOptions distill_options_of(const TrainSettings& train);
// The form as linearize's options: with from_allocation, the DoF view's strategy, budget and lambda
// (each only when it is not linearize's default for a model of head_dim, so that an untouched form
// runs exactly `attnscope linearize`'s defaults); else the fixed M. The model, texts and python
// module are the caller's.
// state_share (> 0): the DoF view's head types under a state budget (--state-share).
LinearizeOptions linearize_options_of(const TrainSettings& train, AllocStrategy strategy, int64_t budget, double lambda,
                                      int64_t head_dim, double state_share = 0);

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
  double state_share = 0;  // the DoF view's head types under a state budget (share of the KV cache; 0: off)
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

// The session's choices alone (capture settings, DoF and analysis choices, colour scale, grid metric,
// the Train form; no model, texts, capture, spectra or run), in the session file's format: what the
// window remembers between launches (its one settings store).
std::string session_choices_text(const Session& session);
// Those choices, read by the session file's reader into `session` (its model, texts, capture and run
// stay). Error naming `where` and the key, as for a session file.
void read_session_choices(const std::string& text, const std::string& where, Session& session);

// The report of the session (the workbench's Export report) on `texts`: its model, capture (length,
// windows, seed), DoF sampling, lambda, budget, multiple and analysis (the map, M, window, windows
// used, rows sampled, mixers) as `attnscope report` takes them: read back through the command line
// report_option_table() writes, so the job runs exactly what that command line says.
ReportOptions report_options_of(const Session& s, const std::vector<std::string>& texts);

}  // namespace attnscope
