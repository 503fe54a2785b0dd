// The CUDA kernels of causal linear attention (kernels/cuda/*.cu) against the CPU kernels, through
// the public API (kernels/include/attnscope/kernels/linear_attention.h): output, autograd gradients
// and the recurrent step, on random inputs, for lengths around the chunk size (1, 63, 64, 65) and
// long ones (1000, 4096), feature and head dimensions from 16 to the limits (512, 256: kMaxFeatures,
// kMaxHeadDim), just past the kernels' column tiles (M = 257, D = 129, D + 1 = 161) and ones that
// are no multiple of 16, key log scales spread over hundreds (exp would overflow float32 past 88),
// and rows with no weight (den = 0: NaN output, zero gradient). The reference is always the CPU
// kernel in float64 on exactly the values the GPU was given (bfloat16 inputs rounded first).
// Skips where LibTorch sees no GPU; fails where it sees one but the build has no CUDA kernels.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <algorithm>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_kernels_cuda {

namespace K = attnscope::kernels;
namespace test = attnscope::test;

namespace {

#define SKIP_WITHOUT_GPU()                                                                              \
  do {                                                                                                  \
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA here (CPU-only LibTorch or no GPU): run on a GPU machine"; \
    if (!K::have_cuda_kernels()) GTEST_FAIL() << "a GPU is present but this build has no CUDA kernels (nvcc not found)"; \
  } while (0)

at::Tensor uniform(std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble)) * (hi - lo) + lo;
}

// Two heads of one sequence ([1, 2, L, ...]: the dispatch flattens the leading dimensions).
struct Inputs {
  at::Tensor q, k, ls, v, gy;  // float64 on the CPU
};

// Positive features (exp of a Gaussian, as PRF values), so every row has den > 0; key log scales
// uniform in [-spread, spread]; the upstream gradient gy ~ N(0, 1).
Inputs make_inputs(int64_t L, int64_t M, int64_t D, double spread, uint64_t seed) {
  return {at::exp(test::seeded_randn({1, 2, L, M}, seed)), at::exp(test::seeded_randn({1, 2, L, M}, seed + 1)),
          uniform({1, 2, L, 1}, seed + 2, -spread, spread), test::seeded_randn({1, 2, L, D}, seed + 3), test::seeded_randn({1, 2, L, D}, seed + 4)};
}

// The values a kernel of dtype `dt` sees (bfloat16 rounds), as float64.
Inputs rounded(const Inputs& in, at::ScalarType dt) {
  auto r = [&](const at::Tensor& t) { return t.to(dt).to(at::kDouble); };
  return {r(in.q), r(in.k), r(in.ls), r(in.v), r(in.gy)};
}

struct Result {
  at::Tensor y, dq, dk, dls, dv;  // float64 on the CPU
};

// Output and the gradients of sum(y * gy), computed in dtype dt on device dev.
Result run(const Inputs& in, at::ScalarType dt, at::Device dev) {
  auto leaf = [&](const at::Tensor& t) { return t.to(dev, dt).detach().requires_grad_(true); };
  at::Tensor q = leaf(in.q), k = leaf(in.k), ls = leaf(in.ls), v = leaf(in.v);
  const at::Tensor y = K::causal_linear_attention(q, k, ls, v);
  (y * in.gy.to(dev, dt)).sum().backward();
  auto host = [](const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble); };
  return {host(y), host(q.grad()), host(k.grad()), host(ls.grad()), host(v.grad())};
}

// max |a - ref| / max |ref| over the finite entries of ref; a must be finite where ref is and NaN
// where ref is NaN (reported as an infinite error otherwise).
double rel_error(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor fin = at::isfinite(ref);
  if (!at::equal(at::isnan(a), at::isnan(ref)) || !at::equal(at::isfinite(a), fin)) return INFINITY;
  if (!fin.any().item<bool>()) return 0;
  const double scale = ref.masked_select(fin).abs().max().item<double>();
  const double err = (a - ref).masked_select(fin).abs().max().item<double>();
  return scale > 0 ? err / scale : err;
}

// Tolerances (max error relative to the tensor's largest entry):
//  float64: 1e-10, summation order only.
//  float32: accumulation in float over up to L = 4096 keys, eps sqrt(L) ~ 4e-6 expected, and
//    exp(ls_j - c_i) with the difference rounded in float (<= 4e-6 relative for |ls_j - c_i| < 88,
//    past which the weight underflows anyway): 2e-5 for y, 5e-5 for the gradients (sums of both
//    signs over every later query).
//  bfloat16: inputs identical (rounded before the reference sees them), float accumulation, but
//    every output rounded to 8 bits (2^-9 = 2e-3 relative) and the backward pass reads the saved
//    y in bfloat16 (another 2^-9 in g' = [gy, -gy.y] / den): 2e-2 is several times that, while a
//    wrong term or index gives errors of order 1.
struct Tolerance {
  double y, grad;
};
Tolerance tolerance(at::ScalarType dt) {
  if (dt == at::kDouble) return {1e-10, 1e-10};
  if (dt == at::kFloat) return {2e-5, 5e-5};
  return {2e-2, 2e-2};
}

void expect_matches_cpu(const Inputs& in, at::ScalarType dt, const std::string& what) {
  const Inputs exact = rounded(in, dt);
  const Result gpu = run(exact, dt, at::Device(at::kCUDA));
  const Result cpu = run(exact, at::kDouble, at::Device(at::kCPU));
  const Tolerance tol = tolerance(dt);
  const std::string where = what + " " + std::string(c10::toString(dt));
  EXPECT_LE(rel_error(gpu.y, cpu.y), tol.y) << where << ": y";
  EXPECT_LE(rel_error(gpu.dq, cpu.dq), tol.grad) << where << ": dq";
  EXPECT_LE(rel_error(gpu.dk, cpu.dk), tol.grad) << where << ": dk";
  EXPECT_LE(rel_error(gpu.dls, cpu.dls), tol.grad) << where << ": dk_log_scale";
  EXPECT_LE(rel_error(gpu.dv, cpu.dv), tol.grad) << where << ": dv";
}

std::string shape_name(int64_t L, int64_t M, int64_t D, double spread) {
  return "L=" + std::to_string(L) + " M=" + std::to_string(M) + " D=" + std::to_string(D) +
         " spread=" + std::to_string(int(spread));
}

// Lengths around the chunk (64) and long ones; (M, D) pairs from 16 to the limits (512, 256),
// including ones that are no multiple of 16 or 32, and (256, 128), the largest one column tile
// of every kernel covers.
const std::vector<int64_t> kLengths = {1, 63, 64, 65, 1000, 4096};
const std::vector<std::pair<int64_t, int64_t>> kDims = {{16, 16},  {64, 64},  {256, 128}, {64, 128},
                                                        {256, 16}, {37, 50},  {512, 256}};

void sweep(at::ScalarType dt) {
  uint64_t seed = 100;
  for (int64_t L : kLengths)
    for (auto [M, D] : kDims) {
      // The longest sequences with the largest dimensions only in float32 (the speed path) and
      // float64; the CPU reference dominates the run time.
      if (L == 4096 && M * D > 64 * 128 && dt == at::kBFloat16) continue;
      expect_matches_cpu(make_inputs(L, M, D, 2.0, seed), dt, shape_name(L, M, D, 2.0));
      seed += 10;
    }
}

// y, lse and the gradients of sum(y gy) + sum(lse h) (or of sum(lse h) alone: y unused), in dtype
// dt on device dev (causal_linear_attention_lse).
struct LseResult {
  at::Tensor y, lse, dq, dk, dls, dv;  // float64 on the CPU
};
LseResult run_lse(const Inputs& in, const at::Tensor& h, bool with_y, at::ScalarType dt, at::Device dev) {
  auto leaf = [&](const at::Tensor& t) { return t.to(dev, dt).detach().requires_grad_(true); };
  at::Tensor q = leaf(in.q), k = leaf(in.k), ls = leaf(in.ls), v = leaf(in.v);
  const K::AttentionWithLse o = K::causal_linear_attention_lse(q, k, ls, v);
  at::Tensor loss = (o.lse * h.to(dev, dt)).sum();
  if (with_y) loss = loss + (o.y * in.gy.to(dev, dt)).sum();
  loss.backward();
  auto host = [](const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble); };
  auto grad = [&](const at::Tensor& t) { return t.grad().defined() ? host(t.grad()) : at::zeros_like(host(t)); };
  return {host(o.y), host(o.lse), grad(q), grad(k), grad(ls), grad(v)};
}

void expect_lse_matches_cpu(const Inputs& in, const at::Tensor& h, bool with_y, at::ScalarType dt, const std::string& what) {
  const Inputs exact = rounded(in, dt);
  const at::Tensor hr = h.to(dt).to(at::kDouble);
  const LseResult gpu = run_lse(exact, hr, with_y, dt, at::Device(at::kCUDA));
  const LseResult cpu = run_lse(exact, hr, with_y, at::kDouble, at::Device(at::kCPU));
  const Tolerance tol = tolerance(dt);
  const std::string where = what + (with_y ? " y+lse " : " lse ") + std::string(c10::toString(dt));
  EXPECT_LE(rel_error(gpu.y, cpu.y), tol.y) << where << ": y";
  EXPECT_LE(rel_error(gpu.lse, cpu.lse), tol.y) << where << ": lse";
  EXPECT_LE(rel_error(gpu.dq, cpu.dq), tol.grad) << where << ": dq";
  EXPECT_LE(rel_error(gpu.dk, cpu.dk), tol.grad) << where << ": dk";
  EXPECT_LE(rel_error(gpu.dls, cpu.dls), tol.grad) << where << ": dk_log_scale";
  EXPECT_LE(rel_error(gpu.dv, cpu.dv), tol.grad) << where << ": dv";
}

// Token by token for T tokens of N = 2 sequences (heads 0 and 1 of make_inputs): the CUDA
// recurrent step's y and lse against the CPU's (float64, same values), then the final state.
void expect_recurrent_matches_cpu(int64_t M, int64_t D, at::ScalarType dt, int64_t T, uint64_t seed) {
  const at::NoGradGuard no_grad;
  const int64_t N = 2;
  const Inputs in = rounded(make_inputs(T, M, D, 300.0, seed), dt);
  K::RecurrentState gpu_state, cpu_state;
  double err_y = 0, err_lse = 0;
  for (int64_t t = 0; t < T; ++t) {
    auto token = [&](const at::Tensor& x) { return x[0].select(1, t); };  // [N, ...]
    const at::Tensor q = token(in.q), k = token(in.k), ls = token(in.ls).view({N}), v = token(in.v);
    at::Tensor lg, lc;
    const at::Tensor yg =
        K::recurrent_step(gpu_state, q.to(at::kCUDA, dt), k.to(at::kCUDA, dt), ls.to(at::kCUDA, dt), v.to(at::kCUDA, dt), &lg);
    const at::Tensor yc = K::recurrent_step(cpu_state, q, k, ls, v, &lc);
    err_y = std::max(err_y, rel_error(yg.to(at::kCPU).to(at::kDouble), yc));
    err_lse = std::max(err_lse, rel_error(lg.to(at::kCPU).to(at::kDouble), lc));
  }
  const std::string where = "recurrent M=" + std::to_string(M) + " D=" + std::to_string(D) + " " + c10::toString(dt);
  const Tolerance tol = tolerance(dt);
  EXPECT_LE(err_y, tol.y) << where << ": y";
  EXPECT_LE(err_lse, tol.y) << where << ": lse";
  auto host = [](const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble); };
  EXPECT_LE(rel_error(host(gpu_state.S), cpu_state.S), tol.y) << where << ": S";
  EXPECT_LE(rel_error(host(gpu_state.z), cpu_state.z), tol.y) << where << ": z";
  EXPECT_LE(rel_error(host(gpu_state.c), cpu_state.c), tol.y) << where << ": c";
}

}  // namespace

TEST(KernelsCuda, OutputAndGradientsMatchCpuFloat32) {
  SKIP_WITHOUT_GPU();
  sweep(at::kFloat);
}

TEST(KernelsCuda, OutputAndGradientsMatchCpuFloat64) {
  SKIP_WITHOUT_GPU();
  sweep(at::kDouble);
}

TEST(KernelsCuda, OutputAndGradientsMatchCpuBFloat16) {
  SKIP_WITHOUT_GPU();
  sweep(at::kBFloat16);
}

// Key log scales uniform over [-300, 300] (exp(300) overflows float32 and nearly float64), rising
// and falling ramps (each chunk's maximum above or below the carried one: the prefix rescaling
// both ways), across chunk boundaries.
TEST(KernelsCuda, HugeKeyLogScalesMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16})
    for (int64_t L : {65, 1000}) {
      Inputs in = make_inputs(L, 64, 64, 300.0, 7 + L);
      expect_matches_cpu(in, dt, shape_name(L, 64, 64, 300.0));
      const at::Tensor ramp = at::arange(L, at::kDouble).view({1, 1, L, 1}).expand({1, 2, L, 1}) * 0.5;
      in.ls = ramp * 3;  // rising: 1.5 per position, 96 per chunk
      expect_matches_cpu(in, dt, "rising ramp " + shape_name(L, 64, 64, 1.5 * L));
      in.ls = -ramp * 3;  // falling: the first key keeps the maximum
      expect_matches_cpu(in, dt, "falling ramp " + shape_name(L, 64, 64, 1.5 * L));
    }
}

// Decayed heads (SPEC 5, head.h's decayed_features): the decay reaches the kernel as each key's log
// scale minus Lambda_j = (j + 1) log a, a rising ramp of slope -log a on top of the features' own
// scales. Strong decay over 4096 tokens (a = sigmoid(-2.5): Lambda down to about -1.1e4, where a
// float32 log scale has a spacing of 1e-3) and a weak one (a = sigmoid(8)) in the other head.
TEST(KernelsCuda, StrongDecayMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kDouble})
    for (int64_t L : {64, 4096}) {
      Inputs in = make_inputs(L, 32, 32, 3.0, 17 + L);
      const at::Tensor pos = at::arange(1, L + 1, at::kDouble).view({1, 1, L, 1});
      const at::Tensor log_a = at::log_sigmoid(at::tensor({8.0, -2.5}, at::kDouble)).view({1, 2, 1, 1});
      in.ls = in.ls - pos * log_a;  // the key's own scale - Lambda_j
      expect_matches_cpu(in, dt, "decay " + shape_name(L, 32, 32, 2.58 * double(L)));
    }
}

// Rows with no weight: keys 0..2 are zero vectors (rows 0..2 see only them) and queries 100 and
// 150 are zero. Those rows are NaN on both devices, every gradient is finite and equals the CPU's,
// and the zero-query rows' dq is exactly 0.
TEST(KernelsCuda, RowsWithoutWeightAreNanWithZeroGradient) {
  SKIP_WITHOUT_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kDouble}) {
    Inputs in = make_inputs(200, 64, 32, 2.0, 31);
    in.k.narrow(2, 0, 3).zero_();
    in.q.select(2, 100).zero_();
    in.q.select(2, 150).zero_();
    const Inputs exact = rounded(in, dt);
    const Result gpu = run(exact, dt, at::Device(at::kCUDA));
    const Result cpu = run(exact, at::kDouble, at::Device(at::kCPU));
    const at::Tensor nan_rows = at::isnan(gpu.y).all(-1);  // [1, 2, L]
    for (int64_t i : {0, 1, 2, 100, 150}) EXPECT_TRUE(nan_rows[0][1][i].item<bool>()) << "row " << i << " is not NaN";
    EXPECT_EQ(nan_rows.sum().item<int64_t>(), 2 * 5) << "only the five rows without weight are NaN";
    EXPECT_FALSE(at::isnan(gpu.y).logical_xor(nan_rows.unsqueeze(-1)).any().item<bool>()) << "partly NaN rows";
    for (const at::Tensor* g : {&gpu.dq, &gpu.dk, &gpu.dls, &gpu.dv})
      EXPECT_TRUE(at::isfinite(*g).all().item<bool>()) << "a gradient is not finite";
    EXPECT_EQ(gpu.dq.select(2, 100).abs().max().item<double>(), 0.0);
    EXPECT_EQ(gpu.dq.select(2, 150).abs().max().item<double>(), 0.0);
    const Tolerance tol = tolerance(dt);
    EXPECT_LE(rel_error(gpu.y, cpu.y), tol.y);
    EXPECT_LE(rel_error(gpu.dq, cpu.dq), tol.grad);
    EXPECT_LE(rel_error(gpu.dk, cpu.dk), tol.grad);
    EXPECT_LE(rel_error(gpu.dls, cpu.dls), tol.grad);
    EXPECT_LE(rel_error(gpu.dv, cpu.dv), tol.grad);
  }
}

// Token by token: the CUDA recurrent step against the CPU one (float64) on the same values, for
// 150 tokens with key log scales over [-300, 300], every output and the final state.
TEST(KernelsCuda, RecurrentStepMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const at::NoGradGuard no_grad;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16})
    for (auto [M, D] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {64, 128}, {256, 64}, {37, 50}}) {
      const int64_t N = 3, T = 150;
      const Inputs in = rounded(make_inputs(T, M, D, 300.0, 500 + M + D), dt);
      // Three sequences per token: head 0, head 1, and head 0 read backwards.
      auto token = [&](const at::Tensor& x, int64_t t) {
        return at::cat({x[0][0][t].unsqueeze(0), x[0][1][t].unsqueeze(0), x[0][0][T - 1 - t].unsqueeze(0)}, 0);
      };
      K::RecurrentState gpu_state, cpu_state;
      double err = 0;
      for (int64_t t = 0; t < T; ++t) {
        const at::Tensor q = token(in.q, t), k = token(in.k, t), ls = token(in.ls, t).view({N}), v = token(in.v, t);
        const at::Tensor yg = K::recurrent_step(gpu_state, q.to(at::kCUDA, dt), k.to(at::kCUDA, dt), ls.to(at::kCUDA, dt),
                                                v.to(at::kCUDA, dt));
        const at::Tensor yc = K::recurrent_step(cpu_state, q, k, ls, v);
        err = std::max(err, rel_error(yg.to(at::kCPU).to(at::kDouble), yc));
      }
      const std::string where = "M=" + std::to_string(M) + " D=" + std::to_string(D) + " " + c10::toString(dt);
      const Tolerance tol = tolerance(dt);
      EXPECT_LE(err, tol.y) << where << ": y";
      auto host = [](const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble); };
      EXPECT_LE(rel_error(host(gpu_state.S), cpu_state.S), tol.y) << where << ": S";
      EXPECT_LE(rel_error(host(gpu_state.z), cpu_state.z), tol.y) << where << ": z";
      EXPECT_LE(rel_error(host(gpu_state.c), cpu_state.c), tol.y) << where << ": c";
    }
}

// A hybrid head's token on CUDA (hybrid_step's composition: recurrent_step's CUDA kernel and
// LibTorch) against the CPU loop: 40 tokens through windows of 1 and 8, key log scales spread 300
// with a strong decay (Lambda down to -1e4) and balances at +-30, float32 and float64.
TEST(KernelsCuda, HybridStepMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const at::NoGradGuard no_grad;
  for (at::ScalarType dt : {at::kFloat, at::kDouble})
    for (int64_t W : {int64_t(1), int64_t(8)}) {
      const int64_t N = 3, M = 16, D = 32, T = 40;
      const Inputs in = rounded(make_inputs(T, M, D, 300.0, 700 + W), dt);
      const at::Tensor q_raw = test::seeded_randn({T, N, D}, 710 + W).to(dt), k_raw = test::seeded_randn({T, N, D}, 720 + W).to(dt);
      const at::Tensor lambda = (-500.0 * uniform({T, N}, 730 + W, 0.0, 1.0)).cumsum(0).to(dt);
      const at::Tensor gamma = at::tensor({30.0, -30.0, 0.5}, at::kDouble).to(dt);
      auto token = [&](const at::Tensor& x, int64_t t) {  // [1, H, T, X] -> [N, X]: heads 0, 1 and 0 backwards
        return at::cat({x[0][0][t].unsqueeze(0), x[0][1][t].unsqueeze(0), x[0][0][T - 1 - t].unsqueeze(0)}, 0);
      };
      K::HybridState gpu, cpu;
      double err = 0;
      for (int64_t t = 0; t < T; ++t) {
        const at::Tensor fq = token(in.q, t).to(dt), fk = token(in.k, t).to(dt), v = token(in.v, t).to(dt);
        const at::Tensor q_ls = token(in.ls, t).view({N}).to(dt), k_ls = token(in.ls, T - 1 - t).view({N}).to(dt);
        const at::Tensor f = at::stack({fq, fk}, 1), ls = at::stack({q_ls, k_ls}, 1);
        const at::Tensor yc = K::hybrid_step(cpu, W, q_raw[t], k_raw[t], v, f, ls, gamma, lambda[t]);
        auto g = [](const at::Tensor& x) { return x.to(at::kCUDA); };
        const at::Tensor yg = K::hybrid_step(gpu, W, g(q_raw[t]), g(k_raw[t]), g(v), g(f), g(ls), g(gamma), g(lambda[t]));
        err = std::max(err, rel_error(yg.to(at::kCPU).to(at::kDouble), yc.to(at::kDouble)));
      }
      EXPECT_LE(err, tolerance(dt).y) << "W=" << W << " " << c10::toString(dt);
      EXPECT_EQ(gpu.n, T);
    }
}

// lse and the gradients through it (alone, and with y) against the CPU kernel: lengths around the
// chunk and a long one, key log scales spread 2 and 300 and a rising ramp, every dtype.
TEST(KernelsCuda, LseAndGradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 900;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16})
    for (int64_t L : {1, 63, 64, 65, 1000})
      for (auto [M, D] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {256, 128}, {37, 50}})
        for (double spread : {2.0, 300.0, -1.0}) {  // -1: rising ramp, 1.5 per position
          Inputs in = make_inputs(L, M, D, std::max(spread, 1.0), seed);
          if (spread < 0) in.ls = at::arange(L, at::kDouble).view({1, 1, L, 1}).expand({1, 2, L, 1}) * 1.5;
          const at::Tensor h = test::seeded_randn({1, 2, L, 1}, seed + 7);
          const std::string what = spread < 0 ? "rising ramp " + shape_name(L, M, D, 1.5 * L) : shape_name(L, M, D, spread);
          for (bool with_y : {false, true}) expect_lse_matches_cpu(in, h, with_y, dt, what);
          seed += 10;
        }
}

// Rows without weight (keys 0..2 zero, queries 100 and 150 zero): lse = -inf on both devices, the
// nonzero upstream gradient of those rows passes nothing, every gradient is finite.
TEST(KernelsCuda, LseRowsWithoutWeightMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (at::ScalarType dt : {at::kFloat, at::kDouble}) {
    Inputs in = make_inputs(200, 64, 32, 2.0, 37);
    in.k.narrow(2, 0, 3).zero_();
    in.q.select(2, 100).zero_();
    in.q.select(2, 150).zero_();
    const Inputs exact = rounded(in, dt);
    const at::Tensor h = test::seeded_randn({1, 2, 200, 1}, 38);
    const LseResult gpu = run_lse(exact, h, false, dt, at::Device(at::kCUDA));
    const LseResult cpu = run_lse(exact, h, false, at::kDouble, at::Device(at::kCPU));
    for (int64_t i : {0, 1, 2, 100, 150}) EXPECT_EQ(gpu.lse[0][1][i][0].item<double>(), -INFINITY) << "row " << i;
    EXPECT_EQ((gpu.lse == -INFINITY).sum().item<int64_t>(), 2 * 5);
    for (const at::Tensor* g : {&gpu.dq, &gpu.dk, &gpu.dls, &gpu.dv})
      EXPECT_TRUE(at::isfinite(*g).all().item<bool>()) << "a gradient is not finite";
    EXPECT_EQ(gpu.dq.select(2, 100).abs().max().item<double>(), 0.0);
    const Tolerance tol = tolerance(dt);
    EXPECT_LE(rel_error(gpu.lse, cpu.lse), tol.y);
    EXPECT_LE(rel_error(gpu.dq, cpu.dq), tol.grad);
    EXPECT_LE(rel_error(gpu.dk, cpu.dk), tol.grad);
    EXPECT_LE(rel_error(gpu.dls, cpu.dls), tol.grad);
  }
}

// The recurrent step's lse on CUDA against the CPU's, token by token (a zero query at token 40 of
// sequence 1 gives a -inf row).
TEST(KernelsCuda, RecurrentLseMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const at::NoGradGuard no_grad;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16})
    for (auto [M, D] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {256, 64}, {37, 50}}) {
      const int64_t N = 2, T = 120;
      Inputs in = rounded(make_inputs(T, M, D, 300.0, 700 + M + D), dt);
      in.q[0][1][40].zero_();
      K::RecurrentState gpu_state, cpu_state;
      double err = 0;
      for (int64_t t = 0; t < T; ++t) {
        auto token = [&](const at::Tensor& x) { return x[0].select(1, t); };  // [N, ...]
        const at::Tensor q = token(in.q), k = token(in.k), ls = token(in.ls).view({N}), v = token(in.v);
        at::Tensor lg, lc;
        K::recurrent_step(gpu_state, q.to(at::kCUDA, dt), k.to(at::kCUDA, dt), ls.to(at::kCUDA, dt), v.to(at::kCUDA, dt), &lg);
        K::recurrent_step(cpu_state, q, k, ls, v, &lc);
        EXPECT_EQ(lg.scalar_type(), dt);
        err = std::max(err, rel_error(lg.to(at::kCPU).to(at::kDouble), lc));
        if (t == 40) {
          EXPECT_EQ(lg[1].item<double>(), -INFINITY);
        }
      }
      EXPECT_LE(err, tolerance(dt).y) << "M=" << M << " D=" << D << " " << c10::toString(dt) << ": lse";
    }
}

// The limits and the edges of the kernels' column tiles: M = 512 and 511 (two gradient tiles of
// 256 columns, the second full or one short), 257 (one column into the second), 300; D = 256 and
// 255 (two output tiles of 128; D + 1 = 257 and 256: two state tiles of 160), 129 (one column into
// the second output tile), 160 (D + 1 = 161: one into the second state tile); and each limit with
// the other dimension small. Output, gradients and lse (alone and with y) of the chunked form for
// one position, one chunk and a bit and several chunks, and the recurrent step (y, lse, state).
TEST(KernelsCuda, LimitSizesMatchCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int64_t, int64_t>> dims = {
      {K::kMaxFeatures, K::kMaxHeadDim}, {511, 255}, {257, 129}, {300, 160}, {300, 256}, {K::kMaxFeatures, 16}, {16, K::kMaxHeadDim}};
  uint64_t seed = 1300;
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16})
    for (auto [M, D] : dims) {
      for (int64_t L : {1, 65, 200}) {
        const Inputs in = make_inputs(L, M, D, 2.0, seed);
        expect_matches_cpu(in, dt, shape_name(L, M, D, 2.0));
        const at::Tensor h = test::seeded_randn({1, 2, L, 1}, seed + 7);
        for (bool with_y : {false, true}) expect_lse_matches_cpu(in, h, with_y, dt, shape_name(L, M, D, 2.0));
        seed += 10;
      }
      expect_recurrent_matches_cpu(M, D, dt, 70, seed);
      seed += 10;
    }
}

// Past the limits the dispatch throws an Error naming M and D and the limits (the CPU kernels
// take the same inputs); the recurrent step's launcher does the same.
TEST(KernelsCuda, PastTheLimitsNameTheSizes) {
  SKIP_WITHOUT_GPU();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const attnscope::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string limits = "M <= " + std::to_string(K::kMaxFeatures);
  const std::string head = "D <= " + std::to_string(K::kMaxHeadDim);
  for (auto [M, D] : std::vector<std::pair<int64_t, int64_t>>{{K::kMaxFeatures + 1, 16}, {16, K::kMaxHeadDim + 1}}) {
    const Inputs in = make_inputs(5, M, D, 2.0, 1500);
    auto cuda = [](const at::Tensor& t) { return t.to(at::kCUDA, at::kFloat); };
    const std::string got = message([&] { K::causal_linear_attention(cuda(in.q), cuda(in.k), cuda(in.ls), cuda(in.v)); });
    EXPECT_NE(got.find(limits), std::string::npos) << got;
    EXPECT_NE(got.find(head), std::string::npos) << got;
    EXPECT_NE(got.find("M = " + std::to_string(M) + ", D = " + std::to_string(D)), std::string::npos) << got;
    EXPECT_EQ(K::causal_linear_attention(in.q, in.k, in.ls, in.v).sizes(), in.v.sizes()) << "the CPU kernel takes any size";
    K::RecurrentState st;
    const std::string rec = message([&] {
      K::recurrent_step(st, cuda(in.q[0][0]), cuda(in.k[0][0]), cuda(in.ls[0][0].view({5})), cuda(in.v[0][0]));
    });
    EXPECT_NE(rec.find(limits), std::string::npos) << rec;
    EXPECT_NE(rec.find("M = " + std::to_string(M) + ", D = " + std::to_string(D)), std::string::npos) << rec;
  }
}

}  // namespace test_kernels_cuda
