// Head metrics (entropy, monotonicity, errors against softmax) against plain float64 loops written
// here from the definitions in SPEC section 5 and the conventions in head_metrics.h.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/attention/attention.h"
#include "attnscope/base/random.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_head_metrics {

using namespace attnscope;

namespace {

FeatureMapSpec spec(const char* name, int64_t d, int64_t features = 0, uint64_t seed = 0) {
  FeatureMapSpec s;
  s.name = name;
  s.d = d;
  s.features = features;
  s.seed = seed;
  return s;
}

at::Tensor elu_map(const at::Tensor& q, const at::Tensor& k) {
  auto phi = make_feature_map(spec("elu", q.size(-1)));
  return linear_map(phi->query_features(q), phi->key_features(k)).map;
}

// Rows of sequence t of a [T, L, L] (or [T, L, d]) tensor as nested vectors.
std::vector<std::vector<double>> rows_of(const at::Tensor& x, int64_t t) {
  const at::Tensor s = x[t].to(at::kDouble).contiguous();
  std::vector<std::vector<double>> out(s.size(0), std::vector<double>(s.size(1)));
  auto acc = s.accessor<double, 2>();
  for (int64_t i = 0; i < s.size(0); ++i)
    for (int64_t j = 0; j < s.size(1); ++j) out[i][j] = acc[i][j];
  return out;
}

double row_entropy_loop(const std::vector<double>& a, int64_t keys) {
  double h = 0;
  for (int64_t j = 0; j < keys; ++j)
    if (a[j] > 0) h -= a[j] * std::log(a[j]);
  return h;
}

// Average rank of x[j] among x[0..n): 1 + (number below) + (number of other equal values) / 2.
double rank_loop(const std::vector<double>& x, int64_t n, int64_t j) {
  double below = 0, equal = 0;
  for (int64_t m = 0; m < n; ++m) {
    if (x[m] < x[j]) below += 1;
    if (m != j && x[m] == x[j]) equal += 1;
  }
  return 1 + below + equal / 2;
}

struct MonoLoop {
  double spearman = 0, discordant = 0;
};

// Spearman per row (rows with >= 3 keys; all-tied scores skipped, all-tied weights count 0,
// undefined (NaN) rows skipped), mean over rows; discordant pairs pooled over the same rows.
MonoLoop monotonicity_loop(const at::Tensor& map, const at::Tensor& scores) {
  double sum = 0, used = 0, disc = 0, pairs = 0;
  for (int64_t t = 0; t < map.size(0); ++t) {
    const auto A = rows_of(map, t), S = rows_of(scores, t);
    const int64_t L = map.size(1);
    for (int64_t i = 2; i < L; ++i) {
      const int64_t n = i + 1;
      if (std::isnan(A[i][0])) continue;
      double row_pairs = 0, row_disc = 0;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t m = j + 1; m < n; ++m) {
          if (S[i][j] == S[i][m]) continue;
          row_pairs += 1;
          if ((S[i][j] - S[i][m]) * (A[i][j] - A[i][m]) < 0) row_disc += 1;
        }
      if (row_pairs == 0) continue;
      std::vector<double> rs(n), rw(n);
      for (int64_t j = 0; j < n; ++j) {
        rs[j] = rank_loop(S[i], n, j);
        rw[j] = rank_loop(A[i], n, j);
      }
      double ms = 0, mw = 0;
      for (int64_t j = 0; j < n; ++j) ms += rs[j] / n, mw += rw[j] / n;
      double sxy = 0, sxx = 0, syy = 0;
      for (int64_t j = 0; j < n; ++j) {
        sxy += (rs[j] - ms) * (rw[j] - mw);
        sxx += (rs[j] - ms) * (rs[j] - ms);
        syy += (rw[j] - mw) * (rw[j] - mw);
      }
      sum += syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
      used += 1;
      disc += row_disc;
      pairs += row_pairs;
    }
  }
  return {sum / used, disc / pairs};
}

at::Tensor scores_of(const at::Tensor& q, const at::Tensor& k) { return at::matmul(q, k.transpose(-2, -1)); }

}  // namespace

TEST(HeadMetrics, UniformMapEntropyIsLogOfKeys) {
  const int64_t L = 40;
  const at::Tensor uniform = at::ones({L, L}, at::kDouble).tril() / at::arange(1, L + 1, at::kDouble).unsqueeze(1);
  const at::Tensor h = row_entropy(uniform);
  for (int64_t i = 0; i < L; ++i) EXPECT_NEAR(h[i].item<double>(), std::log(double(i + 1)), 1e-13) << i;

  HeadMetricsInput in;
  in.map = uniform.unsqueeze(0).repeat({3, 1, 1});
  const HeadMetrics m = compute_head_metrics(in);
  EXPECT_NEAR(m.normalized_entropy, 1.0, 1e-13);
  double mean_log = 0;
  for (int64_t i = 0; i < L; ++i) mean_log += std::log(double(i + 1)) / L;
  EXPECT_NEAR(m.entropy, mean_log, 1e-13);
  EXPECT_FALSE(m.monotonicity.has_value());
  EXPECT_FALSE(m.kl.has_value());

  in.map = at::eye(L, at::kDouble);  // one-hot rows: no uncertainty at all
  const HeadMetrics one_hot = compute_head_metrics(in);
  EXPECT_EQ(one_hot.entropy, 0.0);
  EXPECT_EQ(one_hot.normalized_entropy, 0.0);
}

TEST(HeadMetrics, SoftmaxEntropyMatchesLoop) {
  const int64_t T = 3, L = 33, d = 8;
  const at::Tensor q = test::seeded_randn({T, L, d}, 1, 1.5), k = test::seeded_randn({T, L, d}, 2, 1.5);
  HeadMetricsInput in;
  in.map = softmax_map(q, k);
  const HeadMetrics m = compute_head_metrics(in);

  double h = 0, hn = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto A = rows_of(in.map, t);
    for (int64_t i = 0; i < L; ++i) {
      const double hi = row_entropy_loop(A[i], i + 1);
      h += hi / (T * L);
      if (i >= 1) hn += hi / std::log(double(i + 1)) / (T * (L - 1));
    }
  }
  EXPECT_NEAR(m.entropy, h, 1e-12);
  EXPECT_NEAR(m.normalized_entropy, hn, 1e-12);
  EXPECT_GT(m.entropy, 0.1);  // random scores spread the weights
  EXPECT_LT(m.normalized_entropy, 1.0);
}

TEST(HeadMetrics, SoftmaxIsExactlyMonotone) {
  const int64_t T = 3, L = 70, d = 16;
  const at::Tensor q = test::seeded_randn({T, L, d}, 3), k = test::seeded_randn({T, L, d}, 4);
  HeadMetricsInput in;
  in.map = softmax_map(q, k);
  in.q = q;
  in.k = k;
  const HeadMetrics m = compute_head_metrics(in);
  ASSERT_TRUE(m.monotonicity.has_value());
  EXPECT_EQ(m.monotonicity->spearman, 1.0);
  EXPECT_EQ(m.monotonicity->discordant_fraction, 0.0);

  // One sequence [L, L] works the same; so does any positive rescaling of the scores.
  const Monotonicity one = monotonicity(softmax_map(q[0], k[0]), 0.1 * scores_of(q[0], k[0]));
  EXPECT_EQ(one.spearman, 1.0);
  EXPECT_EQ(one.discordant_fraction, 0.0);
}

TEST(HeadMetrics, ReversedMapIsMinusOne) {
  const int64_t T = 2, L = 50, d = 8;
  const at::Tensor q = test::seeded_randn({T, L, d}, 5), k = test::seeded_randn({T, L, d}, 6);
  // softmax of the negated scores puts the most weight on the lowest score.
  const Monotonicity m = monotonicity(softmax_map(q, -k), scores_of(q, k));
  EXPECT_EQ(m.spearman, -1.0);
  EXPECT_EQ(m.discordant_fraction, 1.0);
}

TEST(HeadMetrics, LinearMapMonotonicityMatchesLoop) {
  const int64_t T = 2, L = 45, d = 8;
  const at::Tensor q = test::seeded_randn({T, L, d}, 7), k = test::seeded_randn({T, L, d}, 8);
  const at::Tensor map = elu_map(q, k);
  const at::Tensor scores = scores_of(q, k);
  const Monotonicity m = monotonicity(map, scores);
  const MonoLoop want = monotonicity_loop(map, scores);
  EXPECT_NEAR(m.spearman, want.spearman, 1e-12);
  EXPECT_NEAR(m.discordant_fraction, want.discordant, 1e-12);
  EXPECT_GT(m.spearman, 0.2);  // 1 + ELU follows the scores somewhat, not perfectly
  EXPECT_LT(m.spearman, 0.999);
  EXPECT_GT(m.discordant_fraction, 0.0);
}

TEST(HeadMetrics, MonotonicityTiesFollowTheConventions) {
  const int64_t T = 2, L = 40, d = 4;
  const at::Tensor q = test::seeded_randn({T, L, d}, 9), k = test::seeded_randn({T, L, d}, 10);
  // Scores rounded to a coarse grid tie often; ReLU features give exact-zero weights (ties) and
  // rows whose raw sum is 0 are undefined (NaN), which monotonicity skips.
  at::Tensor scores = at::round(scores_of(q, k));
  scores.select(1, 5).zero_();  // a row of all-tied scores: skipped
  auto relu = make_feature_map(spec("relu", d));
  const at::Tensor map = linear_map(relu->query_features(q), relu->key_features(k)).map;
  const Monotonicity m = monotonicity(map, scores);
  const MonoLoop want = monotonicity_loop(map, scores);
  EXPECT_NEAR(m.spearman, want.spearman, 1e-12);
  EXPECT_NEAR(m.discordant_fraction, want.discordant, 1e-12);
  EXPECT_GT(m.spearman, 0.0);
  EXPECT_TRUE(at::isnan(map).any().item<bool>()) << "the case of undefined rows is exercised";
}

TEST(HeadMetrics, KlAndCrossEntropyMatchLoops) {
  const int64_t T = 2, L = 37, d = 8;
  const at::Tensor q = test::seeded_randn({T, L, d}, 11), k = test::seeded_randn({T, L, d}, 12);
  const at::Tensor ref = softmax_map(q, k);
  HeadMetricsInput in;
  in.map = elu_map(q, k);
  in.reference = ref;
  const HeadMetrics m = compute_head_metrics(in);
  ASSERT_TRUE(m.kl && m.cross_entropy);

  double kl = 0, ce = 0, h_ref = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto P = rows_of(ref, t), Qm = rows_of(in.map, t);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        kl += P[i][j] * std::log(P[i][j] / Qm[i][j]) / (T * L);
        ce -= P[i][j] * std::log(Qm[i][j]) / (T * L);
        h_ref -= P[i][j] * std::log(P[i][j]) / (T * L);
      }
  }
  EXPECT_NEAR(*m.kl, kl, 1e-12);
  EXPECT_NEAR(*m.cross_entropy, ce, 1e-12);
  EXPECT_NEAR(*m.cross_entropy, h_ref + *m.kl, 1e-12);
  EXPECT_GT(*m.kl, 0.01);

  in.map = ref;  // KL(A || A) = 0
  const HeadMetrics self = compute_head_metrics(in);
  EXPECT_EQ(*self.kl, 0.0);
  EXPECT_NEAR(*self.cross_entropy, self.entropy, 1e-12);

  // A zero where the reference is positive stays finite (map read at the 1e-300 floor).
  at::Tensor holes = ref.clone();
  holes.select(1, L - 1).select(1, 0).zero_();
  in.map = holes;
  const HeadMetrics floored = compute_head_metrics(in);
  EXPECT_TRUE(std::isfinite(*floored.kl));
  EXPECT_GT(*floored.kl, 0.0);
}

TEST(HeadMetrics, KernelErrorMatchesLoopOnAllPairs) {
  const int64_t T = 2, L = 24, d = 8;
  const at::Tensor q = test::seeded_randn({T, L, d}, 13, 0.5), k = test::seeded_randn({T, L, d}, 14, 0.5);
  auto prf = [&](int64_t M) { return make_feature_map(spec("prf", d, M, 99)); };
  auto small = prf(16), large = prf(4096);

  HeadMetricsInput in;
  in.map = softmax_map(q, k);
  in.q = q;
  in.k = k;
  in.phi_q = small->query_features(q);
  in.phi_k = small->key_features(k);
  in.kernel_pairs = T * L * (L + 1) / 2;  // every causal pair
  const HeadMetrics m = compute_head_metrics(in);
  ASSERT_TRUE(m.kernel_rel_error.has_value());

  double num = 0, den = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto Q = rows_of(q, t), K = rows_of(k, t), FQ = rows_of(in.phi_q.values, t), FK = rows_of(in.phi_k.values, t);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0, f = 0;
        for (int64_t c = 0; c < d; ++c) s += Q[i][c] * K[j][c];
        for (size_t c = 0; c < FQ[i].size(); ++c) f += FQ[i][c] * FK[j][c];
        const double e = std::exp(s / std::sqrt(double(d)));
        num += (f - e) * (f - e);
        den += e * e;
      }
  }
  EXPECT_NEAR(*m.kernel_rel_error, std::sqrt(num / den), 1e-12);

  // More random features estimate the kernel better.
  in.phi_q = large->query_features(q);
  in.phi_k = large->key_features(k);
  const HeadMetrics better = compute_head_metrics(in);
  EXPECT_LT(*better.kernel_rel_error, 0.5 * *m.kernel_rel_error);

  // Sampled pairs: fixed by the seed, and a different seed draws different pairs.
  in.kernel_pairs = 100;
  in.seed = 1;
  const double a = *compute_head_metrics(in).kernel_rel_error;
  EXPECT_EQ(*compute_head_metrics(in).kernel_rel_error, a);
  in.seed = 2;
  EXPECT_NE(*compute_head_metrics(in).kernel_rel_error, a);
  EXPECT_GT(a, 0.0);
}

TEST(HeadMetrics, OutputErrorAndNonpositiveRowsMatchLoops) {
  const int64_t T = 2, L = 20, d = 6, dv = 5;
  const at::Tensor q = test::seeded_randn({T, L, d}, 15), k = test::seeded_randn({T, L, d}, 16), v = test::seeded_randn({T, L, dv}, 17);
  HeadMetricsInput in;
  in.reference = softmax_map(q, k);
  in.map = elu_map(q, k);
  in.v = v;
  in.raw_row_sums = at::tensor({1.0, 0.0, -2.0, 3.0, 5.0, -1e-9, 2.0, 1.0}, at::kDouble).repeat({5}).narrow(0, 0, T * L).reshape({T, L});
  const HeadMetrics m = compute_head_metrics(in);
  ASSERT_TRUE(m.output_rel_error && m.nonpositive_row_fraction);

  double num = 0, den = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto A = rows_of(in.map, t), R = rows_of(in.reference, t), V = rows_of(v, t);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t c = 0; c < dv; ++c) {
        double y = 0, y_ref = 0;
        for (int64_t j = 0; j <= i; ++j) y += A[i][j] * V[j][c], y_ref += R[i][j] * V[j][c];
        num += (y - y_ref) * (y - y_ref);
        den += y_ref * y_ref;
      }
  }
  EXPECT_NEAR(*m.output_rel_error, std::sqrt(num / den), 1e-12);
  EXPECT_GT(*m.output_rel_error, 0.01);
  // 40 sums from the period-8 pattern {+, 0, -, +, +, -, +, +}: 3 of every 8 are <= 0.
  EXPECT_DOUBLE_EQ(*m.nonpositive_row_fraction, 15.0 / 40.0);
}

TEST(HeadMetrics, RejectsBadInputs) {
  const at::Tensor q = test::seeded_randn({2, 10, 4}, 18), k = test::seeded_randn({2, 10, 4}, 19);
  HeadMetricsInput in;
  in.map = softmax_map(q, k);
  in.q = q;
  EXPECT_THROW(compute_head_metrics(in), Error);  // k missing
  in.k = test::seeded_randn({2, 9, 4}, 20);
  EXPECT_THROW(compute_head_metrics(in), Error);  // wrong L
  in.k = k;
  in.reference = in.map.narrow(1, 0, 5);
  EXPECT_THROW(compute_head_metrics(in), Error);
  in.reference = at::Tensor();
  in.map = -in.map;
  EXPECT_THROW(compute_head_metrics(in), Error);  // negative weights
  EXPECT_THROW(row_entropy(test::seeded_randn({3, 4}, 21)), Error);
  EXPECT_THROW(monotonicity(softmax_map(q, k), scores_of(q, k)[0]), Error);
}

// Kernel pairs are drawn with Rng::below (random.h), whose draws the standard fixes, not with
// std::uniform_int_distribution (implementation-defined): the pairs are reproduced here from
// Rng::below over the causal pairs enumerated in (sequence, i, j) order.
TEST(HeadMetrics, KernelPairsAreRngBelowDraws) {
  const int64_t T = 2, L = 15, d = 4, n = 50;
  const at::Tensor q = test::seeded_randn({T, L, d}, 30, 0.5), k = test::seeded_randn({T, L, d}, 31, 0.5);
  auto phi = make_feature_map(spec("prf", d, 8, 3));
  HeadMetricsInput in;
  in.map = softmax_map(q, k);
  in.q = q;
  in.k = k;
  in.phi_q = phi->query_features(q);
  in.phi_k = phi->key_features(k);
  in.kernel_pairs = n;
  in.seed = 77;
  std::vector<std::array<int64_t, 3>> all;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) all.push_back({t, i, j});
  Rng rng(77);
  double num = 0, den = 0;
  for (int64_t p = 0; p < n; ++p) {
    const auto [t, i, j] = all[rng.below(all.size())];
    double s = 0, f = 0;
    for (int64_t c = 0; c < d; ++c) s += q[t][i][c].item<double>() * k[t][j][c].item<double>();
    for (int64_t m = 0; m < 8; ++m) f += in.phi_q.values[t][i][m].item<double>() * in.phi_k.values[t][j][m].item<double>();
    const double e = std::exp(s / 2.0);  // sqrt(4)
    num += (f - e) * (f - e);
    den += e * e;
  }
  EXPECT_NEAR(*compute_head_metrics(in).kernel_rel_error, std::sqrt(num / den), 1e-12);
}

// q.k / sqrt(d) from about 500 to 1000: exp overflows float64 past 709.8, and the old
// ||K^ - K|| / ||K|| became inf / inf. Features given scaled, phi(x) = exp(|x|^2 / (2 sqrt d)) v(x)
// with signed random v, so that K^ / K = exp(|q - k|^2 / (2 sqrt d)) v(q).v(k) is moderate; the
// reference evaluates the definition directly in long double (range e^11356).
TEST(HeadMetrics, KernelErrorAtHugeScoresMatchesALongDoubleReference) {
  const int64_t L = 12, d = 16, M = 3;
  for (double s_base : {500.0, 750.0, 1000.0}) {
    // Vectors near one base b with b.b / sqrt(d) = s_base; noise of norm ~1.5 moves the scores by
    // tens and keeps |q - k|^2 / (2 sqrt d) of order 1.
    const at::Tensor b = test::seeded_randn({d}, 40);
    const at::Tensor base = b / b.norm() * std::sqrt(s_base * std::sqrt(double(d)));
    const at::Tensor q = (base + test::seeded_randn({1, L, d}, 41, 0.4)), k = (base + test::seeded_randn({1, L, d}, 42, 0.4));
    const at::Tensor vq = test::seeded_randn({1, L, M}, 43), vk = test::seeded_randn({1, L, M}, 44);
    HeadMetricsInput in;
    in.map = softmax_map(q, k);
    in.q = q;
    in.k = k;
    in.phi_q = Features(vq, (q * q).sum(-1, true) / (2 * std::sqrt(double(d))));
    in.phi_k = Features(vk, (k * k).sum(-1, true) / (2 * std::sqrt(double(d))));
    in.kernel_pairs = L * (L + 1) / 2;
    const HeadMetrics m = compute_head_metrics(in);
    ASSERT_TRUE(m.kernel_rel_error.has_value());

    long double num = 0, den = 0, s_min = 1e300L, s_max = -1e300L;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        long double s = 0, qq = 0, kk = 0, dot = 0;
        for (int64_t c = 0; c < d; ++c) {
          const long double a = q[0][i][c].item<double>(), e = k[0][j][c].item<double>();
          s += a * e, qq += a * a, kk += e * e;
        }
        for (int64_t c = 0; c < M; ++c) dot += (long double)vq[0][i][c].item<double>() * vk[0][j][c].item<double>();
        s /= std::sqrt((long double)d);
        s_min = std::min(s_min, s), s_max = std::max(s_max, s);
        const long double exact = std::exp(s), approx = std::exp((qq + kk) / (2 * std::sqrt((long double)d))) * dot;
        num += (approx - exact) * (approx - exact);
        den += exact * exact;
      }
    const double want = double(std::sqrt(num / den));
    EXPECT_GT(double(s_min), s_base - 100) << "scores are where the test means them to be";
    EXPECT_LT(double(s_max), s_base + 100);
    EXPECT_GT(want, 0.01);
    EXPECT_LT(want, 100.0);
    EXPECT_NEAR(*m.kernel_rel_error, want, 1e-9 * want) << "q.k / sqrt d around " << s_base;
  }
}

// Undefined rows (all NaN on j <= i, linear_map's mark for rows without weight) are accepted,
// counted and left out of every row mean; the means over the remaining rows match loops.
TEST(HeadMetrics, UndefinedRowsAreCountedAndExcluded) {
  const int64_t T = 2, L = 12, d = 4, dv = 3;
  const at::Tensor q = test::seeded_randn({T, L, d}, 50), k = test::seeded_randn({T, L, d}, 51), v = test::seeded_randn({T, L, dv}, 52);
  at::Tensor map = elu_map(q, k);
  const std::vector<std::pair<int64_t, int64_t>> undefined = {{0, 0}, {0, 5}, {1, 11}};
  for (auto [t, i] : undefined) map[t][i].narrow(0, 0, i + 1).fill_(NAN);
  HeadMetricsInput in;
  in.map = map;
  in.reference = softmax_map(q, k);
  in.q = q;
  in.k = k;
  in.v = v;
  const HeadMetrics m = compute_head_metrics(in);
  EXPECT_EQ(m.undefined_rows, 3);

  double h = 0, hn = 0, kl = 0, num = 0, den = 0, rows = 0, rows2 = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto A = rows_of(map, t), R = rows_of(in.reference, t), V = rows_of(v, t);
    for (int64_t i = 0; i < L; ++i) {
      if (std::isnan(A[i][0])) continue;
      const double hi = row_entropy_loop(A[i], i + 1);
      h += hi, rows += 1;
      if (i >= 1) hn += hi / std::log(double(i + 1)), rows2 += 1;
      for (int64_t j = 0; j <= i; ++j) kl += R[i][j] * std::log(R[i][j] / A[i][j]);
      for (int64_t c = 0; c < dv; ++c) {
        double y = 0, y_ref = 0;
        for (int64_t j = 0; j <= i; ++j) y += A[i][j] * V[j][c], y_ref += R[i][j] * V[j][c];
        num += (y - y_ref) * (y - y_ref);
        den += y_ref * y_ref;
      }
    }
  }
  EXPECT_EQ(rows, T * L - 3.0);
  EXPECT_NEAR(m.entropy, h / rows, 1e-12);
  EXPECT_NEAR(m.normalized_entropy, hn / rows2, 1e-12);
  ASSERT_TRUE(m.kl && m.output_rel_error && m.monotonicity);
  EXPECT_NEAR(*m.kl, kl / rows, 1e-12);
  EXPECT_NEAR(*m.output_rel_error, std::sqrt(num / den), 1e-12);
  const MonoLoop mono = monotonicity_loop(map, scores_of(q, k));
  EXPECT_NEAR(m.monotonicity->spearman, mono.spearman, 1e-12);
  EXPECT_NEAR(m.monotonicity->discordant_fraction, mono.discordant, 1e-12);

  const at::Tensor h_rows = row_entropy(map);
  for (auto [t, i] : undefined) EXPECT_TRUE(std::isnan(h_rows[t][i].item<double>()));
  EXPECT_EQ(at::isnan(h_rows).sum().item<int64_t>(), 3);

  // No defined row at all: the means are NaN, not a made-up number, and nothing throws.
  in.map = at::where(at::ones({L, L}, at::kBool).tril(), at::full({T, L, L}, NAN, at::kDouble), at::zeros({T, L, L}, at::kDouble));
  const HeadMetrics none = compute_head_metrics(in);
  EXPECT_EQ(none.undefined_rows, T * L);
  EXPECT_TRUE(std::isnan(none.entropy));
  EXPECT_TRUE(std::isnan(*none.kl));
}

// NaN or inf in any input is an Error naming the argument: the numbers would otherwise come out
// finite and wrong (a NaN score sorts arbitrarily; a NaN query gave a finite entropy).
TEST(HeadMetrics, NonFiniteInputsAreErrors) {
  const int64_t T = 2, L = 8, d = 4;
  const at::Tensor q = test::seeded_randn({T, L, d}, 60), k = test::seeded_randn({T, L, d}, 61), v = test::seeded_randn({T, L, 2}, 62);
  auto phi = make_feature_map(spec("elu", d));
  HeadMetricsInput good;
  good.map = elu_map(q, k);
  good.reference = softmax_map(q, k);
  good.q = q;
  good.k = k;
  good.v = v;
  good.phi_q = phi->query_features(q);
  good.phi_k = phi->key_features(k);
  good.raw_row_sums = at::ones({T, L}, at::kDouble);
  ASSERT_NO_THROW(compute_head_metrics(good));
  auto poisoned = [](const at::Tensor& t, double x) {
    at::Tensor b = t.clone();
    b.view({-1})[5] = x;
    return b;
  };
  for (double x : {NAN, INFINITY}) {
    const std::string sx = std::isnan(x) ? "NaN" : "inf";
    std::vector<std::pair<std::string, HeadMetricsInput>> cases;
    for (const char* what : {"q", "k", "v", "reference", "raw_row_sums", "phi_q", "map"}) {
      HeadMetricsInput in = good;
      const std::string w = what;
      if (w == "q") in.q = poisoned(q, x);
      if (w == "k") in.k = poisoned(k, x);
      if (w == "v") in.v = poisoned(v, x);
      if (w == "reference") {
        in.reference = good.reference.clone();
        in.reference[0][6][3] = x;
      }
      if (w == "raw_row_sums") in.raw_row_sums = poisoned(good.raw_row_sums, x);
      if (w == "phi_q") in.phi_q = poisoned(good.phi_q.values, x);
      if (w == "map") {  // one causal entry of a row that is otherwise defined
        in.map = good.map.clone();
        in.map[1][4][2] = x;
      }
      const std::string msg = test::error_of([&] { compute_head_metrics(in); });
      EXPECT_NE(msg.find(w + " has non-finite"), std::string::npos) << sx << " in " << w << ": " << msg;
    }
    at::Tensor scores = scores_of(q, k);
    scores[0][6][2] = x;
    std::string msg = test::error_of([&] { monotonicity(good.map, scores); });
    EXPECT_NE(msg.find("scores has non-finite"), std::string::npos) << msg;
    at::Tensor map = good.map.clone();
    map[0][3][1] = x;
    msg = test::error_of([&] { row_entropy(map); });
    EXPECT_NE(msg.find("map has non-finite"), std::string::npos) << msg;
    msg = test::error_of([&] { monotonicity(map, scores_of(q, k)); });
    EXPECT_NE(msg.find("map has non-finite"), std::string::npos) << msg;
  }
}

}  // namespace test_head_metrics
