// The GEMM-based chunked form of causal linear attention (kernels/src/gemm_chunked.cpp, reached
// through causal_linear_attention_lse_gemm: what the dispatch runs for bfloat16/float16 on CUDA),
// run on the CPU against two independent computations: a float64 O(L^2) reference through the
// masked L x L map in the log domain (its autograd for the gradients) and the CPU kernel (float64).
// Lengths on both sides of chunk boundaries and past the scan's group of 16 chunks (L > 1024),
// M and D at the CUDA limits, extreme key log scales, rows without weight, finite differences.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "test_support.h"

namespace test_kernels_gemm {

using namespace attnscope;
namespace K = attnscope::kernels;

namespace {

struct Inputs {
  at::Tensor q, k, ls, v;  // [N, L, M], [N, L, M], [N, L, 1], [N, L, D], float64
  Inputs to(at::ScalarType dt) const { return {q.to(dt), k.to(dt), ls.to(dt), v.to(dt)}; }
  // The inputs as a dtype holds them, back in float64 (the reference's view of rounded inputs).
  Inputs rounded(at::ScalarType dt) const { return to(dt).to(at::kDouble); }
};

// Positive features (exp of a Gaussian, like PRF values), key log scales N(0, spread^2).
Inputs make_inputs(int64_t N, int64_t L, int64_t M, int64_t D, double spread, uint64_t seed) {
  return {at::exp(test::seeded_randn({N, L, M}, seed) * 0.5), at::exp(test::seeded_randn({N, L, M}, seed + 1) * 0.5), test::seeded_randn({N, L, 1}, seed + 2, spread),
          test::seeded_randn({N, L, D}, seed + 3)};
}

// The reference: w_ij = (q_i.k_j) exp(ls_j - c_i) over the whole masked L x L map (c_i the running
// max; keys of scale -inf and j > i weigh 0), float64, differentiable. Rows with den = 0 get y = 0
// and lse = -inf through where (no gradient); `nan_rows` says which they are.
struct Reference {
  at::Tensor y, lse, none;  // [N, L, D], [N, L, 1], [N, L, 1] bool (den == 0)
};
Reference reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  const int64_t L = q.size(1);
  const at::Tensor l = ls.squeeze(-1);
  const at::Tensor c = std::get<0>(at::cummax(l.detach(), -1));
  const at::Tensor off = at::ones({L, L}, at::kBool).tril().logical_not().unsqueeze(0) | (l.detach() == -INFINITY).unsqueeze(1);
  const at::Tensor expo = (l.unsqueeze(1) - c.unsqueeze(2)).masked_fill(off, -INFINITY);
  const at::Tensor w = at::matmul(q, k.transpose(1, 2)) * at::exp(expo);
  const at::Tensor den = w.sum(-1, /*keepdim=*/true);
  const at::Tensor nonzero = den != 0, positive = den > 0;
  Reference r;
  r.y = at::where(nonzero, at::matmul(w, v) / at::where(nonzero, den, at::ones_like(den)), at::zeros_like(v));
  r.lse = at::where(positive, c.unsqueeze(-1) + at::log(at::where(positive, den, at::ones_like(den))), at::full_like(den, -INFINITY));
  r.none = nonzero.logical_not();
  return r;
}
Reference reference(const Inputs& in) { return reference(in.q, in.k, in.ls, in.v); }

// max |got - want| / max|want| over rows with weight; infinite unless got is NaN exactly on the
// rows without weight.
double y_error(const at::Tensor& got, const Reference& ref) {
  const at::Tensor g = got.to(at::kDouble);
  const at::Tensor nan_rows = at::isnan(g).all(-1, /*keepdim=*/true), any_nan = at::isnan(g).any(-1, /*keepdim=*/true);
  if (!at::equal(nan_rows, ref.none) || !at::equal(any_nan, ref.none)) return INFINITY;
  const at::Tensor keep = ref.none.logical_not().expand_as(g);
  if (!keep.any().item<bool>()) return 0;
  return ((g - ref.y).masked_select(keep).abs().max() / ref.y.masked_select(keep).abs().max().clamp_min(1e-300)).item<double>();
}

// max |got - want| / max(1, |want|) over the finite lse; infinite unless -inf exactly where want is.
double lse_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble);
  if (at::isnan(g).any().item<bool>() || !at::equal(g == -INFINITY, want == -INFINITY) || at::isinf(g).logical_and(g > 0).any().item<bool>())
    return INFINITY;
  const at::Tensor fin = at::isfinite(want);
  if (!fin.any().item<bool>()) return 0;
  return ((g - want).abs() / want.abs().clamp_min(1.0)).masked_select(fin).max().item<double>();
}

double max_rel(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (!at::isfinite(g).all().item<bool>()) return INFINITY;
  return ((g - w).abs().max() / w.abs().max().clamp_min(1e-300)).item<double>();
}

// A scalar loss through y (rows without weight left out by where: no gradient) and lse (finite
// rows), with fixed random weights, and the four gradients.
struct Grads {
  at::Tensor dq, dk, dls, dv;
};
at::Tensor loss_of(const at::Tensor& y, const at::Tensor& lse, uint64_t seed) {
  const at::Tensor ry = test::seeded_randn(y.sizes().vec(), seed).to(y.scalar_type());
  const at::Tensor rl = test::seeded_randn(lse.sizes().vec(), seed + 1).to(lse.scalar_type());
  const at::Tensor y0 = at::where(at::isnan(y), at::zeros_like(y), y);
  const at::Tensor l0 = at::where(at::isfinite(lse), lse, at::zeros_like(lse));
  return (y0 * ry).sum() + (l0 * rl).sum();
}
enum class Path { Gemm, Kernel, Reference };
Grads grads_of(const Inputs& in, Path path, uint64_t seed) {
  at::Tensor q = in.q.clone().requires_grad_(true), k = in.k.clone().requires_grad_(true);
  at::Tensor ls = in.ls.clone().requires_grad_(true), v = in.v.clone().requires_grad_(true);
  at::Tensor loss;
  if (path == Path::Reference) {
    const Reference r = reference(q, k, ls, v);
    loss = loss_of(r.y, r.lse, seed);
  } else {
    const K::AttentionWithLse a = path == Path::Gemm ? K::causal_linear_attention_lse_gemm(q, k, ls, v)
                                                     : K::causal_linear_attention_lse(q, k, ls, v);
    loss = loss_of(a.y, a.lse, seed);
  }
  loss.backward();
  auto g = [](const at::Tensor& t) { return t.grad().defined() ? t.grad() : at::zeros_like(t); };
  return {g(q), g(k), g(ls), g(v)};
}

void expect_grads_near(const Grads& got, const Grads& want, double tol, const std::string& what) {
  EXPECT_LT(max_rel(got.dq, want.dq), tol) << what << " dq";
  EXPECT_LT(max_rel(got.dk, want.dk), tol) << what << " dk";
  EXPECT_LT(max_rel(got.dls, want.dls), tol) << what << " dls";
  EXPECT_LT(max_rel(got.dv, want.dv), tol) << what << " dv";
}

// The forward of `in` (float64) through the GEMM form in float64 and float32, against the reference
// and (against_cpu) the CPU kernel.
void check_forward(const Inputs& in, const std::string& what, bool against_cpu = true) {
  const Reference ref = reference(in);
  const K::AttentionWithLse g64 = K::causal_linear_attention_lse_gemm(in.q, in.k, in.ls, in.v);
  EXPECT_EQ(g64.y.scalar_type(), at::kDouble);
  EXPECT_LT(y_error(g64.y, ref), 1e-10) << what << " float64 y vs reference";
  EXPECT_LT(lse_error(g64.lse, ref.lse), 1e-10) << what << " float64 lse vs reference";
  if (against_cpu) {
    const K::AttentionWithLse cpu64 = K::causal_linear_attention_lse(in.q, in.k, in.ls, in.v);
    EXPECT_LT(y_error(g64.y, {cpu64.y.nan_to_num(0), cpu64.lse, at::isnan(cpu64.y).all(-1, true)}), 1e-10) << what << " vs CPU kernel";
    EXPECT_LT(lse_error(g64.lse, cpu64.lse), 1e-10) << what << " lse vs CPU kernel";
  }
  const Inputs in32 = in.to(at::kFloat);
  const Reference ref32 = reference(in.rounded(at::kFloat));
  const K::AttentionWithLse g32 = K::causal_linear_attention_lse_gemm(in32.q, in32.k, in32.ls, in32.v);
  EXPECT_EQ(g32.y.scalar_type(), at::kFloat);
  EXPECT_LT(y_error(g32.y, ref32), 1e-5) << what << " float32 y vs reference";
  EXPECT_LT(lse_error(g32.lse, ref32.lse), 1e-5) << what << " float32 lse vs reference";
}

}  // namespace

TEST(KernelsGemm, ForwardEqualsReferenceAndCpuKernelAtEveryChunkBoundary) {
  for (int64_t L : {1, 63, 64, 65, 200, 1000, 2200}) {
    check_forward(make_inputs(2, L, 6, 5, 3.0, 10 + L), "L " + std::to_string(L));
  }
}

TEST(KernelsGemm, ForwardAtSmallAndLargestSizes) {
  check_forward(make_inputs(1, 130, 1, 1, 2.0, 31), "M 1 D 1");
  check_forward(make_inputs(1, 130, K::kMaxFeatures, K::kMaxHeadDim, 2.0, 32), "M 512 D 256");
  check_forward(make_inputs(2, 70, 128, 96, 2.0, 33), "M 128 D 96");
}

// Key log scales spread over thousands (exp(ls) alone is far past float64's range), keys of scale
// -inf (the first chunk's first keys: rows without weight; a whole chunk: a -inf chunk state),
// rising ramps (the running max moves at every key and chunk), and zero queries (rows without
// weight): NaN rows where the reference has them, zero gradient from them, the rest as the reference.
// The CPU kernel too: it gave NaN there before (y after a chunk of -inf keys: its chunk state's
// exp(ls - m_t) was exp(-inf - -inf); so were the gradients of rows whose running max is -inf).
TEST(KernelsGemm, ExtremeScalesAndRowsWithoutWeight) {
  const int64_t N = 2, L = 1100, M = 4, D = 3;
  Inputs in = make_inputs(N, L, M, D, 2000.0, 41);
  auto ls = in.ls.accessor<double, 3>();
  for (int64_t j = 0; j < 5; ++j) ls[0][j][0] = -INFINITY;            // rows 0-4 of sequence 0: no weight
  for (int64_t j = 128; j < 192; ++j) ls[0][j][0] = -INFINITY;        // chunk 2: every key -inf
  for (int64_t j = 0; j < L; ++j) ls[1][j][0] = 0.75 * double(j);    // sequence 1: a rising ramp
  for (int64_t j = 600; j < L; ++j) ls[1][j][0] = 30.0 * double(j);  // then a steep one
  in.q[0][70].zero_();                                                // query rows without weight
  in.q[1][700].zero_();
  const Reference ref = reference(in);
  ASSERT_EQ(ref.none.sum().item<int64_t>(), 7) << "the rows meant to have no weight";
  check_forward(in, "extremes");
  const Grads g = grads_of(in, Path::Gemm, 7), want = grads_of(in, Path::Reference, 7);
  expect_grads_near(g, want, 1e-9, "extremes vs reference");
  const Grads cpu = grads_of(in, Path::Kernel, 7);
  expect_grads_near(cpu, want, 1e-9, "extremes, CPU kernel vs reference");
  EXPECT_EQ(cpu.dk[0].narrow(0, 128, 64).abs().max().item<double>(), 0.0) << "CPU kernel: keys of scale -inf";
  EXPECT_EQ(g.dq[0][70].abs().max().item<double>(), 0.0) << "a row without weight passes no gradient";
  EXPECT_EQ(g.dq[1][700].abs().max().item<double>(), 0.0);
  EXPECT_EQ(g.dk[0].narrow(0, 128, 64).abs().max().item<double>(), 0.0) << "keys of scale -inf have no gradient";
  EXPECT_EQ(g.dls[0].narrow(0, 128, 64).abs().max().item<double>(), 0.0);

  // Against the CPU kernel: the same with finite (but far below the rest) first keys and one such
  // key in chunk 2.
  for (int64_t j = 0; j < 5; ++j) ls[0][j][0] = -5000.0;
  ls[0][150][0] = -5000.0;
  check_forward(in, "extremes, finite keys in chunk 0 and 2");
  expect_grads_near(grads_of(in, Path::Gemm, 7), grads_of(in, Path::Kernel, 7), 1e-9, "extremes vs CPU kernel");
}

// The recurrent step (generation) at the same extremes: token by token it gives the reference's
// rows, NaN where a row has no weight, and its state stays finite through leading keys of scale
// -inf (before: keep = exp(-inf - -inf) made the state NaN for good).
TEST(KernelsGemm, RecurrentStepThroughKeysOfScaleMinusInf) {
  const int64_t L = 200, M = 4, D = 3;
  Inputs in = make_inputs(1, L, M, D, 50.0, 43);
  auto ls = in.ls.accessor<double, 3>();
  for (int64_t j = 0; j < 3; ++j) ls[0][j][0] = -INFINITY;
  for (int64_t j = 64; j < 128; ++j) ls[0][j][0] = -INFINITY;
  const Reference ref = reference(in);
  K::RecurrentState st;
  for (int64_t i = 0; i < L; ++i) {
    at::Tensor lse;
    const at::Tensor y = K::recurrent_step(st, in.q.select(1, i), in.k.select(1, i), in.ls.select(1, i).squeeze(-1),
                                           in.v.select(1, i), &lse);
    if (ref.none[0][i][0].item<bool>()) {
      EXPECT_TRUE(at::isnan(y).all().item<bool>()) << "row " << i << " has no weight";
      EXPECT_EQ(lse.item<double>(), -INFINITY) << i;
      continue;
    }
    EXPECT_LT(((y[0] - ref.y[0][i]).abs().max() / ref.y[0][i].abs().max().clamp_min(1e-300)).item<double>(), 1e-10) << "row " << i;
    EXPECT_NEAR(lse.item<double>(), ref.lse[0][i][0].item<double>(), 1e-10 * std::max(1.0, std::abs(ref.lse[0][i][0].item<double>()))) << i;
  }
  EXPECT_EQ(ref.none.sum().item<int64_t>(), 3);
  EXPECT_TRUE(at::isfinite(st.S).all().item<bool>());
}

// Past 16 x 16 chunks (L > 16384) the scan over chunks recurses twice: against the CPU kernel (the
// O(L^2) reference would take gigabytes here).
TEST(KernelsGemm, DeepScanEqualsCpuKernel) {
  const Inputs in = make_inputs(1, 16500, 2, 2, 3.0, 95);
  const K::AttentionWithLse g = K::causal_linear_attention_lse_gemm(in.q, in.k, in.ls, in.v);
  const K::AttentionWithLse cpu = K::causal_linear_attention_lse(in.q, in.k, in.ls, in.v);
  EXPECT_LT(max_rel(g.y, cpu.y), 1e-10);
  EXPECT_LT(lse_error(g.lse, cpu.lse), 1e-10);
  expect_grads_near(grads_of(in, Path::Gemm, 12), grads_of(in, Path::Kernel, 12), 1e-9, "L 16500");
}

// Huge scales: two keys at 1e30 and 2e30 take all the weight of the rows after them (every other
// key's weight underflows to exactly 0), in float32 as in float64.
TEST(KernelsGemm, HugeKeyScales) {
  Inputs in = make_inputs(1, 300, 5, 4, 1.0, 51);
  auto ls = in.ls.accessor<double, 3>();
  ls[0][100][0] = 1e30;
  ls[0][250][0] = 2e30;
  check_forward(in, "huge");
  const Grads g = grads_of(in, Path::Gemm, 8), cpu = grads_of(in, Path::Kernel, 8);
  expect_grads_near(g, cpu, 1e-9, "huge vs CPU kernel");
}

TEST(KernelsGemm, GradientsEqualCpuKernelAndReference) {
  for (int64_t L : {1, 65, 200, 1100}) {
    const Inputs in = make_inputs(2, L, 6, 5, 3.0, 60 + L);
    const Grads g = grads_of(in, Path::Gemm, 9);
    expect_grads_near(g, grads_of(in, Path::Kernel, 9), 1e-9, "L " + std::to_string(L) + " vs CPU kernel");
    expect_grads_near(g, grads_of(in, Path::Reference, 9), 1e-9, "L " + std::to_string(L) + " vs reference");
    // float32 inputs: the float64 reference's gradients of the rounded inputs.
    const Grads g32 = grads_of(in.to(at::kFloat), Path::Gemm, 9);
    expect_grads_near(g32, grads_of(in.rounded(at::kFloat), Path::Reference, 9), 1e-4, "L " + std::to_string(L) + " float32");
  }
}

TEST(KernelsGemm, GradientMatchesFiniteDifferences) {
  // Two chunks (the state and the suffix both carry), y and lse both in the loss, float64.
  const Inputs in = make_inputs(1, 70, 3, 2, 2.0, 71);
  const Grads g = grads_of(in, Path::Gemm, 10);
  auto loss = [&](const Inputs& x) {
    const K::AttentionWithLse a = K::causal_linear_attention_lse_gemm(x.q, x.k, x.ls, x.v);
    return loss_of(a.y, a.lse, 10).item<double>();
  };
  const double h = 1e-6;
  struct Probe {
    at::Tensor Inputs::*input;
    at::Tensor Grads::*grad;
    const char* name;
  };
  for (const Probe& p : {Probe{&Inputs::q, &Grads::dq, "q"}, Probe{&Inputs::k, &Grads::dk, "k"},
                         Probe{&Inputs::ls, &Grads::dls, "ls"}, Probe{&Inputs::v, &Grads::dv, "v"}}) {
    const at::Tensor flat_grad = (g.*p.grad).reshape(-1);
    const int64_t n = flat_grad.numel();
    for (int64_t idx : {int64_t(0), n / 3, n / 2, n - 1}) {
      Inputs plus{in.q.clone(), in.k.clone(), in.ls.clone(), in.v.clone()}, minus{in.q.clone(), in.k.clone(), in.ls.clone(), in.v.clone()};
      (plus.*p.input).view(-1)[idx] += h;
      (minus.*p.input).view(-1)[idx] -= h;
      const double fd = (loss(plus) - loss(minus)) / (2 * h);
      const double an = flat_grad[idx].item<double>();
      EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::abs(fd))) << p.name << "[" << idx << "]";
    }
  }
}

// bfloat16 inputs (GEMM operands in bfloat16, everything else in float32) against the float64
// reference of the same rounded inputs. Tolerance: a few bfloat16 roundings (2^-8 each) of the
// products, relative to the largest output: 2e-2 for y, 1e-2 for lse (relative to max(1, |lse|)),
// 5e-2 for the gradients (measured at these sizes: y <= 5.1e-3, lse <= 5.0e-3). float16 on the CPU
// (float32 products) to float16's rounding of the outputs.
TEST(KernelsGemm, BFloat16AndFloat16) {
  for (int64_t L : {1, 63, 65, 1000, 1100}) {
    const Inputs in = make_inputs(2, L, 16, 8, 3.0, 80 + L);
    const Inputs bf = in.to(at::kBFloat16);
    const Reference ref = reference(in.rounded(at::kBFloat16));
    const K::AttentionWithLse a = K::causal_linear_attention_lse_gemm(bf.q, bf.k, bf.ls, bf.v);
    ASSERT_EQ(a.y.scalar_type(), at::kBFloat16);
    EXPECT_LT(y_error(a.y, ref), 2e-2) << "L " << L << " bfloat16 y";
    EXPECT_LT(lse_error(a.lse, ref.lse), 1e-2) << "L " << L << " bfloat16 lse";
    expect_grads_near(grads_of(bf, Path::Gemm, 11), grads_of(in.rounded(at::kBFloat16), Path::Reference, 11), 5e-2,
                      "L " + std::to_string(L) + " bfloat16");

    const Inputs hf = in.to(at::kHalf);
    const Reference refh = reference(in.rounded(at::kHalf));
    const K::AttentionWithLse h = K::causal_linear_attention_lse_gemm(hf.q, hf.k, hf.ls, hf.v);
    ASSERT_EQ(h.y.scalar_type(), at::kHalf);
    EXPECT_LT(y_error(h.y, refh), 2e-3) << "L " << L << " float16 y";
    EXPECT_LT(lse_error(h.lse, refh.lse), 2e-3) << "L " << L << " float16 lse";
  }
}

TEST(KernelsGemm, DtypesAndBadInputs) {
  const Inputs in = make_inputs(1, 10, 3, 2, 1.0, 90);
  // The dispatch on the CPU still takes float32/float64 only; the GEMM form takes the four.
  const Inputs bf = in.to(at::kBFloat16);
  EXPECT_THROW(K::causal_linear_attention_lse(bf.q, bf.k, bf.ls, bf.v), Error);
  EXPECT_THROW(K::causal_linear_attention_lse_gemm(in.q.to(at::kInt), in.k.to(at::kInt), in.ls.to(at::kInt), in.v.to(at::kInt)), Error);
  try {
    K::causal_linear_attention_lse_gemm(in.q, in.k, in.ls.narrow(1, 0, 5), in.v);
    ADD_FAILURE() << "a short k_log_scale was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_log_scale"), std::string::npos) << e.what();
  }
  // The recurrent step has no float16 (on any device).
  K::RecurrentState st;
  const at::Tensor h = at::ones({1, 3}, at::kHalf);
  EXPECT_THROW(K::recurrent_step(st, h, h, at::zeros({1}, at::kHalf), at::ones({1, 2}, at::kHalf)), Error);
}

}  // namespace test_kernels_gemm
