// DoF results as JSON (dof_json.h).
#include "attnscope/analysis/dof_json.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace attnscope {
namespace {

// JSON has no NaN: a missing value is null.
nlohmann::ordered_json number_or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

}  // namespace

nlohmann::ordered_json dof_to_json(const DofSpectra& sp, double lambda) {
  const auto heads = head_dofs(sp, lambda);
  const auto layers = layer_dofs(sp, lambda);
  const auto conv = head_convergence(sp, lambda);
  nlohmann::ordered_json j;
  j["lambda"] = lambda;
  j["samples"] = sp.settings.samples;
  j["max_samples"] = sp.settings.max_samples;  // the cap of J per head; each head's J used is its "samples"
  int64_t used = -1;
  for (const HeadSpectrum& hs : sp.heads) used = used == -1 || used == hs.samples ? hs.samples : -2;
  j["samples_used"] = used >= 0 ? nlohmann::ordered_json(used) : nullptr;
  j["normalize"] = dof_normalize_name(sp.settings.normalize);
  j["seed"] = sp.settings.seed;
  j["capture"] = sp.capture_dir;
  j["model"] = sp.model;
  j["convergence_tolerance"] = kDofConvergenceTolerance;
  int fallbacks = 0;
  for (const HeadSpectrum& hs : sp.heads) fallbacks += fast_path_fell_back(sp.settings, hs);
  j["tolerance"] = sp.settings.tolerance;
  j["fallback_heads"] = fallbacks;  // solved exactly: fast-path bounds not within the tolerance at top_k
  int unconverged = 0;
  for (const auto& row : conv)
    for (const DofConvergence& c : row) unconverged += c.unconverged();
  j["unconverged_heads"] = unconverged;
  j["layers"] = nlohmann::ordered_json::array();
  for (int s = 0; s < sp.num_layers; ++s) {
    nlohmann::ordered_json l;
    l["layer"] = s;
    l["dof"] = layers[s].value;
    l["lower"] = layers[s].lower;
    l["upper"] = layers[s].upper;
    l["heads"] = nlohmann::ordered_json::array();
    for (int h = 0; h < sp.num_heads; ++h) {
      const HeadSpectrum& hs = sp.head(s, h);
      const DofConvergence& c = conv[s][h];
      l["heads"].push_back({{"head", h},
                            {"dof", heads[s][h].value},
                            {"lower", heads[s][h].lower},
                            {"upper", heads[s][h].upper},
                            {"samples", hs.samples},
                            {"exact", hs.exact},
                            {"ritz_values", hs.exact ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(hs.eigenvalues.size())},
                            {"fallback", fast_path_fell_back(sp.settings, hs)},
                            {"unresolved", unresolved_count(hs, lambda)},
                            {"dof_half", number_or_null(c.dof_half)},
                            {"samples_half", c.samples_half},
                            {"relative_change", number_or_null(c.relative_change)},
                            {"converged", c.checked ? nlohmann::ordered_json(c.converged) : nullptr}});
    }
    j["layers"].push_back(l);
  }
  return j;
}

}  // namespace attnscope
