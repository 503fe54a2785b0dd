// DoF results as the JSON document `dof --json`, the report and the GUI's exports share.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "attnscope/dof.h"

namespace attnscope {

// {"lambda", "samples", "normalize", "seed", "capture", "model",
//  "layers": [{"layer", "dof", "lower", "upper", "heads": [{"head", "dof", "lower", "upper", "samples", "exact"}]}]}
nlohmann::ordered_json dof_to_json(const DofSpectra& spectra, double lambda);

}  // namespace attnscope
