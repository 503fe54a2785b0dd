// Small tensor helpers the attention and metric code share (private to core/).
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "attnscope/base/error.h"

namespace attnscope {

// Throws Error("<where>: <what> has non-finite entries (NaN or inf)") unless every entry is finite.
inline void check_finite(const char* where, const std::string& what, const at::Tensor& t) {
  if (!at::isfinite(t).all().item<bool>()) fail(where, what + " has non-finite entries (NaN or inf)");
}

// [L, L] bool, true on and below the diagonal (key j visible to query i when j <= i); with a
// sliding window W > 0 (Mistral, ModelConfig::sliding_window) only where also i - j < W.
inline at::Tensor causal_mask(int64_t L, const at::Device& device = at::kCPU, int64_t window = 0) {
  const at::Tensor ones = at::ones({L, L}, at::TensorOptions().dtype(at::kBool).device(device));
  return window > 0 && window < L ? ones.tril().logical_and(ones.triu(1 - window)) : ones.tril();
}

}  // namespace attnscope
