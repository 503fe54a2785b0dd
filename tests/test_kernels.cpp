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
#include <vector>

#include "attnscope/bench/attention_bench.h"
#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_kernels {

using namespace attnscope;
namespace K = attnscope::kernels;

namespace {

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale;
}

struct Inputs {
  at::Tensor q, k, ls, v;  // [N, L, M], [N, L, M], [N, L, 1], [N, L, D], float64
};

// Positive features (exp of a Gaussian, like PRF values), key log scales N(0, spread^2).
Inputs make_inputs(int64_t N, int64_t L, int64_t M, int64_t D, double spread, uint64_t seed) {
  return {at::exp(randn({N, L, M}, seed)), at::exp(randn({N, L, M}, seed + 1)), randn({N, L, 1}, seed + 2, spread),
          randn({N, L, D}, seed + 3)};
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
    const at::Tensor gy = randn({2, 150, 3}, 99);
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
  const at::Tensor gy = randn({1, 70, 2}, 42);
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

}  // namespace test_kernels
