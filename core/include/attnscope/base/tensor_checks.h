// Small tensor helpers the attention and metric code share (private to core/).
#pragma once
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "attnscope/base/error.h"

namespace attnscope {

// Throws Error("<where>: <what> has non-finite entries (NaN or inf)") unless every entry is finite.
// A sum is finite whenever every entry is, unless finite entries overflow it (NaN and inf always
// carry through), so a finite sum (float32 or wider, one vectorized pass: ~1/40 of an isfinite scan
// of an activation) settles the common case; anything else is scanned entry by entry.
inline void check_finite(const char* where, const std::string& what, const at::Tensor& t) {
  if (at::isFloatingType(t.scalar_type())) {
    const at::Tensor sum = t.scalar_type() == at::kDouble ? t.sum() : t.sum(at::kFloat);
    if (std::isfinite(sum.item<double>())) return;
  }
  if (!at::isfinite(t).all().item<bool>()) fail(where, what + " has non-finite entries (NaN or inf)");
}

// i - j of queries at positions query_pos [..., R] and keys at key_pos [..., C]: [..., R, C], the
// lag every mask and rule by distance reads (the masks here, head.h's hybrid heads, the mixers).
inline at::Tensor key_lag(const at::Tensor& query_pos, const at::Tensor& key_pos) {
  return query_pos.unsqueeze(-1) - key_pos.unsqueeze(-2);
}

// The keys a window of W keys holds: 0 <= lag < W (bool, lag's shape).
inline at::Tensor in_window(const at::Tensor& lag, int64_t window) { return (lag >= 0).logical_and(lag < window); }

// [L, L] bool, true on and below the diagonal (key j visible to query i when j <= i); with a
// sliding window W > 0 (Mistral, ModelConfig::sliding_window) only where also i - j < W.
inline at::Tensor causal_mask(int64_t L, const at::Device& device = at::kCPU, int64_t window = 0) {
  const at::Tensor ones = at::ones({L, L}, at::TensorOptions().dtype(at::kBool).device(device));
  return window > 0 && window < L ? ones.tril().logical_and(ones.triu(1 - window)) : ones.tril();
}

// The rows of causal_mask(L, window) at positions pos [R] (long, CPU): [R, L] bool, key j visible
// to the row at position pos[r] when j <= pos[r] and, with a window W > 0, pos[r] - j < W.
inline at::Tensor visible_keys(const at::Tensor& pos, int64_t L, int64_t window = 0) {
  const at::Tensor lag = key_lag(pos, at::arange(L, at::kLong));
  return window > 0 ? in_window(lag, window) : lag >= 0;
}

}  // namespace attnscope
