// Feature dimensions per layer or per head as JSON ("dims"), and head types per head ("head_types"):
// one format for job.json, the allocation file and a converted model's config.json.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/attention/head.h"

namespace attnscope {

// The dims written per layer when every head of every layer agrees, else per head (SPEC 7 allows
// both): what job.json, the allocation file and a converted model's config.json write.
nlohmann::ordered_json dims_json(const std::vector<std::vector<int64_t>>& dims);
// The inverse, for n_layer x n_head: Error naming `where` for anything but whole numbers in
// 1..kMaxFeatureDim in one of the two shapes. With head types (mixed models, SPEC 7) a softmax
// head's dimension is 0 (it has no map) and every other head's in 1..kMaxFeatureDim.
std::vector<std::vector<int64_t>> parse_dims_json(const nlohmann::json& dims, int n_layer, int n_head,
                                                  const std::string& where,
                                                  const std::vector<std::vector<HeadType>>& types = {});

// Head types per head ("head_types") as SPEC 7 writes it ([["softmax"|"hybrid"|"linear", ...] per layer]), and its reader for
// n_layer x n_head against the window (check_head_types); Error naming `where`.
nlohmann::ordered_json head_types_json(const std::vector<std::vector<HeadType>>& types);
std::vector<std::vector<HeadType>> parse_head_types_json(const nlohmann::json& j, int n_layer, int n_head, int64_t window,
                                                         const std::string& where);

// Each head's decay ("head_decays", SPEC 7: [["none"|"fixed"|"gated", ...] per layer]) of a model
// that mixes them, and its reader for n_layer x n_head (softmax heads none, mixer refused); Error
// naming `where`.
nlohmann::ordered_json head_decays_json(const std::vector<std::vector<Decay>>& decays);
std::vector<std::vector<Decay>> parse_head_decays_json(const nlohmann::json& j, int n_layer, int n_head,
                                                       const std::vector<std::vector<HeadType>>& types, const std::string& where);

}  // namespace attnscope
