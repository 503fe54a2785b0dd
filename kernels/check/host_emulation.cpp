// The kernel checker's own plumbing without a GPU (target attnscope_cuda_check_emulated, not built
// by default): the CUDA runtime calls cuda_kernel_check.cpp makes, on host memory, and launch.h's
// launchers computed by the float64 reference itself (rounded to the dtype like the kernels'
// outputs) and a host recurrent step. It checks the checker, not the kernels: the dtype encodings,
// layouts, the comparison's NaN/inf rules and tolerances, every case's set-up.
//   ninja -C build attnscope_cuda_check_emulated && build/kernels/attnscope_cuda_check_emulated --small
#include <cuda_runtime_api.h>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include "check/reference.h"
#include "cuda/launch.h"
using namespace attnscope::kernels;
extern "C" {
cudaError_t cudaMalloc(void** p, size_t n) { *p = std::malloc(n); return cudaSuccess; }
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "fake"; }
const char* cudaGetErrorString(cudaError_t) { return "fake"; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { std::memset(p, 0, sizeof *p); std::strcpy(p->name, "fake host device"); return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = 0; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* v) { *v = 0; return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t*) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* m, cudaEvent_t, cudaEvent_t) { *m = 1; return cudaSuccess; }
}
namespace {
float bf(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
uint16_t tobf(float f) { uint32_t u; std::memcpy(&u, &f, 4); if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40); u += 0x7fffu + ((u >> 16) & 1u); return uint16_t(u >> 16); }
double get(cuda::DType t, const void* p, int64_t i, bool acc = false) {
  if (t == cuda::DType::Float64) return static_cast<const double*>(p)[i];
  if (t == cuda::DType::Float32 || acc) return static_cast<const float*>(p)[i];
  return bf(static_cast<const uint16_t*>(p)[i]);
}
void put(cuda::DType t, void* p, int64_t i, double x, bool acc = false) {
  if (t == cuda::DType::Float64) static_cast<double*>(p)[i] = x;
  else if (t == cuda::DType::Float32 || acc) static_cast<float*>(p)[i] = float(x);
  else static_cast<uint16_t*>(p)[i] = tobf(float(x));
}
std::vector<double> vec(cuda::DType t, const void* p, int64_t n, bool acc = false) { std::vector<double> x(n); for (int64_t i = 0; i < n; ++i) x[i] = get(t, p, i, acc); return x; }
check::Problem prob(cuda::DType t, const void* q, const void* k, const void* ls, const void* v, int64_t N, int64_t L, int64_t M, int64_t D) {
  check::Problem p; p.N = N, p.L = L, p.M = M, p.D = D; p.q = vec(t, q, N*L*M); p.k = vec(t, k, N*L*M); p.ls = vec(t, ls, N*L); p.v = vec(t, v, N*L*D); return p;
}
}
namespace attnscope::kernels::cuda {
int64_t forward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D) { return 1; }
int64_t backward_workspace_elements(int64_t N, int64_t L, int64_t M, int64_t D) { return 1; }
std::string forward(DType t, const void* q, const void* k, const void* ls, const void* v, void* y, void* den, void* c, void*, int64_t N, int64_t L, int64_t M, int64_t D, void*) {
  auto f = check::reference_forward(prob(t, q, k, ls, v, N, L, M, D));
  for (int64_t i = 0; i < N*L*D; ++i) put(t, y, i, f.y[i]);
  for (int64_t i = 0; i < N*L; ++i) put(t, den, i, f.den[i], true), put(t, c, i, f.c[i], true);
  return "";
}
std::string backward(DType t, const void* q, const void* k, const void* ls, const void* v, const void* y, const void* den, const void* c, const void* gy, const void* glse, void* dq, void* dk, void* dls, void* dv, void*, int64_t N, int64_t L, int64_t M, int64_t D, void*) {
  auto p = prob(t, q, k, ls, v, N, L, M, D);
  check::ForwardReference f; f.y = vec(t, y, N*L*D); f.den = vec(t, den, N*L, true); f.c = vec(t, c, N*L, true);
  auto g = vec(t, gy, N*L*D); std::vector<double> h; if (glse) h = vec(t, glse, N*L);
  auto b = check::reference_backward(p, f, g, glse ? &h : nullptr);
  for (int64_t i = 0; i < N*L*M; ++i) put(t, dq, i, b.dq[i]), put(t, dk, i, b.dk[i]);
  for (int64_t i = 0; i < N*L*D; ++i) put(t, dv, i, b.dv[i]);
  for (int64_t i = 0; i < N*L; ++i) put(t, dls, i, b.dls[i]);
  return "";
}
std::string recurrent_step(DType t, void* S, void* z, void* c, const void* q, const void* k, const void* ls, const void* v, void* y, void* lse, int64_t N, int64_t M, int64_t D, void*) {
  for (int64_t n = 0; n < N; ++n) {
    double co = get(t, c, n, true), l = get(t, ls, n), cn = std::max(co, l);
    double keep = co == -INFINITY ? 0 : std::exp(co - cn), add = l == -INFINITY ? 0 : std::exp(l - cn);
    std::vector<double> num(D + 1, 0.0);
    for (int64_t m = 0; m < M; ++m) {
      double km = get(t, k, n*M+m), qm = get(t, q, n*M+m);
      for (int64_t d = 0; d < D; ++d) { double s = keep * get(t, S, (n*M+m)*D+d, true) + add * km * get(t, v, n*D+d); put(t, S, (n*M+m)*D+d, s, true); num[d] += qm * s; }
      double zz = keep * get(t, z, n*M+m, true) + add * km; put(t, z, n*M+m, zz, true); num[D] += qm * zz;
    }
    for (int64_t d = 0; d < D; ++d) put(t, y, n*D+d, num[D] == 0 ? NAN : num[d] / num[D]);
    put(t, c, n, cn, true);
    if (lse) put(t, lse, n, num[D] > 0 ? cn + std::log(num[D]) : -INFINITY);
  }
  return "";
}
}
