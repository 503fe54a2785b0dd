// DoF results as JSON: the schema of `attnscope dof --json` and of report's dof.json, kept beside
// the results so that every front end writes the same thing.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "attnscope/analysis/dof.h"

namespace attnscope {

// The DoF of every head at lambda:
//   lambda, samples (J requested), max_samples (the cap of J per head, DofSettings::max_samples),
//   samples_used (J used by every head, or null when heads differ),
//   normalize, seed, capture, model, tolerance (the fast path's), fallback_heads,
//   convergence_tolerance, unconverged_heads,
//   layers: [{layer, dof, lower, upper (the max over heads), heads: [{head, dof, lower, upper,
//            samples (J used), exact, ritz_values (the fast path's subspace size, null when exact),
//            fallback (fast_path_fell_back), unresolved (unresolved_count), dof_half, samples_half,
//            relative_change, converged}]}]
// lower == upper == dof on the exact path; on the fast path dof is the midpoint of [lower, upper].
// dof_half, relative_change and converged are null for spectra without a J/2 half (version-1 files).
nlohmann::ordered_json dof_to_json(const DofSpectra& spectra, double lambda);

}  // namespace attnscope
