// What every CLI command shares: the default model, the common --model/--tokenizer options, a
// terminal progress bar, and registration hooks (one per command file).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

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

// Throws Error listing the valid names when `name` is not a feature map.
void check_feature_map_name(const std::string& name);

// A one-line bar on stderr, shown only on a terminal and only once the work has run a second.
ProgressFn terminal_progress(const std::string& label);

void register_info(CLI::App& app);
void register_logits(CLI::App& app);
void register_generate(CLI::App& app);
void register_eval(CLI::App& app);
void register_capture(CLI::App& app);
void register_pretrain(CLI::App& app);
void register_gui(CLI::App& app);

}  // namespace attnscope::cli
