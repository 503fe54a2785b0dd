// The results of analyze_capture (head_analysis.h) as JSON and as a table (Markdown, LaTeX, CSV
// through table.h): the one rendering `metrics`, `report` and the GUI's exports share.
#pragma once
#include <nlohmann/json_fwd.hpp>
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

}  // namespace attnscope
