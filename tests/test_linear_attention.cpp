// Softmax and linear attention maps and outputs against plain double loops; the prefix-sum output
// against the materialized map; the clamping of signed (random Fourier) kernels.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/attention/attention.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_linear_attention {

using namespace attnscope;

namespace {

at::Tensor randn_t(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype = at::kDouble, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale).to(dtype);
}

// Positive features with a spread of magnitudes, like real PRF features.
at::Tensor positive_features(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  return at::exp(randn_t(shape, seed)).to(dtype);
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-300);
}

// A[i][j] = exp(q_i.k_j/sqrt d) / sum_{m<=i} exp(q_i.k_m/sqrt d), in double, one loop per index.
std::vector<std::vector<double>> softmax_loop(const at::Tensor& q, const at::Tensor& k) {
  const int64_t L = q.size(0), d = q.size(1);
  auto qa = q.to(at::kDouble).contiguous(), ka = k.to(at::kDouble).contiguous();
  auto Q = qa.accessor<double, 2>(), K = ka.accessor<double, 2>();
  std::vector<std::vector<double>> A(L, std::vector<double>(L, 0.0));
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> s(i + 1);
    double mx = -1e300;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t t = 0; t < d; ++t) dot += Q[i][t] * K[j][t];
      s[j] = dot / std::sqrt(double(d));
      mx = std::max(mx, s[j]);
    }
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) z += std::exp(s[j] - mx);
    for (int64_t j = 0; j <= i; ++j) A[i][j] = std::exp(s[j] - mx) / z;
  }
  return A;
}

// y_i = sum_{j<=i} (phi_q_i . phi_k_j) v_j / sum_{j<=i} phi_q_i . phi_k_j, in double, by loops.
at::Tensor linear_output_loop(const at::Tensor& fq, const at::Tensor& fk, const at::Tensor& v) {
  const int64_t L = fq.size(0), M = fq.size(1), dv = v.size(1);
  auto qa = fq.to(at::kDouble).contiguous(), ka = fk.to(at::kDouble).contiguous(), va = v.to(at::kDouble).contiguous();
  auto Q = qa.accessor<double, 2>(), K = ka.accessor<double, 2>(), V = va.accessor<double, 2>();
  at::Tensor y = at::zeros({L, dv}, at::kDouble);
  auto Y = y.accessor<double, 2>();
  for (int64_t i = 0; i < L; ++i) {
    double den = 0;
    std::vector<double> num(dv, 0.0);
    for (int64_t j = 0; j <= i; ++j) {
      double w = 0;
      for (int64_t m = 0; m < M; ++m) w += Q[i][m] * K[j][m];
      den += w;
      for (int64_t c = 0; c < dv; ++c) num[c] += w * V[j][c];
    }
    for (int64_t c = 0; c < dv; ++c) Y[i][c] = num[c] / den;
  }
  return y;
}

}  // namespace

TEST(HeadFeatureMaps, SoftmaxMapEqualsADoubleLoop) {
  for (int64_t L : {1, 5, 40}) {
    for (auto dtype : {at::kDouble, at::kFloat}) {
      const at::Tensor q = randn_t({L, 8}, 1 + L, dtype, 2.0), k = randn_t({L, 8}, 2 + L, dtype, 2.0);
      const at::Tensor A = softmax_map(q, k).to(at::kDouble);
      const auto want = softmax_loop(q, k);
      const double tol = dtype == at::kDouble ? 1e-12 : 2e-6;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) EXPECT_NEAR(A[i][j].item<double>(), want[i][j], tol) << i << "," << j;
    }
  }
}

TEST(HeadFeatureMaps, SoftmaxMapBatchesAndOutput) {
  const at::Tensor q = randn_t({2, 3, 17, 4}, 10), k = randn_t({2, 3, 17, 4}, 11), v = randn_t({2, 3, 17, 5}, 12);
  const at::Tensor A = softmax_map(q, k);
  const at::Tensor y = softmax_attention_output(q, k, v);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h) {
      EXPECT_LT(rel_err(A[b][h], softmax_map(q[b][h], k[b][h])), 1e-12);
      EXPECT_LT(rel_err(y[b][h], at::matmul(softmax_map(q[b][h], k[b][h]), v[b][h])), 1e-12);
    }
  EXPECT_EQ(at::triu(A, 1).abs().max().item<double>(), 0.0);
}

// The O(L M d) prefix-sum output equals the materialized map times v, and an independent float64
// loop, across lengths that are below, at and beyond the chunk size.
TEST(HeadFeatureMaps, PrefixSumOutputEqualsMapTimesValuesAndALoop) {
  uint64_t seed = 100;
  for (int64_t L : {1, 7, 64, 65, 300}) {
    for (int64_t M : {3, 16}) {
      for (int64_t dv : {1, 5}) {
        ++seed;
        const at::Tensor fq = positive_features({L, M}, seed, at::kFloat);
        const at::Tensor fk = positive_features({L, M}, seed + 1000, at::kFloat);
        const at::Tensor v = randn_t({L, dv}, seed + 2000, at::kFloat);
        const at::Tensor y = linear_attention_output(fq, fk, v);
        ASSERT_EQ(y.sizes(), v.sizes());
        const at::Tensor via_map = at::matmul(linear_map(fq, fk).map, v);
        const at::Tensor loop = linear_output_loop(fq, fk, v);
        EXPECT_LT(rel_err(y, via_map), 1e-5) << "L " << L << " M " << M << " dv " << dv;
        EXPECT_LT(rel_err(y, loop), 1e-5) << "L " << L << " M " << M << " dv " << dv;
        // in float64 the agreement is to rounding
        EXPECT_LT(rel_err(linear_attention_output(fq.to(at::kDouble), fk.to(at::kDouble), v.to(at::kDouble)), loop), 1e-12);
      }
    }
  }
}

TEST(HeadFeatureMaps, PrefixSumBatches) {
  const at::Tensor fq = positive_features({2, 3, 130, 6}, 5, at::kDouble), fk = positive_features({2, 3, 130, 6}, 6, at::kDouble);
  const at::Tensor v = randn_t({2, 3, 130, 4}, 7);
  const at::Tensor y = linear_attention_output(fq, fk, v);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h) EXPECT_LT(rel_err(y[b][h], linear_output_loop(fq[b][h], fk[b][h], v[b][h])), 1e-12);
}

TEST(HeadFeatureMaps, LinearMapRowsSumToOneAndAreCausal) {
  for (int64_t L : {1, 9, 70}) {
    const at::Tensor fq = positive_features({L, 5}, 20 + L, at::kDouble), fk = positive_features({L, 5}, 30 + L, at::kDouble);
    const LinearMap lm = linear_map(fq, fk);
    EXPECT_LT((lm.map.sum(-1) - 1).abs().max().item<double>(), 1e-12);
    EXPECT_EQ(at::triu(lm.map, 1).abs().max().item<double>(), 0.0);
    EXPECT_EQ(lm.nonpositive_row_fraction, 0.0);
    EXPECT_EQ(lm.negative_weight_fraction, 0.0);
    // entry by entry against the definition
    const at::Tensor K = at::matmul(fq, fk.t());
    for (int64_t i = 0; i < L; i += 4)
      for (int64_t j = 0; j <= i; ++j) {
        const double den = K[i].narrow(0, 0, i + 1).sum().item<double>();
        EXPECT_NEAR(lm.map[i][j].item<double>(), K[i][j].item<double>() / den, 1e-12);
      }
  }
}

// With many PRF features the linear map approaches the softmax map (moderate norms): the mean row
// total variation 0.5 sum_j |A_ij - Ahat_ij| falls roughly as 1/sqrt(M).
TEST(HeadFeatureMaps, PrfLinearMapApproachesSoftmax) {
  const at::Tensor q = randn_t({24, 8}, 40, at::kDouble, 0.6), k = randn_t({24, 8}, 41, at::kDouble, 0.6);
  const at::Tensor A = softmax_map(q, k);
  auto tv = [&](const FeatureMap& fm) {
    return 0.5 * (linear_map(fm.query_features(q), fm.key_features(k)).map - A).abs().sum(-1).mean().item<double>();
  };
  double err_small = 0, err_large = 0;
  for (uint64_t s = 0; s < 4; ++s) {
    FeatureMapSpec spec;
    spec.name = "prf";
    spec.d = 8;
    spec.seed = s;
    spec.features = 16;
    err_small += tv(*make_feature_map(spec)) / 4;
    spec.features = 4096;
    err_large += tv(*make_feature_map(spec)) / 4;
  }
  std::printf("mean row total variation to softmax: M = 16 %.4f, M = 4096 %.4f\n", err_small, err_large);
  EXPECT_LT(err_large, 0.03);
  EXPECT_LT(err_large, err_small / 5);  // sqrt(4096 / 16) = 16 in theory
}

// Random Fourier features with few frequencies and large norms give negative kernel estimates:
// the map reports them; rows with some positive weight are clamped and normalized, rows with none
// are undefined (NaN on j <= i) and counted, never given a made-up uniform row.
TEST(HeadFeatureMaps, SignedKernelsAreClampedAndReported) {
  FeatureMapSpec spec;
  spec.name = "flex-stationary";
  spec.d = 8;
  spec.features = 4;
  spec.seed = 3;
  auto fm = make_feature_map(spec);
  const at::Tensor q = randn_t({2, 80, 8}, 50, at::kDouble, 2.5), k = randn_t({2, 80, 8}, 51, at::kDouble, 2.5);
  const at::Tensor fq = fm->query_features(q), fk = fm->key_features(k);
  const LinearMap lm = linear_map(fq, fk);
  std::printf("flex-stationary M=4: non-positive rows %.3f, negative weights %.3f\n", lm.nonpositive_row_fraction,
              lm.negative_weight_fraction);
  EXPECT_GT(lm.nonpositive_row_fraction, 0.0);
  EXPECT_LT(lm.nonpositive_row_fraction, 1.0);
  EXPECT_GT(lm.negative_weight_fraction, 0.0);
  const at::Tensor defined = at::isfinite(lm.map).all(-1);  // [2, 80]
  EXPECT_EQ(lm.undefined_rows, (~defined).sum().item<int64_t>());
  EXPECT_GT(lm.undefined_rows, 0);
  const at::Tensor ok_rows = lm.map.index({defined});
  EXPECT_GE(ok_rows.min().item<double>(), 0.0);
  EXPECT_LT((ok_rows.sum(-1) - 1).abs().max().item<double>(), 1e-12);
  EXPECT_EQ(at::triu(lm.map, 1).abs().max().item<double>(), 0.0);

  // The reported fraction is the fraction of rows with raw sum <= 0, recomputed here.
  const at::Tensor raw = at::matmul(fq, fk.transpose(-2, -1)).tril();
  const double want = (raw.sum(-1) <= 0).to(at::kDouble).mean().item<double>();
  EXPECT_DOUBLE_EQ(lm.nonpositive_row_fraction, want);
  // A row with no positive weight is NaN on its keys (0 above); one with some is the clamped ratio.
  const at::Tensor clamped = raw.clamp_min(0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 80; ++i) {
      const double s = clamped[b][i].sum().item<double>();
      if (s > 0) {
        EXPECT_LT((lm.map[b][i] - clamped[b][i] / s).abs().max().item<double>(), 1e-12) << b << "," << i;
      } else {
        EXPECT_TRUE(at::isnan(lm.map[b][i].narrow(0, 0, i + 1)).all().item<bool>()) << b << "," << i;
        EXPECT_EQ(lm.map[b][i].narrow(0, i + 1, 79 - i).abs().sum().item<double>(), 0.0) << b << "," << i;
      }
    }
}

TEST(HeadFeatureMaps, BadShapesGiveErrors) {
  const at::Tensor a = randn_t({5, 4}, 1), b = randn_t({6, 4}, 2);
  EXPECT_THROW(softmax_map(a, b), Error);
  EXPECT_THROW(softmax_map(randn_t({4}, 3), randn_t({4}, 3)), Error);
  EXPECT_THROW(linear_map(a, randn_t({5, 3}, 4)), Error);
  EXPECT_THROW(linear_attention_output(a, a, randn_t({6, 2}, 5)), Error);
  EXPECT_THROW(linear_attention_output(a, a, at::ones({5, 2}, at::kLong)), Error);
  EXPECT_THROW(linear_map(at::zeros({0, 4}, at::kDouble), at::zeros({0, 4}, at::kDouble)), Error);
  try {
    linear_map(a, b);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 4]"), std::string::npos) << e.what();
  }
}

namespace {

using LD = long double;

// Rows of x [L, d] with norms drawn uniformly from [lo, hi] in a random order, random directions.
at::Tensor spread_norms(int64_t L, int64_t d, double lo, double hi, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1);
  const at::Tensor u = randn_t({L, d}, seed);
  const at::Tensor norms = lo + (hi - lo) * at::rand({L, 1}, gen, at::TensorOptions().dtype(at::kDouble));
  return u / u.norm(2, {1}, true) * norms;
}

LD logsumexp(const std::vector<LD>& a) {
  LD mx = -INFINITY;
  for (LD v : a) mx = std::max(mx, v);
  if (mx == -INFINITY) return mx;
  LD s = 0;
  for (LD v : a) s += std::exp(v - mx);
  return mx + std::log(s);
}

// The learned-prf linear map in long double and the log domain, from the definition:
//   log phi_m(x) = z_m.x / d^(1/4) - |x|^2 / (2 sqrt d) + alpha_m / 2 - log(M) / 2
//   log Khat_ij  = logsumexp_m (log phi_m(q_i) + log phi_m(k_j))
//   Ahat_ij      = exp(log Khat_ij - logsumexp_{j' <= i} log Khat_ij')
std::vector<std::vector<LD>> prf_map_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& z,
                                               const at::Tensor& alpha) {
  const int64_t L = q.size(0), d = q.size(1), M = z.size(0);
  auto log_phi = [&](const at::Tensor& x) {
    std::vector<std::vector<LD>> out(L, std::vector<LD>(M));
    for (int64_t i = 0; i < L; ++i) {
      LD sq = 0;
      for (int64_t c = 0; c < d; ++c) sq += LD(x[i][c].item<double>()) * x[i][c].item<double>();
      for (int64_t m = 0; m < M; ++m) {
        LD dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += LD(z[m][c].item<double>()) * x[i][c].item<double>();
        out[i][m] = dot / std::pow(LD(d), 0.25L) - sq / (2 * std::sqrt(LD(d))) + LD(alpha[m].item<double>()) / 2 -
                    std::log(LD(M)) / 2;
      }
    }
    return out;
  };
  const auto lq = log_phi(q), lk = log_phi(k);
  std::vector<std::vector<LD>> A(L, std::vector<LD>(L, 0));
  for (int64_t i = 0; i < L; ++i) {
    std::vector<LD> logk(i + 1);
    for (int64_t j = 0; j <= i; ++j) {
      std::vector<LD> terms(M);
      for (int64_t m = 0; m < M; ++m) terms[m] = lq[i][m] + lk[j][m];
      logk[j] = logsumexp(terms);
    }
    const LD norm = logsumexp(logk);
    for (int64_t j = 0; j <= i; ++j) A[i][j] = std::exp(logk[j] - norm);
  }
  return A;
}

}  // namespace

// Queries and keys with |x| from 5 to 100 at d = 16 (|x|^2 / sqrt d up to 2500; real heads reach
// ~800): phi itself is 0 in float64, but the scaled features give the right map, output and
// metrics, checked against a long-double log-domain computation.
TEST(HeadFeatureMaps, LargeNormPrfMatchesALogDomainReference) {
  const int64_t L = 150, d = 16, M = 24, dv = 3;  // three chunks of the running sums
  const at::Tensor q = spread_norms(L, d, 5.0, 100.0, 60), k = spread_norms(L, d, 5.0, 100.0, 61);
  const at::Tensor v = randn_t({L, dv}, 62);
  const at::Tensor z = randn_t({M, d}, 63), alpha = randn_t({M}, 64, at::kDouble, 0.5);
  auto fm = make_learned_prf(z, alpha);
  const Features fq = fm->scaled_query_features(q), fk = fm->scaled_key_features(k);
  const auto want = prf_map_reference(q, k, z, alpha);

  const LinearMap lm = linear_map(fq, fk);
  EXPECT_EQ(lm.undefined_rows, 0);
  EXPECT_EQ(lm.nonpositive_row_fraction, 0.0);
  const at::Tensor A = lm.map.contiguous();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) EXPECT_NEAR(A[i][j].item<double>(), double(want[i][j]), 1e-9) << i << "," << j;
  // The test is not trivial: the rows are far from uniform.
  EXPECT_GT(A.max().item<double>(), 0.99);

  // Output by running sums against sum_j Ahat_ij v_j in long double.
  const at::Tensor y = linear_attention_output(fq, fk, v);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < dv; ++c) {
      LD yi = 0;
      for (int64_t j = 0; j <= i; ++j) yi += want[i][j] * v[j][c].item<double>();
      EXPECT_NEAR(y[i][c].item<double>(), double(yi), 1e-9) << i << "," << c;
    }

  // Metrics of the map: entropy and KL(softmax || map) against the reference map, by loops (KL with
  // the documented floor: the map read at >= 1e-300 where softmax is positive).
  HeadMetricsInput in;
  in.map = lm.map;
  in.reference = softmax_map(q, k);
  in.v = v;
  const HeadMetrics m = compute_head_metrics(in);
  LD h = 0, kl = 0;
  const at::Tensor R = in.reference.contiguous();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const LD a = want[i][j], r = R[i][j].item<double>();
      if (a > 0) h -= a * std::log(a) / L;
      if (r > 0) kl += r * (std::log(r) - std::log(std::max(a, LD(1e-300)))) / L;
    }
  EXPECT_NEAR(m.entropy, double(h), 1e-9);
  ASSERT_TRUE(m.kl.has_value());
  EXPECT_NEAR(*m.kl, double(kl), 1e-9 * std::max(LD(1), kl));
  EXPECT_EQ(m.undefined_rows, 0);
}

// Flexformer's norm factor exp(|x|^2 / e^tau) overflows at |x| = 100 (10^4 / 8 in the exponent):
// the scaled path gives the clamped map of the definition, computed here in long double (whose
// exponent range holds e^2500), and undefined rows exactly where no weight is positive.
TEST(HeadFeatureMaps, LargeNormFlexformerMatchesALongDoubleReference) {
  const int64_t L = 30, d = 16, M = 8, n = M / 2;
  const at::Tensor q = spread_norms(L, d, 20.0, 100.0, 70), k = spread_norms(L, d, 20.0, 100.0, 71);
  FeatureMapSpec spec;
  spec.name = "flex-stationary";
  spec.d = d;
  spec.features = M;
  spec.seed = 4;
  auto fm = make_feature_map(spec);
  const auto p = fm->named_parameters();
  const at::Tensor w = p[0].second.to(at::kDouble);
  const LD inv_e_tau = std::exp(-LD(p[1].second.item<double>()));
  auto phi = [&](const at::Tensor& x, int64_t i) {  // exp(|x|^2 / e^tau) / sqrt(n) [cos(w.x), sin(w.x)]
    LD sq = 0;
    for (int64_t c = 0; c < d; ++c) sq += LD(x[i][c].item<double>()) * x[i][c].item<double>();
    const LD scale = std::exp(sq * inv_e_tau) / std::sqrt(LD(n));
    std::vector<LD> f(M);
    for (int64_t m = 0; m < n; ++m) {
      LD a = 0;
      for (int64_t c = 0; c < d; ++c) a += LD(w[m][c].item<double>()) * x[i][c].item<double>();
      f[m] = scale * std::cos(a);
      f[n + m] = scale * std::sin(a);
    }
    return f;
  };
  const LinearMap lm = linear_map(fm->scaled_query_features(q), fm->scaled_key_features(k));
  int64_t undefined = 0, nonpositive = 0;
  for (int64_t i = 0; i < L; ++i) {
    const auto fq = phi(q, i);
    std::vector<LD> wts(i + 1);
    LD raw_sum = 0, clamped_sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const auto fk = phi(k, j);
      LD dot = 0;
      for (int64_t m = 0; m < M; ++m) dot += fq[m] * fk[m];
      raw_sum += dot;
      wts[j] = std::max(dot, LD(0));
      clamped_sum += wts[j];
    }
    nonpositive += raw_sum <= 0;
    if (clamped_sum == 0) {
      ++undefined;
      EXPECT_TRUE(at::isnan(lm.map[i].narrow(0, 0, i + 1)).all().item<bool>()) << i;
      continue;
    }
    for (int64_t j = 0; j <= i; ++j) EXPECT_NEAR(lm.map[i][j].item<double>(), double(wts[j] / clamped_sum), 1e-9) << i << "," << j;
  }
  EXPECT_EQ(lm.undefined_rows, undefined);
  EXPECT_DOUBLE_EQ(lm.nonpositive_row_fraction, double(nonpositive) / L);
  EXPECT_LT(undefined, L);  // most rows have a positive weight
}

// ReLU features that are all 0 (a query with no positive coordinate) leave the row without any
// weight: NaN and counted, not uniform.
TEST(HeadFeatureMaps, RowsWithoutWeightAreUndefinedNotUniform) {
  at::Tensor fq = positive_features({6, 3}, 90, at::kDouble), fk = positive_features({6, 3}, 91, at::kDouble);
  fq[2].zero_();  // query 2: no weight on any key
  fq[4].zero_();
  const LinearMap lm = linear_map(fq, fk);
  EXPECT_EQ(lm.undefined_rows, 2);
  EXPECT_DOUBLE_EQ(lm.nonpositive_row_fraction, 2.0 / 6.0);
  for (int64_t i = 0; i < 6; ++i) {
    const bool undefined = i == 2 || i == 4;
    EXPECT_EQ(at::isnan(lm.map[i].narrow(0, 0, i + 1)).all().item<bool>(), undefined) << i;
    if (!undefined) {
      EXPECT_NEAR(lm.map[i].sum().item<double>(), 1.0, 1e-12) << i;
    }
  }
  // The relu map does this on real data: a query with no positive coordinate.
  auto relu = make_feature_map([] {
    FeatureMapSpec s;
    s.name = "relu";
    s.d = 3;
    return s;
  }());
  const at::Tensor x = at::tensor({1.0, 2.0, 0.5, -1.0, -2.0, -0.1, 0.3, -1.0, 2.0}, at::kDouble).reshape({3, 3});
  const LinearMap r = linear_map(relu->query_features(x), relu->key_features(x));
  EXPECT_EQ(r.undefined_rows, 1);
  EXPECT_TRUE(at::isnan(r.map[1][0]).item<bool>());
}

// NaN or inf anywhere in the inputs is an Error that names the argument.
TEST(HeadFeatureMaps, NonFiniteInputsAreErrors) {
  const at::Tensor q = randn_t({5, 4}, 80), k = randn_t({5, 4}, 81), v = randn_t({5, 2}, 82);
  const at::Tensor f = positive_features({5, 3}, 83, at::kDouble);
  auto bad = [](const at::Tensor& t, double value) {
    at::Tensor b = t.clone();
    b[3][1] = value;
    return b;
  };
  auto expect_names = [&](const std::string& msg, const std::string& fn, const std::string& arg) {
    EXPECT_NE(msg.find(fn), std::string::npos) << msg;
    EXPECT_NE(msg.find(arg + " has non-finite"), std::string::npos) << msg;
  };
  for (double x : {NAN, INFINITY, -INFINITY}) {
    expect_names(test::error_of([&] { softmax_map(bad(q, x), k); }), "softmax_map", "q");
    expect_names(test::error_of([&] { softmax_map(q, bad(k, x)); }), "softmax_map", "k");
    expect_names(test::error_of([&] { softmax_attention_output(q, k, bad(v, x)); }), "softmax_attention_output", "v");
    expect_names(test::error_of([&] { linear_map(bad(f, x), f); }), "linear_map", "phi_q");
    expect_names(test::error_of([&] { linear_map(f, bad(f, x)); }), "linear_map", "phi_k");
    at::Tensor log_scale = at::zeros({5, 1}, at::kDouble);
    log_scale[3][0] = x;
    expect_names(test::error_of([&] { linear_map(f, Features(f, log_scale)); }), "linear_map", "phi_k log_scale");
    expect_names(test::error_of([&] { linear_attention_output(bad(f, x), f, v); }), "linear_attention_output", "phi_q");
    expect_names(test::error_of([&] { linear_attention_output(f, f, bad(v, x)); }), "linear_attention_output", "v");
  }
  // The check sums first (check_finite): finite entries whose float32 sum overflows (3e38 each) are
  // finite, and are scanned, not refused; +inf beside -inf (a NaN sum either way) is refused.
  const at::Tensor huge = at::full({5, 4}, 3e38, at::kFloat);
  ASSERT_FALSE(std::isfinite(huge.sum().item<double>()));
  EXPECT_NO_THROW(softmax_map(huge, k.to(at::kFloat)));
  at::Tensor both = q.to(at::kFloat).clone();
  both[0][0] = INFINITY, both[1][0] = -INFINITY;
  expect_names(test::error_of([&] { softmax_map(both, k.to(at::kFloat)); }), "softmax_map", "q");
  at::Tensor half = q.to(at::kHalf).clone();
  half[2][2] = NAN;
  expect_names(test::error_of([&] { softmax_map(half, k.to(at::kHalf)); }), "softmax_map", "q");
}

}  // namespace test_linear_attention
