#include "convert/converted_json.h"

#include <algorithm>

#include "attnscope/base/error.h"

namespace attnscope::convert {

nlohmann::ordered_json feature_map_json(const FeatureMapSpec& spec) {
  nlohmann::ordered_json j;
  j["name"] = spec.name;
  j["activation"] = spec.activation;
  j["tied"] = spec.tied;
  j["seed"] = spec.seed;
  j["init"] = spec.init;
  j["temperature"] = spec.temperature;
  return j;
}

nlohmann::ordered_json dims_json(const std::vector<std::vector<int64_t>>& dims) {
  bool per_layer = true;
  for (const auto& l : dims) per_layer = per_layer && std::all_of(l.begin(), l.end(), [&](int64_t m) { return m == l[0]; });
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& l : dims) {
    if (per_layer) j.push_back(l[0]);
    else j.push_back(l);
  }
  return j;
}

ConvertedHeader parse_header(const nlohmann::json& config, const std::string& file, int n_layer, int n_head) {
  if (!config.contains("attnscope") || !config["attnscope"].is_object()) fail(file, "has no \"attnscope\" object");
  const auto& a = config["attnscope"];
  const std::string where = file + ": attnscope";
  if (!a.contains("format_version") || !a["format_version"].is_number_integer() || a["format_version"] != 1)
    fail(where, "format_version must be 1 (this attnscope reads version 1)");
  if (!a.contains("feature_map") || !a["feature_map"].is_object()) fail(where, "has no feature_map object");
  const auto& fm = a["feature_map"];
  ConvertedHeader h;
  if (!fm.contains("name") || !fm["name"].is_string()) fail(where + ".feature_map", "has no name");
  h.map.name = fm["name"];
  const auto names = feature_map_names();
  if (std::find(names.begin(), names.end(), h.map.name) == names.end())
    fail(where + ".feature_map.name", "'" + h.map.name + "' is not a feature map attnscope knows");
  if (fm.contains("activation") && fm["activation"].is_string()) h.map.activation = fm["activation"];
  if (fm.contains("tied") && fm["tied"].is_boolean()) h.map.tied = fm["tied"];
  if (fm.contains("seed") && fm["seed"].is_number_unsigned()) h.map.seed = fm["seed"];
  if (fm.contains("temperature") && fm["temperature"].is_number()) h.map.temperature = fm["temperature"];
  if (!a.contains("dims") || !a["dims"].is_array() || int(a["dims"].size()) != n_layer)
    fail(where + ".dims", "must list " + std::to_string(n_layer) + " layers");
  for (int s = 0; s < n_layer; ++s) {
    const auto& d = a["dims"][s];
    std::vector<int64_t> row;
    if (d.is_number_integer()) {
      row.assign(n_head, d.get<int64_t>());
    } else if (d.is_array() && int(d.size()) == n_head) {
      for (const auto& m : d) {
        if (!m.is_number_integer()) fail(where + ".dims", "layer " + std::to_string(s) + " holds a non-integer");
        row.push_back(m.get<int64_t>());
      }
    } else {
      fail(where + ".dims", "layer " + std::to_string(s) + " must be an integer or " + std::to_string(n_head) + " integers");
    }
    for (int64_t m : row)
      if (m < 1) fail(where + ".dims", "layer " + std::to_string(s) + " has a feature dimension < 1");
    h.dims.push_back(row);
  }
  return h;
}

}  // namespace attnscope::convert
