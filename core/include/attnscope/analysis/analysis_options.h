// The options of the head analysis (AnalysisOptions) and of `attnscope metrics` and `attnscope
// maps`: the catalogue's definitions (option_defs.h) bound to their fields, for the CLI (metrics,
// maps, report) and the workbench's command lines.
#pragma once
#include <cstdint>
#include <string>

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/base/options.h"

namespace attnscope {

// "" (softmax only) or one of feature_map_names(); else Error (quantity "feature map") listing them.
void check_analysis_feature_map(const std::string& name);

// --feature-map (any map, "" for none), --features (0: the map's natural size), --window, --seed,
// --max-seqs, --sample-rows, --mixer-state, --mixer-tokens. --features and --window are written
// back only with a map, --mixer-tokens only with the mixers.
const OptionTable<AnalysisOptions>& analysis_option_table();

// The rules between the analysis options: a map that needs M without one, a window without a map.
// Error naming the quantity ("feature dimension", "window").
void check_analysis_options(const AnalysisOptions& o);

// `attnscope metrics`: every metric of every head of a capture.
struct MetricsCommand {
  std::string capture;
  AnalysisOptions analysis;
};
const OptionTable<MetricsCommand>& metrics_command_option_table();

// `attnscope maps`: one head's softmax, linear and difference maps on one window of a capture.
struct MapsCommand {
  std::string capture;
  int64_t layer = 0, head = 0, seq = 0;
  AnalysisOptions analysis;
};
// As metrics' without --mixer-state (maps draws no mixers).
const OptionTable<MapsCommand>& maps_command_option_table();

}  // namespace attnscope
