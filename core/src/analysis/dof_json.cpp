#include "attnscope/dof_json.h"

#include <nlohmann/json.hpp>

namespace attnscope {

nlohmann::ordered_json dof_to_json(const DofSpectra& sp, double lambda) {
  nlohmann::ordered_json j;
  j["lambda"] = lambda;
  j["samples"] = sp.settings.samples;
  j["normalize"] = dof_normalize_name(sp.settings.normalize);
  j["seed"] = sp.settings.seed;
  j["capture"] = sp.capture_dir;
  j["model"] = sp.model;
  const auto heads = head_dofs(sp, lambda);
  const auto layers = layer_dofs(sp, lambda);
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
      l["heads"].push_back({{"head", h},
                            {"dof", heads[s][h].value},
                            {"lower", heads[s][h].lower},
                            {"upper", heads[s][h].upper},
                            {"samples", hs.samples},
                            {"exact", hs.exact}});
    }
    j["layers"].push_back(l);
  }
  return j;
}

}  // namespace attnscope
