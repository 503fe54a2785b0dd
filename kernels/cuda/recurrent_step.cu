// One token of causal linear attention in the recurrent form (launch.h: recurrent_step), for
// generation: the state update and the read of the query.
#include "cuda/common.cuh"

namespace attnscope::kernels::cuda {
namespace {

// c' = max(c, ls);  S = exp(c - c') S + exp(ls - c') k v^T;  z = exp(c - c') z + exp(ls - c') k;
// y = q^T S / (q . z), NaN where q . z == 0; lse = c' + log(q . z), -inf where q . z <= 0 (lse may
// be nullptr: not wanted). One block per sequence n; S [M, D] row-major.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads) recurrent_step_kernel(A* S, A* z, A* c, const T* q, const T* k,
                                                                  const T* ls, const T* v, T* y, T* lse, int M, int D) {
  __shared__ A num[kMaxHeadDim + 1];  // q^T S, then q . z at [D] (check_sizes: D <= kMaxHeadDim)
  const int64_t n = blockIdx.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const A c_old = c[n], l = to_acc(ls[n]), cn = fmax(c_old, l);
  const A keep = exp_diff(c_old, cn), add = exp_diff(l, cn);  // keep = 0 before the first token (c = -inf)
  A* Sn = S + n * M * D;
  A* zn = z + n * M;
  const T *qn = q + n * M, *kn = k + n * M, *vn = v + n * D;
  for (int e = tid; e < M * D; e += kThreads) {
    const int m = e / D, d = e % D;
    Sn[e] = keep * Sn[e] + (add * to_acc(kn[m])) * to_acc(vn[d]);
  }
  for (int m = tid; m < M; m += kThreads) zn[m] = keep * zn[m] + add * to_acc(kn[m]);
  __syncthreads();  // the block's global writes are visible to the block after this barrier
  for (int d = warp; d <= D; d += kWarps) {
    A part = 0;
    for (int m = lane; m < M; m += 32) part += to_acc(qn[m]) * (d < D ? Sn[int64_t(m) * D + d] : zn[m]);
    part = warp_sum(part);
    if (lane == 0) num[d] = part;
  }
  __syncthreads();
  for (int d = tid; d < D; d += kThreads) store(y + n * D + d, num[D] == 0 ? A(NAN) : num[d] / num[D]);
  if (tid == 0) {
    c[n] = cn;  // every thread read c[n] before the first barrier
    if (lse != nullptr) store(lse + n, log_normalizer(cn, num[D]));
  }
}

}  // namespace

std::string recurrent_step(DType dtype, void* S, void* z, void* c, const void* q, const void* k, const void* ls,
                           const void* v, void* y, void* lse, int64_t N, int64_t M, int64_t D, void* stream) {
  if (N == 0) return "";
  if (std::string e = check_sizes(N, 1, M, D); !e.empty()) return e;
  return with_dtype(dtype, [&](auto t, auto a) {
    using T = decltype(t);
    using A = decltype(a);
    recurrent_step_kernel<T, A><<<unsigned(N), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<A*>(S), static_cast<A*>(z), static_cast<A*>(c), static_cast<const T*>(q),
        static_cast<const T*>(k), static_cast<const T*>(ls), static_cast<const T*>(v), static_cast<T*>(y), static_cast<T*>(lse), int(M),
        int(D));
    return launch_error();
  });
}

}  // namespace attnscope::kernels::cuda
