// The feature map of every head of a model that runs linear attention (a converted model, SPEC 7,
// or one whose maps are in training): what Model::set_feature_maps takes. The converted model's
// files are read and written in convert/ (converted_model.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "attnscope/attention/feature_map.h"

namespace attnscope {

// The feature map of every head: maps[s][h] for layer s, head h (query heads; under GQA each query
// head has its own map over the shared key/value head).
struct HeadFeatureMaps {
  std::vector<std::vector<std::shared_ptr<FeatureMap>>> maps;
  int64_t trained_length = 0;  // the window length (tokens) the maps were trained on; 0: unknown or untrained
  // Hybrid heads (SPEC 5) when window > 0: each query attends its last `window` keys with softmax
  // weights and older keys through its map, with balance sigmoid(gamma[s][h]); gamma[s] [H]
  // float32 per layer (empty when window is 0). A trainer may set requires_grad on them.
  int64_t window = 0;
  std::vector<at::Tensor> gamma;
  // Decayed heads (SPEC 5, head.h), fixed decay: a = sigmoid(delta[s][h]) at every position;
  // delta[s] [H] float32 per layer; empty: no decay.
  std::vector<at::Tensor> decay_delta;
};

// Hybrid heads' balances for a model of n_layer x n_head heads: gamma = 0 (g = 1/2), as LoLCATs
// and SPEC 5 start.
std::vector<at::Tensor> initial_gamma(int n_layer, int n_head);

// The spec of one head's map: `base` with head dimension d and M features (0 for fixed-size maps).
FeatureMapSpec head_map_spec(const FeatureMapSpec& base, int64_t head_dim, int64_t features);

// Fresh (untrained) maps of `spec` for every head: head (s, h) gets dims[s][h] features (ignored
// for fixed-size maps) and seed derive_seed(spec.seed, s, h), so heads draw independently. With
// window W > 0 the heads are hybrid (SPEC 5) with their initial balances (initial_gamma).
// Throws Error for a map that cannot run as a converted model (cosformer: position-dependent) and
// for head settings check_head (head.h) refuses.
HeadFeatureMaps make_head_feature_maps(const FeatureMapSpec& spec, const std::vector<std::vector<int64_t>>& dims,
                                      int n_layer, int n_head, int head_dim, int64_t window = 0);

}  // namespace attnscope
