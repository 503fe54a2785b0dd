// Feature dimensions as JSON (dims_json.h).
#include "attnscope/formats/dims_json.h"

#include <algorithm>

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/error.h"

namespace attnscope {

nlohmann::ordered_json dims_json(const std::vector<std::vector<int64_t>>& dims) {
  bool per_layer = true;
  for (const auto& l : dims)
    per_layer = per_layer && std::all_of(l.begin(), l.end(), [&](int64_t m) { return m == l[0]; });
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& l : dims) {
    if (per_layer) j.push_back(l.empty() ? 0 : l[0]);
    else j.push_back(l);
  }
  return j;
}

std::vector<std::vector<int64_t>> parse_dims_json(const nlohmann::json& d, int n_layer, int n_head,
                                                  const std::string& where) {
  if (!d.is_array()) fail(where, "\"dims\" is not a list of feature dimensions");
  if (int(d.size()) != n_layer)
    fail(where, "has dims for " + std::to_string(d.size()) + " layers, the model has " + std::to_string(n_layer));
  const auto dimension = [&](const nlohmann::json& m, size_t s) {
    const std::string layer = "layer " + std::to_string(s);
    if (!m.is_number_integer()) fail(where, layer + " has a feature dimension that is not a whole number: " + m.dump());
    const int64_t v = m.get<int64_t>();
    if (v < 1 || v > kMaxFeatureDim)
      fail(where, layer + " has feature dimension " + std::to_string(v) + ", outside 1.." + std::to_string(kMaxFeatureDim));
    return v;
  };
  std::vector<std::vector<int64_t>> dims;
  for (size_t s = 0; s < d.size(); ++s) {
    const nlohmann::json& v = d[s];
    if (v.is_array()) {
      if (int(v.size()) != n_head)
        fail(where, "layer " + std::to_string(s) + " lists " + std::to_string(v.size()) + " per-head dimensions, the model has " +
                        std::to_string(n_head) + " heads");
      std::vector<int64_t> row;
      for (const nlohmann::json& m : v) row.push_back(dimension(m, s));
      dims.push_back(row);
    } else {
      dims.emplace_back(size_t(n_head), dimension(v, s));
    }
  }
  return dims;
}

}  // namespace attnscope
