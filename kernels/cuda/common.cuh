// Device helpers shared by the CUDA kernels of this folder (launch.h has the equations): element
// conversion, the guarded exponential, warp reductions, and the one tiled block product every
// chunk kernel is built from.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/launch.h"

namespace attnscope::kernels::cuda {

constexpr int kC = 64;          // chunk: queries (and keys) per chunk, kChunk of linear_attention.h
constexpr int kThreads = 256;   // threads of every chunk kernel: 8 warps
constexpr int kWarps = kThreads / 32;

// ---- element access: inputs in T, arithmetic in the accumulator A (float or double) ----
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(double* p, double x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }  // round to nearest even

// exp(a - b) for a <= b, and 0 where a = -inf (also when b = -inf: never -inf - -inf = NaN).
// Full-precision exp (no fast-math intrinsics): the CPU kernels use std::exp.
__device__ __forceinline__ float exp_diff(float a, float b) { return a == -INFINITY ? 0.f : expf(a - b); }
__device__ __forceinline__ double exp_diff(double a, double b) { return a == -INFINITY ? 0.0 : exp(a - b); }

// c + log(x) for x > 0, -inf otherwise (a log normalizer: launch.h, lse).
__device__ __forceinline__ float log_normalizer(float c, float x) { return x > 0.f ? c + logf(x) : -INFINITY; }
__device__ __forceinline__ double log_normalizer(double c, double x) { return x > 0.0 ? c + log(x) : -INFINITY; }

template <typename A> __device__ __forceinline__ A warp_sum(A x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <typename A> __device__ __forceinline__ A warp_max(A x) {
  for (int o = 16; o > 0; o /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The inner tile of block_gemm: 16 for float, 4 for double (shared memory stays under the 48 KB a
// block gets without opting in, W's 64 x 65 doubles included).
template <typename A> struct Tile { static constexpr int K = sizeof(A) == 8 ? 4 : 16; };
// Shared-memory sizes of block_gemm's two staging buffers, for CPT column groups.
template <typename A> __host__ __device__ constexpr int xs_size() { return kC * (Tile<A>::K + 1); }
template <typename A, int CPT> __host__ __device__ constexpr int ys_size() { return Tile<A>::K * (32 * CPT + 1); }

// acc[a][b] += sum_{k < K} x(r, k) y(k, col) for the block's 64 x (32 CPT) output tile, where this
// thread holds rows r = warp + 8 a (a < 8) and columns col = lane + 32 b (b < CPT). x(r, k) and
// y(k, col) return A and must return 0 outside the matrices (rows past the chunk, columns past M
// or D + 1); they are read once per element into shared memory, KT = Tile<A>::K of k at a time.
// X_K_FAST / Y_C_FAST: which index is the fast one of the global layout (coalesced staging).
// Every thread of the block must call it (it synchronizes); K is uniform over the block.
template <int CPT, bool X_K_FAST, bool Y_C_FAST, typename A, typename LX, typename LY>
__device__ __forceinline__ void block_gemm(A (&acc)[8][CPT], int K, LX x, LY y, A* xs, A* ys) {
  constexpr int KT = Tile<A>::K, NC = 32 * CPT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int k0 = 0; k0 < K; k0 += KT) {
    for (int idx = tid; idx < kC * KT; idx += kThreads) {
      const int r = X_K_FAST ? idx / KT : idx % kC, k = X_K_FAST ? idx % KT : idx / kC;
      xs[r * (KT + 1) + k] = k0 + k < K ? x(r, k0 + k) : A(0);
    }
    for (int idx = tid; idx < KT * NC; idx += kThreads) {
      const int k = Y_C_FAST ? idx / NC : idx % KT, col = Y_C_FAST ? idx % NC : idx / KT;
      ys[k * (NC + 1) + col] = k0 + k < K ? y(k0 + k, col) : A(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      A yv[CPT];
#pragma unroll
      for (int b = 0; b < CPT; ++b) yv[b] = ys[kk * (NC + 1) + lane + 32 * b];
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const A xv = xs[(warp + 8 * a) * (KT + 1) + kk];  // one address per warp: a broadcast
#pragma unroll
        for (int b = 0; b < CPT; ++b) acc[a][b] = fma(xv, yv[b], acc[a][b]);
      }
    }
    __syncthreads();
  }
}

// W_ij = s_ij exp(ls_j - c_i) for j <= i < len, else 0, from a 64 x 64 block_gemm result s (the
// intra-chunk weights of launch.h; lsj, ci: the chunk's key log scales and running maxima).
template <typename A>
__device__ __forceinline__ void causal_weights(const A (&s)[8][2], A (*W)[kC + 1], const A* lsj, const A* ci, int len) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int i = warp + 8 * a, j = lane + 32 * b;
      W[i][j] = i < len && j <= i ? s[a][b] * exp_diff(lsj[j], ci[i]) : A(0);
    }
}

template <typename A, int CPT> __device__ __forceinline__ void zero(A (&acc)[8][CPT]) {
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < CPT; ++b) acc[a][b] = A(0);
}

// Positions in chunk t of a sequence of L: min(64, L - 64 t).
__host__ __device__ __forceinline__ int chunk_length(int64_t L, int64_t t) { return L - t * kC < kC ? int(L - t * kC) : kC; }

// ---- host side ----
inline int64_t num_chunks(int64_t L) { return (L + kC - 1) / kC; }

// The error of the launches just made (configuration errors; faults of a running kernel surface at
// the next synchronizing call, as LibTorch's own kernels' do).
inline std::string launch_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Calls f(T{}, A{}) with the element type T and the accumulator A of `dtype`.
template <typename F> std::string with_dtype(DType dtype, F f) {
  switch (dtype) {
    case DType::Float32: return f(float{}, float{});
    case DType::BFloat16: return f(__nv_bfloat16{}, float{});
    case DType::Float64: return f(double{}, double{});
  }
  return "unknown dtype";
}

template <int G> using Groups = std::integral_constant<int, G>;

// Launch-time limits (launch.h: kMaxFeatures, kMaxHeadDim) and grid sizes.
inline std::string check_sizes(int64_t N, int64_t L, int64_t M, int64_t D) {
  if (M < 1 || M > kMaxFeatures || D < 1 || D > kMaxHeadDim)
    return "the CUDA kernels take 1 <= M <= " + std::to_string(kMaxFeatures) + " and 1 <= D <= " +
           std::to_string(kMaxHeadDim) + ", got M = " + std::to_string(M) + ", D = " + std::to_string(D);
  if (N * num_chunks(L) > int64_t(0x7fffffff) || N > int64_t(0x7fffffff))
    return "too many chunks for one grid: N = " + std::to_string(N) + ", L = " + std::to_string(L);
  return "";
}

}  // namespace attnscope::kernels::cuda
