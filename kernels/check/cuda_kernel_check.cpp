// attnscope_cuda_check: the CUDA kernels of kernels/cuda (through launch.h only, no LibTorch)
// against the float64 host reference of reference.h (one (query, key) pair at a time, from
// launch.h's definitions; tests/test_cuda_check_reference.cpp checks that reference against the
// CPU kernel). Linked with the static CUDA runtime, so the binary built on a machine without a GPU
// runs on the GPU machine as it is (packaging/gpu_check.sh, stage 1; docs/GPU.md).
//
//   attnscope_cuda_check           every case: float32, bfloat16, float64; L = 1, 63, 64, 65, 1000,
//                                  4096; every M and D boundary of the kernels' templates and tiles;
//                                  huge, -inf and rising key log scales, rows with no weight,
//                                  negative normalizers; the recurrent step over sequences
//   attnscope_cuda_check --small   a handful of small cases (for compute-sanitizer)
//   attnscope_cuda_check --time    forward and forward + backward timed, B2 H16 D128 M128 bf16 at
//                                  T = 1K, 4K, 16K and float32 at 16K
// Prints one line per case and "N passed, N failed"; exits 0 when every case passed, 1 when one
// failed, 2 without a CUDA device or on a CUDA error that ends the run.
//
// Inputs are rounded to the dtype first and the reference computed from the rounded values, so it
// sees exactly what the kernels see. Errors are max |got - want| over a tensor's finite entries,
// divided by the larger of max |want| and the reference's largest sum of the terms' absolute
// values (reference.h: what bounds a sum's rounding error, and not ~0 where the terms cancel;
// lse: by max(1, max |want|)); NaN and +-inf must sit exactly where the
// reference has them. Tolerances (kTolerance): float64 1e-10, float32 1e-4 (float accumulators,
// chunk sums of 64 and prefixes over up to 64 chunks), bfloat16 3e-2 (8-bit significands: outputs
// rounded to 2^-9, and the backward pass reads the saved y and gy in bfloat16).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check/inputs.h"
#include "cuda/launch.h"

namespace {

namespace C = attnscope::kernels::check;
namespace cu = attnscope::kernels::cuda;
using cu::DType;

const char* dtype_name(DType t) { return t == DType::Float32 ? "float32" : t == DType::BFloat16 ? "bfloat16" : "float64"; }
double tolerance(DType t) { return t == DType::Float64 ? 1e-10 : t == DType::Float32 ? 1e-4 : 3e-2; }
size_t elem_size(DType t) { return t == DType::Float64 ? 8 : t == DType::Float32 ? 4 : 2; }
size_t acc_size(DType t) { return t == DType::Float64 ? 8 : 4; }

// ---- host conversions ----
uint16_t to_bf16(float f) {  // round to nearest even, NaN kept NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// x rounded to the dtype.
double round_to(DType t, double x) {
  if (t == DType::Float64) return x;
  if (t == DType::Float32) return double(float(x));
  return double(from_bf16(to_bf16(float(x))));
}
void round_all(DType t, std::vector<double>& x) {
  for (double& e : x) e = round_to(t, e);
}
// Bytes of x in the dtype (T) or in its accumulator (A).
std::vector<unsigned char> encode(DType t, const std::vector<double>& x, bool accumulator = false) {
  const size_t es = accumulator ? acc_size(t) : elem_size(t);
  std::vector<unsigned char> b(x.size() * es);
  for (size_t i = 0; i < x.size(); ++i) {
    if (es == 8) std::memcpy(&b[i * 8], &x[i], 8);
    else if (es == 4) { const float f = float(x[i]); std::memcpy(&b[i * 4], &f, 4); }
    else { const uint16_t h = to_bf16(float(x[i])); std::memcpy(&b[i * 2], &h, 2); }
  }
  return b;
}
std::vector<double> decode(DType t, const std::vector<unsigned char>& b, bool accumulator = false) {
  const size_t es = accumulator ? acc_size(t) : elem_size(t);
  std::vector<double> x(b.size() / es);
  for (size_t i = 0; i < x.size(); ++i) {
    if (es == 8) std::memcpy(&x[i], &b[i * 8], 8);
    else if (es == 4) { float f; std::memcpy(&f, &b[i * 4], 4); x[i] = f; }
    else { uint16_t h; std::memcpy(&h, &b[i * 2], 2); x[i] = from_bf16(h); }
  }
  return x;
}

// ---- device memory ----
struct CudaError {
  std::string what;
};
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError{std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}
void check(const std::string& e, const char* what) {
  if (!e.empty()) throw CudaError{std::string(what) + ": " + e};
}

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) { check(cudaMalloc(&p, std::max<size_t>(n, 1)), "cudaMalloc"); }
  Buffer(const std::vector<unsigned char>& host) : Buffer(host.size()) {
    check(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> b(bytes);
    check(cudaMemcpy(b.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return b;
  }
  void fill(unsigned char byte) { check(cudaMemset(p, byte, bytes), "cudaMemset"); }
};

// ---- comparison ----
struct Compared {
  std::string worst_name;
  double worst = 0;  // largest error / tolerance
  std::string failures;
};

// got against want: NaN/inf exactly where want has them, then the normalized error within tol:
// max |got - want| / max(scale, max |want| over the finite entries) (scale: the reference's bound
// on the terms' sizes, reference.h).
void compare(Compared& r, const char* name, const std::vector<double>& got, const std::vector<double>& want, double tol,
             double floor = 1e-300) {
  char buf[256];
  if (got.size() != want.size()) {
    r.failures += std::string(" ") + name + ": size differs;";
    return;
  }
  double scale = floor;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) != std::isnan(g) || (std::isinf(w) && g != w) || (std::isfinite(w) && !std::isfinite(g))) {
      std::snprintf(buf, sizeof buf, " %s[%zu] = %g where the reference has %g;", name, i, g, w);
      r.failures += buf;
      return;
    }
    if (std::isfinite(w)) err = std::max(err, std::fabs(g - w) / scale);
  }
  if (tol > 0 && (err / tol > r.worst || r.worst_name.empty())) r.worst = err / tol, r.worst_name = name;
  if (!(err <= tol)) {
    std::snprintf(buf, sizeof buf, " %s error %.3g > %.1g;", name, err, tol);
    r.failures += buf;
  }
}

// ---- the cases ----
enum class Op { ForwardBackward, Recurrent };

struct Case {
  Op op;
  DType dtype;
  int64_t N, L, M, D;
  C::Inputs inputs;
  bool with_h;  // backward with a gradient of lse
};

// [N, L, X] -> [L, N, X] (the recurrent steps take one position of every sequence at a time).
std::vector<double> by_position(const std::vector<double>& x, int64_t N, int64_t L, int64_t X) {
  std::vector<double> o(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t e = 0; e < X; ++e) o[(i * N + n) * X + e] = x[(n * L + i) * X + e];
  return o;
}

Compared run_case(const Case& cs, uint64_t seed) {
  const DType t = cs.dtype;
  const int64_t N = cs.N, L = cs.L, M = cs.M, D = cs.D;
  C::Problem p = C::make_problem(N, L, M, D, cs.inputs, seed);
  round_all(t, p.q), round_all(t, p.k), round_all(t, p.ls), round_all(t, p.v);
  const double tol = tolerance(t);
  Compared r;
  const C::ForwardReference f = C::reference_forward(p);
  if (cs.op == Op::Recurrent) {
    Buffer S(size_t(N * M * D) * acc_size(t)), z(size_t(N * M) * acc_size(t));
    S.fill(0), z.fill(0);
    Buffer c(encode(t, std::vector<double>(size_t(N), -INFINITY), true));
    Buffer q(encode(t, by_position(p.q, N, L, M))), k(encode(t, by_position(p.k, N, L, M))),
        ls(encode(t, by_position(p.ls, N, L, 1))), v(encode(t, by_position(p.v, N, L, D)));
    Buffer y(size_t(L * N * D) * elem_size(t)), lse(size_t(L * N) * elem_size(t));
    const size_t es = elem_size(t);
    for (int64_t i = 0; i < L; ++i) {
      auto at = [&](const Buffer& b, int64_t per) { return static_cast<char*>(b.p) + size_t(i * N * per) * es; };
      check(cu::recurrent_step(t, S.p, z.p, c.p, at(q, M), at(k, M), at(ls, 1), at(v, D), at(y, D), at(lse, 1), N, M, D,
                               nullptr),
            "recurrent_step");
    }
    check(cudaDeviceSynchronize(), "recurrent_step");
    const C::StateReference s = C::reference_state(p);
    compare(r, "y", decode(t, y.read()), by_position(f.y, N, L, D), tol, f.y_scale);
    compare(r, "lse", decode(t, lse.read()), by_position(f.lse, N, L, 1), tol, 1.0);
    compare(r, "S", decode(t, S.read(), true), s.S, tol, s.S_scale);
    compare(r, "z", decode(t, z.read(), true), s.z, tol, s.z_scale);
    compare(r, "c", decode(t, c.read(), true), s.c, 0.0, 1.0);
    return r;
  }
  Buffer q(encode(t, p.q)), k(encode(t, p.k)), ls(encode(t, p.ls)), v(encode(t, p.v));
  Buffer y(size_t(N * L * D) * elem_size(t)), den(size_t(N * L) * acc_size(t)), c(size_t(N * L) * acc_size(t));
  Buffer fw(size_t(cu::forward_workspace_elements(N, L, M, D)) * acc_size(t));
  check(cu::forward(t, q.p, k.p, ls.p, v.p, y.p, den.p, c.p, fw.p, N, L, M, D, nullptr), "forward");
  check(cudaDeviceSynchronize(), "forward");
  const std::vector<double> got_y = decode(t, y.read()), got_den = decode(t, den.read(), true),
                            got_c = decode(t, c.read(), true);
  std::vector<double> got_lse(got_den.size());
  for (size_t i = 0; i < got_den.size(); ++i) got_lse[i] = got_den[i] > 0 ? got_c[i] + std::log(got_den[i]) : -INFINITY;
  compare(r, "y", got_y, f.y, tol, f.y_scale);
  compare(r, "den", got_den, f.den, tol, f.den_scale);
  compare(r, "c", got_c, f.c, 0.0, 1.0);
  compare(r, "lse", got_lse, f.lse, tol, 1.0);

  // Backward from the kernels' own saved y, den and c (as the dispatch does); the reference's g'
  // from its own y (the difference is y's rounding to the dtype, inside the tolerance).
  std::vector<double> gy = C::random_values(size_t(N * L * D), seed + 1), h = C::random_values(size_t(N * L), seed + 2);
  round_all(t, gy), round_all(t, h);
  const C::BackwardReference b = C::reference_backward(p, f, gy, cs.with_h ? &h : nullptr);
  Buffer dgy(encode(t, gy)), dh(encode(t, h));
  Buffer dq(size_t(N * L * M) * elem_size(t)), dk(size_t(N * L * M) * elem_size(t)), dls(size_t(N * L) * elem_size(t)),
      dv(size_t(N * L * D) * elem_size(t));
  Buffer bw(size_t(cu::backward_workspace_elements(N, L, M, D)) * acc_size(t));
  check(cu::backward(t, q.p, k.p, ls.p, v.p, y.p, den.p, c.p, dgy.p, cs.with_h ? dh.p : nullptr, dq.p, dk.p, dls.p, dv.p,
                     bw.p, N, L, M, D, nullptr),
        "backward");
  check(cudaDeviceSynchronize(), "backward");
  compare(r, "dq", decode(t, dq.read()), b.dq, tol, b.dq_scale);
  compare(r, "dk", decode(t, dk.read()), b.dk, tol, b.dk_scale);
  compare(r, "dls", decode(t, dls.read()), b.dls, tol, b.dls_scale);
  compare(r, "dv", decode(t, dv.read()), b.dv, tol, b.dv_scale);
  return r;
}

struct Shape {
  int64_t M, D;
};
// Every boundary of the kernels' templates and tiles (forward.cu, chunk_states.cuh, backward.cu):
//   forward output column groups: D <= 32 | <= 64 | larger, tiles of 128 (D = 128 | 129);
//   state column groups: D + 1 <= 32 | <= 96 | larger, tiles of 160 (D + 1 = 160 | 161);
//   state row tiles of 64 (M = 64 | 65); gradient groups CM: M <= 64 | <= 128 | larger, tiles of
//   256 (M = 256 | 257); CD: D <= 64 | larger, tiles of 128; block_gemm's K tile (16 or 4): odd M;
//   and the limits M = 512, D = 256.
const std::vector<Shape> kShapes = {{1, 1},     {17, 31},   {32, 32},   {64, 33},   {64, 64},
                                    {65, 65},   {100, 95},  {128, 96},  {128, 128}, {129, 129},
                                    {200, 159}, {256, 160}, {257, 255}, {512, 256}};
const DType kDtypes[] = {DType::Float32, DType::BFloat16, DType::Float64};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  bool h = false;
  for (DType t : kDtypes)
    for (const Shape& s : kShapes) {
      for (int64_t L : {1, 63, 64, 65}) cases.push_back({Op::ForwardBackward, t, 2, L, s.M, s.D, C::Inputs::Random, h = !h});
      cases.push_back({Op::ForwardBackward, t, s.M + s.D > 300 ? 1 : 2, 1000, s.M, s.D, C::Inputs::Random, h = !h});
    }
  for (DType t : kDtypes)
    for (const Shape& s : {Shape{1, 1}, Shape{64, 64}, Shape{128, 128}})
      cases.push_back({Op::ForwardBackward, t, 1, 4096, s.M, s.D, C::Inputs::Random, true});
  cases.push_back({Op::ForwardBackward, DType::Float32, 1, 4096, 512, 256, C::Inputs::Random, true});
  // The extremes, past several chunks with a partial last one.
  for (C::Inputs in : {C::Inputs::Huge, C::Inputs::MinusInf, C::Inputs::Ramp, C::Inputs::NoWeight, C::Inputs::NegativeDen})
    for (DType t : kDtypes)
      for (const Shape& s : {Shape{16, 31}, Shape{65, 95}, Shape{128, 128}, Shape{512, 256}})
        cases.push_back({Op::ForwardBackward, t, 2, 300, s.M, s.D, in, true});
  cases.push_back({Op::ForwardBackward, DType::Float32, 1, 4096, 64, 64, C::Inputs::Ramp, true});
  cases.push_back({Op::ForwardBackward, DType::Float64, 1, 4096, 64, 64, C::Inputs::Huge, true});
  // More sequences than one block of the running max takes (8).
  for (DType t : kDtypes) cases.push_back({Op::ForwardBackward, t, 9, 130, 32, 32, C::Inputs::Random, true});
  // The recurrent step over whole sequences.
  for (DType t : kDtypes)
    for (const Shape& s : {Shape{1, 1}, Shape{17, 31}, Shape{64, 64}, Shape{128, 128}, Shape{257, 255}, Shape{512, 256}})
      for (C::Inputs in : {C::Inputs::Random, C::Inputs::MinusInf, C::Inputs::Huge, C::Inputs::Ramp})
        cases.push_back({Op::Recurrent, t, 3, in == C::Inputs::MinusInf ? 80 : 70, s.M, s.D, in, false});
  return cases;
}

std::vector<Case> small_cases() {
  return {{Op::ForwardBackward, DType::Float32, 2, 130, 65, 96, C::Inputs::Random, true},
          {Op::ForwardBackward, DType::BFloat16, 1, 70, 17, 33, C::Inputs::Random, false},
          {Op::ForwardBackward, DType::Float64, 1, 65, 129, 160, C::Inputs::Random, true},
          {Op::ForwardBackward, DType::Float32, 1, 65, 512, 256, C::Inputs::Random, true},
          {Op::ForwardBackward, DType::Float32, 1, 130, 16, 31, C::Inputs::MinusInf, true},
          {Op::Recurrent, DType::Float32, 2, 3, 65, 256, C::Inputs::Random, false},
          {Op::Recurrent, DType::BFloat16, 9, 2, 16, 16, C::Inputs::MinusInf, false}};
}

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-9s %-14s N%-2" PRId64 " L%-4" PRId64 " M%-3" PRId64 " D%-3" PRId64 " %s",
                dtype_name(c.dtype), C::inputs_name(c.inputs), c.N, c.L, c.M, c.D,
                c.op == Op::Recurrent ? "recurrent steps" : c.with_h ? "forward+backward (y, lse)" : "forward+backward (y)");
  return buf;
}

int run_checks(const std::vector<Case>& cases) {
  int passed = 0, failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const Compared r = run_case(cases[i], 1000 + 17 * uint64_t(i));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const bool ok = r.failures.empty();
      (ok ? passed : failed)++;
      std::printf("%s %s  worst %s at %.2f of tol (%.1f s)%s\n", ok ? "PASS" : "FAIL", describe(cases[i]).c_str(),
                  r.worst_name.c_str(), r.worst, s, r.failures.c_str());
    } catch (const CudaError& e) {
      ++failed;
      std::printf("FAIL %s  %s\n", describe(cases[i]).c_str(), e.what.c_str());
      // A fault of a running kernel leaves the context unusable: the remaining cases cannot run.
      if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
        std::printf("the CUDA context is broken; %zu cases not run\n", cases.size() - i - 1);
        failed += int(cases.size() - i - 1);
        break;
      }
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

// ---- timing ----
std::vector<unsigned char> random_device_values(DType t, size_t n, double lo, double hi, uint64_t seed) {
  std::vector<double> x(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (double& e : x) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    e = lo + (hi - lo) * double(s >> 11) * 0x1.0p-53;
  }
  return encode(t, x);
}

void time_one(DType t, int64_t N, int64_t L, int64_t M, int64_t D, int reps) {
  const size_t es = elem_size(t), as = acc_size(t);
  Buffer q(random_device_values(t, size_t(N * L * M), 0.5, 1.5, 1)), k(random_device_values(t, size_t(N * L * M), 0.5, 1.5, 2)),
      ls(random_device_values(t, size_t(N * L), -1, 1, 3)), v(random_device_values(t, size_t(N * L * D), -1, 1, 4)),
      gy(random_device_values(t, size_t(N * L * D), -1, 1, 5));
  Buffer y(size_t(N * L * D) * es), den(size_t(N * L) * as), c(size_t(N * L) * as);
  Buffer fw(size_t(cu::forward_workspace_elements(N, L, M, D)) * as), bw(size_t(cu::backward_workspace_elements(N, L, M, D)) * as);
  Buffer dq(size_t(N * L * M) * es), dk(size_t(N * L * M) * es), dls(size_t(N * L) * es), dv(size_t(N * L * D) * es);
  auto forward = [&] { check(cu::forward(t, q.p, k.p, ls.p, v.p, y.p, den.p, c.p, fw.p, N, L, M, D, nullptr), "forward"); };
  auto backward = [&] {
    check(cu::backward(t, q.p, k.p, ls.p, v.p, y.p, den.p, c.p, gy.p, nullptr, dq.p, dk.p, dls.p, dv.p, bw.p, N, L, M, D,
                       nullptr),
          "backward");
  };
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  auto ms = [&](auto f) {
    f(), f();  // warm-up
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<float> times;
    for (int r = 0; r < reps; ++r) {
      check(cudaEventRecord(e0), "cudaEventRecord");
      f();
      check(cudaEventRecord(e1), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float m = 0;
      check(cudaEventElapsedTime(&m, e0, e1), "cudaEventElapsedTime");
      times.push_back(m);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const float f = ms(forward), fb = ms([&] { forward(), backward(); });
  std::printf("time %-8s N%" PRId64 " (B2 H16) L%-5" PRId64 " M%" PRId64 " D%" PRId64 ": forward %.3f ms, forward+backward %.3f ms (median of %d)\n",
              dtype_name(t), N, L, M, D, f, fb, reps);
  std::fflush(stdout);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
}

int run_timing() {
  for (int64_t L : {1024, 4096, 16384}) time_one(DType::BFloat16, 32, L, 128, 128, 10);
  time_one(DType::Float32, 32, 16384, 128, 128, 10);
  time_one(DType::BFloat16, 32, 16384, 64, 64, 10);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (argc > 2 || (!mode.empty() && mode != "--small" && mode != "--time")) {
    std::fprintf(stderr, "usage: %s [--small | --time]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: %s (nothing checked)\n",
                e != cudaSuccess ? (std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)).c_str()
                                 : "cudaGetDeviceCount found none");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime), cudaDriverGetVersion(&driver);
  std::printf("device 0: %s (sm_%d%d, %.1f GiB), CUDA runtime %d, driver %d\n", prop.name, prop.major, prop.minor,
              double(prop.totalGlobalMem) / (1 << 30), runtime, driver);
  try {
    if (mode == "--time") return run_timing();
    return run_checks(mode == "--small" ? small_cases() : all_cases());
  } catch (const CudaError& err) {
    std::printf("CUDA error: %s\n", err.what.c_str());
    return 2;
  }
}
