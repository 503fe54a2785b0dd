// The allocation file (allocation_file.h): its one writer and one reader.
#include "attnscope/allocation/allocation_file.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/formats/dims_json.h"

#include <algorithm>
#include <fstream>

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"

namespace attnscope {


nlohmann::ordered_json allocation_file_json(const DofAllocation& a) {
  const Allocation& al = a.allocation;
  nlohmann::ordered_json j;
  j["lambda"] = a.lambda;
  j["budget"] = al.budget;
  j["strategy"] = alloc_strategy_name(al.strategy);
  j["multiple_of"] = al.multiple;
  j["layer_dof"] = al.layer_dof;
  j["dims"] = al.strategy == AllocStrategy::PerHead ? nlohmann::ordered_json(al.dims) : dims_json(al.dims);
  j["mean_cost"] = al.mean_cost;
  if (!al.types.empty()) {
    j["head_types"] = head_types_json(al.types);
    j["state_bytes"] = al.state_bytes;
    j["original_kv_bytes"] = al.original_bytes;
    j["predicted_loss"] = al.predicted_loss;  // the DoF of the heads left to a map
  }
  j["head_dof"] = dof_values(a.head_dof);
  j["wide_bounds"] = nlohmann::ordered_json::array();
  for (const WideBound& w : a.wide_bounds)
    j["wide_bounds"].push_back(
        {{"layer", w.layer}, {"head", w.head}, {"dof", w.dof.value}, {"lower", w.dof.lower}, {"upper", w.dof.upper}});
  j["unconverged_heads"] = nlohmann::ordered_json::array();
  for (const auto& [l, h] : a.unconverged_heads()) j["unconverged_heads"].push_back({{"layer", l}, {"head", h}});
  return j;
}

void write_allocation_file(const std::string& path, const DofAllocation& a) {
  write_text_file(path, allocation_file_json(a).dump(2) + "\n");
}

AllocationFile read_allocation_file(const std::string& path, int n_layer, int n_head) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot be read (allocation file)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(path, std::string("is not JSON (an allocation file is `attnscope allocate --json` output): ") + e.what());
  }
  if (!j.is_object() || !j.contains("dims"))
    fail(path, "has no \"dims\" (an allocation file is `attnscope allocate --json` output)");
  AllocationFile f;
  // The window is the job's: any hybrid head passes here, the job checks it against its own.
  if (j.contains("head_types")) f.types = parse_head_types_json(j["head_types"], n_layer, n_head, 1 << 30, path + ": head_types");
  f.dims = parse_dims_json(j["dims"], n_layer, n_head, path, f.types);
  if (j.contains("strategy")) {
    if (!j["strategy"].is_string()) fail(path, "\"strategy\" is not a name");
    try {
      f.strategy = parse_alloc_strategy(j["strategy"].get<std::string>());
    } catch (const Error& e) {
      fail(path, e.what());
    }
  }
  if (j.contains("lambda")) {
    if (!j["lambda"].is_number() || !(j["lambda"].get<double>() > 0)) fail(path, "\"lambda\" is not a positive number");
    f.lambda = j["lambda"];
  }
  if (j.contains("budget")) {
    if (!j["budget"].is_number_integer() || j["budget"].get<int64_t>() < 1) fail(path, "\"budget\" is not a positive whole number");
    f.budget = j["budget"];
  }
  const char* multiple_key = j.contains("multiple_of") ? "multiple_of" : "multiple";  // the workbench wrote "multiple"
  if (j.contains(multiple_key)) {
    if (!j[multiple_key].is_number_integer() || j[multiple_key].get<int64_t>() < 1)
      fail(path, std::string("\"") + multiple_key + "\" is not a positive whole number");
    f.multiple = j[multiple_key];
  }
  return f;
}

}  // namespace attnscope
