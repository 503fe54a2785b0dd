// What the chunked forms on LibTorch operations share (cpu_chunked.cpp, gemm_chunked.cpp): chunks
// of C = kChunk positions, and launch.h's rule that exp(-inf) = 0, never exp(-inf - -inf).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

#include "attnscope/kernels/linear_attention.h"

namespace attnscope::kernels::chunks {

constexpr int64_t C = kChunk;

inline int64_t num_chunks(int64_t L) { return (L + C - 1) / C; }

// [N, L, X] -> [N T, C, X]: cut into chunks, padded with `pad` to T C rows, sequences x chunks flat.
inline at::Tensor chunked(const at::Tensor& x, int64_t T, double pad) {
  const int64_t L = x.size(1);
  const at::Tensor p = L == T * C ? x : at::constant_pad_nd(x, {0, 0, 0, T * C - L}, pad);
  return p.reshape({x.size(0) * T, C, x.size(2)});
}

// [N T, C, X] -> [N, L, X], padding dropped.
inline at::Tensor unchunked(const at::Tensor& x, int64_t N, int64_t L) {
  return x.reshape({N, x.size(0) / N * C, x.size(2)}).narrow(1, 0, L).contiguous();
}

// exp(a - b) for a <= b (broadcast): every exponent <= 0. 0 where a = -inf, also where b = -inf
// (a key of scale -inf, a chunk of them, a running max still -inf): never exp(-inf - -inf) = NaN.
inline at::Tensor exp_below(const at::Tensor& a, const at::Tensor& b) {
  return at::exp((a - b).masked_fill_(a == -std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()));
}

}  // namespace attnscope::kernels::chunks
