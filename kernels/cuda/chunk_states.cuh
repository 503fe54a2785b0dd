// Phases 1 and 2 of launch.h, shared by the forward pass (forward.cu) and the backward pass, which
// recomputes the prefix states (backward.cu): the per-chunk sums of outer products and the
// exclusive prefix over chunks. Workspace layout of the states: [N, chunks, M, D + 1].
#pragma once
#include "cuda/common.cuh"

namespace attnscope::kernels::cuda {

// Phase 1: per chunk t of sequence n, the chunk's sum of outer products, written to out[n, t]:
//   keys (QUERY_GRAD false):     A_t = sum_{j in t} exp(ls_j - m_t) k_j [v_j, 1]^T,  m_t = max_{j in t} ls_j
//   queries (QUERY_GRAD true):   B_t = sum_{i in t} exp(c_first(t) - c_i) q_i g'_i^T   (backward; x = q)
// Grid (N * chunks, ceil(M / 64), ceil((D + 1) / (32 CPT))): a block computes the 64 x (32 CPT)
// tile of state rows m0..m0+63 and columns d0..d0+32 CPT-1 (CPT groups of 32; one column tile
// where D + 1 <= 160, two at D = 256). x is k or q [N, L, M]; v [N, L, D] (keys) or
// gp = g' [N, L, D+1] (queries).
template <typename T, typename A, int CPT, bool QUERY_GRAD>
__global__ void __launch_bounds__(kThreads)
    chunk_state_kernel(const T* x, const T* ls, const T* v, const A* c, const A* gp, A* out, int64_t L, int M, int D,
                       int64_t chunks) {
  __shared__ A xs[xs_size<A>()], ys[ys_size<A, CPT>()], w[kC];
  const int64_t n = blockIdx.x / chunks, t = blockIdx.x % chunks, row0 = n * L + t * kC;
  const int len = chunk_length(L, t), m0 = blockIdx.y * kC, d0 = blockIdx.z * (32 * CPT), D1 = D + 1;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The per-row weight w_j.
  if (!QUERY_GRAD) {
    if (warp == 0) {
      const A l0 = lane < len ? to_acc(ls[row0 + lane]) : A(-INFINITY);
      const A l1 = lane + 32 < len ? to_acc(ls[row0 + lane + 32]) : A(-INFINITY);
      const A m = warp_max(fmax(l0, l1));
      w[lane] = exp_diff(l0, m);
      w[lane + 32] = exp_diff(l1, m);
    }
  } else if (tid < kC) {
    w[tid] = tid < len ? exp_diff(c[row0], c[row0 + tid]) : A(0);
  }
  __syncthreads();
  const T* xn = x + row0 * M;
  A acc[8][CPT];
  zero(acc);
  block_gemm<CPT, false, true>(
      acc, len, [&](int r, int j) { return m0 + r < M ? w[j] * to_acc(xn[int64_t(j) * M + m0 + r]) : A(0); },
      [&](int j, int dt) -> A {
        const int d = d0 + dt;
        if (QUERY_GRAD) return d < D1 ? gp[(row0 + j) * D1 + d] : A(0);
        return d < D ? to_acc(v[(row0 + j) * D + d]) : d == D ? A(1) : A(0);
      },
      xs, ys);
  A* o = out + (n * chunks + t) * M * D1;
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < CPT; ++b) {
      const int m = m0 + warp + 8 * a, d = d0 + lane + 32 * b;
      if (m < M && d < D1) o[int64_t(m) * D1 + d] = acc[a][b];
    }
}

// Phase 2: in place over the chunk states of sequence n, A_t -> P_t:
//   P_0 = 0, P_{t+1} = exp(cP_t - cP_{t+1}) P_t + exp(m_t - cP_{t+1}) A_t,  cP_{t+1} = max(cP_t, m_t).
// Grid (N, ceil(E / 256)), E = M (D + 1): one thread per state element, sequential over the chunks;
// the block finds the chunk maxima m_t, 32 chunks at a time (one warp per chunk).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) prefix_scan_kernel(const T* ls, A* states, int64_t L, int64_t chunks, int E) {
  __shared__ A m_sh[32];
  const int64_t n = blockIdx.x;
  const int e = blockIdx.y * kThreads + threadIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* lsn = ls + n * L;
  A* s = states + n * chunks * E + e;
  A run = 0, cp = -INFINITY;
  for (int64_t t0 = 0; t0 < chunks; t0 += 32) {
    for (int u = warp; u < 32; u += kWarps) {
      const int64_t i = (t0 + u) * kC + lane;
      const A l0 = i < L ? to_acc(lsn[i]) : A(-INFINITY), l1 = i + 32 < L ? to_acc(lsn[i + 32]) : A(-INFINITY);
      const A m = warp_max(fmax(l0, l1));
      if (lane == 0) m_sh[u] = m;
    }
    __syncthreads();
    const int64_t t1 = t0 + 32 < chunks ? t0 + 32 : chunks;
    if (e < E)
      for (int64_t t = t0; t < t1; ++t) {
        const A own = s[t * E], mt = m_sh[t - t0], cn = fmax(cp, mt);
        s[t * E] = run;
        run = exp_diff(cp, cn) * run + exp_diff(mt, cn) * own;
        cp = cn;
      }
    __syncthreads();
  }
}

// Column groups of 32 per tile of the D + 1 state columns: 1, 3 or 5 (D <= 31, 95, larger; tiles
// of 160 columns past D = 159), and the number of such tiles (grid.z of chunk_state_kernel).
template <typename F> void with_state_groups(int64_t D, F f) {
  if (D + 1 <= 32) f(Groups<1>{});
  else if (D + 1 <= 96) f(Groups<3>{});
  else f(Groups<5>{});
}
inline unsigned column_tiles(int64_t columns, int cpt) { return unsigned((columns + 32 * cpt - 1) / (32 * cpt)); }

// Phases 1 and 2 for the keys: states [N, chunks, M, D+1] <- P_t.
template <typename T, typename A>
void launch_prefix_states(const T* k, const T* ls, const T* v, A* states, int64_t N, int64_t L, int64_t M, int64_t D,
                          cudaStream_t stream) {
  const int64_t chunks = num_chunks(L), E = M * (D + 1);
  with_state_groups(D, [&](auto g) {
    constexpr int CPT = decltype(g)::value;
    const dim3 grid(unsigned(N * chunks), unsigned((M + kC - 1) / kC), column_tiles(D + 1, CPT));
    chunk_state_kernel<T, A, CPT, false>
        <<<grid, kThreads, 0, stream>>>(k, ls, v, nullptr, nullptr, states, L, int(M), int(D), chunks);
  });
  prefix_scan_kernel<T, A><<<dim3(unsigned(N), unsigned((E + kThreads - 1) / kThreads)), kThreads, 0, stream>>>(
      ls, states, L, chunks, int(E));
}

}  // namespace attnscope::kernels::cuda
