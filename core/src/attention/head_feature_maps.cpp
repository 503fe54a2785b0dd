// Fresh feature maps for every head (head_feature_maps.h).
#include "attnscope/attention/head_feature_maps.h"

#include <ATen/ATen.h>

#include "attnscope/attention/head.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/base/random.h"

namespace attnscope {

FeatureMapSpec head_map_spec(const FeatureMapSpec& base, int64_t head_dim, int64_t features) {
  FeatureMapSpec s = base;
  s.d = head_dim;
  s.features = feature_map_has_fixed_size(base.name) ? 0 : features;
  return s;
}

std::vector<at::Tensor> initial_gamma(int n_layer, int n_head) {
  std::vector<at::Tensor> gamma;
  for (int s = 0; s < n_layer; ++s) gamma.push_back(at::zeros({n_head}, at::kFloat));
  return gamma;
}

at::Tensor decay_lambda(const HeadFeatureMaps& lin, int layer, const at::Tensor& x) {
  const int64_t B = x.size(0), L = x.size(1);
  switch (lin.decay()) {
    case Decay::None: return {};
    case Decay::Fixed: {
      const at::Tensor delta = lin.decay_delta[size_t(layer)].to(x.device(), at::kDouble);
      return fixed_decay_lambda(delta, L).unsqueeze(0).expand({B, delta.size(0), L});
    }
    case Decay::Gated:
      return gated_decay_lambda(x.to(at::kDouble), lin.decay_w[size_t(layer)].to(x.device()), lin.decay_b[size_t(layer)].to(x.device()));
  }
  return {};
}

at::Tensor decay_log_a_step(const HeadFeatureMaps& lin, int layer, const at::Tensor& x_t) {
  switch (lin.decay()) {
    case Decay::None: return {};
    case Decay::Fixed:
      return at::log_sigmoid(lin.decay_delta[size_t(layer)].detach().to(x_t.device(), at::kDouble)).unsqueeze(0).expand({x_t.size(0), -1});
    case Decay::Gated: {
      const at::Tensor w = lin.decay_w[size_t(layer)].detach().to(x_t.device(), at::kDouble);
      const at::Tensor b = lin.decay_b[size_t(layer)].detach().to(x_t.device(), at::kDouble);
      return at::log_sigmoid(at::matmul(x_t.to(at::kDouble), w.t()) + b);
    }
  }
  return {};
}

void check_head_types(const std::vector<std::vector<HeadType>>& types, int n_layer, int n_head, int64_t window,
                      const std::string& where) {
  if (types.empty()) return;
  if (int(types.size()) != n_layer)
    fail(where, std::to_string(types.size()) + " layers of head types for a model of " + std::to_string(n_layer));
  for (int s = 0; s < n_layer; ++s) {
    if (int(types[s].size()) != n_head)
      fail(where, "layer " + std::to_string(s) + " lists " + std::to_string(types[s].size()) + " head types for " +
                      std::to_string(n_head) + " heads");
    for (int h = 0; h < n_head; ++h)
      if (types[s][h] == HeadType::Hybrid && window < 1)
        fail(where, "layer " + std::to_string(s) + " head " + std::to_string(h) +
                        " is hybrid, which needs a window of at least 1 token (the window is " + std::to_string(window) + ")");
  }
}

std::vector<std::vector<HeadType>> head_types_of(const HeadFeatureMaps& lin) {
  std::vector<std::vector<HeadType>> out(lin.maps.size());
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) out[s].push_back(lin.type(int64_t(s), int64_t(h)));
  return out;
}

int64_t state_values(const HeadFeatureMaps& lin, int64_t head_dim, int64_t T) {
  int64_t values = 0;
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) {
      const HeadType type = lin.type(int64_t(s), int64_t(h));
      const int64_t M = lin.maps[s][h] ? lin.maps[s][h]->feature_dim() : 0;
      values += head_cost(type, head_dim, head_dim, T, M, lin.window, lin.decay() != Decay::None).state_values;
    }
  return values;
}

int64_t kv_cache_values(int64_t n_layer, int64_t n_kv_head, int64_t head_dim, int64_t T) {
  return n_layer * n_kv_head * head_cost(HeadType::Softmax, head_dim, head_dim, T).state_values;
}

HeadFeatureMaps make_head_feature_maps(const FeatureMapSpec& spec, const std::vector<std::vector<int64_t>>& dims,
                                      int n_layer, int n_head, int head_dim, int64_t window,
                                      const std::vector<std::vector<HeadType>>& types) {
  if (map_family(spec.name).positional)
    fail("feature map " + spec.name, "depends on token positions and a horizon; it cannot run as a converted model");
  check_head(spec.name, window);
  check_head_types(types, n_layer, n_head, window);
  if (int(dims.size()) != n_layer) fail("dims", std::to_string(dims.size()) + " layers for a model of " + std::to_string(n_layer));
  HeadFeatureMaps lin;
  lin.maps.resize(n_layer);
  for (int s = 0; s < n_layer; ++s) {
    if (int(dims[s].size()) != n_head)
      fail("dims", "layer " + std::to_string(s) + " has " + std::to_string(dims[s].size()) + " heads, the model " +
                       std::to_string(n_head));
    for (int h = 0; h < n_head; ++h) {
      if (!types.empty() && types[s][h] == HeadType::Softmax) {
        lin.maps[s].push_back(nullptr);
        continue;
      }
      FeatureMapSpec hs = head_map_spec(spec, head_dim, dims[s][h]);
      hs.seed = derive_seed(spec.seed, s, h);
      lin.maps[s].push_back(std::shared_ptr<FeatureMap>(make_feature_map(hs)));
    }
  }
  lin.window = window;
  lin.types = types;
  if (map_head_type(window) == HeadType::Hybrid) lin.gamma = initial_gamma(n_layer, n_head);
  return lin;
}

std::vector<std::vector<int64_t>> head_dims(const HeadFeatureMaps& lin) {
  std::vector<std::vector<int64_t>> dims;
  for (const auto& layer : lin.maps) {
    dims.emplace_back();
    for (const auto& map : layer) dims.back().push_back(map ? map->feature_dim() : 0);
  }
  return dims;
}

}  // namespace attnscope
