// The results of analyze_capture (head_analysis.h) as JSON and as a table (Markdown, LaTeX, CSV
// through table.h): the one rendering `metrics`, `report` and the GUI's exports share.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/base/table.h"

namespace attnscope {

// [{"layer", "head", "softmax": {metrics}, "linear": {metrics}, "mixers": {...}}, ...]; a metric
// that is not finite is null.
nlohmann::ordered_json head_analysis_json(const std::vector<HeadAnalysis>& heads);

// One row per head: layer, head, the softmax metrics, then the linear-map and mixer columns when
// the first head has them.
Table head_analysis_table(const std::vector<HeadAnalysis>& heads);

// Which metrics are estimates from sampled rows (AnalysisOptions::sample_rows), from how many rows,
// and the largest standard error of each over the heads, in one paragraph; "" when every metric is
// exact. Whoever shows the table shows this with it.
std::string sampling_note(const std::vector<HeadAnalysis>& heads);

}  // namespace attnscope
