// Feature dimensions per layer or per head as JSON ("dims"): one format for job.json, the
// allocation file and a converted model's config.json.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attnscope {

// The dims written per layer when every head of every layer agrees, else per head (SPEC 7 allows
// both): what job.json, the allocation file and a converted model's config.json write.
nlohmann::ordered_json dims_json(const std::vector<std::vector<int64_t>>& dims);
// The inverse, for n_layer x n_head: Error naming `where` for anything but whole numbers in
// 1..kMaxFeatureDim in one of the two shapes.
std::vector<std::vector<int64_t>> parse_dims_json(const nlohmann::json& dims, int n_layer, int n_head,
                                                  const std::string& where);

}  // namespace attnscope
