// Launchers of the CUDA kernels in this folder (one operation per .cu file). Plain C++ on purpose:
// no ATen or CUDA header, so kernels/src/dispatch.cpp compiles against any LibTorch and the .cu
// files against nothing but the CUDA toolkit. All pointers are device pointers to contiguous
// row-major arrays; `stream` is a cudaStream_t (LibTorch's current stream). Each launcher returns
// an empty string on success, else the CUDA error's text (the dispatch throws it as an Error).
//
// The math is the one of include/attnscope/kernels/linear_attention.h and of the CPU kernels
// (src/cpu_chunked.cpp), which are the reference the CUDA kernels are checked against:
//   dtype T: float32, bfloat16 or float64; accumulator A: float for float32/bfloat16, double for float64.
//   Inputs q, k [N, L, M], ls [N, L], v [N, L, D] in T. Chunks of C = 64 positions; chunk t holds
//   positions [t C, min(L, t C + C)); T_c = ceil(L / C) chunks.
//   c_i = max_{j<=i} ls_j (running max), cP_t = c at position t C - 1 (-inf for t = 0).
//   m_t = max_{j in t} ls_j; A_t = sum_{j in t} exp(ls_j - m_t) k_j [v_j, 1]^T        [M, D+1]
//   P_0 = 0, P_{t+1} = exp(cP_t - cP_{t+1}) P_t + exp(m_t - cP_{t+1}) A_t            [M, D+1]
//   (cP_{t+1} = max(cP_t, m_t); exp(-inf) = 0, never -inf - -inf)
//   num'_i = sum_{j in t, j<=i} (q_i.k_j) exp(ls_j - c_i) [v_j, 1] + exp(cP_t - c_i) P_t^T q_i
//   den_i = num'_i[D]; y_i = num'_i[:D] / den_i, and y_i = NaN where den_i == 0.
//   lse_i = c_i + log(den_i), -inf where den_i <= 0 (the dispatch forms it from den and c).
// Backward, given gy [N, L, D] (T), optionally h [N, L] (T: the gradient of lse; none = 0) and the
// saved y (T), den and c (A):
//   g'_i = [gy_i / den_i, (-(gy_i . y_i) + h_i [den_i > 0]) / den_i]  (0 where den_i == 0)   [D+1]
//   (dlse_i/dw_ij = 1/den_i; rows with den_i <= 0 have lse_i = -inf and take no gradient from h_i)
//   dq_i = sum_{j in t, j<=i} (g'_i . v'_j) exp(ls_j - c_i) k_j + exp(cP_t - c_i) P_t g'_i
//   with v'_j = [v_j, 1]. For the keys, the suffix over chunks:
//   r_t = c at position (t+1) C (the first query after chunk t),
//   B_u = sum_{i in u} exp(c_first(u) - c_i) q_i g'_i^T                               [M, D+1]
//   R_{T_c-1} = 0, R_t = exp(r_t - r_{t+1}) R_{t+1} + B_{t+1}
//   dk_j = sum_{i in t, i>=j} (g'_i . v'_j) exp(ls_j - c_i) q_i + exp(ls_j - r_t) R_t v'_j
//   dv_j = sum_{i in t, i>=j} (q_i . k_j) exp(ls_j - c_i) g'_i[:D] + exp(ls_j - r_t) (R_t^T k_j)[:D]
//   dls_j = k_j . dk_j
// All exponents above are <= 0.
#pragma once
#include <cstdint>
#include <string>

namespace attnscope::kernels::cuda {

enum class DType { Float32, BFloat16, Float64 };

// The sizes the launchers take (kMaxFeatures, kMaxHeadDim of linear_attention.h, which the dispatch
// checks against these): 1 <= M <= 512, 1 <= D <= 256. The chunk kernels tile the state and
// gradient columns (over M and D + 1), so no shared-memory array grows with M or D; the limits
// bound only the recurrent step's per-block buffer and what has been reasoned through.
constexpr int64_t kMaxFeatures = 512;
constexpr int64_t kMaxHeadDim = 256;

// Workspace: the chunk states, N * ceil(L / 64) * M * (D + 1) accumulators (float or double).
int64_t forward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D);
// y [N, L, D] (T); den, c [N, L] (A).
std::string forward(DType dtype, const void* q, const void* k, const void* ls, const void* v, void* y, void* den,
                    void* c, void* workspace, int64_t N, int64_t L, int64_t M, int64_t D, void* stream);

// Workspace: two sets of chunk states (prefix P and suffix R) plus g' [N, L, D + 1], accumulators.
int64_t backward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D);
// glse [N, L] (T): the gradient of lse, or nullptr (none). dq, dk [N, L, M], dls [N, L], dv [N, L, D], all T.
std::string backward(DType dtype, const void* q, const void* k, const void* ls, const void* v, const void* y,
                     const void* den, const void* c, const void* gy, const void* glse, void* dq, void* dk, void* dls, void* dv,
                     void* workspace, int64_t N, int64_t L, int64_t M, int64_t D, void* stream);

// One token (recurrent_step): S [N, M, D], z [N, M], c [N] (A, updated in place; c = -inf before
// the first token, S and z 0), q, k [N, M], ls [N], v [N, D] (T) -> y [N, D] (T), and, where lse is
// not nullptr, lse [N] (T): c + log(q . z) after the update, -inf where q . z <= 0.
std::string recurrent_step(DType dtype, void* S, void* z, void* c, const void* q, const void* k, const void* ls,
                           const void* v, void* y, void* lse, int64_t N, int64_t M, int64_t D, void* stream);

}  // namespace attnscope::kernels::cuda
