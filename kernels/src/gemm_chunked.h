// Causal linear attention in the chunked form as batched GEMMs over chunk tensors, every step a
// LibTorch operation on the inputs' device (equations: cuda/launch.h; API:
// include/attnscope/kernels/linear_attention.h). The dispatch runs it for bfloat16 and float16 CUDA
// tensors, where at::matmul of [N T, C, X] chunk tensors runs on cuBLAS's tensor cores; the FMA
// kernels (cuda/) keep float32 and float64. It takes any device and float32, float64, bfloat16 or
// float16 (causal_linear_attention_lse_gemm), so the CPU checks it against the CPU kernel.
//
// Precision: GEMM operands in the input dtype, their products, the weights, the chunk states, the
// scan and every sum between GEMMs in float32 (float64 for float64 inputs). A float32 tensor
// cast to a bfloat16/float16 operand is first divided by a power of two per matrix (its largest
// magnitude), so float16's range holds states and gradients of any size. LibTorch's CPU GEMM has
// no float16 (1.13): float16 on the CPU multiplies in float32.
//
// The scan over chunks (the only sequential part) is a blocked prefix in the log domain: within
// groups of kScanGroup chunks one masked [G, G] weight matrix times the states (a GEMM), the group
// totals scanned the same way, recursively, and combined; every exponent is <= 0, as in launch.h.
// Time O(T_c G M D) for the scan, against O(L (C + D) M) for the rest.
//
// The backward pass is explicit (launch.h's equations), not LibTorch autograd through these
// operations: autograd would keep every chunk's C x C weights, the scan's intermediate states (a few
// [N, T_c, M, D + 1] tensors per level) and each cast operand until the backward pass, and replay a
// dozen small operations per step; the explicit pass recomputes one set of states from q, k, ls, v
// and the saved y, den and c (as the CPU and CUDA kernels do), so forward + backward holds the
// inputs and O(L) saved rows, not the forward's temporaries.
#pragma once
#include <ATen/core/Tensor.h>

#include "src/cpu_chunked.h"

namespace attnscope::kernels::gemm {

// q, k [N, L, M], ls [N, L], v [N, L, D], contiguous, one dtype, one device -> y [N, L, D] in q's
// dtype; den, c [N, L] in the accumulator dtype (float32, float64 for float64), as cpu::forward.
cpu::Forward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v);

// The explicit backward pass (launch.h's equations: the states recomputed, the suffix over chunks
// for the keys), from the saved y, den and c; gy [N, L, D], glse [N, L] or undefined, in q's dtype.
// Gradients in q's dtype.
cpu::Backward backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                       const cpu::Forward& saved, const at::Tensor& gy, const at::Tensor& glse = {});

}  // namespace attnscope::kernels::gemm
