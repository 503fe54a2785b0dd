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

// The rows of causal_mask(L, window) at positions pos [R] (long, CPU): [R, L] bool, key j visible
// to the row at position pos[r] when j <= pos[r] and, with a window W > 0, pos[r] - j < W.
inline at::Tensor visible_keys(const at::Tensor& pos, int64_t L, int64_t window = 0) {
  const at::Tensor j = at::arange(L, at::kLong).unsqueeze(0), i = pos.unsqueeze(1);
  return window > 0 ? (j <= i).logical_and(i - j < window) : j <= i;
}

}  // namespace attnscope
