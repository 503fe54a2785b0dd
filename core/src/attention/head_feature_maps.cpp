// Fresh feature maps for every head (head_feature_maps.h).
#include "attnscope/attention/head_feature_maps.h"

#include <ATen/ATen.h>

#include <optional>

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

Decay uniform_decay(const HeadFeatureMaps& lin) {
  std::optional<Decay> one;
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) {
      if (lin.type(int64_t(s), int64_t(h)) == HeadType::Softmax) continue;
      const Decay d = lin.decay(int64_t(s), int64_t(h));
      if (one && *one != d) return Decay::Mixer;
      one = d;
    }
  return one.value_or(Decay::None);
}

void set_head_decays(HeadFeatureMaps& lin, std::vector<std::vector<Decay>> decays) {
  lin.decays = std::move(decays);
  if (uniform_decay(lin) != Decay::Mixer) lin.decays.clear();
}

namespace {

// Layer s's map heads by decay: which kinds it has, and [H] masks of its fixed and gated heads
// (on `device`) for a layer that has more than one kind.
struct LayerDecays {
  bool fixed = false, gated = false, none = false;
  at::Tensor fixed_mask, gated_mask;  // bool [H]; defined only when the layer mixes kinds
  bool mixed() const { return int(fixed) + int(gated) + int(none) > 1; }
};
LayerDecays layer_decays(const HeadFeatureMaps& lin, int layer, const at::Device& device) {
  LayerDecays d;
  const int64_t H = int64_t(lin.maps[size_t(layer)].size());
  std::vector<uint8_t> fixed(size_t(H), 0), gated(size_t(H), 0);
  for (int64_t h = 0; h < H; ++h) {
    if (lin.type(layer, h) == HeadType::Softmax) continue;  // not read: no kind of its own
    switch (lin.decay(layer, h)) {
      case Decay::Fixed: d.fixed = true, fixed[size_t(h)] = 1; break;
      case Decay::Gated: d.gated = true, gated[size_t(h)] = 1; break;
      default: d.none = true;
    }
  }
  if (d.mixed()) {
    d.fixed_mask = at::tensor(std::vector<int64_t>(fixed.begin(), fixed.end()), at::kLong).to(device).to(at::kBool);
    d.gated_mask = at::tensor(std::vector<int64_t>(gated.begin(), gated.end()), at::kLong).to(device).to(at::kBool);
  }
  return d;
}

// Each head its own kind's value of a [B, H, ...] tensor: the fixed heads' from `fixed`, the gated
// heads' from `gated` (either undefined when no head has it), 0 for the rest.
at::Tensor by_head_kind(const LayerDecays& d, const at::Tensor& fixed, const at::Tensor& gated, int64_t trailing) {
  const at::Tensor like = fixed.defined() ? fixed : gated;
  std::vector<int64_t> shape{1, d.fixed_mask.size(0)};
  for (int64_t i = 0; i < trailing; ++i) shape.push_back(1);
  at::Tensor out = at::zeros_like(like);
  if (gated.defined()) out = at::where(d.gated_mask.view(shape), gated, out);
  if (fixed.defined()) out = at::where(d.fixed_mask.view(shape), fixed, out);
  return out;
}

}  // namespace

at::Tensor decay_lambda(const HeadFeatureMaps& lin, int layer, const at::Tensor& x) {
  if (!lin.decayed()) return {};
  const int64_t B = x.size(0), L = x.size(1), H = int64_t(lin.maps[size_t(layer)].size());
  const LayerDecays d = layer_decays(lin, layer, x.device());
  at::Tensor fixed, gated;
  if (d.fixed) {
    const at::Tensor delta = lin.decay_delta[size_t(layer)].to(x.device(), at::kDouble);
    fixed = fixed_decay_lambda(delta, L).unsqueeze(0).expand({B, H, L});
  }
  if (d.gated)
    gated = gated_decay_lambda(x.to(at::kDouble), lin.decay_w[size_t(layer)].to(x.device()), lin.decay_b[size_t(layer)].to(x.device()));
  if (!d.mixed()) return fixed.defined() ? fixed : gated.defined() ? gated : at::zeros({B, H, L}, x.options().dtype(at::kDouble));
  return by_head_kind(d, fixed, gated, 1);
}

at::Tensor decay_log_a_step(const HeadFeatureMaps& lin, int layer, const at::Tensor& x_t) {
  if (!lin.decayed()) return {};
  const int64_t B = x_t.size(0), H = int64_t(lin.maps[size_t(layer)].size());
  const LayerDecays d = layer_decays(lin, layer, x_t.device());
  at::Tensor fixed, gated;
  if (d.fixed)
    fixed = at::log_sigmoid(lin.decay_delta[size_t(layer)].detach().to(x_t.device(), at::kDouble)).unsqueeze(0).expand({B, H});
  if (d.gated) {
    const at::Tensor w = lin.decay_w[size_t(layer)].detach().to(x_t.device(), at::kDouble);
    const at::Tensor b = lin.decay_b[size_t(layer)].detach().to(x_t.device(), at::kDouble);
    gated = at::log_sigmoid(at::matmul(x_t.to(at::kDouble), w.t()) + b);
  }
  if (!d.mixed()) return fixed.defined() ? fixed : gated.defined() ? gated : at::zeros({B, H}, x_t.options().dtype(at::kDouble));
  return by_head_kind(d, fixed, gated, 0);
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

void check_head_decays(const HeadFeatureMaps& lin, int n_layer, int n_head, const std::string& where) {
  if (lin.decays.empty()) return;
  const auto bad = [&](const std::string& why) { throw Error(where + ": " + why, "decay"); };
  if (int(lin.decays.size()) != n_layer)
    bad(std::to_string(lin.decays.size()) + " layers of head decays for a model of " + std::to_string(n_layer));
  for (int s = 0; s < n_layer; ++s) {
    if (int(lin.decays[size_t(s)].size()) != n_head)
      bad("layer " + std::to_string(s) + " lists " + std::to_string(lin.decays[size_t(s)].size()) + " head decays for " +
          std::to_string(n_head) + " heads");
    for (int h = 0; h < n_head; ++h) {
      const Decay d = lin.decays[size_t(s)][size_t(h)];
      const std::string head = "layer " + std::to_string(s) + " head " + std::to_string(h);
      if (d == Decay::Mixer) bad(head + ": mixer is a training choice, not a head's decay (none, fixed or gated)");
      if (d != Decay::None && lin.type(s, h) == HeadType::Softmax) bad(head + " is a softmax head: it has no map to decay");
      if (d == Decay::Fixed && lin.decay_delta.empty()) bad(head + " has a fixed decay but the model has no deltas");
      if (d == Decay::Gated && (lin.decay_w.empty() || lin.decay_b.empty()))
        bad(head + " has a gated decay but the model has no gates (w and b)");
    }
  }
}

std::vector<std::vector<HeadType>> head_types_of(const HeadFeatureMaps& lin) {
  std::vector<std::vector<HeadType>> out(lin.maps.size());
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) out[s].push_back(lin.type(int64_t(s), int64_t(h)));
  return out;
}

std::vector<std::vector<Decay>> head_decays_of(const HeadFeatureMaps& lin) {
  std::vector<std::vector<Decay>> out(lin.maps.size());
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) out[s].push_back(lin.decay(int64_t(s), int64_t(h)));
  return out;
}

int64_t state_values(const HeadFeatureMaps& lin, int64_t head_dim, int64_t T) {
  int64_t values = 0;
  for (size_t s = 0; s < lin.maps.size(); ++s)
    for (size_t h = 0; h < lin.maps[s].size(); ++h) {
      const HeadType type = lin.type(int64_t(s), int64_t(h));
      const int64_t M = lin.maps[s][h] ? lin.maps[s][h]->feature_dim() : 0;
      values += head_cost(type, head_dim, head_dim, T, M, lin.window, lin.decay(int64_t(s), int64_t(h)) != Decay::None).state_values;
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
