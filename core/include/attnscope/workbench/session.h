// A workbench session file (.attnscope, JSON): the model, texts, capture, spectra, analysis
// choices, selections and slider positions, so reopening it shows the same thing. Paths are stored
// relative to the session file's directory (a project folder moves as a whole) and held absolute
// in memory.
//
//   {"format": "attnscope.session", "version": 1,
//    "model": "...", "tokenizer": "", "texts": ["..."], "text": "typed text, when not from files",
//    "capture": {"dir": "...", "seq_len", "num_seqs", "seed", "pre_rope"},
//    "spectra": "...", "dof": {"samples", "normalize", "seed"},
//    "analysis": {"feature_map", "features", "seed", "mixer_state"},
//    "lambda", "budget", "strategy", "multiple",
//    "selection": {"layer", "head", "seq"}, "colour_scale", "metric", "view"}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"

namespace attnscope {

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
  std::string colour_scale = "linear";  // colour_scale_names()
  std::string metric = "entropy";       // what colours the head grid
  std::string view = "heads";           // heads | metrics | dof | jobs
};

// Atomic write; paths made relative to the file's directory. Throws Error naming the path.
void save_session(const std::string& path, const Session& session);
// Throws Error naming the file for a missing or malformed file, a wrong format or version, or a bad
// value (naming the key). Paths come back absolute; a missing capture or spectra path is not an
// error here (the workbench says so and recomputes).
Session load_session(const std::string& path);

}  // namespace attnscope
