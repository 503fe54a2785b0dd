// Causal linear attention, backward (launch.h: backward): g', the prefix states P_t again
// (chunk_states.cuh), the query-side chunk sums B_u and their suffix R_t, then each chunk's dq,
// dk, dv and dls. Workspace: P [N, chunks, M, D+1], R [N, chunks, M, D+1], g' [N, L, D+1].
#include "cuda/chunk_states.cuh"

namespace attnscope::kernels::cuda {
namespace {

// g'_i = [gy_i / den_i, (-(gy_i . y_i) + h_i) / den_i], and 0 where den_i == 0 (no gradient flows
// from an undefined row): one warp per row i. h (the gradient of lse) may be nullptr (none), and
// counts only where den_i > 0 (lse_i = -inf elsewhere).
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) grad_prime_kernel(const T* gy, const T* h, const T* y, const A* den, A* gp, int64_t rows, int D) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave
  A* g = gp + row * (D + 1);
  const A dn = den[row];
  if (dn == 0) {  // the same for the whole warp
    for (int d = lane; d <= D; d += 32) g[d] = 0;
    return;
  }
  const A inv = A(1) / dn;
  A dot = 0;
  for (int d = lane; d < D; d += 32) {
    const A gd = to_acc(gy[row * D + d]);
    dot += gd * to_acc(y[row * D + d]);
    g[d] = gd * inv;
  }
  dot = warp_sum(dot);
  if (lane == 0) g[D] = (h != nullptr && dn > 0 ? to_acc(h[row]) - dot : -dot) * inv;
}

// In place over B_u [N, chunks, M, D+1] -> R_t, the sum over the chunks after t relative to
// r_t = c_{(t+1) C}:  R_{T_c-1} = 0,  R_t = exp(r_t - r_{t+1}) R_{t+1} + B_{t+1}.
// Grid (N, ceil(E / 256)): one thread per state element, sequential over the chunks, last first.
template <typename A>
__global__ void __launch_bounds__(kThreads) suffix_scan_kernel(const A* c, A* states, int64_t L, int64_t chunks, int E) {
  const int64_t n = blockIdx.x;
  const int e = blockIdx.y * kThreads + threadIdx.x;
  if (e >= E) return;  // no synchronization below
  const A* cn = c + n * L;
  A* s = states + n * chunks * E + e;
  A run = 0;  // R_t
  for (int64_t t = chunks - 1; t >= 0; --t) {
    const A own = s[t * E];  // B_t
    s[t * E] = run;
    // R_{t-1} = exp(r_{t-1} - r_t) R_t + B_t, r_{t-1} = c_{tC}, r_t = c_{(t+1)C}; R_{T_c-1} = 0.
    const A keep = t + 1 < chunks ? exp_diff(cn[t * kC], cn[(t + 1) * kC]) : A(0);
    run = keep * run + own;
  }
}

// The gradients of chunk t of sequence n (one block each, grid N * chunks), with
// e_ij = exp(ls_j - c_i) for j <= i in the chunk:
//   Wq_ij = (g'_i . [v_j, 1]) e_ij,  Wv_ij = (q_i . k_j) e_ij,
//   dk_j = sum_i Wq_ij q_i + exp(ls_j - r_t) R_t [v_j, 1],          dls_j = k_j . dk_j,
//   dq_i = sum_j Wq_ij k_j + exp(cP_t - c_i) P_t g'_i,
//   dv_j = sum_i Wv_ij g'_i[:D] + exp(ls_j - r_t) (R_t^T k_j)[:D].
// W (64 x 64) lives in shared memory, first Wq then Wv; the outputs are register tiles of
// 64 x (32 CM) (dq, dk) and 64 x (32 CD) (dv), one tile after the other over the M (or D)
// columns: one tile where M <= 32 CM and D <= 32 CD, two at M = 512 or D = 256 (the same code
// path at every size; dls sums its row over the dk tiles).
template <typename T, typename A, int CM, int CD>
__global__ void __launch_bounds__(kThreads)
    backward_chunk_kernel(const T* q, const T* k, const T* ls, const T* v, const A* c, const A* gp, const A* P,
                          const A* R, T* dq, T* dk, T* dls, T* dv, int64_t L, int M, int D, int64_t chunks) {
  constexpr int CY = CM > CD ? CM : CD;
  __shared__ A xs[xs_size<A>()], ys[ys_size<A, CY>()], W[kC][kC + 1], ci[kC], lsj[kC], sp[kC], sr[kC];
  const int64_t n = blockIdx.x / chunks, t = blockIdx.x % chunks, row0 = n * L + t * kC;
  const bool last = t + 1 == chunks;  // R_{T_c-1} = 0
  const int len = chunk_length(L, t), D1 = D + 1;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const A cP = t > 0 ? c[row0 - 1] : A(-INFINITY), r = last ? A(0) : c[row0 + kC];
  if (tid < kC) {
    const A l = tid < len ? to_acc(ls[row0 + tid]) : A(-INFINITY);
    ci[tid] = tid < len ? c[row0 + tid] : A(0);
    lsj[tid] = l;
    sp[tid] = tid < len ? exp_diff(cP, c[row0 + tid]) : A(0);
    sr[tid] = tid < len && !last ? exp_diff(l, r) : A(0);
  }
  __syncthreads();
  const T *qn = q + row0 * M, *kn = k + row0 * M, *vn = v + row0 * D;
  const A* gpn = gp + row0 * D1;
  const A* Pt = P + (n * chunks + t) * M * D1;
  const A* Rt = R + (n * chunks + t) * M * D1;
  auto vprime = [&](int j, int d) { return d < D ? to_acc(vn[int64_t(j) * D + d]) : d == D ? A(1) : A(0); };
  auto q_at = [&](int i, int m) { return to_acc(qn[int64_t(i) * M + m]); };
  auto k_at = [&](int j, int m) { return to_acc(kn[int64_t(j) * M + m]); };

  // Wq = mask(G' [V, 1]^T) * e
  {
    A s[8][2];
    zero(s);
    block_gemm<2, true, false>(
        s, D1, [&](int i, int d) { return i < len ? gpn[int64_t(i) * D1 + d] : A(0); },
        [&](int d, int j) { return j < len ? vprime(j, d) : A(0); }, xs, ys);
    causal_weights(s, W, lsj, ci, len);
    __syncthreads();
  }

  // dk = Wq^T Q + diag(exp(ls - r_t)) [V, 1] R_t^T;  dls = rowsum(K * dk). Tiles of the columns
  // m0..m0+NM-1 (block_gemm ends on a barrier, so the next tile may restage xs and ys).
  constexpr int NM = 32 * CM, ND = 32 * CD;
  {
    A dls_own = 0;  // lane a < 8: rowsum(K * dk) of row warp + 8 a, summed over the tiles
    for (int m0 = 0; m0 < M; m0 += NM) {
      A g[8][CM];
      zero(g);
      block_gemm<CM, false, true>(
          g, len, [&](int j, int i) { return W[i][j]; },
          [&](int i, int m) { return m0 + m < M ? q_at(i, m0 + m) : A(0); }, xs, ys);
      if (!last)
        block_gemm<CM, true, false>(
            g, D1, [&](int j, int d) { return j < len ? sr[j] * vprime(j, d) : A(0); },
            [&](int d, int m) { return m0 + m < M ? Rt[int64_t(m0 + m) * D1 + d] : A(0); }, xs, ys);
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const int j = warp + 8 * a;  // a row per warp: its lanes hold the row's columns
        A part = 0;
#pragma unroll
        for (int b = 0; b < CM; ++b) {
          const int m = m0 + lane + 32 * b;
          if (j < len && m < M) {
            store(dk + (row0 + j) * M + m, g[a][b]);
            part += k_at(j, m) * g[a][b];
          }
        }
        part = warp_sum(part);  // every lane of the warp: the tile's share of row j
        if (lane == a) dls_own += part;
      }
    }
    if (lane < 8 && warp + 8 * lane < len) store(dls + row0 + warp + 8 * lane, dls_own);
  }

  // dq = Wq K + diag(exp(cP_t - c)) G' P_t^T, tiles of the columns m0..m0+NM-1
  for (int m0 = 0; m0 < M; m0 += NM) {
    A g[8][CM];
    zero(g);
    block_gemm<CM, true, true>(
        g, len, [&](int i, int j) { return W[i][j]; },
        [&](int j, int m) { return m0 + m < M ? k_at(j, m0 + m) : A(0); }, xs, ys);
    if (t > 0)  // P_0 = 0
      block_gemm<CM, true, false>(
          g, D1, [&](int i, int d) { return i < len ? sp[i] * gpn[int64_t(i) * D1 + d] : A(0); },
          [&](int d, int m) { return m0 + m < M ? Pt[int64_t(m0 + m) * D1 + d] : A(0); }, xs, ys);
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < CM; ++b) {
        const int i = warp + 8 * a, m = m0 + lane + 32 * b;
        if (i < len && m < M) store(dq + (row0 + i) * M + m, g[a][b]);
      }
  }
  __syncthreads();  // W is rewritten below

  // Wv = mask(Q K^T) * e
  {
    A s[8][2];
    zero(s);
    block_gemm<2, true, false>(
        s, M, [&](int i, int m) { return i < len ? q_at(i, m) : A(0); },
        [&](int m, int j) { return j < len ? k_at(j, m) : A(0); }, xs, ys);
    causal_weights(s, W, lsj, ci, len);
    __syncthreads();
  }

  // dv = Wv^T G'[:, :D] + diag(exp(ls - r_t)) K R_t[:, :D], tiles of the columns d0..d0+ND-1
  for (int d0 = 0; d0 < D; d0 += ND) {
    A g[8][CD];
    zero(g);
    block_gemm<CD, false, true>(
        g, len, [&](int j, int i) { return W[i][j]; },
        [&](int i, int d) { return d0 + d < D ? gpn[int64_t(i) * D1 + d0 + d] : A(0); }, xs, ys);
    if (!last)
      block_gemm<CD, true, true>(
          g, M, [&](int j, int m) { return j < len ? sr[j] * k_at(j, m) : A(0); },
          [&](int m, int d) { return d0 + d < D ? Rt[int64_t(m) * D1 + d0 + d] : A(0); }, xs, ys);
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < CD; ++b) {
        const int j = warp + 8 * a, d = d0 + lane + 32 * b;
        if (j < len && d < D) store(dv + (row0 + j) * D + d, g[a][b]);
      }
  }
}

// Column groups of the gradient tiles: CM for M (2, 4 or 8: M <= 64, 128, larger: tiles of 256,
// two at M = 512) and CD for D (2 or 4: D <= 64, larger: tiles of 128, two at D = 256). float64
// (the checks' precision, not a speed path) takes the largest only.
template <typename A, typename F> void with_gradient_groups(int64_t M, int64_t D, F f) {
  if constexpr (sizeof(A) == 8) {
    f(Groups<8>{}, Groups<4>{});
  } else {
    auto by_d = [&](auto cm) {
      if (D <= 64) f(cm, Groups<2>{});
      else f(cm, Groups<4>{});
    };
    if (M <= 64) by_d(Groups<2>{});
    else if (M <= 128) by_d(Groups<4>{});
    else by_d(Groups<8>{});
  }
}

template <typename T, typename A>
void launch_backward(const T* q, const T* k, const T* ls, const T* v, const T* y, const A* den, const A* c,
                     const T* gy, const T* glse, T* dq, T* dk, T* dls, T* dv, A* workspace, int64_t N, int64_t L, int64_t M,
                     int64_t D, cudaStream_t stream) {
  const int64_t chunks = num_chunks(L), E = M * (D + 1);
  A* P = workspace;
  A* R = P + N * chunks * E;
  A* gp = R + N * chunks * E;
  grad_prime_kernel<T, A><<<unsigned((N * L + kWarps - 1) / kWarps), kThreads, 0, stream>>>(gy, glse, y, den, gp, N * L, int(D));
  launch_prefix_states<T, A>(k, ls, v, P, N, L, M, D, stream);
  // B_u = sum_{i in u} exp(c_first(u) - c_i) q_i g'_i^T, then its suffix R_t.
  with_state_groups(D, [&](auto g) {
    constexpr int CPT = decltype(g)::value;
    const dim3 grid_states(unsigned(N * chunks), unsigned((M + kC - 1) / kC), column_tiles(D + 1, CPT));
    chunk_state_kernel<T, A, CPT, true>
        <<<grid_states, kThreads, 0, stream>>>(q, nullptr, nullptr, c, gp, R, L, int(M), int(D), chunks);
  });
  suffix_scan_kernel<A><<<dim3(unsigned(N), unsigned((E + kThreads - 1) / kThreads)), kThreads, 0, stream>>>(
      c, R, L, chunks, int(E));
  with_gradient_groups<A>(M, D, [&](auto cm, auto cd) {
    backward_chunk_kernel<T, A, decltype(cm)::value, decltype(cd)::value><<<unsigned(N * chunks), kThreads, 0, stream>>>(
        q, k, ls, v, c, gp, P, R, dq, dk, dls, dv, L, int(M), int(D), chunks);
  });
}

}  // namespace

int64_t backward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D) {
  return 2 * N * num_chunks(L) * M * (D + 1) + N * L * (D + 1);
}

std::string backward(DType dtype, const void* q, const void* k, const void* ls, const void* v, const void* y,
                     const void* den, const void* c, const void* gy, const void* glse, void* dq, void* dk, void* dls, void* dv,
                     void* workspace, int64_t N, int64_t L, int64_t M, int64_t D, void* stream) {
  if (N == 0 || L == 0) return "";
  if (std::string e = check_sizes(N, L, M, D); !e.empty()) return e;
  return with_dtype(dtype, [&](auto t, auto a) {
    using T = decltype(t);
    using A = decltype(a);
    launch_backward<T, A>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(ls),
                          static_cast<const T*>(v), static_cast<const T*>(y), static_cast<const A*>(den),
                          static_cast<const A*>(c), static_cast<const T*>(gy), static_cast<const T*>(glse), static_cast<T*>(dq),
                          static_cast<T*>(dk), static_cast<T*>(dls), static_cast<T*>(dv), static_cast<A*>(workspace),
                          N, L, M, D, static_cast<cudaStream_t>(stream));
    return launch_error();
  });
}

}  // namespace attnscope::kernels::cuda
