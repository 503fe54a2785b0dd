// Feature dimensions as JSON (dims_json.h).
#include "attnscope/formats/dims_json.h"

#include <algorithm>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head_feature_maps.h"
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
                                                  const std::string& where, const std::vector<std::vector<HeadType>>& types) {
  if (!d.is_array()) fail(where, "\"dims\" is not a list of feature dimensions");
  if (int(d.size()) != n_layer)
    fail(where, "has dims for " + std::to_string(d.size()) + " layers, the model has " + std::to_string(n_layer));
  const auto dimension = [&](const nlohmann::json& m, size_t s) {
    const std::string layer = "layer " + std::to_string(s);
    if (!m.is_number_integer()) fail(where, layer + " has a feature dimension that is not a whole number: " + m.dump());
    const int64_t v = m.get<int64_t>();
    if (v == 0 && !types.empty()) return v;  // a softmax head's (checked per head below)
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
  for (size_t s = 0; s < types.size() && s < dims.size(); ++s)
    for (size_t h = 0; h < types[s].size() && h < dims[s].size(); ++h)
      if ((types[s][h] == HeadType::Softmax) != (dims[s][h] == 0))
        fail(where, "layer " + std::to_string(s) + " head " + std::to_string(h) + " is a " + head_type_name(types[s][h]) +
                        " head with feature dimension " + std::to_string(dims[s][h]) +
                        " (0 for a softmax head, which has no map; 1.." + std::to_string(kMaxFeatureDim) + " for the others)");
  return dims;
}

namespace {

// A per-head table of names ([[name, ...] per layer]) written and read with one name table: `name`
// and `parse` (which throws Error); `what` is the entries' noun in messages ("head type").
template <typename T>
nlohmann::ordered_json names_json(const std::vector<std::vector<T>>& table, const char* (*name)(T)) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& layer : table) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (T t : layer) row.push_back(name(t));
    j.push_back(row);
  }
  return j;
}
template <typename T>
std::vector<std::vector<T>> parse_names_json(const nlohmann::json& j, T (*parse)(const std::string&), const std::string& what,
                                             const std::string& names, const std::string& where) {
  if (!j.is_array()) fail(where, "is not a list of layers, each a list of " + what + "s (" + names + ")");
  std::vector<std::vector<T>> table;
  for (size_t s = 0; s < j.size(); ++s) {
    if (!j[s].is_array()) fail(where, "layer " + std::to_string(s) + " is not a list of " + what + "s");
    std::vector<T> row;
    for (const auto& t : j[s]) {
      if (!t.is_string()) fail(where, "layer " + std::to_string(s) + " has a " + what + " that is not a name: " + t.dump());
      try {
        row.push_back(parse(t.get<std::string>()));
      } catch (const Error& e) {
        fail(where, "layer " + std::to_string(s) + ": " + e.what());
      }
    }
    table.push_back(row);
  }
  return table;
}

}  // namespace

nlohmann::ordered_json head_types_json(const std::vector<std::vector<HeadType>>& types) {
  return names_json(types, head_type_name);
}

std::vector<std::vector<HeadType>> parse_head_types_json(const nlohmann::json& j, int n_layer, int n_head, int64_t window,
                                                         const std::string& where) {
  auto types = parse_names_json(j, parse_head_type, "head type", "softmax, hybrid, linear", where);
  check_head_types(types, n_layer, n_head, window, where);
  return types;
}

nlohmann::ordered_json head_decays_json(const std::vector<std::vector<Decay>>& decays) { return names_json(decays, decay_name); }

std::vector<std::vector<Decay>> parse_head_decays_json(const nlohmann::json& j, int n_layer, int n_head,
                                                       const std::vector<std::vector<HeadType>>& types, const std::string& where) {
  auto decays = parse_names_json(j, parse_head_decay, "head decay", "none, fixed, gated", where);
  if (int(decays.size()) != n_layer)
    fail(where, std::to_string(decays.size()) + " layers of head decays for a model of " + std::to_string(n_layer));
  for (int s = 0; s < n_layer; ++s) {
    if (int(decays[size_t(s)].size()) != n_head)
      fail(where, "layer " + std::to_string(s) + " lists " + std::to_string(decays[size_t(s)].size()) + " head decays for " +
                      std::to_string(n_head) + " heads");
    for (int h = 0; h < n_head && !types.empty(); ++h)
      if (types[size_t(s)][size_t(h)] == HeadType::Softmax && decays[size_t(s)][size_t(h)] != Decay::None)
        fail(where, "layer " + std::to_string(s) + " head " + std::to_string(h) + " is a softmax head: its decay is none");
  }
  return decays;
}

}  // namespace attnscope
