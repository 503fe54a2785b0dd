// The CPU kernels of causal linear attention (equations: cuda/launch.h; API:
// include/attnscope/kernels/linear_attention.h). float32 and float64, contiguous inputs
// q, k [N, L, M], ls [N, L], v [N, L, D].
#pragma once
#include <ATen/core/Tensor.h>

#include "attnscope/kernels/linear_attention.h"

namespace attnscope::kernels::cpu {

struct Forward {
  at::Tensor y;    // [N, L, D]
  at::Tensor den;  // [N, L]: the normalizer of each row (0: undefined row, y NaN)
  at::Tensor c;    // [N, L]: the running max of the key log scales, c_i
};
Forward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v);

struct Backward {
  at::Tensor dq, dk, dls, dv;
};
// gy [N, L, D]: the gradient of y; glse [N, L]: the gradient of lse = c + log(den), or undefined
// (none: y's gradient only). glse is ignored on rows with den <= 0 (lse = -inf there).
Backward backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                  const Forward& saved, const at::Tensor& gy, const at::Tensor& glse = {});

// q, k [N, M], ls [N], v [N, D] -> y [N, D]; the state (allocated by the dispatch: contiguous,
// float32/float64 like q) is updated in place. lse, when given: [N] (q's dtype), c + log(q . z),
// -inf where q . z <= 0.
at::Tensor recurrent_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls,
                          const at::Tensor& v, at::Tensor* lse = nullptr);

// hybrid_step (linear_attention.h) on contiguous float32/float64 tensors (q, k, v: N x D values;
// features N x 2 x M; log_scales N x 2; gamma, lambda N); the state's tensors are allocated by the
// dispatch. Writes y [N, D].
void hybrid_step(HybridState& state, int64_t window, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& features, const at::Tensor& log_scales, const at::Tensor& gamma, const at::Tensor& lambda,
                 at::Tensor& y);

}  // namespace attnscope::kernels::cpu
