// Features with a per-vector scale: phi(x) = exp(log_scale) * values.
//
// Exponential feature maps (PRF, Hedgehog's exp, exp(t x), Flexformer) have features like
// exp(w.x' - |x'|^2 / 2): with |x|^2 / sqrt(d) in the hundreds, which real heads reach, every
// feature under- or overflows even in float64. Taking the largest exponent of each vector out as
// log_scale keeps `values` in range (for the PRF family max(values) = 1), and the scale is carried
// in the log domain by linear_map, linear_attention_output and compute_head_metrics.
#pragma once
#include <ATen/core/Tensor.h>

namespace attnscope {

struct Features {
  at::Tensor values;     // [..., M]
  at::Tensor log_scale;  // [..., 1], finite

  Features() = default;
  Features(at::Tensor values, at::Tensor log_scale) : values(std::move(values)), log_scale(std::move(log_scale)) {}
  // Plain features, log_scale = 0. Implicit on purpose: wherever scaled features are taken, phi
  // itself may be passed.
  Features(at::Tensor values);  // NOLINT(google-explicit-constructor)
};

}  // namespace attnscope
