// The certified DoF fast path (block Krylov Ritz values + trace, dof.h) and the batched layer
// spectra. References: closed forms, spectra built as U diag(mu) U^T with a known mu, brute-force
// search over the feasible spectra, and Eigen's eigenvalues (not core's LAPACK path).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "attnscope/capture/capture.h"
#include "attnscope/base/device.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model.h"
#include "attnscope/io/text_source.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_dof_fast {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

constexpr double kEps = 2.220446049250313e-16;

double f(double mu, double t) { return mu / (mu + t); }

// A hand-built fast-path spectrum: Ritz values theta (descending), trace T, J eigenvalues, ridge t
// (log scale 0), resolution 0 (nothing dropped).
HeadSpectrum ritz_spectrum(std::vector<double> theta, double trace, int64_t J) {
  HeadSpectrum sp;
  sp.eigenvalues = std::move(theta);
  sp.trace = trace;
  sp.samples = J;
  sp.exact = false;
  return sp;
}

// The symmetric matrix U diag(mu) U^T with a Haar-random orthogonal U (QR of a Gaussian matrix).
at::Tensor with_spectrum(const std::vector<double>& mu, uint64_t seed) {
  const int64_t J = int64_t(mu.size());
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor u = std::get<0>(at::linalg_qr(at::randn({J, J}, gen, at::kDouble)));
  const at::Tensor g = at::matmul(u * at::tensor(mu, at::kDouble).unsqueeze(0), u.t());
  return ((g + g.t()) / 2).contiguous();
}

// DoF of Sigma = G / tr G from G's known eigenvalues mu, in long double.
double dof_of(const std::vector<double>& mu, double lambda) {
  long double total = 0, s = 0;
  for (double m : mu) total += m;
  for (double m : mu) s += (m / total) / (m / total + lambda);
  return double(s);
}

// Spectra of J = 240 with the shapes that stress the bounds.
std::vector<std::pair<std::string, std::vector<double>>> synthetic_spectra() {
  const int J = 240;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::pair<std::string, std::vector<double>>> out;
  std::vector<double> fast, slow, clustered, dominant, identity;
  for (int i = 0; i < J; ++i) {
    fast.push_back(std::pow(0.8, i));
    slow.push_back(1.0 / (1.0 + i));
    clustered.push_back(i < 10 ? 1.0 : i < 40 ? 0.01 : i < 100 ? 1e-4 : 1e-9);
    dominant.push_back(i == 0 ? 1.0 : 1e-7 * u(rng));
    identity.push_back(1.0 + 1e-3 * u(rng));
  }
  out = {{"fast decay", fast}, {"slow decay", slow}, {"clustered", clustered}, {"one dominant", dominant}, {"near identity", identity}};
  return out;
}

DofSettings fast_settings(int64_t block, double tolerance) {
  DofSettings s;
  s.exact_limit = 0;
  s.block = block;
  s.top_k = block;  // below J: the fast path; with a huge tolerance it stops at one block
  s.tolerance = tolerance;
  return s;
}


std::string capture_of(const std::string& model, int seq_len, const std::string& tag) {
  LoadedModel m = load_model(model);
  const std::string dir = test::temp_dir(tag) + "/store";
  CaptureOptions o;
  o.seq_len = seq_len, o.num_seqs = 2, o.seed = 5, o.batch = 2;
  capture_to_dir(m, test::sample_documents(), o, dir);
  return dir;
}

}  // namespace

// The formulas of dof.h on spectra small enough to check by hand, and against a brute-force search
// over the feasible set S = {mu_i >= theta_i, mu >= 0, sum mu = T} for J = 3.
TEST(DofFast, BoundFormulasClosedForm) {
  const double t = 0.05;
  {
    // theta = (0.5, 0.2), T = 1, J = 10: leftover 0.3 piled on 0.5 (lower); water level
    // tau = 0.3 / 8 = 0.0375 below both theta (upper).
    const DofValue v = dof_at(ritz_spectrum({0.5, 0.2}, 1.0, 10), t);
    EXPECT_NEAR(v.lower, f(0.5, t) + f(0.2, t) + f(0.8, t) - f(0.5, t), 1e-12);
    EXPECT_NEAR(v.upper, f(0.5, t) + f(0.2, t) + 8 * f(0.0375, t), 1e-12);
    EXPECT_DOUBLE_EQ(v.value, 0.5 * (v.lower + v.upper));
  }
  {
    // theta = (0.5, 0.01), T = 1, J = 3: the water rises above 0.01: tau = 0.5 / 2 = 0.25.
    const DofValue v = dof_at(ritz_spectrum({0.5, 0.01}, 1.0, 3), t);
    EXPECT_NEAR(v.lower, f(0.99, t) + f(0.01, t), 1e-12);
    EXPECT_NEAR(v.upper, f(0.5, t) + 2 * f(0.25, t), 1e-12);
    // Brute force: every feasible spectrum on a grid stays inside, and the grid gets close to both.
    double lo = 1e300, hi = -1e300;
    const int n = 400;
    for (int a = 0; a <= n; ++a)
      for (int b = 0; b <= n - a; ++b) {
        const double extra1 = 0.49 * a / n, extra2 = 0.49 * b / n, mu3 = 0.49 - extra1 - extra2;
        if (mu3 < 0) continue;
        const double s = f(0.5 + extra1, t) + f(0.01 + extra2, t) + f(mu3, t);
        lo = std::min(lo, s), hi = std::max(hi, s);
      }
    EXPECT_GE(lo, v.lower - 1e-12);
    EXPECT_LE(hi, v.upper + 1e-12);
    EXPECT_NEAR(lo, v.lower, 1e-9);
    EXPECT_NEAR(hi, v.upper, 1e-3);  // the grid misses tau = 0.25 by at most a step
  }
  {
    // With the sum of squares F = 0.38 (e.g. the spectrum 0.5, 0.3, 0.2): the leftover 0.5 cannot
    // all sit on the top eigenvalue (1^2 > 0.38), so the lower bound rises above the piled-up one,
    // and stays below every feasible spectrum of a grid (Sigma mu^2 <= F).
    HeadSpectrum sp = ritz_spectrum({0.5}, 1.0, 3);
    const double piled = dof_at(sp, t).lower;
    sp.sum_squares = 0.38;
    const DofValue v = dof_at(sp, t);
    EXPECT_GT(v.lower, piled + 0.1);
    double lo = 1e300;
    const int n = 500;
    for (int a = 0; a <= n; ++a)
      for (int b = 0; b <= n - a; ++b) {
        const double mu1 = 0.5 + 0.5 * a / n, mu2 = 0.5 * b / n, mu3 = 1.0 - mu1 - mu2;
        if (mu3 < 0 || mu1 * mu1 + mu2 * mu2 + mu3 * mu3 > 0.38) continue;
        lo = std::min(lo, f(mu1, t) + f(mu2, t) + f(mu3, t));
      }
    EXPECT_LE(v.lower, lo + 1e-12);
    EXPECT_GE(v.upper, lo);
  }
  {
    // All J Ritz values and no leftover: the exact DoF (up to the trace's rounding margin).
    const DofValue v = dof_at(ritz_spectrum({0.6, 0.3, 0.1}, 1.0, 3), t);
    const double exact = f(0.6, t) + f(0.3, t) + f(0.1, t);
    EXPECT_NEAR(v.lower, exact, 1e-12);
    EXPECT_NEAR(v.upper, exact, 1e-12);
  }
  {
    // Under the resolution (t < res), the leftover mass can hide below res in the 98 others:
    // 98 * res = 0.098 > 0.05 left, so nothing is piled up; at most 0.05 / res = 50 more count.
    HeadSpectrum sp = ritz_spectrum({0.5, 0.45}, 1.0, 100);
    sp.resolution = 1e-3;
    const double tiny = 1e-6;
    const DofValue v = dof_at(sp, tiny);
    EXPECT_NEAR(v.lower, f(0.5, tiny) + f(0.45, tiny), 1e-12);
    EXPECT_NEAR(v.upper, 2 + 50, 1e-9);
    EXPECT_EQ(unresolved_count(sp, tiny), 98);
  }
}

// Certified: lower <= exact <= upper on known spectra, for subspaces far too small to converge
// (tolerance 1e300 stops after the first block), at lambdas from far below to far above the spectrum.
TEST(DofFast, BoundsBracketTheExactDofOnSyntheticSpectra) {
  for (const auto& [name, mu] : synthetic_spectra()) {
    const at::Tensor g = with_spectrum(mu, 11);
    for (int64_t block : {1, 4, 16, 64}) {
      const HeadSpectrum sp = spectrum_of_gram(g, fast_settings(block, 1e300));
      ASSERT_FALSE(sp.exact) << name;
      ASSERT_EQ(int64_t(sp.eigenvalues.size()), block) << name;
      double total = 0;
      for (double m : mu) total += m;
      std::vector<double> sorted = mu;
      std::sort(sorted.rbegin(), sorted.rend());
      for (int64_t i = 0; i < block; ++i)  // interlacing, in Sigma's units
        EXPECT_LE(sp.eigenvalues[i], sorted[i] / total * (1 + 1e-12)) << name << " block " << block << " i " << i;
      for (double lambda : {1e-9, 1e-6, 1e-4, std::pow(2.0, -8), 0.1, 10.0}) {
        const double exact = dof_of(mu, lambda);
        // G = U diag(mu) U^T is itself rounded: its eigenvalues are mu to ~J eps mu_max.
        const double slack = 1e-12 * exact + 8 * 240 * kEps * (sorted[0] / total) / lambda;
        const DofValue v = dof_at(sp, lambda);
        EXPECT_LE(v.lower, exact + slack) << name << " block " << block << " lambda " << lambda;
        EXPECT_GE(v.upper, exact - slack) << name << " block " << block << " lambda " << lambda;
        EXPECT_LE(v.lower, v.upper);
      }
    }
  }
}

// Random PSD Grams and exp Grams of random vectors, every normalization, against Eigen's spectrum.
TEST(DofFast, BoundsBracketTheExactDofOnRandomGrams) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t J = 50 + 37 * trial, r = 3 + 9 * trial;
    at::Generator gen = at::detail::createCPUGenerator(trial);
    at::Tensor g;
    double c = 0;
    if (trial % 2 == 0) {
      const at::Tensor a = at::randn({J, r}, gen, at::kDouble);
      g = at::matmul(a, a.t()).contiguous();
    } else {
      g = shifted_gram(at::randn({J, 8}, gen, at::kDouble) * (0.5 + trial), &c);
    }
    Eigen::Map<const Eigen::MatrixXd> G(g.data_ptr<double>(), J, J);
    const Eigen::VectorXd e = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(G, Eigen::EigenvaluesOnly).eigenvalues();
    for (DofNormalize mode : {DofNormalize::Trace, DofNormalize::Max, DofNormalize::Samples, DofNormalize::None}) {
      DofSettings s = fast_settings(1 + trial * 3, 1e300);
      s.normalize = mode;
      const HeadSpectrum sp = spectrum_of_gram(g, s, c);
      // max divides by the largest eigenvalue, which a Ritz value only bounds from below: exact.
      ASSERT_EQ(sp.exact, mode == DofNormalize::Max);
      DofSettings ex = s;
      ex.exact_limit = J;
      const HeadSpectrum exact = spectrum_of_gram(g, ex, c);
      const double emax = exact.eigenvalues[0];
      for (double lambda : {1e-8, 1e-3, 0.25, 4.0}) {
        // The reference: Eigen's eigenvalues in Sigma's units, the exact path's scale.
        const double t = shifted_ridge(lambda, exact.log_scale), n = g.diagonal().sum().item<double>() / exact.trace;
        double ref = 0;
        for (int i = 0; i < J; ++i) {
          const double m = std::max(0.0, e(i)) / n;
          ref += exact.resolution > t && m < exact.resolution ? 0.0 : (t > 0 ? m / (m + t) : double(m > 0));
        }
        const double slack = 1e-10 * ref + 8 * double(J) * kEps * emax / std::max(t, 1e-300);
        const DofValue v = dof_at(sp, lambda);
        EXPECT_LE(v.lower, ref + std::min(slack, 0.5)) << "trial " << trial << " lambda " << lambda;
        EXPECT_GE(v.upper, ref - std::min(slack, 0.5)) << "trial " << trial << " lambda " << lambda;
      }
    }
  }
}

// The bounds tighten as the subspace grows: 8, 32, 128 columns on one exp Gram.
TEST(DofFast, BoundsTightenWithTheSubspace) {
  at::Generator gen = at::detail::createCPUGenerator(21);
  const at::Tensor g = shifted_gram(at::randn({300, 16}, gen, at::kDouble));
  for (double lambda : {1e-4, std::pow(2.0, -8), 0.05}) {
    double last = 1e300;
    for (int64_t k : {8, 32, 128}) {
      const DofValue v = dof_at(spectrum_of_gram(g, fast_settings(k, 1e300)), lambda);
      EXPECT_LT(v.upper - v.lower, last) << "k " << k << " lambda " << lambda;
      last = v.upper - v.lower;
    }
  }
}

// The adaptive path: bounds within the tolerance at settings.lambda with a subspace smaller than J,
// or (a spectrum too flat to bound: near identity) the exact path, reported as a fallback.
TEST(DofFast, AdaptiveMeetsTheToleranceOrFallsBack) {
  const auto spectra = synthetic_spectra();
  for (const auto& [name, mu] : spectra) {
    const at::Tensor g = with_spectrum(mu, 5);
    for (double tol : {0.01, 1e-4}) {
      DofSettings s = fast_settings(8, tol);
      s.top_k = 120;
      s.lambda = 1e-3;
      const HeadSpectrum sp = spectrum_of_gram(g, s);
      const DofValue v = dof_at(sp, s.lambda);
      const double exact = dof_of(mu, s.lambda);
      if (sp.exact) {
        EXPECT_TRUE(fast_path_fell_back(s, sp)) << name;
        EXPECT_NEAR(v.value, exact, 1e-8 * exact) << name;
      } else {
        EXPECT_FALSE(fast_path_fell_back(s, sp));
        EXPECT_LE(v.upper - v.lower, tol * v.value) << name;
        EXPECT_LE(int64_t(sp.eigenvalues.size()), 120) << name;
        EXPECT_NEAR(v.value, exact, tol * exact) << name;
      }
      // Fast decay certifies with a small subspace; so does the near-identity spectrum, whose trace
      // and sum of squares leave it almost no room (a flat spectrum has the least sum of squares).
      if (name == "fast decay" || (name == "near identity" && tol > 1e-3)) {
        EXPECT_FALSE(sp.exact) << name << " " << tol;
      }
      // The slowly decaying one (1 / i, 11% of its mass beyond 120) cannot at 1e-4.
      if (name == "slow decay" && tol < 1e-3) {
        EXPECT_TRUE(sp.exact) << name;
      }
    }
  }
}

// J = 1 and 2, norms whose kernel overflows (c ~ 800) under samples and none, and bad input.
TEST(DofFast, Extremes) {
  // J = 1: one eigenvalue, exact whatever the settings (the subspace would be all of it).
  const HeadSpectrum one = spectrum_of_gram(at::full({1, 1}, 0.7, at::kDouble), fast_settings(4, 0.01));
  EXPECT_TRUE(one.exact);
  EXPECT_NEAR(dof_at(one, 0.25).value, 1.0 / 1.25, 1e-15);
  // J = 2 with a one-column subspace: [[2, 1], [1, 2]] has eigenvalues 3 and 1 (trace 4).
  DofSettings two = fast_settings(1, 1e300);
  two.top_k = 1;
  const at::Tensor g2 = at::tensor({2.0, 1.0, 1.0, 2.0}, at::kDouble).view({2, 2});
  const HeadSpectrum sp2 = spectrum_of_gram(g2, two);
  ASSERT_FALSE(sp2.exact);
  for (double lambda : {1e-3, 0.1, 1.0, 100.0}) {
    const double exact = f(0.75, lambda) + f(0.25, lambda);
    const DofValue v = dof_at(sp2, lambda);
    EXPECT_LE(v.lower, exact + 1e-12);
    EXPECT_GE(v.upper, exact - 1e-12);
  }
  two.tolerance = 1e-9;  // cannot be met with one Ritz value unless it is exact: falls back
  const HeadSpectrum exact2 = spectrum_of_gram(g2, two);
  if (exact2.exact) {
    EXPECT_TRUE(fast_path_fell_back(two, exact2));
  }
  EXPECT_NEAR(dof_at(exact2, 0.1).value, f(0.75, 0.1) + f(0.25, 0.1), 1e-9);

  // Huge norms: |x|^2 / sqrt d ~ 800, exp(c) beyond double range; the fast path's bounds bracket
  // the exact path's DoF in the shifted units, for samples and none.
  at::Generator gen = at::detail::createCPUGenerator(4);
  at::Tensor x = at::randn({200, 4}, gen, at::kDouble);
  x = x / x.norm(2, 1, true) * std::sqrt(800.0 * 2.0) * (0.9 + 0.1 * at::rand({200, 1}, gen, at::kDouble));
  double c = 0;
  const at::Tensor g = shifted_gram(x, &c);
  ASSERT_GT(c, 700);
  for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None, DofNormalize::Trace}) {
    DofSettings s = fast_settings(16, 1e300);
    s.normalize = mode;
    DofSettings e = s;
    e.exact_limit = 1 << 20;
    const HeadSpectrum fast = spectrum_of_gram(g, s, c), exact = spectrum_of_gram(g, e, c);
    ASSERT_FALSE(fast.exact);
    for (double lambda : {std::pow(2.0, -8), 1e300, 1e-300}) {
      const DofValue v = dof_at(fast, lambda), ex = dof_at(exact, lambda);
      EXPECT_TRUE(std::isfinite(v.lower) && std::isfinite(v.upper));
      EXPECT_LE(v.lower, ex.value * (1 + 1e-9) + 1e-9) << dof_normalize_name(mode) << " lambda " << lambda;
      EXPECT_GE(v.upper, ex.value * (1 - 1e-9) - 1e-9) << dof_normalize_name(mode) << " lambda " << lambda;
    }
  }

  // Bad input: errors that name what is wrong.
  at::Tensor bad = g.clone();
  bad[3][5] = std::nan("");
  bad[5][3] = std::nan("");
  EXPECT_THROW(
      {
        try {
          spectrum_of_gram(bad, fast_settings(4, 0.01));
        } catch (const Error& err) {
          EXPECT_NE(std::string(err.what()).find("Gram matrix contains NaN"), std::string::npos) << err.what();
          throw;
        }
      },
      Error);
  at::Tensor xn = x.clone();
  xn[7][1] = std::nan("");
  EXPECT_THROW(
      {
        try {
          shifted_gram(xn);
        } catch (const Error& err) {
          EXPECT_NE(std::string(err.what()).find("sampled vectors contain NaN"), std::string::npos) << err.what();
          throw;
        }
      },
      Error);
  DofSettings nan_tol = fast_settings(4, std::nan(""));
  try {
    spectrum_of_gram(g2, nan_tol);
    ADD_FAILURE() << "a NaN tolerance was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("tolerance"), std::string::npos) << err.what();
  }
  DofSettings nan_lambda = fast_settings(4, 0.01);
  nan_lambda.lambda = std::nan("");
  try {
    spectrum_of_gram(g2, nan_lambda);
    ADD_FAILURE() << "a NaN lambda was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("lambda"), std::string::npos) << err.what();
  }
  DofSettings zero_block = fast_settings(0, 0.01);
  EXPECT_THROW(spectrum_of_gram(g2, zero_block), Error);
}

// A spectrum saved by the earlier Lanczos fast path (its top-k eigenvalues, converged, and the
// trace; version 2) gets bounds that bracket the exact DoF under the new formulas.
TEST(DofFast, LanczosEraSpectraStillBracket) {
  at::Generator gen = at::detail::createCPUGenerator(8);
  const at::Tensor g = shifted_gram(at::randn({300, 16}, gen, at::kDouble));
  DofSettings e;
  e.exact_limit = 1 << 20;
  const HeadSpectrum exact = spectrum_of_gram(g, e);
  for (int k : {10, 60}) {
    HeadSpectrum old = ritz_spectrum(std::vector<double>(exact.eigenvalues.begin(), exact.eigenvalues.begin() + k), 1.0, 300);
    old.resolution = exact.resolution;
    DofSpectra sp;
    sp.num_layers = 1, sp.num_heads = 1, sp.head_dim = 16;
    sp.heads = {old};
    const std::string path = test::temp_dir("dof_lanczos") + "/old.safetensors";
    save_spectra(path, sp);
    const HeadSpectrum back = load_spectra(path).head(0, 0);
    for (double lambda : {1e-5, std::pow(2.0, -8), 0.3}) {
      const double truth = dof_at(exact, lambda).value;
      const DofValue v = dof_at(back, lambda);
      EXPECT_LE(v.lower, truth * (1 + 1e-12)) << "k " << k << " lambda " << lambda;
      EXPECT_GE(v.upper, truth * (1 - 1e-12)) << "k " << k << " lambda " << lambda;
    }
  }
}

// Batched on the CPU (the path CUDA takes) equals the per-head exact path: the same samples, the
// same normalization, J and J/2 spectra, on a random-weight model and on the bundled model.
TEST(DofBatched, CpuBatchedEqualsPerHeadExact) {
  for (const auto& [model, tag] : {std::pair{test::tiny_gpt2_dir(), std::string("dof_batched_tiny")},
                                   std::pair{test::source_dir() + "/resources/models/brown-gpt2-mini", std::string("dof_batched_real")}}) {
    const CaptureStore st(capture_of(model, 24, tag));
    for (DofNormalize mode : {DofNormalize::Trace, DofNormalize::Samples}) {
      DofSettings per_head;
      per_head.samples = 60;
      per_head.normalize = mode;
      per_head.exact_limit = 1 << 20;
      DofSettings batched = per_head;
      batched.batched = true;
      for (int s = 0; s < st.num_layers(); ++s) {
        const auto a = layer_spectra(st, s, per_head), b = layer_spectra(st, s, batched);
        ASSERT_EQ(a.size(), size_t(st.num_heads()));
        ASSERT_EQ(b.size(), a.size());
        for (size_t h = 0; h < a.size(); ++h) {
          for (const auto& [x, y] : {std::pair{&a[h], &b[h]}, std::pair{a[h].half.get(), b[h].half.get()}}) {
            ASSERT_TRUE(x && y);
            ASSERT_TRUE(y->exact);
            ASSERT_EQ(x->eigenvalues.size(), y->eigenvalues.size());
            EXPECT_EQ(x->samples, y->samples);
            EXPECT_NEAR(x->log_scale, y->log_scale, 1e-12 * (1 + std::abs(x->log_scale)));
            EXPECT_NEAR(x->trace, y->trace, 1e-12 * x->trace);
            for (size_t i = 0; i < x->eigenvalues.size(); ++i)
              EXPECT_NEAR(x->eigenvalues[i], y->eigenvalues[i], 1e-12 * x->eigenvalues[0]) << "layer " << s << " head " << h;
            EXPECT_NEAR(dof_at(*x, 0.01).value, dof_at(*y, 0.01).value, 1e-9 * dof_at(*x, 0.01).value);
          }
        }
      }
      DofSettings batched_all = batched;
      batched_all.samples = 60;
      const DofSpectra all = compute_spectra(st, batched_all);
      EXPECT_EQ(all.heads.size(), size_t(st.num_layers() * st.num_heads()));
    }
  }
}

// CUDA against the CPU, to float64 tolerance; skips without a GPU (and on a CPU-only LibTorch,
// where --device cuda is an error saying so).
TEST(DofBatched, CudaMatchesCpu) {
  try {
    parse_device("cuda");
  } catch (const Error& e) {
    GTEST_SKIP() << "no CUDA: " << e.what();
  }
  const CaptureStore st(capture_of(test::source_dir() + "/resources/models/brown-gpt2-mini", 32, "dof_cuda"));
  DofSettings cpu;
  cpu.samples = 128;
  cpu.exact_limit = 1 << 20;
  DofSettings gpu = cpu;
  gpu.device = "cuda";
  for (int s = 0; s < st.num_layers(); ++s) {
    const auto a = layer_spectra(st, s, cpu), b = layer_spectra(st, s, gpu);
    ASSERT_EQ(a.size(), b.size());
    for (size_t h = 0; h < a.size(); ++h)
      for (double lambda : {1e-4, std::pow(2.0, -8), 0.1}) {
        EXPECT_NEAR(dof_at(a[h], lambda).value, dof_at(b[h], lambda).value, 1e-8 * dof_at(a[h], lambda).value);
        EXPECT_NEAR(dof_at(*a[h].half, lambda).value, dof_at(*b[h].half, lambda).value, 1e-8 * dof_at(*a[h].half, lambda).value);
      }
  }
}

TEST(DofBatched, CudaOnACpuOnlyBuildIsAClearError) {
  bool has_cuda = true;
  try {
    parse_device("cuda");
  } catch (const Error&) {
    has_cuda = false;
  }
  if (has_cuda) GTEST_SKIP() << "this build and machine have CUDA";
  const CaptureStore st(capture_of(test::tiny_gpt2_dir(), 8, "dof_nocuda"));
  DofSettings s;
  s.device = "cuda";
  try {
    compute_spectra(st, s);
    ADD_FAILURE() << "--device cuda ran on a build without CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace test_dof_fast
