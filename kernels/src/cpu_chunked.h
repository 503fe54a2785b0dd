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
Backward backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                  const Forward& saved, const at::Tensor& gy);

// q, k [N, M], ls [N], v [N, D] -> y [N, D]; the state (allocated by the dispatch: contiguous,
// float32/float64 like q) is updated in place.
at::Tensor recurrent_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls,
                          const at::Tensor& v);

}  // namespace attnscope::kernels::cpu
