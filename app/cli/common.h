// What every CLI command shares: the default model, the common --model/--tokenizer options, a
// terminal progress bar, and registration hooks (one per command file).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/dof.h"
#include "attnscope/dof_json.h"  // dof_to_json, the DoF results as JSON
#include "attnscope/head_analysis.h"
#include "attnscope/table.h"
#include "attnscope/model.h"
#include "attnscope/progress.h"

namespace attnscope::cli {

// The bundled model under resources/ (ATTNSCOPE_RESOURCES overrides where resources live).
std::string resources_dir();
std::string default_model();

struct ModelArgs {
  std::string model;
  std::string tokenizer;
  void add_to(CLI::App* cmd);
  LoadedModel load() const;
};

// The DoF options shared by `dof`, `allocate` and `report`.
struct DofArgs {
  std::string lambda = "2^-8";
  std::string normalize = "trace";
  DofSettings settings;
  void add_to(CLI::App* cmd);
  DofSpectra compute(const std::string& capture_dir);  // with a progress bar
};

// The head-analysis options shared by `metrics`, `maps` and `report`.
struct AnalysisArgs {
  AnalysisOptions opt;
  void add_to(CLI::App* cmd);
};
nlohmann::ordered_json analysis_json(const std::vector<HeadAnalysis>& heads);
Table analysis_table(const std::vector<HeadAnalysis>& heads);
// Token labels of a capture's ids (ids themselves when its tokenizer has moved).
std::vector<std::string> token_labels(const CaptureStore& store, const std::vector<int64_t>& ids);
// Writes PREFIX_{softmax,linear,diff}.csv (+ .png with the GUI build); returns the files written.
std::vector<std::string> write_head_maps(const CaptureStore& store, int layer, int head, int seq,
                                         const AnalysisOptions& opt, const std::string& prefix);

// Throws Error when `name` is not a feature map (listing the valid names), or when it needs a
// feature dimension M and none was given. An empty name (softmax only) passes.
void check_feature_map(const std::string& name, int64_t features);

// A one-line bar on stderr, shown only on a terminal and only once the work has run a second.
ProgressFn terminal_progress(const std::string& label);

void register_info(CLI::App& app);
void register_logits(CLI::App& app);
void register_generate(CLI::App& app);
void register_eval(CLI::App& app);
void register_capture(CLI::App& app);
void register_pretrain(CLI::App& app);
void register_gui(CLI::App& app);
void register_dof(CLI::App& app);
void register_allocate(CLI::App& app);
void register_metrics(CLI::App& app);
void register_maps(CLI::App& app);
void register_report(CLI::App& app);

}  // namespace attnscope::cli
