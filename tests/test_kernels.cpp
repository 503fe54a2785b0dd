// The CPU kernels of causal linear attention (kernels/include/attnscope/kernels/linear_attention.h)
// against independent computations: a float64 loop over every (query, key) pair for the output,
// LibTorch autograd through the materialized L x L map for the gradients, and the token-by-token
// recurrence against the chunked form. Key log scales spread over thousands put exp far past
// float64's range, so any step that formed exp(ls) alone would overflow.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/bench/attention_bench.h"
#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_kernels {

using namespace attnscope;
namespace K = attnscope::kernels;

namespace {

struct Inputs {
  at::Tensor q, k, ls, v;  // [N, L, M], [N, L, M], [N, L, 1], [N, L, D], float64
};

// Positive features (exp of a Gaussian, like PRF values), key log scales N(0, spread^2).
Inputs make_inputs(int64_t N, int64_t L, int64_t M, int64_t D, double spread, uint64_t seed) {
  return {at::exp(test::seeded_randn({N, L, M}, seed)), at::exp(test::seeded_randn({N, L, M}, seed + 1)), test::seeded_randn({N, L, 1}, seed + 2, spread),
          test::seeded_randn({N, L, D}, seed + 3)};
}

// y_i = sum_{j<=i} (q_i.k_j) exp(ls_j - c_i) v_j / sum_{j<=i} (q_i.k_j) exp(ls_j - c_i), one pair at
// a time in long double, c_i the row's own max (the ratio does not depend on it).
at::Tensor reference_output(const Inputs& in) {
  const int64_t N = in.q.size(0), L = in.q.size(1), M = in.q.size(2), D = in.v.size(2);
  auto q = in.q.accessor<double, 3>(), k = in.k.accessor<double, 3>(), ls = in.ls.accessor<double, 3>(),
       v = in.v.accessor<double, 3>();
  at::Tensor y = at::empty({N, L, D}, at::kDouble);
  auto Y = y.accessor<double, 3>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i) {
      long double c = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) c = std::max<long double>(c, ls[n][j][0]);
      std::vector<long double> num(D, 0);
      long double den = 0;
      for (int64_t j = 0; j <= i; ++j) {
        long double dot = 0;
        for (int64_t m = 0; m < M; ++m) dot += (long double)q[n][i][m] * k[n][j][m];
        const long double w = dot * std::exp((long double)ls[n][j][0] - c);
        den += w;
        for (int64_t d = 0; d < D; ++d) num[d] += w * v[n][j][d];
      }
      for (int64_t d = 0; d < D; ++d) Y[n][i][d] = den == 0 ? NAN : double(num[d] / den);
    }
  return y;
}

// The same output as a differentiable expression through the L x L map (autograd's reference for
// the kernel's hand-written backward): W_ij = (q_i.k_j) exp(ls_j - c_i) masked to j <= i.
at::Tensor map_output(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  const int64_t L = q.size(1);
  const at::Tensor lsd = ls.squeeze(-1).detach();
  const at::Tensor c = std::get<0>(at::cummax(lsd, -1));  // [N, L], a constant: y does not depend on it
  const at::Tensor mask = at::ones({L, L}, at::kBool).tril();
  const at::Tensor expo = (ls.squeeze(-1).unsqueeze(-2) - c.unsqueeze(-1)).masked_fill(mask.logical_not(), -INFINITY);
  const at::Tensor w = at::matmul(q, k.transpose(-2, -1)) * at::exp(expo);
  return at::matmul(w, v) / w.sum(-1, /*keepdim=*/true);
}

double max_rel(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs().max() / w.abs().max().clamp_min(1e-300)).item<double>();
}

// lse_i = c_i + log(den_i) (-inf where den_i <= 0), one pair at a time in long double: [N, L, 1].
at::Tensor reference_lse(const Inputs& in) {
  const int64_t N = in.q.size(0), L = in.q.size(1), M = in.q.size(2);
  auto q = in.q.accessor<double, 3>(), k = in.k.accessor<double, 3>(), ls = in.ls.accessor<double, 3>();
  at::Tensor lse = at::empty({N, L, 1}, at::kDouble);
  auto S = lse.accessor<double, 3>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i) {
      long double c = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) c = std::max<long double>(c, ls[n][j][0]);
      long double den = 0;
      for (int64_t j = 0; j <= i; ++j) {
        long double dot = 0;
        for (int64_t m = 0; m < M; ++m) dot += (long double)q[n][i][m] * k[n][j][m];
        den += dot * std::exp((long double)ls[n][j][0] - c);
      }
      S[n][i][0] = den > 0 ? double(c + std::log(den)) : -INFINITY;
    }
  return lse;
}

// y and lse as differentiable expressions through the L x L map, rows with den <= 0 masked out
// by where (lse = -inf and y = 0 there, no gradient): autograd's reference for the lse backward.
struct MapOutputs {
  at::Tensor y, lse;  // [N, L, D], [N, L, 1]
};
MapOutputs map_outputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  const int64_t L = q.size(1);
  const at::Tensor c = std::get<0>(at::cummax(ls.squeeze(-1).detach(), -1));  // lse = log sum_j (q.k) exp(ls_j): c cancels
  const at::Tensor mask = at::ones({L, L}, at::kBool).tril();
  const at::Tensor expo = (ls.squeeze(-1).unsqueeze(-2) - c.unsqueeze(-1)).masked_fill(mask.logical_not(), -INFINITY);
  const at::Tensor w = at::matmul(q, k.transpose(-2, -1)) * at::exp(expo);
  const at::Tensor den = w.sum(-1, /*keepdim=*/true);
  const at::Tensor positive = den > 0, nonzero = den != 0;
  const at::Tensor y = at::where(nonzero, at::matmul(w, v) / at::where(nonzero, den, at::ones_like(den)), at::zeros_like(v));
  const at::Tensor lse = at::where(positive, c.unsqueeze(-1) + at::log(at::where(positive, den, at::ones_like(den))),
                                   at::full_like(den, -INFINITY));
  return {y, lse};
}

// max |got - want| / max(1, |want|) over the finite entries; infinite if got is not -inf exactly
// where want is, or NaN anywhere.
double lse_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (at::isnan(g).any().item<bool>() || !at::equal(at::isfinite(g), at::isfinite(w)) ||
      !at::equal(g.masked_select(at::isfinite(w).logical_not()), w.masked_select(at::isfinite(w).logical_not())))
    return INFINITY;
  const at::Tensor fin = at::isfinite(w);
  if (!fin.any().item<bool>()) return 0;
  return ((g - w).abs() / w.abs().clamp_min(1.0)).masked_select(fin).max().item<double>();
}

at::Tensor grad_or_zero(const at::Tensor& leaf) { return leaf.grad().defined() ? leaf.grad() : at::zeros_like(leaf); }

}  // namespace

TEST(Kernels, ChunkedForwardEqualsPairLoopFloat64) {
  // L across the chunk edges (1, 63, 64, 65, several chunks) and scales spread over +-1500, far past
  // exp's range in float64.
  for (int64_t L : {1, 2, 63, 64, 65, 130, 300}) {
    for (double spread : {0.0, 3.0, 500.0, -1.0}) {  // -1: a rising ramp of scales, 3 per token
      Inputs in = make_inputs(3, L, 5, 4, std::max(spread, 1.0), 100 + L);
      if (spread < 0) in.ls = in.ls + at::arange(L, at::kDouble).view({1, L, 1}) * 3.0;
      const at::Tensor y = K::causal_linear_attention(in.q, in.k, in.ls, in.v);
      ASSERT_EQ(y.sizes(), in.v.sizes());
      EXPECT_LT(max_rel(y, reference_output(in)), 1e-11) << "L " << L << " spread " << spread;
    }
  }
}

TEST(Kernels, ChunkedForwardFloat32MatchesFloat64Reference) {
  const Inputs in = make_inputs(4, 777, 64, 64, 30.0, 7);  // exp(30 sigma) overflows float32
  const at::Tensor y = K::causal_linear_attention(in.q.to(at::kFloat), in.k.to(at::kFloat), in.ls.to(at::kFloat),
                                                  in.v.to(at::kFloat));
  EXPECT_EQ(y.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::isfinite(y).all().item<bool>());
  EXPECT_LT(max_rel(y, reference_output(in)), 2e-5);
}

TEST(Kernels, LongSequenceEqualsTheCumsumForm) {
  // 20000 tokens (312.5 chunks): the chunked kernel against the textbook prefix-sum form, whose
  // every prefix state is materialized (attention_bench.h), in float64.
  const Inputs in = make_inputs(2, 20000, 8, 4, 1.0, 11);
  const at::Tensor y = K::causal_linear_attention(in.q, in.k, in.ls, in.v);
  const at::Tensor ref = attention_form_output(AttentionForm::Cumsum, {}, {}, in.q, in.k, in.ls, in.v);
  EXPECT_LT(max_rel(y, ref), 1e-11);
}

TEST(Kernels, LeadingDimensionsAreBatchAndHeads) {
  // [B, H, L, M] gives what each [L, M] head gives alone.
  const Inputs in = make_inputs(6, 90, 3, 2, 2.0, 21);
  const at::Tensor y = K::causal_linear_attention(in.q.view({2, 3, 90, 3}), in.k.view({2, 3, 90, 3}),
                                                  in.ls.view({2, 3, 90, 1}), in.v.view({2, 3, 90, 2}));
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{2, 3, 90, 2}));
  for (int64_t n = 0; n < 6; ++n) {
    const at::Tensor one = K::causal_linear_attention(in.q[n], in.k[n], in.ls[n], in.v[n]);
    EXPECT_LT(max_rel(y.view({6, 90, 2})[n], one), 1e-14);
  }
}

TEST(Kernels, GradientsEqualAutogradThroughTheMap) {
  // Random scales, and a rising ramp: the running max c then grows at every chunk, so the prefix
  // and suffix over chunks must rescale their sums (a random spread reaches its max early).
  for (double spread : {0.0, 40.0, -1.0}) {
    Inputs in = make_inputs(2, 150, 4, 3, std::max(spread, 1.0), 31);
    if (spread < 0) in.ls = in.ls + at::arange(150, at::kDouble).view({1, 150, 1}) * 0.5;
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor q1 = leaf(in.q), k1 = leaf(in.k), l1 = leaf(in.ls), v1 = leaf(in.v);
    const at::Tensor q2 = leaf(in.q), k2 = leaf(in.k), l2 = leaf(in.ls), v2 = leaf(in.v);
    const at::Tensor gy = test::seeded_randn({2, 150, 3}, 99);
    (K::causal_linear_attention(q1, k1, l1, v1) * gy).sum().backward();
    (map_output(q2, k2, l2, v2) * gy).sum().backward();
    EXPECT_LT(max_rel(q1.grad(), q2.grad()), 1e-10) << "q, spread " << spread;
    EXPECT_LT(max_rel(k1.grad(), k2.grad()), 1e-10) << "k, spread " << spread;
    EXPECT_LT(max_rel(l1.grad(), l2.grad()), 1e-10) << "log scale, spread " << spread;
    EXPECT_LT(max_rel(v1.grad(), v2.grad()), 1e-10) << "v, spread " << spread;
  }
}

TEST(Kernels, GradientMatchesFiniteDifferences) {
  // Independent of both autograd paths: central differences of a scalar loss in float64.
  const Inputs in = make_inputs(1, 70, 3, 2, 1.0, 41);
  const at::Tensor gy = test::seeded_randn({1, 70, 2}, 42);
  auto loss = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
    return (K::causal_linear_attention(q, k, ls, v) * gy).sum().item<double>();
  };
  const at::Tensor k = in.k.clone().requires_grad_(true), ls = in.ls.clone().requires_grad_(true);
  (K::causal_linear_attention(in.q, k, ls, in.v) * gy).sum().backward();
  const double h = 1e-6;
  for (int64_t j : {0, 5, 63, 64, 69}) {
    at::Tensor kp = in.k.clone(), km = in.k.clone();
    kp[0][j][1] += h;
    km[0][j][1] -= h;
    const double fd = (loss(in.q, kp, in.ls, in.v) - loss(in.q, km, in.ls, in.v)) / (2 * h);
    EXPECT_NEAR(k.grad()[0][j][1].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "key " << j;
    at::Tensor lp = in.ls.clone(), lm = in.ls.clone();
    lp[0][j][0] += h;
    lm[0][j][0] -= h;
    const double fdl = (loss(in.q, in.k, lp, in.v) - loss(in.q, in.k, lm, in.v)) / (2 * h);
    EXPECT_NEAR(ls.grad()[0][j][0].item<double>(), fdl, 1e-6 * std::max(1.0, std::abs(fdl))) << "log scale " << j;
  }
}

TEST(Kernels, RowWithoutWeightIsNaNAndPassesNoGradient) {
  // Query 70's features are 0 (a ReLU map's all-zero row): its output is 0/0; the other rows and
  // every gradient stay finite.
  Inputs in = make_inputs(1, 100, 4, 3, 1.0, 51);
  in.q[0][70].zero_();
  const at::Tensor q = in.q.clone().requires_grad_(true), k = in.k.clone().requires_grad_(true);
  const at::Tensor y = K::causal_linear_attention(q, k, in.ls, in.v);
  EXPECT_TRUE(at::isnan(y[0][70]).all().item<bool>());
  EXPECT_EQ(at::isnan(y).sum().item<int64_t>(), 3);
  at::where(at::isnan(y), at::zeros_like(y), y).sum().backward();
  EXPECT_TRUE(at::isfinite(q.grad()).all().item<bool>());
  EXPECT_TRUE(at::isfinite(k.grad()).all().item<bool>());
  EXPECT_EQ(q.grad()[0][70].abs().sum().item<double>(), 0.0);
}

TEST(Kernels, RecurrentStepsEqualTheChunkedForm) {
  const Inputs in = make_inputs(3, 140, 6, 5, 200.0, 61);
  const at::Tensor y = K::causal_linear_attention(in.q, in.k, in.ls, in.v);
  K::RecurrentState st;
  for (int64_t i = 0; i < 140; ++i) {
    const at::Tensor yi = K::recurrent_step(st, in.q.select(1, i), in.k.select(1, i), in.ls.select(1, i).squeeze(-1),
                                            in.v.select(1, i));
    ASSERT_LT(max_rel(yi, y.select(1, i)), 1e-11) << "token " << i;
  }
  // The final state of the whole sequence in one product equals the stepped one.
  const K::RecurrentState fin = K::final_state(in.k, in.ls, in.v);
  EXPECT_LT(max_rel(fin.S, st.S), 1e-12);
  EXPECT_LT(max_rel(fin.z, st.z), 1e-12);
  EXPECT_LT(max_rel(fin.c, st.c), 1e-15);
  // ... and generation can continue from it.
  const Inputs more = make_inputs(3, 1, 6, 5, 200.0, 62);
  K::RecurrentState a = st, b = fin;
  a.S = a.S.clone(), a.z = a.z.clone(), a.c = a.c.clone();
  EXPECT_LT(max_rel(K::recurrent_step(a, more.q.select(1, 0), more.k.select(1, 0), more.ls.select(1, 0).squeeze(-1), more.v.select(1, 0)),
                    K::recurrent_step(b, more.q.select(1, 0), more.k.select(1, 0), more.ls.select(1, 0).squeeze(-1), more.v.select(1, 0))),
            1e-12);
}

TEST(Kernels, LseEqualsPairLoop) {
  // The same lengths and scale spreads as the output: float64 against the long-double loop, and
  // float32 against it on the float32-rounded inputs. y of causal_linear_attention_lse is the one
  // causal_linear_attention gives.
  for (int64_t L : {1, 63, 64, 65, 130, 300}) {
    for (double spread : {0.0, 3.0, 500.0, -1.0}) {  // -1: a rising ramp of scales, 3 per token
      Inputs in = make_inputs(3, L, 5, 4, std::max(spread, 1.0), 200 + L);
      if (spread < 0) in.ls = in.ls + at::arange(L, at::kDouble).view({1, L, 1}) * 3.0;
      const K::AttentionWithLse out = K::causal_linear_attention_lse(in.q, in.k, in.ls, in.v);
      ASSERT_EQ(out.lse.sizes(), (at::IntArrayRef{3, L, 1}));
      EXPECT_EQ(out.lse.scalar_type(), at::kDouble);
      EXPECT_LT(lse_error(out.lse, reference_lse(in)), 1e-13) << "L " << L << " spread " << spread;
      EXPECT_TRUE(at::equal(out.y, K::causal_linear_attention(in.q, in.k, in.ls, in.v)));
      auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
      const Inputs r{f32(in.q).to(at::kDouble), f32(in.k).to(at::kDouble), f32(in.ls).to(at::kDouble), f32(in.v).to(at::kDouble)};
      const K::AttentionWithLse o32 = K::causal_linear_attention_lse(f32(in.q), f32(in.k), f32(in.ls), f32(in.v));
      EXPECT_EQ(o32.lse.scalar_type(), at::kFloat);
      EXPECT_LT(lse_error(o32.lse, reference_lse(r)), 1e-5) << "float32, L " << L << " spread " << spread;
    }
  }
}

TEST(Kernels, LseLeadingDimensions) {
  const Inputs in = make_inputs(6, 70, 3, 2, 2.0, 23);
  const K::AttentionWithLse out = K::causal_linear_attention_lse(in.q.view({2, 3, 70, 3}), in.k.view({2, 3, 70, 3}),
                                                                 in.ls.view({2, 3, 70, 1}), in.v.view({2, 3, 70, 2}));
  ASSERT_EQ(out.lse.sizes(), (at::IntArrayRef{2, 3, 70, 1}));
  EXPECT_LT(lse_error(out.lse.view({6, 70, 1}), reference_lse(in)), 1e-13);
  // No value columns: lse still there.
  const K::AttentionWithLse none = K::causal_linear_attention_lse(in.q, in.k, in.ls, in.v.narrow(2, 0, 0));
  EXPECT_EQ(none.y.sizes(), (at::IntArrayRef{6, 70, 0}));
  EXPECT_LT(lse_error(none.lse, reference_lse(in)), 1e-13);
}

TEST(Kernels, LseGradientsEqualAutogradThroughTheMap) {
  // Through lse alone (y unused: its gradient is undefined in the backward pass), and through y and
  // lse together; random scales and a rising ramp (the running max grows at every chunk).
  for (double spread : {0.0, 40.0, -1.0}) {
    for (bool with_y : {false, true}) {
      Inputs in = make_inputs(2, 150, 4, 3, std::max(spread, 1.0), 33);
      if (spread < 0) in.ls = in.ls + at::arange(150, at::kDouble).view({1, 150, 1}) * 0.5;
      auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
      const at::Tensor q1 = leaf(in.q), k1 = leaf(in.k), l1 = leaf(in.ls), v1 = leaf(in.v);
      const at::Tensor q2 = leaf(in.q), k2 = leaf(in.k), l2 = leaf(in.ls), v2 = leaf(in.v);
      const at::Tensor r1 = test::seeded_randn({2, 150, 3}, 98), r2 = test::seeded_randn({2, 150, 1}, 99);
      const K::AttentionWithLse a = K::causal_linear_attention_lse(q1, k1, l1, v1);
      const MapOutputs b = map_outputs(q2, k2, l2, v2);
      ((with_y ? (a.y * r1).sum() : at::zeros({}, at::kDouble)) + (a.lse * r2).sum()).backward();
      ((with_y ? (b.y * r1).sum() : at::zeros({}, at::kDouble)) + (b.lse * r2).sum()).backward();
      const std::string where = std::string(with_y ? "y and lse" : "lse") + ", spread " + std::to_string(spread);
      EXPECT_LT(max_rel(q1.grad(), q2.grad()), 1e-10) << "q, " << where;
      EXPECT_LT(max_rel(k1.grad(), k2.grad()), 1e-10) << "k, " << where;
      EXPECT_LT(max_rel(l1.grad(), l2.grad()), 1e-10) << "log scale, " << where;
      if (with_y) {
        EXPECT_LT(max_rel(v1.grad(), v2.grad()), 1e-10) << "v, " << where;
      } else {
        EXPECT_EQ(grad_or_zero(v1).abs().max().item<double>(), 0.0) << "lse does not depend on v";
      }
    }
  }
}

TEST(Kernels, LseGradientMatchesFiniteDifferences) {
  // loss = sum(y r1) + sum(lse r2), central differences in float64 for every input.
  const Inputs in = make_inputs(1, 70, 3, 2, 1.0, 43);
  const at::Tensor r1 = test::seeded_randn({1, 70, 2}, 44), r2 = test::seeded_randn({1, 70, 1}, 45);
  auto loss = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
    const K::AttentionWithLse o = K::causal_linear_attention_lse(q, k, ls, v);
    return (o.y * r1).sum() + (o.lse * r2).sum();
  };
  std::vector<at::Tensor> x = {in.q.clone().requires_grad_(true), in.k.clone().requires_grad_(true),
                               in.ls.clone().requires_grad_(true), in.v.clone().requires_grad_(true)};
  loss(x[0], x[1], x[2], x[3]).backward();
  const double h = 1e-6;
  const char* names[] = {"q", "k", "log scale", "v"};
  for (int a = 0; a < 4; ++a)
    for (int64_t j : {0, 5, 63, 64, 69}) {
      const int64_t col = a == 2 ? 0 : 1;
      std::vector<at::Tensor> p = {in.q, in.k, in.ls, in.v}, m = p;
      p[a] = p[a].clone(), m[a] = m[a].clone();
      p[a][0][j][col] += h;
      m[a][0][j][col] -= h;
      const double fd = (loss(p[0], p[1], p[2], p[3]).item<double>() - loss(m[0], m[1], m[2], m[3]).item<double>()) / (2 * h);
      EXPECT_NEAR(x[a].grad()[0][j][col].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << names[a] << " " << j;
    }
}

TEST(Kernels, LseOfRowsWithoutWeightIsMinusInfWithoutGradient) {
  // ReLU-type zeros (keys 0..2 zero: rows 0..2 see no weight; query 70 zero) and signed features
  // (random Fourier-like: some rows have den < 0). lse = -inf exactly where den <= 0, the upstream
  // gradient of those rows (nonzero here) passes nothing, no gradient is NaN, and the others
  // equal autograd through the map with those rows masked.
  for (bool signed_features : {false, true}) {
    Inputs in = make_inputs(1, 100, 4, 3, 1.0, 53);
    if (signed_features) {
      in.q = test::seeded_randn({1, 100, 4}, 54), in.k = test::seeded_randn({1, 100, 4}, 55);
    } else {
      in.k[0].narrow(0, 0, 3).zero_();
      in.q[0][70].zero_();
    }
    const at::Tensor want = reference_lse(in);
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor q1 = leaf(in.q), k1 = leaf(in.k), l1 = leaf(in.ls), v1 = leaf(in.v);
    const at::Tensor q2 = leaf(in.q), k2 = leaf(in.k), l2 = leaf(in.ls), v2 = leaf(in.v);
    const K::AttentionWithLse a = K::causal_linear_attention_lse(q1, k1, l1, v1);
    EXPECT_LT(lse_error(a.lse, want), 1e-12) << "signed " << signed_features;
    const int64_t minus_inf = (a.lse == -INFINITY).sum().item<int64_t>();
    if (signed_features) {
      EXPECT_GT(minus_inf, 0) << "the signed case should have rows with den < 0";
    } else {
      EXPECT_EQ(minus_inf, 4);
      for (int64_t i : {0, 1, 2, 70}) EXPECT_EQ(a.lse[0][i][0].item<double>(), -INFINITY) << "row " << i;
    }
    const at::Tensor r1 = test::seeded_randn({1, 100, 3}, 56), r2 = test::seeded_randn({1, 100, 1}, 57);
    // sum(lse r2) is -inf; its gradient r2 still reaches every row, the -inf ones included.
    ((at::where(at::isnan(a.y), at::zeros_like(a.y), a.y) * r1).sum() + (a.lse * r2).sum()).backward();
    const MapOutputs b = map_outputs(q2, k2, l2, v2);
    ((b.y * r1).sum() + at::where(at::isfinite(b.lse), b.lse * r2, at::zeros_like(r2)).sum()).backward();
    for (const at::Tensor* g : {&q1, &k1, &l1, &v1}) EXPECT_TRUE(at::isfinite(g->grad()).all().item<bool>());
    const double tol = signed_features ? 1e-9 : 1e-10;  // signed: 1/den^2 of small dens
    EXPECT_LT(max_rel(q1.grad(), q2.grad()), tol) << "q, signed " << signed_features;
    EXPECT_LT(max_rel(k1.grad(), k2.grad()), tol) << "k, signed " << signed_features;
    EXPECT_LT(max_rel(l1.grad(), l2.grad()), tol) << "log scale, signed " << signed_features;
    EXPECT_LT(max_rel(v1.grad(), v2.grad()), tol) << "v, signed " << signed_features;
    if (!signed_features) {
      EXPECT_EQ(q1.grad()[0][70].abs().sum().item<double>(), 0.0);
    }
  }
}

TEST(Kernels, RecurrentLseEqualsTheChunkedLse) {
  // Token by token, with -inf rows: sequence 1's query 50 is zero, sequence 2's first two keys.
  for (at::ScalarType dt : {at::kDouble, at::kFloat}) {
    Inputs in = make_inputs(3, 140, 6, 5, 200.0, 63);
    in.q[1][50].zero_();
    in.k[2].narrow(0, 0, 2).zero_();
    auto cast = [&](const at::Tensor& t) { return t.to(dt); };
    const K::AttentionWithLse out = K::causal_linear_attention_lse(cast(in.q), cast(in.k), cast(in.ls), cast(in.v));
    K::RecurrentState st;
    const double tol = dt == at::kDouble ? 1e-13 : 5e-6;
    for (int64_t i = 0; i < 140; ++i) {
      at::Tensor lse;
      const at::Tensor yi = K::recurrent_step(st, cast(in.q.select(1, i)), cast(in.k.select(1, i)),
                                              cast(in.ls.select(1, i).squeeze(-1)), cast(in.v.select(1, i)), &lse);
      ASSERT_EQ(lse.sizes(), (at::IntArrayRef{3}));
      ASSERT_EQ(lse.scalar_type(), dt);
      ASSERT_LT(lse_error(lse, out.lse.select(1, i).squeeze(-1)), tol) << "token " << i << " " << c10::toString(dt);
    }
    EXPECT_EQ(out.lse[1][50][0].item<double>(), -INFINITY);
    EXPECT_EQ(out.lse[2][1][0].item<double>(), -INFINITY);
  }
}

// The CPU kernel takes any M and D (the CUDA kernels' limits, kMaxFeatures and kMaxHeadDim, do not
// apply): sizes past them, odd ones, one feature or value column, one position and lengths across
// the chunk edges. Output and lse against the long-double pair loop, the gradients of
// sum(y r1) + sum(lse r2) against autograd through the map, and the recurrent form (every token,
// and final_state) against the chunked one, all in float64.
TEST(Kernels, CpuTakesAnySize) {
  struct Size {
    int64_t L, M, D;
  };
  const std::vector<Size> sizes = {{1, 700, 300},  {65, K::kMaxFeatures + 1, K::kMaxHeadDim + 1}, {130, 1, 1},
                                   {70, 3, 600},   {129, 1030, 7},                               {64, 257, 129},
                                   {2, 2 * K::kMaxFeatures + 3, 2 * K::kMaxHeadDim + 5}};
  uint64_t seed = 300;
  for (const Size& z : sizes) {
    const std::string where = "L " + std::to_string(z.L) + " M " + std::to_string(z.M) + " D " + std::to_string(z.D);
    const Inputs in = make_inputs(2, z.L, z.M, z.D, 3.0, seed += 10);
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor q1 = leaf(in.q), k1 = leaf(in.k), l1 = leaf(in.ls), v1 = leaf(in.v);
    const at::Tensor q2 = leaf(in.q), k2 = leaf(in.k), l2 = leaf(in.ls), v2 = leaf(in.v);
    const K::AttentionWithLse a = K::causal_linear_attention_lse(q1, k1, l1, v1);
    ASSERT_EQ(a.y.sizes(), in.v.sizes()) << where;
    EXPECT_LT(max_rel(a.y, reference_output(in)), 1e-11) << where;
    EXPECT_LT(lse_error(a.lse, reference_lse(in)), 1e-13) << where;
    const at::Tensor r1 = test::seeded_randn({2, z.L, z.D}, seed + 5), r2 = test::seeded_randn({2, z.L, 1}, seed + 6);
    ((a.y * r1).sum() + (a.lse * r2).sum()).backward();
    const MapOutputs b = map_outputs(q2, k2, l2, v2);
    ((b.y * r1).sum() + (b.lse * r2).sum()).backward();
    EXPECT_LT(max_rel(q1.grad(), q2.grad()), 1e-10) << "q, " << where;
    EXPECT_LT(max_rel(k1.grad(), k2.grad()), 1e-10) << "k, " << where;
    EXPECT_LT(max_rel(l1.grad(), l2.grad()), 1e-10) << "log scale, " << where;
    EXPECT_LT(max_rel(v1.grad(), v2.grad()), 1e-10) << "v, " << where;

    const at::NoGradGuard no_grad;
    K::RecurrentState st;
    for (int64_t i = 0; i < z.L; ++i) {
      at::Tensor lse;
      const at::Tensor yi = K::recurrent_step(st, in.q.select(1, i), in.k.select(1, i), in.ls.select(1, i).squeeze(-1),
                                              in.v.select(1, i), &lse);
      ASSERT_LT(max_rel(yi, a.y.select(1, i)), 1e-11) << "token " << i << ", " << where;
      ASSERT_LT(lse_error(lse, a.lse.select(1, i).squeeze(-1)), 1e-13) << "token " << i << ", " << where;
    }
    const K::RecurrentState fin = K::final_state(in.k, in.ls, in.v);
    EXPECT_LT(max_rel(fin.S, st.S), 1e-12) << where;
    EXPECT_LT(max_rel(fin.z, st.z), 1e-12) << where;
  }
}

// Long sequences at the CUDA kernels' limits and past them: 1500 positions (23.4 chunks) with
// M = 513, D = 257 in float64 against the output through the L x L map, and float32 against the
// float64 kernel's output on the same (float32-rounded) values.
TEST(Kernels, CpuLongSequenceAtLargeSizes) {
  const Inputs in = make_inputs(1, 1500, K::kMaxFeatures + 1, K::kMaxHeadDim + 1, 3.0, 81);
  const at::NoGradGuard no_grad;
  const at::Tensor y = K::causal_linear_attention(in.q, in.k, in.ls, in.v);
  EXPECT_LT(max_rel(y, map_output(in.q, in.k, in.ls, in.v)), 1e-11);
  auto r32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
  const at::Tensor y32 = K::causal_linear_attention(r32(in.q), r32(in.k), r32(in.ls), r32(in.v));
  const at::Tensor want = K::causal_linear_attention(r32(in.q).to(at::kDouble), r32(in.k).to(at::kDouble),
                                                     r32(in.ls).to(at::kDouble), r32(in.v).to(at::kDouble));
  EXPECT_EQ(y32.scalar_type(), at::kFloat);
  EXPECT_LT(max_rel(y32, want), 2e-5);
}

TEST(Kernels, BadInputsNameTheArgument) {
  const Inputs in = make_inputs(1, 10, 4, 3, 1.0, 71);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { K::causal_linear_attention(in.q, in.k.to(at::kFloat), in.ls, in.v); }).find("k is Float"), std::string::npos);
  EXPECT_NE(message([&] { K::causal_linear_attention(in.q, in.k, in.ls.squeeze(-1), in.v); }).find("k_log_scale"), std::string::npos);
  EXPECT_NE(message([&] { K::causal_linear_attention(in.q, in.k, in.ls, in.v.narrow(1, 0, 5)); }).find("v [1, 5, 3]"), std::string::npos);
  K::RecurrentState wrong = K::final_state(in.k, in.ls, in.v);  // float64 state, float32 token
  EXPECT_NE(message([&] {
              K::recurrent_step(wrong, in.q[0][0].to(at::kFloat).view({1, 4}), in.k[0][0].to(at::kFloat).view({1, 4}),
                                in.ls[0][0].to(at::kFloat), in.v[0][0].to(at::kFloat).view({1, 3}));
            }).find("recurrent state"),
            std::string::npos);
  EXPECT_NE(message([&] {
              K::causal_linear_attention(in.q.to(at::kBFloat16), in.k.to(at::kBFloat16), in.ls.to(at::kBFloat16),
                                         in.v.to(at::kBFloat16));
            }).find("not supported on cpu"),
            std::string::npos);
}

// A hybrid head's token (hybrid_step: window W of softmax beside the sums of older keys, one
// normalizer, balance sigmoid(gamma)) against a float64 loop over each query's keys written here,
// token by token from an empty state: windows of 1 and 4 tokens, L = 1 and L = 23, key log scales
// spread by hundreds, a decay's Lambda down to -1e4 (float64), balances at +-30. The loop per head
// (the CPU) and the composition of recurrent_step and LibTorch (other devices) both, and a state
// made from a prompt at once (hybrid_state) continuing to the last token.
TEST(Kernels, HybridStepEqualsAFloat64Loop) {
  struct Case {
    int64_t W, L;
    double spread, decay;  // key log scales N(0, spread^2); Lambda's step -decay |N(0, 1)| (0: no decay)
    at::ScalarType dtype;
    double tol;
  };
  const int64_t N = 3, M = 5, D = 4;
  for (const Case& c : {Case{4, 23, 300.0, 900.0, at::kDouble, 1e-9}, Case{1, 23, 300.0, 0.0, at::kDouble, 1e-9},
                        Case{4, 1, 3.0, 1.0, at::kDouble, 1e-9}, Case{4, 23, 3.0, 0.5, at::kFloat, 2e-4}}) {
    SCOPED_TRACE("W " + std::to_string(c.W) + " L " + std::to_string(c.L) + " " + c10::toString(c.dtype));
    const uint64_t seed = 500 + uint64_t(c.W * 7 + c.L);
    const at::Tensor q = test::seeded_randn({c.L, N, D}, seed), k = test::seeded_randn({c.L, N, D}, seed + 1) * 3;
    const at::Tensor v = test::seeded_randn({c.L, N, D}, seed + 2);
    const at::Tensor fq = at::exp(test::seeded_randn({c.L, N, M}, seed + 3)), fk = at::exp(test::seeded_randn({c.L, N, M}, seed + 4));
    const at::Tensor q_ls = test::seeded_randn({c.L, N}, seed + 5, c.spread);
    at::Tensor lambda;  // Lambda_i [L, N]: a running sum of log a <= 0
    if (c.decay > 0) lambda = (-c.decay * test::seeded_randn({c.L, N}, seed + 7).abs()).cumsum(0);
    const at::Tensor k_ls_raw = test::seeded_randn({c.L, N}, seed + 6, c.spread);  // the key's own log scale
    const at::Tensor k_ls = lambda.defined() ? k_ls_raw - lambda : k_ls_raw;          // with the decay: - Lambda_j
    const at::Tensor gamma = at::tensor({30.0, -30.0, 0.7}, at::kDouble);
    if (c.decay > 100) EXPECT_LT(lambda[c.L - 1].max().item<double>(), -5000.0) << "the strong decay reaches its extreme";
    // The reference: y_i from the keys of the window (j > i - W) and the older ones (j <= i - W).
    auto a_ = [](const at::Tensor& t) { return t.accessor<double, 3>(); };
    const at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble), fqd = fq.to(at::kDouble), fkd = fk.to(at::kDouble);
    const auto Q = a_(qd), Kk = a_(kd), V = a_(vd), FQ = a_(fqd), FK = a_(fkd);
    const auto QL = q_ls.accessor<double, 2>(), KL = k_ls.accessor<double, 2>();
    const auto G = gamma.accessor<double, 1>();
    auto reference = [&](int64_t i, int64_t n) {
      std::vector<double> y(size_t(D), 0.0);
      // log-sum-exp of a list, and the weighted mean of values by those log weights.
      auto part = [&](const std::vector<std::pair<double, int64_t>>& logw, std::vector<double>& out) {
        if (logw.empty()) return -std::numeric_limits<double>::infinity();
        double top = -std::numeric_limits<double>::infinity();
        for (const auto& [l, j] : logw) top = std::max(top, l);
        double z = 0;
        for (const auto& [l, j] : logw) {
          const double e = std::exp(l - top);
          z += e;
          for (int64_t d = 0; d < D; ++d) out[size_t(d)] += e * V[j][n][d];
        }
        for (double& o : out) o /= z;
        return top + std::log(z);
      };
      std::vector<std::pair<double, int64_t>> win, lin;
      for (int64_t j = 0; j <= i; ++j) {
        if (j > i - c.W) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += Q[i][n][d] * Kk[j][n][d];
          win.emplace_back(dot / std::sqrt(double(D)), j);
        } else {
          double dot = 0;
          for (int64_t m = 0; m < M; ++m) dot += FQ[i][n][m] * FK[j][n][m];
          lin.emplace_back(std::log(dot) + KL[j][n], j);
        }
      }
      std::vector<double> yw(size_t(D), 0.0), yl(size_t(D), 0.0);
      const double lse_w = part(win, yw);
      double lse_l = part(lin, yl) + QL[i][n];
      if (lambda.defined()) lse_l += lambda[i][n].item<double>();
      const double g = G[n];
      const double a = lse_l + std::log(1 / (1 + std::exp(g))), b = lse_w + std::log(1 / (1 + std::exp(-g)));
      const double top = std::max(a, b), ea = std::isinf(a) ? 0.0 : std::exp(a - top), eb = std::exp(b - top);
      for (int64_t d = 0; d < D; ++d) y[size_t(d)] = (ea * yl[size_t(d)] + eb * yw[size_t(d)]) / (ea + eb);
      return y;
    };
    K::HybridState loop, composed;
    for (int64_t i = 0; i < c.L; ++i) {
      auto in = [&](const at::Tensor& t) { return t[i].to(c.dtype); };
      const at::Tensor lam = lambda.defined() ? in(lambda) : at::Tensor();
      const at::Tensor f = at::stack({in(fq), in(fk)}, 1), ls = at::stack({in(q_ls), in(k_ls_raw)}, 1);  // [N, 2, M], [N, 2]
      const at::Tensor y1 = K::hybrid_step(loop, c.W, in(q), in(k), in(v), f, ls, gamma.to(c.dtype), lam);
      const at::Tensor y2 = K::hybrid_step_composed(composed, c.W, in(q), in(k), in(v), f, ls, gamma.to(c.dtype), lam);
      std::vector<double> want;
      for (int64_t n = 0; n < N; ++n)
        for (double x : reference(i, n)) want.push_back(x);
      const at::Tensor ref = at::tensor(want, at::kDouble).view({N, D});
      ASSERT_LT(max_rel(y1, ref), c.tol) << "token " << i;
      ASSERT_LT(max_rel(y2, ref), c.tol) << "token " << i;
    }
    EXPECT_EQ(loop.n, c.L);
    EXPECT_EQ(composed.n, c.L);
    if (c.L > 1) {  // the first L - 1 tokens read at once (hybrid_state: ring + final_state of the older keys), then the last
      const int64_t P = c.L - 1, n = std::min(P, c.W), older = P - n;
      auto rows = [&](const at::Tensor& t, int64_t from, int64_t len) { return t.narrow(0, from, len).transpose(0, 1).to(c.dtype); };
      K::RecurrentState sums;
      if (older > 0) sums = K::final_state(rows(fk, 0, older), rows(k_ls, 0, older).unsqueeze(-1), rows(v, 0, older));
      K::HybridState st = K::hybrid_state(c.W, P, rows(k, older, n), rows(v, older, n), rows(fk, older, n), rows(k_ls, older, n), sums);
      auto in = [&](const at::Tensor& t) { return t[P].to(c.dtype); };
      const at::Tensor f = at::stack({in(fq), in(fk)}, 1), ls = at::stack({in(q_ls), in(k_ls_raw)}, 1);
      const at::Tensor y = K::hybrid_step(st, c.W, in(q), in(k), in(v), f, ls, gamma.to(c.dtype), lambda.defined() ? in(lambda) : at::Tensor());
      std::vector<double> want;
      for (int64_t h = 0; h < N; ++h)
        for (double x : reference(P, h)) want.push_back(x);
      EXPECT_LT(max_rel(y, at::tensor(want, at::kDouble).view({N, D})), c.tol) << "after a prompt of " << P;
    }
  }
  // A state that does not fit the token is refused, naming it.
  K::HybridState st;
  const at::Tensor x = at::ones({2, 4}, at::kDouble), f = at::ones({2, 2, 3}, at::kDouble), ls = at::zeros({2, 2}, at::kDouble),
                   r = at::zeros({2}, at::kDouble);
  K::hybrid_step(st, 3, x, x, x, f, ls, r);
  const std::string msg = test::error_of([&] { K::hybrid_step(st, 5, x, x, x, f, ls, r); });
  EXPECT_NE(msg.find("hybrid state"), std::string::npos) << msg;
  EXPECT_NE(test::error_of([&] { K::hybrid_step(st, 3, x, x, x, f, ls, at::zeros({3}, at::kDouble)); }).find("[N]"), std::string::npos);
  EXPECT_NE(test::error_of([&] { K::hybrid_step(st, 3, x, x, x, at::ones({2, 3}, at::kDouble), ls, r); }).find("features"), std::string::npos);
}

}  // namespace test_kernels
