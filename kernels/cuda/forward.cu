// Causal linear attention, forward (launch.h: forward): running maxima c, chunk states and their
// prefix (chunk_states.cuh), then each chunk's outputs.
#include "cuda/chunk_states.cuh"

namespace attnscope::kernels::cuda {
namespace {

// c_i = max_{j <= i} ls_j: one warp per sequence, 32 positions per step (an inclusive warp scan
// of max, then the carry of the steps before).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) running_max_kernel(const T* ls, A* c, int64_t N, int64_t L) {
  const int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;  // whole warps leave
  A carry = -INFINITY;
  for (int64_t i0 = 0; i0 < L; i0 += 32) {
    const int64_t i = i0 + lane;
    A x = i < L ? to_acc(ls[n * L + i]) : A(-INFINITY);
    for (int o = 1; o < 32; o *= 2) {
      const A y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x = fmax(x, y);
    }
    x = fmax(x, carry);
    if (i < L) c[n * L + i] = x;
    carry = __shfl_sync(0xffffffffu, x, 31);
  }
}

// Phase 3: the outputs of chunk t of sequence n (one block each, grid N * chunks):
//   W_ij = (q_i . k_j) exp(ls_j - c_i) for j <= i in the chunk,
//   den_i = sum_j W_ij + exp(cP_t - c_i) q_i . z_t        (z_t = P_t[:, D], the normalizer column),
//   num_i = sum_j W_ij v_j + exp(cP_t - c_i) P_t[:, :D]^T q_i,
//   y_i = num_i / den_i (NaN where den_i == 0).
// The block holds W (64 x 64) and den (64) in shared memory and one tile of num (64 x (32 CPT)
// columns) at a time in registers, the tiles one after the other over the D value columns (one
// tile where D <= 32 CPT; at D = 256 and CPT = 4, two). One code path for every D: W and den are
// formed once, before the first tile.
template <typename T, typename A, int CPT>
__global__ void __launch_bounds__(kThreads)
    forward_output_kernel(const T* q, const T* k, const T* ls, const T* v, const A* P, const A* c, T* y, A* den,
                          int64_t L, int M, int D, int64_t chunks) {
  constexpr int CY = CPT > 2 ? CPT : 2, NC = 32 * CPT;
  __shared__ A xs[xs_size<A>()], ys[ys_size<A, CY>()], W[kC][kC + 1], ci[kC], lsj[kC], sp[kC], den_sh[kC];
  const int64_t n = blockIdx.x / chunks, t = blockIdx.x % chunks, row0 = n * L + t * kC;
  const int len = chunk_length(L, t), D1 = D + 1;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const A cP = t > 0 ? c[row0 - 1] : A(-INFINITY);
  if (tid < kC) {
    ci[tid] = tid < len ? c[row0 + tid] : A(0);
    lsj[tid] = tid < len ? to_acc(ls[row0 + tid]) : A(-INFINITY);
    sp[tid] = tid < len ? exp_diff(cP, c[row0 + tid]) : A(0);
  }
  __syncthreads();
  const T *qn = q + row0 * M, *kn = k + row0 * M, *vn = v + row0 * D;
  const A* Pt = P + (n * chunks + t) * M * D1;  // read only for t > 0 (P_0 = 0)

  // W = mask(Q K^T) * exp(ls_j - c_i)
  {
    A s[8][2];
    zero(s);
    block_gemm<2, true, false>(
        s, M, [&](int i, int m) { return i < len ? to_acc(qn[int64_t(i) * M + m]) : A(0); },
        [&](int m, int j) { return j < len ? to_acc(kn[int64_t(j) * M + m]) : A(0); }, xs, ys);
    causal_weights(s, W, lsj, ci, len);
    __syncthreads();
  }

  // den_i = sum_j W_ij + exp(cP_t - c_i) q_i . z_t: a warp per row (i is uniform over the warp, so
  // every lane reaches warp_sum), W zero past the diagonal and the chunk.
  for (int i = warp; i < kC; i += kWarps) {
    A part = 0;
    if (i < len) {
      for (int j = lane; j < kC; j += 32) part += W[i][j];
      if (t > 0) {
        A qz = 0;
        for (int m = lane; m < M; m += 32) qz += to_acc(qn[int64_t(i) * M + m]) * Pt[int64_t(m) * D1 + D];
        part += sp[i] * qz;
      }
    }
    part = warp_sum(part);
    if (lane == 0) den_sh[i] = part;
  }
  __syncthreads();

  // num = W V + diag(exp(cP_t - c)) Q P_t[:, :D], y = num / den: a tile of columns d0..d0+NC-1 at
  // a time (block_gemm ends on a barrier, so the next tile may restage xs and ys).
  for (int d0 = 0; d0 < D; d0 += NC) {
    A o[8][CPT];
    zero(o);
    block_gemm<CPT, true, true>(
        o, len, [&](int i, int j) { return W[i][j]; },
        [&](int j, int d) { return d0 + d < D ? to_acc(vn[int64_t(j) * D + d0 + d]) : A(0); }, xs, ys);
    if (t > 0)  // P_0 = 0
      block_gemm<CPT, true, true>(
          o, M, [&](int i, int m) { return i < len ? sp[i] * to_acc(qn[int64_t(i) * M + m]) : A(0); },
          [&](int m, int d) { return d0 + d < D ? Pt[int64_t(m) * D1 + d0 + d] : A(0); }, xs, ys);
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      const int i = warp + 8 * a;
      if (i >= len) continue;
      const A dn = den_sh[i];
#pragma unroll
      for (int b = 0; b < CPT; ++b) {
        const int d = d0 + lane + 32 * b;
        if (d < D) store(y + (row0 + i) * D + d, dn == 0 ? A(NAN) : o[a][b] / dn);
      }
    }
  }
  if (tid < len) den[row0 + tid] = den_sh[tid];
}

// Column groups of 32 per tile of the D value columns: 1, 2 or 4 (D <= 32, 64, larger: tiles of
// 128, two at D = 256).
template <typename F> void with_output_groups(int64_t D, F f) {
  if (D <= 32) f(Groups<1>{});
  else if (D <= 64) f(Groups<2>{});
  else f(Groups<4>{});
}

template <typename T, typename A>
void launch_forward(const T* q, const T* k, const T* ls, const T* v, T* y, A* den, A* c, A* states, int64_t N,
                    int64_t L, int64_t M, int64_t D, cudaStream_t stream) {
  const int64_t chunks = num_chunks(L);
  running_max_kernel<T, A><<<unsigned((N + kWarps - 1) / kWarps), kThreads, 0, stream>>>(ls, c, N, L);
  launch_prefix_states<T, A>(k, ls, v, states, N, L, M, D, stream);
  with_output_groups(D, [&](auto g) {
    forward_output_kernel<T, A, decltype(g)::value><<<unsigned(N * chunks), kThreads, 0, stream>>>(
        q, k, ls, v, states, c, y, den, L, int(M), int(D), chunks);
  });
}

}  // namespace

int64_t forward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D) {
  return N * num_chunks(L) * M * (D + 1);
}

std::string forward(DType dtype, const void* q, const void* k, const void* ls, const void* v, void* y, void* den,
                    void* c, void* workspace, int64_t N, int64_t L, int64_t M, int64_t D, void* stream) {
  if (N == 0 || L == 0) return "";
  if (std::string e = check_sizes(N, L, M, D); !e.empty()) return e;
  return with_dtype(dtype, [&](auto t, auto a) {
    using T = decltype(t);
    using A = decltype(a);
    launch_forward<T, A>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(ls),
                         static_cast<const T*>(v), static_cast<T*>(y), static_cast<A*>(den), static_cast<A*>(c),
                         static_cast<A*>(workspace), N, L, M, D, static_cast<cudaStream_t>(stream));
    return launch_error();
  });
}

}  // namespace attnscope::kernels::cuda
