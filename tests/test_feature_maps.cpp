// The feature-map zoo: every map against its definition, the random maps against the kernel they
// estimate (statistically, over many seeds), parameter sharing, determinism and bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/base/random.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_feature_maps {

using namespace attnscope;

namespace {

constexpr double kPi = 3.14159265358979323846;

at::Tensor randn64(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale;
}

double dot64(const at::Tensor& a, const at::Tensor& b) { return (a * b).sum().item<double>(); }

double exact_kernel(const at::Tensor& q, const at::Tensor& k) {
  return std::exp(dot64(q, k) / std::sqrt(double(q.size(-1))));
}

double estimate(const FeatureMap& fm, const at::Tensor& q, const at::Tensor& k) {
  return dot64(fm.query_features(q), fm.key_features(k));
}

std::unique_ptr<FeatureMap> make(const std::string& name, int64_t d, int64_t M, uint64_t seed = 0) {
  FeatureMapSpec s;
  s.name = name;
  s.d = d;
  s.features = M;
  s.seed = seed;
  return make_feature_map(s);
}

struct Moments {
  double mean = 0, mse = 0, se = 0;  // mean estimate, mean squared error vs truth, standard error
};

// The estimates of one map family over `seeds` independent draws, for one (q, k) pair.
Moments over_seeds(const std::string& name, int64_t M, int seeds, const at::Tensor& q, const at::Tensor& k,
                   double truth, uint64_t first_seed = 1000) {
  std::vector<double> e;
  for (int s = 0; s < seeds; ++s) e.push_back(estimate(*make(name, q.size(0), M, first_seed + s), q, k));
  Moments m;
  for (double v : e) m.mean += v / seeds;
  double var = 0;
  for (double v : e) {
    var += (v - m.mean) * (v - m.mean) / (seeds - 1);
    m.mse += (v - truth) * (v - truth) / seeds;
  }
  m.se = std::sqrt(var / seeds);
  return m;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  const double scale = std::max(1.0, want.abs().max().item<double>());
  EXPECT_LE(err, tol * scale) << what;
}

}  // namespace

TEST(FeatureMap, NamesAreAllConstructible) {
  const auto names = feature_map_names();
  EXPECT_EQ(names.size(), 13u);
  for (const auto& n : names) {
    FeatureMapSpec s;
    s.name = n;
    s.d = 4;
    const bool fixed = n == "elu" || n == "relu" || n == "exp" || n == "taylor2" || n == "cosformer";
    s.features = fixed ? 0 : 8;
    auto fm = make_feature_map(s);
    EXPECT_EQ(fm->name(), n);
    EXPECT_EQ(fm->input_dim(), 4);
    const at::Tensor x = randn64({3, 5, 4}, 7);
    const at::Tensor f = fm->query_features(x);
    ASSERT_EQ(f.dim(), 3) << n;
    EXPECT_EQ(f.size(0), 3);
    EXPECT_EQ(f.size(1), 5);
    EXPECT_EQ(f.size(2), fm->feature_dim()) << n;
    EXPECT_TRUE(at::isfinite(f).all().item<bool>()) << n;
    EXPECT_EQ(f.scalar_type(), at::kDouble) << n;
  }
}

// phi(q).phi(k) of the PRF family is an unbiased estimate of exp(q.k / sqrt d): the mean over many
// seeds lies within 4 standard errors of the exact kernel, for several random pairs.
TEST(FeatureMapPrf, EstimatesConvergeToTheExpKernel) {
  const int64_t d = 8, M = 16;
  const int seeds = 400;
  for (const std::string name : {"prf", "prf-orthogonal", "prf-hyperbolic", "learned-prf"}) {
    for (uint64_t pair = 0; pair < 4; ++pair) {
      const at::Tensor q = randn64({d}, 10 + pair, 0.45), k = randn64({d}, 20 + pair, 0.45);
      const double truth = exact_kernel(q, k);
      const Moments m = over_seeds(name, M, seeds, q, k, truth);
      EXPECT_GT(m.se, 0) << name;  // really random across seeds
      EXPECT_NEAR(m.mean, truth, 4 * m.se) << name << " pair " << pair << " K = " << truth;
    }
  }
}

// Mean squared error of plain PRF falls as 1/M: 16x the features, about 1/16 the MSE.
TEST(FeatureMapPrf, ErrorShrinksAsOneOverSqrtM) {
  const int64_t d = 8;
  double mse_small = 0, mse_large = 0;
  for (uint64_t pair = 0; pair < 6; ++pair) {
    const at::Tensor q = randn64({d}, 30 + pair, 0.4), k = randn64({d}, 40 + pair, 0.4);
    const double truth = exact_kernel(q, k);
    mse_small += over_seeds("prf", 8, 300, q, k, truth).mse / (truth * truth);
    mse_large += over_seeds("prf", 128, 300, q, k, truth, 5000).mse / (truth * truth);
  }
  const double rmse_ratio = std::sqrt(mse_small / mse_large);  // sqrt(128 / 8) = 4 in theory
  EXPECT_GT(rmse_ratio, 2.8);
  EXPECT_LT(rmse_ratio, 5.7);
}

// Orthogonal blocks have lower variance than i.i.d. draws on average (Performer's ORF).
// The estimates are heavy-tailed (exp of Gaussians, squared): with the expected ratio near 0.81,
// 800 draws per map put it above 0.9 for about 6 in 16 seed families, so this takes 8000 draws
// (ratio 0.81 to 0.82 for the three families tried), each map evaluated on all six pairs at once.
TEST(FeatureMapPrf, OrthogonalHasLowerVarianceThanPlain) {
  const int64_t d = 8, M = 8, pairs = 6;
  const int seeds = 8000;
  std::vector<at::Tensor> qs, ks;
  for (uint64_t pair = 0; pair < pairs; ++pair) {
    qs.push_back(randn64({d}, 50 + pair, 0.5));
    ks.push_back(randn64({d}, 60 + pair, 0.5));
  }
  const at::Tensor q = at::stack(qs), k = at::stack(ks);
  const at::Tensor truth = at::exp((q * k).sum(-1) / std::sqrt(double(d)));
  // Mean over pairs of the relative MSE, (estimate - truth)^2 / truth^2 averaged over the seeds.
  auto relative_mse = [&](const std::string& name) {
    at::Tensor sq_err = at::zeros({pairs}, at::kDouble);
    for (int s = 0; s < seeds; ++s) {
      auto fm = make(name, d, M, 1000 + s);
      sq_err += ((fm->query_features(q) * fm->key_features(k)).sum(-1) - truth).pow(2);
    }
    return (sq_err / seeds / truth.pow(2)).mean().item<double>();
  };
  const double plain = relative_mse("prf"), orth = relative_mse("prf-orthogonal");
  std::printf("relative MSE at M = d = 8: plain %.5f, orthogonal %.5f\n", plain, orth);
  EXPECT_LT(orth, 0.9 * plain);
}

TEST(FeatureMapPrf, OrthogonalBlocksAreOrthogonal) {
  FeatureMapSpec s;
  s.name = "learned-prf";
  s.d = 6;
  s.features = 15;
  s.init = "orthogonal";
  auto orth = make_feature_map(s);
  const at::Tensor z = orth->named_parameters().at(0).second.to(at::kDouble);
  ASSERT_EQ(z.size(0), 15);
  for (int64_t b = 0; b < 15; b += 6) {
    const at::Tensor block = z.narrow(0, b, std::min<int64_t>(6, 15 - b));
    const at::Tensor gram = at::matmul(block, block.t());
    const at::Tensor off = gram - at::diag_embed(gram.diagonal());
    EXPECT_LT(off.abs().max().item<double>(), 1e-4) << "block " << b;
    EXPECT_GT(gram.diagonal().min().item<double>(), 0.1);  // chi norms, not unit norms
  }
  // Different blocks are drawn independently: not orthogonal to each other.
  EXPECT_GT(at::matmul(z.narrow(0, 0, 6), z.narrow(0, 6, 6).t()).abs().max().item<double>(), 1e-2);
}

// learned-prf follows SPEC: phi(x)_m = sqrt(a_m / M) exp(z_m.x / d^(1/4) - |x|^2 / (2 sqrt d)).
TEST(FeatureMapPrf, LearnedPrfMatchesTheSpecFormula) {
  const int64_t d = 5, M = 7;
  const at::Tensor z = randn64({M, d}, 70), alpha = randn64({M}, 71);
  auto fm = make_learned_prf(z, alpha);
  const at::Tensor x = randn64({4, d}, 72);
  const at::Tensor got = fm->query_features(x);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t m = 0; m < M; ++m) {
      const double a = std::exp(alpha[m].item<double>());
      const double want = std::sqrt(a / M) * std::exp(dot64(z[m], x[i]) / std::pow(d, 0.25) -
                                                        dot64(x[i], x[i]) / (2 * std::sqrt(double(d))));
      EXPECT_NEAR(got[i][m].item<double>(), want, 1e-12 * want);
    }
  auto params = fm->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "z");
  EXPECT_EQ(params[1].first, "alpha");
  // The returned tensors are the map's own: an update shows in the features.
  params[1].second.add_(2.0);  // a_m -> a_m e^2: features scale by e
  expect_close(fm->query_features(x), got * std::exp(1.0), 1e-12, "alpha update");
}

TEST(FeatureMapPrf, HyperbolicIsThePlusMinusPair) {
  auto fm = make("prf-hyperbolic", 4, 6, 9);
  const at::Tensor x = randn64({3, 4}, 80);
  const at::Tensor f = fm->query_features(x);
  ASSERT_EQ(f.size(-1), 6);
  // exp(w.x' - c) * exp(-w.x' - c) = exp(-2c): the product of each pair does not depend on w.
  const at::Tensor prod = f.narrow(-1, 0, 3) * f.narrow(-1, 3, 3);
  const at::Tensor sq = (x * x).sum(-1, true) / 2.0;  // |x'|^2 = |x|^2 / sqrt(4) = |x|^2 / 2
  expect_close(prod, (at::exp(-sq) / 6.0).expand({3, 3}), 1e-12, "pair product");
}

TEST(FeatureMap, SameSeedSameMapOtherSeedOtherMap) {
  const at::Tensor x = randn64({5, 6}, 90);
  for (const std::string name : {"prf", "prf-orthogonal", "prf-hyperbolic", "learned-prf", "t2r", "flex-stationary",
                                 "flex-nonstationary"}) {
    const at::Tensor a = make(name, 6, 12, 42)->query_features(x);
    const at::Tensor b = make(name, 6, 12, 42)->query_features(x);
    const at::Tensor c = make(name, 6, 12, 43)->query_features(x);
    EXPECT_TRUE(at::equal(a, b)) << name;
    EXPECT_FALSE(at::allclose(a, c)) << name;
  }
}

// Taylor-2: phi(q).phi(k) = 1 + s + s^2 / 2 with s = q.k / sqrt d, exactly.
TEST(FeatureMapTaylor, InnerProductIsTheSecondOrderExpansion) {
  for (int64_t d : {1, 3, 8}) {
    auto fm = make("taylor2", d, 0);
    EXPECT_EQ(fm->feature_dim(), 1 + d + d * d);
    for (uint64_t t = 0; t < 5; ++t) {
      const at::Tensor q = randn64({d}, 100 + t), k = randn64({d}, 200 + t);
      const double s = dot64(q, k) / std::sqrt(double(d));
      const double want = 1 + s + s * s / 2;
      EXPECT_NEAR(estimate(*fm, q, k), want, 1e-6 * std::max(1.0, std::abs(want)));
      // float32 too, to float32 precision
      const double got32 = dot64(fm->query_features(q.to(at::kFloat)).to(at::kDouble),
                               fm->key_features(k.to(at::kFloat)).to(at::kDouble));
      EXPECT_NEAR(got32, want, 1e-5 * std::max(1.0, std::abs(want)));
    }
  }
}

TEST(FeatureMapSimple, ElementwiseMapsAreNonNegativeAndExact) {
  const at::Tensor x = randn64({6, 5}, 300, 2.0);
  ASSERT_TRUE((x < 0).any().item<bool>());
  FeatureMapSpec s;
  s.d = 5;
  s.name = "exp";
  s.temperature = 2.0;
  const at::Tensor e = make_feature_map(s)->query_features(x);
  const at::Tensor elu = make("elu", 5, 0)->query_features(x);
  const at::Tensor relu = make("relu", 5, 0)->query_features(x);
  for (const auto& f : {e, elu, relu}) EXPECT_GE(f.min().item<double>(), 0.0);
  EXPECT_GT(e.min().item<double>(), 0.0);
  EXPECT_GT(elu.min().item<double>(), 0.0);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      const double v = x[i][j].item<double>();
      EXPECT_NEAR(e[i][j].item<double>(), std::exp(2.0 * v), 1e-12 * std::exp(2.0 * v));
      EXPECT_NEAR(elu[i][j].item<double>(), v > 0 ? 1 + v : std::exp(v), 1e-12);
      EXPECT_EQ(relu[i][j].item<double>(), v > 0 ? v : 0.0);
    }
}

// Hedgehog at its identity init with the exp activation is exactly [exp(x), exp(-x)].
TEST(FeatureMapHedgehog, IdentityInitGivesTheNegationMap) {
  const int64_t d = 6;
  auto fm = make("hedgehog", d, 2 * d);
  const at::Tensor x = randn64({4, 3, d}, 400);
  expect_close(fm->query_features(x), at::cat({at::exp(x), at::exp(-x)}, -1), 1e-12, "query");
  expect_close(fm->key_features(x), at::cat({at::exp(x), at::exp(-x)}, -1), 1e-12, "key");
}

// The three Hedgehog activations (SPEC 5) against numbers worked out by hand, for d = d' = 2 with
//   W = [[1, 2], [-1, 0.5]] (u = x W + b), b = [0.5, -1]   (all exact in float32)
//   x = [1, 2]:  u = [1 - 2 + 0.5, 2 + 1 - 1] = [-0.5, 2]
//   x = [0, 0]:  u = b = [0.5, -1]
// exp:            [e^u1, e^u2, e^-u1, e^-u2]
//                 x1: [e^-0.5, e^2, e^0.5, e^-2] = [0.60653066, 7.3890561, 1.6487213, 0.13533528]
// softmax:        [softmax(u), softmax(-u)], each half sums to 1; u2 - u1 = 2.5 (x1), -1.5 (x2):
//                 x1: [1, e^2.5] / (1 + e^2.5) = [0.075858180, 0.92414182], mirrored for -u
//                 x2: [e^1.5, 1] / (1 + e^1.5) = [0.81757448, 0.18242552], mirrored for -u
// softmax-joint:  softmax([u, -u]) over all four, x1: [e^-0.5, e^2, e^0.5, e^-2] / 9.7796432
// (values printed by python3 -c 'import math; ...' from these formulas, to 17 digits).
TEST(FeatureMapHedgehog, ActivationsMatchHandComputedValues) {
  const at::Tensor x = at::tensor({1.0, 2.0, 0.0, 0.0}, at::kDouble).reshape({2, 2});
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"exp", {0.6065306597126334, 7.38905609893065, 1.6487212707001282, 0.1353352832366127,  //
               1.6487212707001282, 0.36787944117144233, 0.6065306597126334, 2.718281828459045}},
      {"softmax", {0.07585818002124355, 0.9241418199787564, 0.9241418199787564, 0.07585818002124355,  //
                   0.8175744761936437, 0.18242552380635635, 0.18242552380635635, 0.8175744761936437}},
      {"softmax-joint", {0.062019711795871325, 0.7555547643977724, 0.1685870555809841, 0.013838468225372233,  //
                         0.3086676145344417, 0.06887305426370378, 0.11355246954265258, 0.508906861659202}},
  };
  for (const auto& [activation, want] : cases) {
    FeatureMapSpec s;
    s.name = "hedgehog";
    s.d = 2;
    s.features = 4;
    s.activation = activation;
    auto fm = make_feature_map(s);
    auto p = fm->named_parameters();
    p.at(0).second.copy_(at::tensor({1.0f, 2.0f, -1.0f, 0.5f}).reshape({2, 2}));  // W
    p.at(1).second.copy_(at::tensor({0.5f, -1.0f}));                           // b
    for (const at::Tensor& got : {fm->query_features(x), fm->key_features(x)}) {
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 4})) << activation;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t m = 0; m < 4; ++m)
          EXPECT_NEAR(got[i][m].item<double>(), want[4 * i + m], 1e-14 * want[4 * i + m]) << activation << " " << i << "," << m;
    }
  }
}

TEST(FeatureMapHedgehog, TiedSharesOneLayerUntiedHasTwo) {
  const int64_t d = 4;
  const at::Tensor x = randn64({5, d}, 410);
  FeatureMapSpec s;
  s.name = "hedgehog";
  s.d = d;
  s.features = 2 * d;
  auto tied = make_feature_map(s);
  auto tp = tied->named_parameters();
  ASSERT_EQ(tp.size(), 2u);
  EXPECT_EQ(tp[0].first, "W");
  EXPECT_EQ(tp[0].second.sizes(), (std::vector<int64_t>{d, d}));
  tp[0].second.mul_(2.0);  // one layer: both sides see it
  expect_close(tied->query_features(x), at::cat({at::exp(2 * x), at::exp(-2 * x)}, -1), 1e-12, "tied q");
  expect_close(tied->key_features(x), at::cat({at::exp(2 * x), at::exp(-2 * x)}, -1), 1e-12, "tied k");

  s.tied = false;
  auto untied = make_feature_map(s);
  auto up = untied->named_parameters();
  ASSERT_EQ(up.size(), 4u);
  EXPECT_EQ(up[2].first, "k.W");
  EXPECT_TRUE(at::equal(untied->query_features(x), untied->key_features(x)));  // same identity init
  up[2].second.mul_(2.0);  // only the key layer changes
  expect_close(untied->query_features(x), at::cat({at::exp(x), at::exp(-x)}, -1), 1e-12, "untied q");
  expect_close(untied->key_features(x), at::cat({at::exp(2 * x), at::exp(-2 * x)}, -1), 1e-12, "untied k");
  up[3].second.add_(0.5);  // key bias b: exp(u + b), exp(-u - b)
  const at::Tensor u = 2 * x + 0.5;
  expect_close(untied->key_features(x), at::cat({at::exp(u), at::exp(-u)}, -1), 1e-12, "untied k bias");
  EXPECT_EQ(untied->parameters().size(), 4u);
}

TEST(FeatureMapT2r, ReluOfALinearLayer) {
  const int64_t d = 5;
  const at::Tensor x = randn64({7, d}, 500);
  FeatureMapSpec s;
  s.name = "t2r";
  s.d = d;
  s.features = d;
  s.init = "identity";
  expect_close(make_feature_map(s)->query_features(x), at::relu(x), 1e-12, "identity init = relu");
  s.init = "random";
  s.features = 11;
  auto fm = make_feature_map(s);
  const at::Tensor W = fm->named_parameters().at(0).second.to(at::kDouble);
  ASSERT_EQ(W.sizes(), (std::vector<int64_t>{d, 11}));
  expect_close(fm->query_features(x), at::relu(at::matmul(x, W)), 1e-6, "random init");
  EXPECT_GT((fm->query_features(x) == 0).sum().item<int64_t>(), 0);
  EXPECT_GT((fm->query_features(x) > 0).sum().item<int64_t>(), 0);
}

// cosFormer: phi(q_i).phi(k_j) = ReLU(q_i).ReLU(k_j) cos(pi (i - j) / 2H), positions along dim -2.
TEST(FeatureMapCosformer, ReweightsByPositionDistance) {
  const int64_t d = 4, L = 9;
  const at::Tensor q = randn64({L, d}, 600), k = randn64({L, d}, 601);
  for (int64_t H : {0, 20}) {
    FeatureMapSpec s;
    s.name = "cosformer";
    s.d = d;
    s.horizon = H;
    auto fm = make_feature_map(s);
    const at::Tensor got = at::matmul(fm->query_features(q), fm->key_features(k).t());
    const double h = H > 0 ? double(H) : double(L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const double want = dot64(at::relu(q[i]), at::relu(k[j])) * std::cos(kPi * double(i - j) / (2 * h));
        EXPECT_NEAR(got[i][j].item<double>(), want, 1e-12) << i << "," << j;
      }
  }
  // Explicit positions: a window at offset 100 gives the same q.k weights (only i - j matters).
  const at::Tensor pos = at::arange(100, 100 + L, at::kDouble);
  const at::Tensor a = cosformer_features(q, pos, 30.0), b = cosformer_features(k, pos, 30.0);
  FeatureMapSpec s;
  s.name = "cosformer";
  s.d = d;
  s.horizon = 30;
  auto fm = make_feature_map(s);
  expect_close(at::matmul(a, b.t()), at::matmul(fm->query_features(q), fm->key_features(k).t()), 1e-12, "offset");
  EXPECT_THROW(cosformer_features(q, at::arange(L - 1, at::kDouble), 30.0), Error);
}

// Flexformer at init: the stationary map estimates exp(q.k / sqrt d) without bias; the nonstationary
// map with w1 = w2 is the stationary map, and with independent w1, w2 estimates (K + 1) / 2.
TEST(FeatureMapFourier, FlexformerEstimatesAtInit) {
  const int64_t d = 6, M = 32;
  const int seeds = 400;
  for (uint64_t pair = 0; pair < 3; ++pair) {
    const at::Tensor q = randn64({d}, 700 + pair, 0.4), k = randn64({d}, 710 + pair, 0.4);
    const double truth = exact_kernel(q, k);
    const Moments st = over_seeds("flex-stationary", M, seeds, q, k, truth);
    EXPECT_NEAR(st.mean, truth, 4 * st.se) << "stationary pair " << pair;
    std::vector<double> e;
    double mean = 0, var = 0;
    for (int s = 0; s < seeds; ++s) {
      FeatureMapSpec spec;
      spec.name = "flex-nonstationary";
      spec.d = d;
      spec.features = M;
      spec.seed = 3000 + s;
      spec.init = "independent";
      e.push_back(estimate(*make_feature_map(spec), q, k));
      mean += e.back() / seeds;
    }
    for (double v : e) var += (v - mean) * (v - mean) / (seeds - 1);
    EXPECT_NEAR(mean, (truth + 1) / 2, 4 * std::sqrt(var / seeds)) << "nonstationary pair " << pair;
  }
  const at::Tensor x = randn64({5, d}, 720);
  EXPECT_TRUE(at::allclose(make("flex-nonstationary", d, M, 9)->query_features(x),
                           make("flex-stationary", d, M, 9)->query_features(x), 1e-6, 1e-9));
}

TEST(FeatureMapFourier, ParametersAreLiveAndSignedValuesOccur) {
  const int64_t d = 4;
  auto fm = make("flex-stationary", d, 8, 1);
  auto p = fm->named_parameters();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].first, "omega");
  EXPECT_EQ(p[1].first, "tau");
  EXPECT_NEAR(p[1].second.item<double>(), std::log(2 * std::sqrt(4.0)), 1e-6);
  const at::Tensor x = randn64({10, d}, 800, 2.0);
  const at::Tensor before = fm->query_features(x);
  EXPECT_LT(before.min().item<double>(), 0.0);  // cosines and sines: signed features
  p[1].second.add_(1.0);  // a larger tau flattens the norm factor
  const at::Tensor after = fm->query_features(x);
  const at::Tensor sq = (x * x).sum(-1, true);
  const double tau = p[1].second.item<double>();
  expect_close(after, before * at::exp(sq * (std::exp(-tau) - std::exp(-(tau - 1)))), 1e-5, "tau update");
  EXPECT_EQ(make("flex-nonstationary", d, 8)->parameters().size(), 3u);
}

// parameters() are what a trainer needs: requires_grad on them, backward through the features, and
// an in-place update the map sees. One small step along -grad lowers the L2 kernel loss.
TEST(FeatureMap, ParametersTrainThroughAutograd) {
  const int64_t d = 4;
  const at::Tensor q = randn64({12, d}, 900, 0.7).to(at::kFloat), k = randn64({12, d}, 901, 0.7).to(at::kFloat);
  const at::Tensor K = at::exp(at::matmul(q, k.t()) / 2.0);  // sqrt(4) = 2
  for (const std::string name : {"learned-prf", "hedgehog", "t2r", "flex-stationary", "flex-nonstationary"}) {
    FeatureMapSpec s;
    s.name = name;
    s.d = d;
    s.features = 8;
    s.seed = 5;
    s.tied = name != "hedgehog";
    auto fm = make_feature_map(s);
    auto params = fm->parameters();
    ASSERT_FALSE(params.empty()) << name;
    for (auto& p : params) p.requires_grad_(true);
    auto loss_of = [&] { return (at::matmul(fm->query_features(q), fm->key_features(k).t()) - K).pow(2).mean(); };
    at::Tensor loss = loss_of();
    loss.backward();
    double norm2 = 0;
    for (auto& p : params) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_TRUE(at::isfinite(p.grad()).all().item<bool>()) << name;
      norm2 += p.grad().pow(2).sum().item<double>();
    }
    ASSERT_GT(norm2, 0) << name;
    {
      at::NoGradGuard no_grad;
      for (auto& p : params) p.sub_(p.grad() * (1e-3 / std::sqrt(norm2)));
    }
    EXPECT_LT(loss_of().item<double>(), loss.item<double>()) << name;
  }
}

TEST(FeatureMapErrors, BadInputGivesClearErrors) {
  auto message = [](const FeatureMapSpec& s) {
    try {
      make_feature_map(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  FeatureMapSpec s;
  s.name = "performer-xl";
  s.d = 4;
  s.features = 8;
  std::string m = message(s);
  EXPECT_NE(m.find("unknown name 'performer-xl'"), std::string::npos) << m;
  for (const auto& n : feature_map_names()) EXPECT_NE(m.find(n), std::string::npos) << n;

  s.name = "prf";
  for (int64_t bad : {0, -3}) {
    s.features = bad;
    m = message(s);
    EXPECT_NE(m.find("must be positive"), std::string::npos) << m;
  }
  s.features = 8;
  s.d = 0;
  EXPECT_NE(message(s).find("d must be positive"), std::string::npos);
  s.d = 4;
  s.name = "relu";
  s.features = 5;
  EXPECT_NE(message(s).find("features must be 0 or 4"), std::string::npos) << message(s);
  s.features = -1;
  EXPECT_NE(message(s).find("must be positive"), std::string::npos);
  s.name = "prf-hyperbolic";
  s.features = 7;
  EXPECT_NE(message(s).find("even"), std::string::npos);
  s.name = "learned-prf";
  s.features = 8;
  s.init = "sobol";
  m = message(s);
  EXPECT_NE(m.find("unknown init 'sobol'"), std::string::npos) << m;
  EXPECT_NE(m.find("leverage"), std::string::npos) << m;
  s.init = "leverage";
  EXPECT_NE(message(s).find("needs the captured vectors"), std::string::npos);
  s.init = "";
  s.name = "hedgehog";
  s.activation = "tanh";
  EXPECT_NE(message(s).find("unknown activation 'tanh'"), std::string::npos);

  // d mismatch at use
  auto fm = make("prf", 8, 16);
  try {
    fm->query_features(randn64({3, 7}, 1));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("last dimension 7, expected d = 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make("hedgehog", 8, 16)->key_features(randn64({9}, 2)), Error);
  EXPECT_THROW(fm->query_features(at::ones({3, 8}, at::kLong)), Error);
  EXPECT_THROW(make_learned_prf(randn64({4, 3}, 3), randn64({5}, 4)), Error);
}

// scaled_query_features / scaled_key_features are phi itself, written as exp(log_scale) * values,
// for every map: compared with query_features / key_features where phi is comfortably in range.
TEST(FeatureMapScaled, ScaledFeaturesArePhiAtModerateNorms) {
  const at::Tensor x = randn64({2, 5, 4}, 950);
  for (const auto& n : feature_map_names()) {
    for (bool tied : {true, false}) {
      FeatureMapSpec s;
      s.name = n;
      s.d = 4;
      s.seed = 11;
      s.tied = tied;
      const bool fixed = n == "elu" || n == "relu" || n == "exp" || n == "taylor2" || n == "cosformer";
      s.features = fixed ? 0 : 8;
      auto fm = make_feature_map(s);
      if (!tied) {  // key layer different from the query layer
        for (auto& [name, p] : fm->named_parameters())
          if (name.rfind("k.", 0) == 0) p.add_(0.25);
      }
      const Features fq = fm->scaled_query_features(x), fk = fm->scaled_key_features(x);
      ASSERT_EQ(fq.log_scale.sizes(), (std::vector<int64_t>{2, 5, 1})) << n;
      ASSERT_EQ(fk.log_scale.sizes(), (std::vector<int64_t>{2, 5, 1})) << n;
      expect_close(fq.values * at::exp(fq.log_scale), fm->query_features(x), 1e-12, n + " query");
      expect_close(fk.values * at::exp(fk.log_scale), fm->key_features(x), 1e-12, n + " key");
    }
  }
}

namespace {

// x [rows, d] with row norms spread over [lo, hi] (random directions).
at::Tensor with_norms(int64_t rows, int64_t d, double lo, double hi, uint64_t seed) {
  const at::Tensor u = randn64({rows, d}, seed);
  const at::Tensor norms = at::linspace(lo, hi, rows, at::kDouble).unsqueeze(1);
  return u / u.norm(2, {1}, true) * norms;
}

// log phi(x) as the map computes it: log(values) + log_scale, in long double.
long double log_feature(const Features& f, int64_t i, int64_t m) {
  return std::log((long double)f.values[i][m].item<double>()) + (long double)f.log_scale[i][0].item<double>();
}

}  // namespace

// At |x| up to 100 with d = 16, phi = exp(w.x/2 - |x|^2/8 ...) is 0 in float64 (|x|^2/8 = 1250);
// the scaled features stay exact: log(values) + log_scale against log phi written out in long
// double from each map's definition and its parameters.
TEST(FeatureMapScaled, LogFeaturesAreRightAtLargeNorms) {
  const int64_t d = 16, M = 32, rows = 6;
  const at::Tensor x = with_norms(rows, d, 30.0, 100.0, 960);
  const long double rd = std::sqrt((long double)d), r4 = std::sqrt(rd);  // sqrt(d), d^(1/4)
  auto sq = [&](int64_t i) {
    long double s = 0;
    for (int64_t c = 0; c < d; ++c) s += (long double)x[i][c].item<double>() * x[i][c].item<double>();
    return s;
  };
  auto dot_row = [&](const at::Tensor& w, int64_t m, int64_t i) {
    long double s = 0;
    for (int64_t c = 0; c < d; ++c) s += (long double)w[m][c].item<double>() * x[i][c].item<double>();
    return s;
  };
  // Tolerance on log phi (magnitude up to ~1300): float64 rounding of the exponents.
  const long double tol = 1e-9;

  {  // learned-prf: log phi_m = z_m.x / d^(1/4) - |x|^2 / (2 sqrt d) + alpha_m / 2 - log(M) / 2
    const at::Tensor z = randn64({M, d}, 961), alpha = randn64({M}, 962);
    auto fm = make_learned_prf(z, alpha);
    const Features f = fm->scaled_query_features(x);
    EXPECT_EQ(fm->query_features(x)[rows - 1].abs().max().item<double>(), 0.0) << "phi itself underflows at |x| = 100";
    for (int64_t i = 0; i < rows; ++i) {
      EXPECT_EQ(f.values[i].max().item<double>(), 1.0);
      for (int64_t m = 0; m < M; ++m) {
        const long double want = dot_row(z, m, i) / r4 - sq(i) / (2 * rd) + alpha[m].item<double>() / 2.0L - std::log((long double)M) / 2;
        EXPECT_NEAR((double)log_feature(f, i, m), (double)want, (double)tol) << "learned-prf " << i << "," << m;
      }
    }
    // prf draws the same z as learned-prf's gaussian init (alpha = 0): same scaled features.
    FeatureMapSpec s;
    s.name = "learned-prf";
    s.d = d;
    s.features = M;
    s.seed = 5;
    const Features a = make_feature_map(s)->scaled_query_features(x);
    s.name = "prf";
    const Features b = make_feature_map(s)->scaled_key_features(x);
    expect_close(b.values, a.values, 1e-15, "prf values");
    expect_close(b.log_scale, a.log_scale, 1e-15, "prf log_scale");
  }
  {  // prf-hyperbolic: phi_m phi_{m + M/2} = exp(-|x|^2 / sqrt d) / M whatever w is
    const Features f = make("prf-hyperbolic", d, M, 7)->scaled_query_features(x);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t m = 0; m < M / 2; ++m) {
        const long double want = -sq(i) / rd - std::log((long double)M);
        EXPECT_NEAR((double)(log_feature(f, i, m) + log_feature(f, i, m + M / 2)), (double)want, (double)tol);
      }
  }
  {  // hedgehog at identity init, exp activation: log phi = [x, -x]
    const Features f = make("hedgehog", d, 2 * d)->scaled_query_features(x);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < d; ++c) {
        EXPECT_NEAR((double)log_feature(f, i, c), x[i][c].item<double>(), 1e-12);
        EXPECT_NEAR((double)log_feature(f, i, d + c), -x[i][c].item<double>(), 1e-12);
      }
  }
  {  // exp(t x), t = 20: phi overflows at x > 35.5; log phi = t x. A feature more than ~745 below
     // its vector's largest is 0 in values (feature_map.h); every other one is exact.
    FeatureMapSpec s;
    s.name = "exp";
    s.d = d;
    s.temperature = 20.0;
    const Features f = make_feature_map(s)->scaled_query_features(x);
    int64_t checked = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const double top = 20.0 * x[i].max().item<double>();
      EXPECT_NEAR(f.log_scale[i][0].item<double>(), top, 1e-12 * top);
      for (int64_t c = 0; c < d; ++c) {
        const double want = 20.0 * x[i][c].item<double>();
        if (want - top < -700) continue;
        EXPECT_NEAR((double)log_feature(f, i, c), want, 1e-9);
        ++checked;
      }
    }
    EXPECT_GT(checked, rows * d / 2);
    EXPECT_GT(20.0 * x.max().item<double>(), 710.0) << "phi itself overflows somewhere";
  }
  for (const std::string name : {"flex-stationary", "flex-nonstationary"}) {
    // phi = exp(|x|^2 / e^tau) / sqrt(n) [cos(a_m), sin(a_m)] (times cos(b_m) for nonstationary):
    // exp(|x|^2 / e^tau) overflows (|x|^2 / e^tau = 10^4 / 8 at |x| = 100). Signed values: compare
    // log_scale and the values themselves.
    auto fm = make(name, d, M, 8);
    const auto p = fm->named_parameters();
    const at::Tensor w1 = p[0].second.to(at::kDouble);
    const at::Tensor w2 = name == "flex-stationary" ? w1 : p[1].second.to(at::kDouble);
    const long double tau = p.back().second.item<double>();
    const int64_t n = M / 2;
    const Features f = fm->scaled_query_features(x);
    EXPECT_FALSE(at::isfinite(fm->query_features(x)).all().item<bool>()) << name << ": phi itself overflows here";
    for (int64_t i = 0; i < rows; ++i) {
      const long double want_scale = sq(i) * std::exp(-tau) - std::log((long double)n) / 2;
      EXPECT_NEAR(f.log_scale[i][0].item<double>(), (double)want_scale, (double)(1e-12L * want_scale)) << name;
      for (int64_t m = 0; m < n; ++m) {
        const long double a = (dot_row(w1, m, i) + dot_row(w2, m, i)) / 2, b = (dot_row(w1, m, i) - dot_row(w2, m, i)) / 2;
        EXPECT_NEAR(f.values[i][m].item<double>(), (double)(std::cos(a) * std::cos(b)), 1e-9) << name;
        EXPECT_NEAR(f.values[i][n + m].item<double>(), (double)(std::sin(a) * std::cos(b)), 1e-9) << name;
      }
    }
  }
}

// Feature-map draws use LibTorch generators seeded with derive_seed(seed, stream) (random.h): a
// Gaussian init is at::randn from exactly that generator (stream 0 for the first draw).
TEST(FeatureMap, DrawsComeFromDerivedSeeds) {
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    FeatureMapSpec s;
    s.name = "learned-prf";
    s.d = 5;
    s.features = 7;
    s.seed = seed;
    const at::Tensor z = make_feature_map(s)->named_parameters().at(0).second;
    at::Generator gen = at::detail::createCPUGenerator(derive_seed(seed, uint64_t(0)));
    EXPECT_TRUE(at::equal(z, at::randn({7, 5}, gen, at::TensorOptions().dtype(at::kFloat)))) << seed;
  }
}

// The family table (map_family.h) says what each map does: its rows against the maps themselves.
TEST(MapFamily, EachRowIsWhatItsMapDoes) {
  const at::Tensor x = randn64({64, 4}, 970, 2.0), y = randn64({64, 4}, 971, 2.0);
  std::vector<std::string> trainable;
  for (const auto& n : feature_map_names()) {
    SCOPED_TRACE(n);
    const MapFamily& f = map_family(n);
    EXPECT_EQ(f.name, n);
    EXPECT_EQ(f.fixed_size, feature_map_has_fixed_size(n));
    EXPECT_EQ(f.budget_per_head_dim, n == "hedgehog" ? 2 : 1);
    FeatureMapSpec s;
    s.name = n;
    s.d = 4;
    s.features = f.fixed_size ? 0 : 8;
    s.seed = 3;
    auto fm = make_feature_map(s);
    EXPECT_EQ(f.trainable, !fm->named_parameters().empty());
    if (f.trainable) trainable.push_back(n);
    if (!f.fixed_size) {  // an odd M: refused exactly by the maps built of pairs
      s.features = 7;
      bool refused = false;
      try {
        make_feature_map(s);
      } catch (const Error& e) {
        refused = std::string(e.what()).find("even") != std::string::npos;
      }
      EXPECT_EQ(refused, f.pairs != nullptr);
    }
    const at::Tensor px = fm->query_features(x), py = fm->key_features(y);
    const double least_feature = px.min().item<double>();
    switch (f.features) {
      case MapFeatures::Positive: EXPECT_GT(least_feature, 0.0); break;
      case MapFeatures::NonNegative: EXPECT_EQ(least_feature, 0.0); break;
      case MapFeatures::Signed: EXPECT_LT(least_feature, 0.0); break;
    }
    const double least_kernel = at::matmul(px, py.t()).min().item<double>();
    if (f.nonnegative_kernel) {
      EXPECT_GE(least_kernel, 0.0);
    } else {
      EXPECT_LT(least_kernel, 0.0);
    }
    EXPECT_EQ(f.positional, n == "cosformer");
  }
  EXPECT_EQ(trainable_map_names(), trainable);
  EXPECT_EQ(trainable, (std::vector<std::string>{"learned-prf", "hedgehog", "t2r", "flex-stationary", "flex-nonstationary"}));
  const std::string m = [] {
    try {
      map_family("performer-xl");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(m.find("unknown name 'performer-xl'"), std::string::npos) << m;
  for (const auto& n : feature_map_names()) EXPECT_NE(m.find(n), std::string::npos) << n;
}

}  // namespace test_feature_maps
