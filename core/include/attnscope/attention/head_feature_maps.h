// The feature map of every head of a model that runs linear attention (a converted model, SPEC 7,
// or one whose maps are in training): what Model::set_feature_maps takes. The converted model's
// files are read and written in convert/ (converted_model.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/head.h"

namespace attnscope {

// The feature map of every head: maps[s][h] for layer s, head h (query heads; under GQA each query
// head has its own map over the shared key/value head).
struct HeadFeatureMaps {
  std::vector<std::vector<std::shared_ptr<FeatureMap>>> maps;  // null for a softmax head
  // Mixed head types (SPEC 5 and 7): types[s][h]; empty: every head is map_head_type(window). A
  // softmax head has no map and runs softmax attention exactly (a key-value cache when generating);
  // a hybrid head uses `window`, a linear head ignores it. gamma and the decays keep one entry per
  // head; the entries of heads that do not use them are not read.
  std::vector<std::vector<HeadType>> types;
  int64_t trained_length = 0;  // the window length (tokens) the maps were trained on; 0: unknown or untrained
  // Hybrid heads (SPEC 5) when window > 0: each query attends its last `window` keys with softmax
  // weights and older keys through its map, with balance sigmoid(gamma[s][h]); gamma[s] [H]
  // float32 per layer (empty when window is 0). A trainer may set requires_grad on them.
  int64_t window = 0;
  std::vector<at::Tensor> gamma;
  // Decayed heads (SPEC 5, head.h), fixed decay: a = sigmoid(delta[s][h]) at every position;
  // delta[s] [H] float32 per layer; empty: no fixed decay.
  std::vector<at::Tensor> decay_delta;
  // Gated decay: a_t = sigmoid(w[s][h].x_t + b[s][h]) from layer s's input x_t; w[s] [H, D], b[s]
  // [H] float32 per layer; empty: no gated decay.
  std::vector<at::Tensor> decay_w, decay_b;
  // Each head's decay [S][H] (none, fixed or gated; a softmax head none) when the model mixes them
  // (training's --decay mixer); the tensors above are then there for the kinds some head has, and
  // their other heads' entries are not read. Empty: every map head has the one kind the tensors
  // say (gated with decay_w, fixed with decay_delta, else none).
  std::vector<std::vector<Decay>> decays;

  HeadType type(int64_t layer, int64_t head) const {
    return types.empty() ? map_head_type(window) : types[size_t(layer)][size_t(head)];
  }
  bool mixed() const { return !types.empty(); }
  Decay decay(int64_t layer, int64_t head) const {
    if (type(layer, head) == HeadType::Softmax) return Decay::None;
    if (!decays.empty()) return decays[size_t(layer)][size_t(head)];
    return !decay_w.empty() ? Decay::Gated : !decay_delta.empty() ? Decay::Fixed : Decay::None;
  }
  bool decayed() const { return !decay_w.empty() || !decay_delta.empty(); }
};

// The one decay every map head of `lin` has, or Decay::Mixer when they differ (a model's
// "decay", SPEC 7, or its "head_decays").
Decay uniform_decay(const HeadFeatureMaps& lin);
// Each head's decay [S][H] (none, fixed or gated), kept as lin.decays only where the map heads'
// decays differ (--decay mixer); where they agree the table stays empty and the tensors say the kind.
void set_head_decays(HeadFeatureMaps& lin, std::vector<std::vector<Decay>> decays);

// Lambda [B, H, L] of layer s's decayed heads over the layer's input x [B, L, D] (fixed:
// fixed_decay_lambda, the same for every sequence; gated: gated_decay_lambda), float64 on x's
// device (the recurrent form carries it on exactly); undefined for a model without decay. The batch form and the recurrent form's prefill.
at::Tensor decay_lambda(const HeadFeatureMaps& lin, int layer, const at::Tensor& x);
// One token's log a [B, H] of layer s from its input x_t [B, D], float64 on x's device; undefined
// without decay. The recurrent form's step: Lambda_t = Lambda_{t-1} + log a_t.
at::Tensor decay_log_a_step(const HeadFeatureMaps& lin, int layer, const at::Tensor& x_t);

// Hybrid heads' balances for a model of n_layer x n_head heads: gamma = 0 (g = 1/2), as LoLCATs
// and SPEC 5 start.
std::vector<at::Tensor> initial_gamma(int n_layer, int n_head);

// The spec of one head's map: `base` with head dimension d and M features (0 for fixed-size maps).
FeatureMapSpec head_map_spec(const FeatureMapSpec& base, int64_t head_dim, int64_t features);

// Fresh (untrained) maps of `spec` for every head: head (s, h) gets dims[s][h] features (ignored
// for fixed-size maps) and seed derive_seed(spec.seed, s, h), so heads draw independently. With
// window W > 0 the heads are hybrid (SPEC 5) with their initial balances (initial_gamma). `types`
// (optional, [S][H]) mixes head types: softmax heads get no map, and their dims are not read.
// Throws Error for a map that cannot run as a converted model (cosformer: position-dependent) and
// for head settings check_head_types (and check_head, head.h) refuse.
HeadFeatureMaps make_head_feature_maps(const FeatureMapSpec& spec, const std::vector<std::vector<int64_t>>& dims,
                                      int n_layer, int n_head, int head_dim, int64_t window = 0,
                                      const std::vector<std::vector<HeadType>>& types = {});

// The one check of a model's head types [S][H] against its shape and window: S x H types, a hybrid
// head only with window > 0; an empty table is "every head as the window says". `where` names the
// file or option in the Error (quantity "head types").
void check_head_types(const std::vector<std::vector<HeadType>>& types, int n_layer, int n_head, int64_t window,
                      const std::string& where = "head types");
// The one check of a model's per-head decays (HeadFeatureMaps::decays) against its shape, types
// and tensors: empty, or S x H kinds, none for softmax heads, never mixer, and the tensors of each
// kind some head has (decay_delta for fixed, decay_w and decay_b for gated). `where` names the file
// or option in the Error (quantity "decay").
void check_head_decays(const HeadFeatureMaps& lin, int n_layer, int n_head, const std::string& where);
// What a model of these heads keeps per sequence at context T in the recurrent form, in values
// (head_cost summed over heads: a softmax head's cache per query head, as the model keeps it), and
// what the original keeps: its key-value cache, each of n_kv_head heads per layer once.
int64_t state_values(const HeadFeatureMaps& lin, int64_t head_dim, int64_t T);
int64_t kv_cache_values(int64_t n_layer, int64_t n_kv_head, int64_t head_dim, int64_t T);
// Each head's feature dimension M [S][H] (0 for a softmax head, which has no map).
std::vector<std::vector<int64_t>> head_dims(const HeadFeatureMaps& lin);
// The types as a table with every head spelled out: types itself, or map_head_type(window) everywhere.
std::vector<std::vector<HeadType>> head_types_of(const HeadFeatureMaps& lin);
// Each head's decay [S][H] (HeadFeatureMaps::decay: softmax heads none).
std::vector<std::vector<Decay>> head_decays_of(const HeadFeatureMaps& lin);

}  // namespace attnscope
