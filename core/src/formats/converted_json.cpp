#include "attnscope/formats/converted_json.h"

#include <algorithm>

#include "attnscope/formats/dims_json.h"
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
  if (!a.contains("dims")) fail(where, "has no dims");
  if (a.contains("trained_length")) {
    if (!a["trained_length"].is_number_integer() || a["trained_length"].get<int64_t>() < 1)
      fail(where + ".trained_length", "is not a positive whole number of tokens");
    h.trained_length = a["trained_length"];
  }
  if (a.contains("window")) {
    if (!a["window"].is_number_integer() || a["window"].get<int64_t>() < 0)
      fail(where + ".window", "is not a whole number of tokens (0: plain linear attention)");
    h.window = a["window"];
  }
  if (a.contains("decay")) {
    if (!a["decay"].is_string()) fail(where + ".decay", "must be a string: none, fixed or gated");
    try {
      h.decay = parse_head_decay(a["decay"].get<std::string>());
    } catch (const Error& e) {
      fail(where + ".decay", e.what());
    }
  }
  if (a.contains("head_types")) h.types = parse_head_types_json(a["head_types"], n_layer, n_head, h.window, where + ".head_types");
  h.dims = parse_dims_json(a["dims"], n_layer, n_head, where + ".dims", h.types);
  if (a.contains("head_decays")) {
    if (a.contains("decay"))
      fail(where + ".head_decays", "and \"decay\" both given: a model names one decay for every head or each head's (head_decays)");
    h.decays = parse_head_decays_json(a["head_decays"], n_layer, n_head, h.types, where + ".head_decays");
  }
  return h;
}

}  // namespace attnscope::convert
