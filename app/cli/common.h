// What every CLI command shares: the default model, the common --model/--tokenizer options, a
// terminal progress bar, and registration hooks (one per command file).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/analysis/dof.h"
#include "attnscope/base/figure.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/model/model.h"
#include "attnscope/base/progress.h"

namespace attnscope::cli {

// The bundled model under resources/ (ATTNSCOPE_RESOURCES overrides where resources live).
std::string resources_dir();
std::string default_model();
// The sample texts under resources/texts (*.txt, sorted); Error naming the folder when there are none.
std::vector<std::string> default_texts();

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

// The head-analysis options shared by `metrics`, `maps` and `report`. The feature-map name is
// checked while parsing (an unknown name is a usage error, exit 2); call check() in the callback
// for the rules between options.
struct AnalysisArgs {
  AnalysisOptions opt;
  void add_to(CLI::App* cmd, bool mixers = true);
  void check() const;  // a map that needs M without --features: a usage error
};

// A CLI11 validator accepting "" (softmax only) or any name core's feature_map_names() lists.
CLI::Validator feature_map_validator();

// The figure writer of this build: Qt's in the GUI build when Qt can start (offscreen without a
// display), else null with a note on stderr saying that only CSV/tables are written.
const FigureWriter* figure_writer(const std::string& command);

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
void register_distill(CLI::App& app);
void register_jobs(CLI::App& app);
void register_convert(CLI::App& app);
void register_bench(CLI::App& app);
void register_attention_bench(CLI::App* bench);  // bench_attention.cpp
void register_dof_bench(CLI::App* bench);        // bench_dof.cpp
void register_compare(CLI::App& app);

}  // namespace attnscope::cli
