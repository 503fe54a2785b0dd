// The trainable feature maps stacked over heads: every parameter has the heads as its first
// dimension. log phi is written out per map so that no feature is ever exponentiated on its own:
//   learned-prf  log phi_m(x) = z_m.x' - |x'|^2/2 + alpha_m/2 - log(M)/2,  x' = x / d^(1/4)
//   hedgehog     u = x W + b;  exp: [u, -u];  softmax: [log_softmax(u), log_softmax(-u)]
//   t2r          phi = ReLU(x W + b), formed directly: its features are exactly 0 where ReLU cuts,
//                where a log would be -inf with a NaN gradient, and nothing in it can overflow
//   flex-stationary  phi(x) = exp(ls(x)) [cos(w.x), sin(w.x)], ls(x) = |x|^2 e^-tau - log(n)/2
//   flex-nonstationary  the same with [cos(w1'.x) cos(w2'.x), sin(w1'.x) cos(w2'.x)], w1' = (w1 + w2)/2,
//                w2' = (w1 - w2)/2 (omega1 = w1, omega2 = w2)
// the same maps as feature_map_prf.cpp and feature_map_mlp.cpp define (the tests check it).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/attention/feature_map.h"

namespace attnscope {

struct StackedMaps {
  std::string map;  // a trainable family
  std::string activation = "exp";
  int64_t heads = 0, d = 0, features = 0;
  std::vector<std::pair<std::string, at::Tensor>> params;  // e.g. "z" [H, M, d], "alpha" [H, M]
  const at::Tensor& param(const std::string& name) const;
  bool has_param(const std::string& name) const;
};

// log phi of x [B, H, L, d] with the stacked parameters; `side` is "q." or "k." for untied maps.
at::Tensor stacked_log_features(const StackedMaps& m, const at::Tensor& x, const std::string& side);
// t2r's features ReLU(x W + b) [B, H, L, M]; `side` as for stacked_log_features.
at::Tensor stacked_relu_features(const StackedMaps& m, const at::Tensor& x, const std::string& side);
// flex-stationary and flex-nonstationary: the cos/sin values [B, H, L, M] and the log scale ls
// [B, H, L] of x.
std::pair<at::Tensor, at::Tensor> stacked_fourier_features(const StackedMaps& m, const at::Tensor& x);

// One head of stacked maps as a core FeatureMap, computed from the stacked tensors (a slice of
// them at each call, so the autograd graph of every forward pass reaches the stacked leaves).
std::shared_ptr<FeatureMap> stacked_head_view(const StackedMaps& maps, int64_t head);

}  // namespace attnscope
