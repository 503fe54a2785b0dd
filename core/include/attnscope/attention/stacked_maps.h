// The trainable feature maps (map_family(name).trainable), each family written once, stacked over
// H heads: every parameter has the heads as its first dimension, head h's SPEC 7 tensor being its
// slice h, and a single head is a stack of one. Distillation trains stacks (distill/layer_maps.h);
// the FeatureMap of a trainable family (make_feature_map, make_learned_prf, a converted model's
// maps, the analysis) is one head of a stack. log phi is written out per map so that no feature is
// ever exponentiated on its own:
//   learned-prf  log phi_m(x) = z_m.x' - |x'|^2/2 + alpha_m/2 - log(M)/2,  x' = x / d^(1/4)
//   hedgehog     u = x W + b;  exp: [u, -u];  softmax: [log_softmax(u), log_softmax(-u)];
//                softmax-joint: log_softmax([u, -u])
//   t2r          phi = ReLU(x W + b), formed directly: its features are exactly 0 where ReLU cuts,
//                where a log would be -inf with a NaN gradient, and nothing in it can overflow
//   flex-stationary  phi(x) = exp(ls(x)) [cos(w.x), sin(w.x)], ls(x) = |x|^2 e^-tau - log(n)/2
//   flex-nonstationary  the same with [cos(w1'.x) cos(w2'.x), sin(w1'.x) cos(w2'.x)], w1' = (w1 + w2)/2,
//                w2' = (w1 - w2)/2 (omega1 = w1, omega2 = w2)
// Parameters (SPEC 7's names), the heads first: learned-prf z [H, M, d], alpha [H, M]; hedgehog
// W [H, d, M/2], b [H, M/2]; t2r W [H, d, M], b [H, M]; untied hedgehog and t2r q.W, q.b, k.W,
// k.b; flex-stationary omega [H, M/2, d], tau [H, 1]; flex-nonstationary omega1, omega2
// [H, M/2, d], tau [H, 1].
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/features.h"

namespace attnscope {

struct StackedMaps {
  std::string map;  // a trainable family
  std::string activation = "exp";  // hedgehog: exp | softmax | softmax-joint
  int64_t heads = 0, d = 0, features = 0;  // H, d, M
  std::vector<std::pair<std::string, at::Tensor>> params;  // e.g. "z" [H, M, d], "alpha" [H, M]
  // The parameter of that name; Error when there is none.
  const at::Tensor& param(const std::string& name) const;
  bool has_param(const std::string& name) const;
};

// Untied maps (hedgehog, t2r with q.* and k.*) have a layer for each side.
enum class MapSide { Query, Key };

// The stack of `spec`'s family (a trainable one) whose head i is make_feature_map's map of `spec`
// with seed seeds[i] (spec.seed is not read): float32 parameters on the CPU. Errors as
// make_feature_map's.
StackedMaps init_stacked_maps(const FeatureMapSpec& spec, const std::vector<uint64_t>& seeds);

// The features of x [B, H, L, d] (H = maps.heads), head h's vectors by head h's parameters, in the
// parameters' dtype: log phi [B, H, L, M] of the families with positive features (learned-prf,
// hedgehog) ...
at::Tensor stacked_log_features(const StackedMaps& maps, const at::Tensor& x, MapSide side);
// ... phi itself of t2r [B, H, L, M] ...
at::Tensor stacked_relu_features(const StackedMaps& maps, const at::Tensor& x, MapSide side);
// ... and of flex-stationary and flex-nonstationary the cos/sin values [B, H, L, M] with the log
// of their norm factor, ls [B, H, L].
std::pair<at::Tensor, at::Tensor> stacked_fourier_features(const StackedMaps& maps, const at::Tensor& x);
// phi of any trainable family as scaled features (features.h), log_scale [B, H, L, 1]: the
// largest log feature taken out (learned-prf, hedgehog; the scale is detached: phi does not
// depend on it), the norm factor as the scale (flex-*: it carries tau's gradient), or no scale (t2r).
Features stacked_features(const StackedMaps& maps, const at::Tensor& x, MapSide side);

// Head h as a FeatureMap computed from the stacked tensors themselves (a slice of them at each call,
// so the autograd graph of every forward pass reaches the stack, e.g. through Model::forward). Its
// named_parameters() are empty: the stack's owner trains them.
std::shared_ptr<FeatureMap> stacked_head_view(const StackedMaps& maps, int64_t head);

// Head h as a FeatureMap of its own: CPU float32 copies of its parameters, in SPEC 7's shapes.
std::unique_ptr<FeatureMap> stacked_head_copy(const StackedMaps& maps, int64_t head);

// Maps of one trainable family with their own parameters (a converted model's heads, copies) and the
// same size, stacked in order (their tensors, not copies): what computes a group of heads' features
// in one call (stacked_features). nullopt for anything else (fixed maps, a trainer's views, mixed
// families or sizes): the caller computes those head by head.
std::optional<StackedMaps> stack_of_heads(const std::vector<const FeatureMap*>& heads);

}  // namespace attnscope
