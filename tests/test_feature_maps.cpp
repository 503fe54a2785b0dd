// The feature-map zoo: every map against its definition, the random maps against the kernel they
// estimate (statistically, over many seeds), parameter sharing, determinism and bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnscope/error.h"
#include "attnscope/feature_map.h"

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
TEST(FeatureMapPrf, OrthogonalHasLowerVarianceThanPlain) {
  const int64_t d = 8, M = 8;
  double plain = 0, orth = 0;
  for (uint64_t pair = 0; pair < 6; ++pair) {
    const at::Tensor q = randn64({d}, 50 + pair, 0.5), k = randn64({d}, 60 + pair, 0.5);
    const double truth = exact_kernel(q, k);
    plain += over_seeds("prf", M, 800, q, k, truth).mse / (truth * truth);
    orth += over_seeds("prf-orthogonal", M, 800, q, k, truth).mse / (truth * truth);
  }
  std::printf("relative MSE at M = d = 8: plain %.5f, orthogonal %.5f\n", plain / 6, orth / 6);
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
  FeatureMapSpec s;
  s.name = "hedgehog";
  s.d = d;
  s.features = 2 * d;
  s.activation = "softmax";
  const at::Tensor f = make_feature_map(s)->query_features(x);
  expect_close(f, at::softmax(at::cat({x, -x}, -1), -1), 1e-12, "softmax");
  expect_close(f.sum(-1), at::ones({4, 3}, at::kDouble), 1e-12, "softmax rows");
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
