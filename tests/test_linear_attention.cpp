// Softmax and linear attention maps and outputs against plain double loops; the prefix-sum output
// against the materialized map; the clamping of signed (random Fourier) kernels.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnscope/error.h"
#include "attnscope/feature_map.h"
#include "attnscope/linear_attention.h"

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

TEST(LinearAttention, SoftmaxMapEqualsADoubleLoop) {
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

TEST(LinearAttention, SoftmaxMapBatchesAndOutput) {
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
TEST(LinearAttention, PrefixSumOutputEqualsMapTimesValuesAndALoop) {
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

TEST(LinearAttention, PrefixSumBatches) {
  const at::Tensor fq = positive_features({2, 3, 130, 6}, 5, at::kDouble), fk = positive_features({2, 3, 130, 6}, 6, at::kDouble);
  const at::Tensor v = randn_t({2, 3, 130, 4}, 7);
  const at::Tensor y = linear_attention_output(fq, fk, v);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h) EXPECT_LT(rel_err(y[b][h], linear_output_loop(fq[b][h], fk[b][h], v[b][h])), 1e-12);
}

TEST(LinearAttention, LinearMapRowsSumToOneAndAreCausal) {
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
TEST(LinearAttention, PrfLinearMapApproachesSoftmax) {
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
// the map reports them and stays finite, non-negative and row-stochastic.
TEST(LinearAttention, SignedKernelsAreClampedAndReported) {
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
  EXPECT_TRUE(at::isfinite(lm.map).all().item<bool>());
  EXPECT_GE(lm.map.min().item<double>(), 0.0);
  EXPECT_LT((lm.map.sum(-1) - 1).abs().max().item<double>(), 1e-12);
  EXPECT_EQ(at::triu(lm.map, 1).abs().max().item<double>(), 0.0);

  // The reported fraction is the fraction of rows with raw sum <= 0, recomputed here.
  const at::Tensor raw = at::matmul(fq, fk.transpose(-2, -1)).tril();
  const double want = (raw.sum(-1) <= 0).to(at::kDouble).mean().item<double>();
  EXPECT_DOUBLE_EQ(lm.nonpositive_row_fraction, want);
  // A row with no positive weight is uniform over its keys; one with some is the clamped ratio.
  const at::Tensor clamped = raw.clamp_min(0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 80; ++i) {
      const double s = clamped[b][i].sum().item<double>();
      const at::Tensor want_row = s > 0 ? clamped[b][i] / s : at::cat({at::full({i + 1}, 1.0 / (i + 1), at::kDouble), at::zeros({79 - i}, at::kDouble)});
      EXPECT_LT((lm.map[b][i] - want_row).abs().max().item<double>(), 1e-12) << b << "," << i;
    }
}

TEST(LinearAttention, BadShapesGiveErrors) {
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
