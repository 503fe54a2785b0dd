// Distances of attention maps to the structured mixers of paper 003: members of each class come back
// at ~0, the exact projections (Toeplitz, RetNet decay) agree with plain loops, and the fitted classes
// keep their containments (ssd <= low rank and retnet, ssd_d <= ssd).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnscope/error.h"
#include "attnscope/linear_attention.h"
#include "attnscope/structured_mixers.h"

using namespace attnscope;

namespace {

at::Tensor randn_t(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * scale;
}

at::Tensor rand_t(std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return lo + (hi - lo) * at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble));
}

// A softmax map with content (random q, k) and, when `slope` > 0, an ALiBi-like recency bias.
at::Tensor attention_map(int64_t L, int64_t d, uint64_t seed, double slope = 0.0) {
  const at::Tensor q = randn_t({L, d}, seed), k = randn_t({L, d}, seed + 1000);
  const at::Tensor idx = at::arange(L, at::kDouble);
  const at::Tensor bias = -slope * (idx.unsqueeze(1) - idx.unsqueeze(0)).clamp_min(0);
  const at::Tensor scores = at::matmul(q, k.t()) / std::sqrt(double(d)) + bias;
  return at::softmax(scores.masked_fill(at::ones({L, L}, at::kBool).tril().logical_not(), -INFINITY), -1);
}

std::vector<std::vector<double>> to_rows(const at::Tensor& a) {
  const at::Tensor c = a.to(at::kDouble).contiguous();
  auto acc = c.accessor<double, 2>();
  std::vector<std::vector<double>> out(c.size(0), std::vector<double>(c.size(1)));
  for (int64_t i = 0; i < c.size(0); ++i)
    for (int64_t j = 0; j < c.size(1); ++j) out[i][j] = acc[i][j];
  return out;
}

void expect_all_in_unit_interval(const MixerDistances& m) {
  for (double v : {m.toeplitz, m.causal_low_rank, m.retnet, m.ssd, m.ssd_d, m.semiseparable}) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_GT(v, 0.0);
    EXPECT_LE(v, 1.0);
  }
}

void expect_containments(const MixerDistances& m) {
  EXPECT_LE(m.ssd, m.causal_low_rank + 1e-12);
  EXPECT_LE(m.ssd, m.retnet + 1e-12);
  EXPECT_LE(m.ssd_d, m.ssd + 1e-9);
  EXPECT_LE(m.semiseparable, m.ssd_d);
}

}  // namespace

TEST(StructuredMixers, ToeplitzMatrixIsToeplitz) {
  const int64_t L = 48;
  const auto t = to_rows(rand_t({1, L}, 1, 0.1, 1.0))[0];
  at::Tensor A = at::zeros({L, L}, at::kDouble);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) A[i][j] = t[i - j];
  A = A + at::triu(randn_t({L, L}, 2), 1);  // the part above the diagonal is ignored
  const MixerDistances m = mixer_distances(A, {8, 50, 1e-8});
  EXPECT_EQ(m.state_size, 8);
  EXPECT_LT(m.toeplitz, 1e-12);
  EXPECT_GT(m.retnet, 0.05);  // random diagonals are no geometric decay
  for (double v : {m.causal_low_rank, m.ssd, m.ssd_d, m.semiseparable}) EXPECT_GE(v, 0.0);
  expect_containments(m);
}

TEST(StructuredMixers, ToeplitzAndRetNetMatchLoopsOnAMap) {
  const int64_t L = 40;
  const at::Tensor A = attention_map(L, 8, 3, 0.3);
  const MixerDistances m = mixer_distances(A, {4, 20, 1e-8});
  const auto a = to_rows(A);
  double norm2 = 0;
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) norm2 += a[i][j] * a[i][j];

  // Toeplitz: each diagonal k's entries against their mean.
  double toeplitz2 = 0;
  for (int64_t k = 0; k < L; ++k) {
    double mean = 0;
    for (int64_t i = k; i < L; ++i) mean += a[i][i - k] / double(L - k);
    for (int64_t i = k; i < L; ++i) toeplitz2 += (a[i][i - k] - mean) * (a[i][i - k] - mean);
  }
  EXPECT_NEAR(m.toeplitz, std::sqrt(toeplitz2 / norm2), 1e-12);

  // RetNet: the best c for each gamma on a fine grid; the search must do at least as well.
  double best = 1e300;
  for (int g = 0; g <= 20000; ++g) {
    const double gamma = g / 20000.0;
    double ag = 0, gg = 0;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const double w = std::pow(gamma, double(i - j));
        ag += a[i][j] * w;
        gg += w * w;
      }
    const double c = ag / gg;
    double e2 = 0;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const double diff = a[i][j] - c * std::pow(gamma, double(i - j));
        e2 += diff * diff;
      }
    best = std::min(best, std::sqrt(e2 / norm2));
  }
  EXPECT_LE(m.retnet, best + 1e-12);
  EXPECT_GT(m.retnet, best - 1e-4);  // and the grid gets close to it
  expect_containments(m);
}

TEST(StructuredMixers, ExponentialDecayIsRetNet) {
  const int64_t L = 64;
  for (double gamma : {0.0, 0.37, 0.83, 0.995, 1.0}) {
    at::Tensor A = at::zeros({L, L}, at::kDouble);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) A[i][j] = 0.3 * std::pow(gamma, double(i - j));
    const MixerDistances m = mixer_distances(A, {4, 30, 1e-8});
    EXPECT_LT(m.retnet, 1e-9) << gamma;
    EXPECT_LT(m.toeplitz, 1e-12) << gamma;
    EXPECT_LT(m.ssd, 1e-9) << gamma;  // starts from the RetNet fit
    EXPECT_LT(m.semiseparable, 1e-9) << gamma;  // c gamma^{i-j} has rank-1 blocks
  }
}

TEST(StructuredMixers, MaskedLowRankIsLowRankAndSemiseparable) {
  const int64_t L = 64, N = 8;
  const at::Tensor U = randn_t({L, N}, 4), V = randn_t({L, N}, 5);
  const at::Tensor A = at::matmul(U, V.t()).tril();
  const MixerDistances m = mixer_distances(A, {N, 50, 1e-10});
  EXPECT_LT(m.causal_low_rank, 1e-3);
  EXPECT_LT(m.semiseparable, 1e-10);
  EXPECT_LT(m.ssd, 1e-3);
  EXPECT_GT(m.toeplitz, 0.5);
  // With a smaller state the same matrix is out of reach.
  const MixerDistances small = mixer_distances(A, {2, 50, 1e-10});
  EXPECT_GT(small.causal_low_rank, 0.1);
  EXPECT_GT(small.semiseparable, 0.1);
}

namespace {

// A_ij = (C_i.B_j) prod_{m=j+1..i} a_m, in plain loops.
at::Tensor ssd_matrix(const at::Tensor& C_t, const at::Tensor& B_t, const std::vector<double>& a) {
  const auto C = to_rows(C_t), B = to_rows(B_t);
  const int64_t L = C_t.size(0), N = C_t.size(1);
  at::Tensor A = at::zeros({L, L}, at::kDouble);
  auto acc = A.accessor<double, 2>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double decay = 1, dot = 0;
      for (int64_t m = j + 1; m <= i; ++m) decay *= a[m];
      for (int64_t n = 0; n < N; ++n) dot += C[i][n] * B[j][n];
      acc[i][j] = dot * decay;
    }
  return A;
}

}  // namespace

TEST(StructuredMixers, SsdMatrixIsSsd) {
  const int64_t L = 64, N = 4;
  const at::Tensor A = ssd_matrix(randn_t({L, N}, 6), randn_t({L, N}, 7), to_rows(rand_t({1, L}, 8, 0.9, 1.0))[0]);
  const MixerDistances m = mixer_distances(A, {N, 50, 1e-10});
  EXPECT_LT(m.ssd, 1e-4);
  EXPECT_LT(m.ssd_d, 1e-4);
  EXPECT_LT(m.semiseparable, 1e-10);  // SSD matrices are semi-separable of order N
  EXPECT_GT(m.toeplitz, 0.3);
  EXPECT_GT(m.retnet, 0.3);
}

TEST(StructuredMixers, SsdReachesCutsThatLowRankCannot) {
  // Decays with three exact cuts (a_m = 0): four independent blocks of state 2. tril(U V^T) of rank 2
  // cannot zero the blocks below the diagonal blocks; the SSD decays can.
  const int64_t L = 64, N = 2;
  std::vector<double> a = to_rows(rand_t({1, L}, 9, 0.9, 1.0))[0];
  for (int64_t cut : {16, 32, 48}) a[cut] = 0.0;
  const at::Tensor A = ssd_matrix(randn_t({L, N}, 10), randn_t({L, N}, 11), a);
  const MixerDistances m = mixer_distances(A, {N, 50, 1e-10});
  EXPECT_GT(m.causal_low_rank, 0.5);
  EXPECT_GT(m.retnet, 0.5);
  EXPECT_LT(m.ssd, 0.3 * m.causal_low_rank);  // a local search: 0.14 vs 0.74 here
  EXPECT_LT(m.semiseparable, 1e-10);
}

TEST(StructuredMixers, RandomSoftmaxMapsKeepTheContainments) {
  for (uint64_t seed : {10, 11, 12}) {
    for (double slope : {0.0, 0.5}) {
      const MixerDistances m = mixer_distances(attention_map(64, 16, seed, slope), {16, 50, 1e-8});
      expect_all_in_unit_interval(m);
      expect_containments(m);
    }
  }
}

TEST(StructuredMixers, LowRankImprovesWithStateSize) {
  const at::Tensor A = attention_map(64, 16, 13);
  const MixerDistances n4 = mixer_distances(A, {4, 50, 1e-8});
  const MixerDistances n32 = mixer_distances(A, {32, 50, 1e-8});
  EXPECT_LT(n32.causal_low_rank, n4.causal_low_rank);
  EXPECT_LT(n32.ssd, n4.ssd);
  EXPECT_LT(n32.semiseparable, n4.semiseparable);
  EXPECT_EQ(n32.toeplitz, n4.toeplitz);  // no state size
  EXPECT_EQ(n32.retnet, n4.retnet);
}

// A realistic size (L = 256, N = 16): every distance in (0, 1] and the class containments hold.
// Its speed is measured by tests/bench/bench_analysis.cpp, not here.
TEST(StructuredMixers, Length256State16KeepsTheContainments) {
  const at::Tensor A = attention_map(256, 64, 14, 0.05);
  const MixerDistances m = mixer_distances(A, {16, 50, 1e-8});
  expect_all_in_unit_interval(m);
  expect_containments(m);
}

TEST(StructuredMixers, RejectsBadInput) {
  const at::Tensor A = attention_map(8, 4, 15);
  EXPECT_THROW(mixer_distances(A.narrow(0, 0, 4), {}), Error);
  EXPECT_THROW(mixer_distances(at::zeros({8, 8}, at::kDouble), {}), Error);
  EXPECT_THROW(mixer_distances(at::triu(A + 1, 1), {}), Error);  // nothing on or below the diagonal
  EXPECT_THROW(mixer_distances(A, {0, 10, 1e-8}), Error);
  EXPECT_THROW(mixer_distances(A, {4, -1, 1e-8}), Error);
  EXPECT_THROW(mixer_distances(A, {4, 10, -1.0}), Error);
  EXPECT_NO_THROW(mixer_distances(A, {16, 0, 0.0}));  // N > L and no iterations are fine
  const MixerDistances one = mixer_distances(at::full({1, 1}, 0.5, at::kDouble), {});
  EXPECT_EQ(one.toeplitz, 0.0);  // a single entry is in every class
  EXPECT_LT(one.ssd_d, 1e-12);
}
