// The allocation file: feature dimensions per layer or per head, as `attnscope allocate --json`
// prints them, `distill --allocation` and `convert --allocation` read them, and the workbench
// writes them beside a run. One writer, one reader:
//
//   {"lambda": 0.00390625, "budget": 64, "strategy": "dof", "multiple_of": 1,
//    "dims": [M_0, M_1, ...]              per layer (every head of layer s has M_s), or
//            [[M_00, M_01, ...], ...]     per head (`per-head`, or a layer whose heads differ),
//    "layer_dof": [...], "mean_cost": 63.5, "head_dof": [[...]],
//    "wide_bounds": [{"layer", "head", "dof", "lower", "upper"}], "unconverged_heads": [{"layer", "head"}]}
//
// Only "dims" is required on reading (a hand-written file may hold just that); "strategy", "lambda"
// and "budget" are read when present (a converted model records them).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/formats/dims_json.h"

namespace attnscope {

struct AllocationFile {
  std::vector<std::vector<int64_t>> dims;  // [S][H]: per-layer dims expanded to every head
  std::optional<AllocStrategy> strategy;
  double lambda = 0;   // 0: not recorded
  int64_t budget = 0;  // 0: not recorded
  int64_t multiple = 1;
  // "head_types" [S][H] (allocate under a state budget): a softmax head's dims entry is 0. Checked
  // against the job's window where it is used (check_head_types). Empty when absent.
  std::vector<std::vector<HeadType>> types;
};

// The file's JSON (what `allocate --json` prints and write_allocation_file writes): dims per layer
// unless the strategy is per-head or the heads of a layer differ.
nlohmann::ordered_json allocation_file_json(const DofAllocation& a);

// Writes allocation_file_json(a) to `path` (atomic). Throws Error naming the file.
void write_allocation_file(const std::string& path, const DofAllocation& a);

// Reads `path` for a model of n_layer layers and n_head heads: every dimension a whole number in
// 1..kMaxFeatureDim, per layer (a number) or per head (exactly n_head numbers) for each of the
// n_layer layers. Throws Error naming the file, the layer and the problem.
AllocationFile read_allocation_file(const std::string& path, int n_layer, int n_head);

}  // namespace attnscope
