// Distances of attention maps to the structured mixers of paper 003, each checked against a value
// the test computes on its own: members of each class come back at ~0; the exact projections
// (Toeplitz, RetNet decay) agree with plain loops and with hand-computed cases; on 3x3 and 4x4
// matrices the fits match a brute-force search (multi-start Nelder-Mead over the nonlinear
// parameters, the linear ones in closed form) and the semi-separable distance matches its closed
// form; on larger maps every fitted distance lies between an Eckart-Young lower bound (a block
// strictly below the diagonal has rank <= N in every member) and a member built here.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/attention/attention.h"
#include "attnscope/analysis/structured_mixers.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_structured_mixers {

using namespace attnscope;

namespace {

at::Tensor rand_t(std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return lo + (hi - lo) * at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble));
}

// A softmax map with content (random q, k) and, when `slope` > 0, an ALiBi-like recency bias.
at::Tensor attention_map(int64_t L, int64_t d, uint64_t seed, double slope = 0.0) {
  const at::Tensor q = test::seeded_randn({L, d}, seed), k = test::seeded_randn({L, d}, seed + 1000);
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

// ||A||_F^2 over the causal part (j <= i).
double causal_norm2(const std::vector<std::vector<double>>& a) {
  double n2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j <= i; ++j) n2 += a[i][j] * a[i][j];
  return n2;
}

// Relative distance to the Toeplitz class by loops: every diagonal against its own mean.
double toeplitz_by_loops(const std::vector<std::vector<double>>& a) {
  const int64_t L = int64_t(a.size());
  double e2 = 0;
  for (int64_t k = 0; k < L; ++k) {
    double mean = 0;
    for (int64_t i = k; i < L; ++i) mean += a[i][i - k] / double(L - k);
    for (int64_t i = k; i < L; ++i) e2 += (a[i][i - k] - mean) * (a[i][i - k] - mean);
  }
  return std::sqrt(e2 / causal_norm2(a));
}

// Relative error of the best c gamma^{i-j} for one gamma (c in closed form), by loops.
double retnet_error_by_loops(const std::vector<std::vector<double>>& a, double gamma) {
  const int64_t L = int64_t(a.size());
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
  return std::sqrt(e2 / causal_norm2(a));
}

// Eckart-Young lower bound on the relative distance to any causal matrix whose block rows
// [row0, L) x columns [0, col_end) (strictly below the diagonal: row0 >= col_end) has rank <= n:
// the singular values of A's block beyond the n-th.
double block_lower_bound(const at::Tensor& A, int64_t row0, int64_t col_end, int64_t n) {
  const int64_t L = A.size(0);
  const at::Tensor Ad = A.to(at::kDouble).tril();
  const at::Tensor s = at::linalg_svdvals(Ad.narrow(0, row0, L - row0).narrow(1, 0, col_end));
  const double tail = n < s.size(0) ? s.narrow(0, n, s.size(0) - n).pow(2).sum().item<double>() : 0.0;
  return std::sqrt(tail / Ad.pow(2).sum().item<double>());
}

// Relative distance of a member of causal_low_rank (and so of ssd and ssd_d, with every a_m =
// 1 and D = 0) built here: tril of the rank-n truncated SVD of tril(A).
double truncated_svd_member(const at::Tensor& A, int64_t n) {
  const at::Tensor Ad = A.to(at::kDouble).tril();
  const auto [U, S, Vh] = at::linalg_svd(Ad, /*full_matrices=*/false);
  const at::Tensor P = at::matmul(U.narrow(1, 0, n) * S.narrow(0, 0, n), Vh.narrow(0, 0, n)).tril();
  return std::sqrt((Ad - P).pow(2).sum().item<double>() / Ad.pow(2).sum().item<double>());
}

// Checks of a map's distances against values computed here, for any size: the Toeplitz distance
// by loops; RetNet at least as good as a grid over gamma and no better than Toeplitz (the loops'
// value; RetNet members are Toeplitz); every class with state n between the block lower bound and
// the truncated-SVD member.
void expect_independent_bounds(const at::Tensor& A, const MixerDistances& m, int64_t n, int grid = 2000) {
  const auto a = to_rows(A);
  const int64_t L = A.size(0);
  const double toeplitz = toeplitz_by_loops(a);
  EXPECT_NEAR(m.toeplitz, toeplitz, 1e-12);
  double grid_best = 1e300;
  for (int g = 0; g <= grid; ++g) grid_best = std::min(grid_best, retnet_error_by_loops(a, double(g) / grid));
  EXPECT_LE(m.retnet, grid_best + 1e-12);
  EXPECT_GE(m.retnet, toeplitz - 1e-12);

  // Fitted members are tril(G (.) C B^T) (+ D I): every block strictly below the diagonal has rank
  // <= n. The widest such block (rows L/2.., columns ..L/2) gives the strongest bound.
  const double fitted_lb = block_lower_bound(A, L / 2, L / 2, n);
  // The semi-separable sweep truncates its blocks in order and later truncations can change earlier
  // blocks; its last truncated block (rows L-n-1.., columns ..L-n-1) is left with rank <= n.
  const double sweep_lb = L - n - 1 >= 1 ? block_lower_bound(A, L - n - 1, L - n - 1, n) : 0.0;
  const double member = truncated_svd_member(A, std::min(n, L));
  for (double v : {m.causal_low_rank, m.ssd, m.ssd_d}) {
    EXPECT_GE(v, fitted_lb - 1e-12);
    EXPECT_LE(v, member + 1e-12);
  }
  EXPECT_GE(m.semiseparable, std::min(fitted_lb, sweep_lb) - 1e-12);
  EXPECT_LE(m.semiseparable, member + 1e-12);
}

}  // namespace

TEST(StructuredMixers, ToeplitzMatrixIsToeplitz) {
  const int64_t L = 48;
  const auto t = to_rows(rand_t({1, L}, 1, 0.1, 1.0))[0];
  at::Tensor A = at::zeros({L, L}, at::kDouble);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) A[i][j] = t[i - j];
  A = A + at::triu(test::seeded_randn({L, L}, 2), 1);  // the part above the diagonal is ignored
  const MixerDistances m = mixer_distances(A, {8, 50, 1e-8});
  EXPECT_EQ(m.state_size, 8);
  EXPECT_LT(m.toeplitz, 1e-12);
  EXPECT_GT(m.retnet, 0.05);  // random diagonals are no geometric decay
  expect_independent_bounds(A, m, 8);
}

TEST(StructuredMixers, ToeplitzAndRetNetMatchLoopsOnAMap) {
  const int64_t L = 40;
  const at::Tensor A = attention_map(L, 8, 3, 0.3);
  const MixerDistances m = mixer_distances(A, {4, 20, 1e-8});
  const auto a = to_rows(A);
  const double norm2 = causal_norm2(a);

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
    best = std::min(best, retnet_error_by_loops(a, gamma));
  }
  EXPECT_LE(m.retnet, best + 1e-12);
  EXPECT_GT(m.retnet, best - 1e-4);  // and the grid gets close to it
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
  const at::Tensor U = test::seeded_randn({L, N}, 4), V = test::seeded_randn({L, N}, 5);
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
  const at::Tensor A = ssd_matrix(test::seeded_randn({L, N}, 6), test::seeded_randn({L, N}, 7), to_rows(rand_t({1, L}, 8, 0.9, 1.0))[0]);
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
  const at::Tensor A = ssd_matrix(test::seeded_randn({L, N}, 10), test::seeded_randn({L, N}, 11), a);
  const MixerDistances m = mixer_distances(A, {N, 50, 1e-10});
  EXPECT_GT(m.causal_low_rank, 0.5);
  EXPECT_GT(m.retnet, 0.5);
  EXPECT_LT(m.ssd, 0.3 * m.causal_low_rank);  // a local search: 0.14 vs 0.74 here
  EXPECT_LT(m.semiseparable, 1e-10);
}

// ------------------------------------------------------------------------------------------------
// Hand-computed cases and brute force on tiny matrices.

TEST(StructuredMixers, ToeplitzOfAHandMatrix) {
  // Diagonal means 10/3, 7/2, 4: residual (1-10/3)^2 + (3-10/3)^2 + (6-10/3)^2 + 2 (3/2)^2 = 103/6
  // against ||A||^2 = 91. The entries above the diagonal are ignored.
  const at::Tensor A = at::tensor({1.0, 9.0, 9.0, 2.0, 3.0, 9.0, 4.0, 5.0, 6.0}, at::kDouble).view({3, 3});
  const MixerDistances m = mixer_distances(A, {1, 50, 1e-10});
  EXPECT_NEAR(m.toeplitz, std::sqrt((103.0 / 6.0) / 91.0), 1e-15);
}

TEST(StructuredMixers, RetNetOfTwoByTwoIsClosedForm) {
  // A = [[p, 0], [q, s]] against c [[1, 0], [gamma, 1]]: error (p-c)^2 + (s-c)^2 + (q - c gamma)^2.
  auto retnet = [](double p, double q, double s) {
    return mixer_distances(at::tensor({p, 0.0, q, s}, at::kDouble).view({2, 2}), {1, 50, 1e-10}).retnet;
  };
  // q / c inside [0, 1] at c = (p+s)/2 = 3/2: gamma = 1/3 fits q exactly, error (p-s)^2/2 = 1/2.
  EXPECT_NEAR(retnet(1.0, 0.5, 2.0), std::sqrt(0.5 / 5.25), 1e-9);
  // q larger than any c gamma can reach: gamma = 1, c = (p+q+s)/3 = 5/3, error 8/3 of ||A||^2 = 11.
  EXPECT_NEAR(retnet(1.0, 3.0, 1.0), std::sqrt((8.0 / 3.0) / 11.0), 1e-9);
  // q < 0, which c gamma >= 0 cannot follow: gamma = 0, c = 1, error q^2 = 1/4 of 9/4.
  EXPECT_NEAR(retnet(1.0, -0.5, 1.0), 1.0 / 3.0, 1e-9);
}

namespace {

// Nelder-Mead from x0 (initial simplex x0 + scale e_k), restarted from its result until a restart no
// longer improves; returns the smallest value found.
template <typename F>
double nelder_mead(F&& f, std::vector<double> x0, double scale) {
  const std::size_t n = x0.size();
  double best = f(x0);
  for (int restart = 0; restart < 20; ++restart) {
    std::vector<std::vector<double>> p(n + 1, x0);
    for (std::size_t k = 0; k < n; ++k) p[k + 1][k] += scale;
    std::vector<double> fv(n + 1);
    for (std::size_t k = 0; k <= n; ++k) fv[k] = f(p[k]);
    for (int it = 0; it < 4000; ++it) {
      std::vector<std::size_t> o(n + 1);
      for (std::size_t k = 0; k <= n; ++k) o[k] = k;
      std::sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) { return fv[a] < fv[b]; });
      const std::size_t lo = o[0], hi = o[n], next = o[n - 1];
      if (fv[hi] - fv[lo] <= 1e-15 * fv[lo] + 1e-30) break;  // f >= 0 here
      std::vector<double> c(n, 0.0);
      for (std::size_t k = 0; k <= n; ++k)
        if (k != hi)
          for (std::size_t d = 0; d < n; ++d) c[d] += p[k][d] / double(n);
      auto along = [&](double t) {
        std::vector<double> x(n);
        for (std::size_t d = 0; d < n; ++d) x[d] = c[d] + t * (p[hi][d] - c[d]);
        return x;
      };
      const std::vector<double> xr = along(-1.0);
      const double fr = f(xr);
      if (fr < fv[lo]) {
        const std::vector<double> xe = along(-2.0);
        const double fe = f(xe);
        if (fe < fr) p[hi] = xe, fv[hi] = fe; else p[hi] = xr, fv[hi] = fr;
      } else if (fr < fv[next]) {
        p[hi] = xr, fv[hi] = fr;
      } else {
        const std::vector<double> xc = along(fr < fv[hi] ? -0.5 : 0.5);
        const double fc = f(xc);
        if (fc < std::min(fr, fv[hi])) {
          p[hi] = xc, fv[hi] = fc;
        } else {
          for (std::size_t k = 0; k <= n; ++k) {
            if (k == lo) continue;
            for (std::size_t d = 0; d < n; ++d) p[k][d] = p[lo][d] + 0.5 * (p[k][d] - p[lo][d]);
            fv[k] = f(p[k]);
          }
        }
      }
    }
    const std::size_t lo = std::min_element(fv.begin(), fv.end()) - fv.begin();
    const bool improved = fv[lo] < best - 1e-15 * best - 1e-30;
    best = std::min(best, fv[lo]);
    x0 = p[lo];
    scale *= 0.5;
    if (!improved && restart > 2) break;
  }
  return best;
}

// The smallest value of f over many seeded random starts in [-2, 2]^dim.
template <typename F>
double multistart(F&& f, std::size_t dim, int starts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  double best = 1e300;
  for (int s = 0; s < starts; ++s) {
    std::vector<double> x(dim);
    for (double& v : x) v = u(rng);
    best = std::min(best, nelder_mead(f, x, 0.5));
  }
  return best;
}

// Squared error of the best P_ij = c_i w(i, j) (+ D on the diagonal) over c, for weights w on the
// causal part: each row is a one-variable least-squares problem, c_i = <Y_i, w_i> / ||w_i||^2.
template <typename W>
double rowwise_error2(const std::vector<std::vector<double>>& a, W&& w, double D) {
  double e2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double yy = 0, yw = 0, ww = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      const double y = a[i][j] - (i == j ? D : 0.0), wij = w(i, j);
      yy += y * y;
      yw += y * wij;
      ww += wij * wij;
    }
    e2 += ww > 0 ? yy - yw * yw / ww : yy;
  }
  return std::max(e2, 0.0);
}

// Brute force over tril(u v^T), state 1: v free (u in closed form per row).
double brute_low_rank1(const std::vector<std::vector<double>>& a, uint64_t seed) {
  auto f = [&](const std::vector<double>& v) {
    return rowwise_error2(a, [&](std::size_t, std::size_t j) { return v[j]; }, 0.0);
  };
  return std::sqrt(multistart(f, a.size(), 30, seed) / causal_norm2(a));
}

// Brute force over SSD of state 1: P_ij = c_i b_j prod_{m=j+1..i} a_m (+ D I with `skip`), with
// a_m = sin^2(t_m) in [0, 1]; the free parameters are t (L-1), b (L) and D, c in closed form.
double brute_ssd1(const std::vector<std::vector<double>>& a, bool skip, uint64_t seed) {
  const std::size_t L = a.size();
  auto f = [&](const std::vector<double>& x) {
    auto w = [&](std::size_t i, std::size_t j) {
      double g = x[L - 1 + j];  // b_j
      for (std::size_t m = j + 1; m <= i; ++m) g *= std::sin(x[m - 1]) * std::sin(x[m - 1]);
      return g;
    };
    return rowwise_error2(a, w, skip ? x[2 * L - 1] : 0.0);
  };
  return std::sqrt(multistart(f, 2 * L - 1 + (skip ? 1 : 0), 40, seed) / causal_norm2(a));
}

}  // namespace

TEST(StructuredMixers, TinyFitsMatchBruteForce) {
  // The fits are local searches with slow stretches; on 3x3 with state 1, enough rounds reach the
  // optimum of every fitted class.
  for (uint64_t seed : {20, 21, 22}) {
    const at::Tensor A = test::seeded_randn({3, 3}, seed).tril();
    const auto a = to_rows(A);
    const MixerDistances m = mixer_distances(A, {1, 1200, 0.0});
    EXPECT_NEAR(m.causal_low_rank, brute_low_rank1(a, seed), 1e-6) << "seed " << seed;
    EXPECT_NEAR(m.ssd, brute_ssd1(a, false, seed), 1e-6) << "seed " << seed;
    EXPECT_NEAR(m.ssd_d, brute_ssd1(a, true, seed), 1e-6) << "seed " << seed;
  }
  // On 4x4 the low-rank ALS can stay above the optimum for long (seed 20: 0.21153 after 200
  // sweeps, 0.20984 after 2000, 0.20960 after 20000, against 0.20940), but never goes below it:
  // its value is the error of an actual member.
  for (uint64_t seed : {20, 21}) {
    const at::Tensor A = test::seeded_randn({4, 4}, seed).tril();
    const MixerDistances m = mixer_distances(A, {1, 500, 0.0});
    const double brute = brute_low_rank1(to_rows(A), seed);
    EXPECT_GE(m.causal_low_rank, brute - 1e-9) << "seed " << seed;
    EXPECT_LE(m.causal_low_rank, brute + 3e-3) << "seed " << seed;
  }
  // With state L-1 = 2 every causal 3x3 is reached: the entries above the diagonal of a rank-2
  // completion are free, and det = 0 is one equation in them.
  const MixerDistances full = mixer_distances(test::seeded_randn({3, 3}, 23).tril(), {2, 200, 1e-14});
  EXPECT_LT(full.causal_low_rank, 1e-6);
}

TEST(StructuredMixers, SemiseparableOfFourByFourIsClosedForm) {
  // With N = 1 and L = 4 the sweep truncates one block, rows 2..3 x columns 0..1, to rank 1; every
  // other block strictly below the diagonal is a single row or column. So the distance to the
  // class is exactly the block's second singular value, s2^2 = (F - sqrt(F^2 - 4 det^2)) / 2 with
  // F its squared norm, and the fitted classes (members too) cannot beat it.
  for (uint64_t seed : {40, 41, 42}) {
    const at::Tensor A = test::seeded_randn({4, 4}, seed).tril();
    const auto a = to_rows(A);
    const double p = a[2][0], q = a[2][1], r = a[3][0], s = a[3][1];
    const double F = p * p + q * q + r * r + s * s, det = p * s - q * r;
    const double s2sq = 0.5 * (F - std::sqrt(F * F - 4 * det * det));
    const MixerDistances m = mixer_distances(A, {1, 50, 1e-10});
    EXPECT_NEAR(m.semiseparable, std::sqrt(s2sq / causal_norm2(a)), 1e-12) << "seed " << seed;
    // And with that block made rank 1 (s := q r / p) the matrix is in the class.
    at::Tensor B = A.clone();
    B[3][1] = q * r / p;
    EXPECT_LT(mixer_distances(B, {1, 50, 1e-10}).semiseparable, 1e-12) << "seed " << seed;
  }
  // With L = 3 and N = 1 every block strictly below the diagonal is a row or a column: distance 0.
  EXPECT_LT(mixer_distances(test::seeded_randn({3, 3}, 43).tril(), {1, 50, 1e-10}).semiseparable, 1e-12);
}

TEST(StructuredMixers, SsdPlusSkipIsSsdSkip) {
  // An SSD matrix plus D I is a member of ssd_d; SSD's diagonal, tied to C_i.B_i, cannot take D.
  // (Local searches: with D = 3, several times the entries, ssd_d can stay far from 0.)
  const int64_t L = 32, N = 2;
  for (uint64_t seed : {50, 60}) {
    const at::Tensor S =
        ssd_matrix(test::seeded_randn({L, N}, seed), test::seeded_randn({L, N}, seed + 1), to_rows(rand_t({1, L}, seed + 2, 0.9, 1.0))[0]);
    for (double D : {0.3, 1.0}) {
      const MixerDistances m = mixer_distances(S + D * at::eye(L, at::kDouble), {N, 50, 1e-8});
      EXPECT_LT(m.ssd_d, 1e-4) << seed << " " << D;
      EXPECT_GT(m.ssd, 0.04) << seed << " " << D;
    }
  }
}

TEST(StructuredMixers, SsdApproachesASingleCut) {
  // An SSD matrix of state 1 with every a_m = 1 except one cut (a_16 = 0): its distance is 0, and
  // no constant decay (the SSD fit's starting points) or low-rank member comes close. The rate
  // steps get there, slowly: 0.0097 and 0.0121 after 300 rounds here, about twice that without
  // them (0.0193, 0.0192), while causal_low_rank stays at 0.65 and 0.59.
  const int64_t L = 32;
  std::vector<double> a(L, 1.0);
  a[L / 2] = 0.0;
  for (uint64_t seed : {60, 61}) {
    const at::Tensor A = ssd_matrix(test::seeded_randn({L, 1}, seed), test::seeded_randn({L, 1}, seed + 100), a);
    const MixerDistances m = mixer_distances(A, {1, 300, 0.0});
    EXPECT_LT(m.ssd, 0.015) << seed;
    EXPECT_GT(m.causal_low_rank, 0.5) << seed;
  }
}

TEST(StructuredMixers, RandomSoftmaxMapsLieWithinIndependentBounds) {
  for (uint64_t seed : {10, 11, 12}) {
    for (double slope : {0.0, 0.5}) {
      const at::Tensor A = attention_map(64, 16, seed, slope);
      const MixerDistances m = mixer_distances(A, {16, 50, 1e-8});
      expect_all_in_unit_interval(m);
      expect_independent_bounds(A, m, 16);
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

// A realistic size (L = 256, N = 16): every distance in (0, 1] and within the independent bounds.
// Its speed is measured by tests/bench/bench_analysis.cpp, not here.
TEST(StructuredMixers, Length256State16LiesWithinIndependentBounds) {
  const at::Tensor A = attention_map(256, 64, 14, 0.05);
  const MixerDistances m = mixer_distances(A, {16, 50, 1e-8});
  expect_all_in_unit_interval(m);
  expect_independent_bounds(A, m, 16, 400);
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

}  // namespace test_structured_mixers

namespace test_structured_mixers {

using namespace attnscope;

// The window class (the last W keys exact, an SSD member of state N beyond): a map built here as a
// random band plus an SSD matrix (plain loops) at lags >= W is a member and comes back at ~0, while
// the band puts it far from SSD itself; every distance lies between the Eckart-Young bound of a block
// entirely beyond the window (rank <= N in every member) and the zero member beyond the window; the
// ends: W = 0 is not measured, W >= L keeps every key.
TEST(StructuredMixers, TheWindowClassKeepsTheLastWKeysExact) {
  const int64_t L = 64, N = 2, W = 8;
  const at::Tensor ssd = ssd_matrix(test::seeded_randn({L, N}, 21), test::seeded_randn({L, N}, 22),
                                    to_rows(rand_t({1, L}, 23, 0.85, 1.0))[0]);
  const at::Tensor band = rand_t({L, L}, 24, 0.0, 1.0).tril() - rand_t({L, L}, 24, 0.0, 1.0).tril(-W);
  const at::Tensor A = ssd.tril(-W) + band;
  MixerFitOptions o{N, 50, 1e-10};
  o.window = W;
  const MixerDistances m = mixer_distances(A, o);
  EXPECT_EQ(m.window_size, W);
  EXPECT_LT(m.window, 1e-4);
  EXPECT_GT(m.ssd, 0.1) << "the random band is far from any SSD member";

  // Softmax maps, with and without recency: between the bounds, and never above SSD's own fit by
  // more than a local search's slack (the SSD member is a window member too).
  for (double slope : {0.0, 0.3}) {
    SCOPED_TRACE(slope);
    const at::Tensor S = attention_map(48, 8, 31, slope);
    o.state_size = 4;
    const MixerDistances s = mixer_distances(S, o);
    const at::Tensor beyond = S.tril(-W);
    const double norm = std::sqrt(S.pow(2).sum().item<double>());
    EXPECT_LE(s.window, std::sqrt(beyond.pow(2).sum().item<double>()) / norm + 1e-12);
    const int64_t row0 = 24;
    const at::Tensor block = beyond.narrow(0, row0, 48 - row0).narrow(1, 0, row0 - W + 1);
    const at::Tensor sv = at::linalg_svdvals(block);
    const double lb = std::sqrt(sv.narrow(0, 4, sv.size(0) - 4).pow(2).sum().item<double>()) / norm;
    EXPECT_GE(s.window, lb - 1e-12);
    EXPECT_LE(s.window, s.ssd + 0.02);
  }

  o.window = 0;
  const MixerDistances none = mixer_distances(A, o);
  EXPECT_EQ(none.window_size, 0);
  EXPECT_TRUE(std::isnan(none.window));
  o.window = L;
  EXPECT_EQ(mixer_distances(A, o).window, 0.0);
  o.window = -1;
  EXPECT_THROW(mixer_distances(A, o), Error);
}

}  // namespace test_structured_mixers
