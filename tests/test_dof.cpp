// DoF of a head (SPEC section 5). The references here build the Gram matrix in plain loops over
// double and take eigenvalues with Eigen's SelfAdjointEigenSolver (the implementation uses LAPACK's
// dsyevd), so an error in core's Gram, shift, normalization or sum cannot be mirrored. The certified
// fast path and the batched spectra are tested in test_dof_fast.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "attnscope/capture/capture.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/base/random.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_dof {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

using Vectors = std::vector<std::vector<double>>;

const DofNormalize kModes[] = {DofNormalize::Trace, DofNormalize::Max, DofNormalize::Samples, DofNormalize::None};

// J vectors of dimension d with N(0, sigma^2) entries.
Vectors random_vectors(int J, int d, double sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, sigma);
  Vectors x(J, std::vector<double>(d));
  for (auto& v : x)
    for (double& e : v) e = n(rng);
  return x;
}

at::Tensor to_tensor(const Vectors& x) {
  at::Tensor t = at::empty({int64_t(x.size()), int64_t(x[0].size())}, at::kDouble);
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = 0; j < x[i].size(); ++j) t[i][j] = x[i][j];
  return t;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// exp(x_i.x_j / sqrt d - shift) in loops.
Eigen::MatrixXd loop_gram(const Vectors& x, double shift) {
  const int J = int(x.size());
  const double sd = std::sqrt(double(x[0].size()));
  Eigen::MatrixXd g(J, J);
  for (int i = 0; i < J; ++i)
    for (int j = 0; j < J; ++j) g(i, j) = std::exp(dot(x[i], x[j]) / sd - shift);
  return g;
}

double max_sq_norm_over_sqrt_d(const Vectors& x) {
  double c = -1e300;
  for (const auto& v : x) c = std::max(c, dot(v, v) / std::sqrt(double(v.size())));
  return c;
}

// Eigenvalues of exp(log_scale) g / n, ascending, with n per SPEC: tr, max eigenvalue, J or 1.
std::vector<double> reference_mu(const Eigen::MatrixXd& g, DofNormalize mode, double log_scale = 0) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(g, Eigen::EigenvaluesOnly);
  const Eigen::VectorXd e = es.eigenvalues();
  double n_shifted = 1;  // n / exp(log_scale)
  if (mode == DofNormalize::Trace) n_shifted = g.trace();
  if (mode == DofNormalize::Max) n_shifted = e.maxCoeff();
  if (mode == DofNormalize::Samples) n_shifted = double(g.rows()) * std::exp(-log_scale);
  if (mode == DofNormalize::None) n_shifted = std::exp(-log_scale);
  std::vector<double> mu;
  for (int i = 0; i < e.size(); ++i) mu.push_back(std::max(0.0, e(i)) / n_shifted);
  return mu;
}

// The rank tolerance below which a computed eigenvalue of a shifted Gram is indistinguishable from
// zero (dof.h): J eps (1 + c) times the largest eigenvalue.
double rank_tolerance(double e_max, int J, double c) { return double(J) * 2.220446049250313e-16 * (1.0 + std::abs(c)) * e_max; }

double reference_dof(const std::vector<double>& mu, double lambda) {
  double s = 0;
  for (double m : mu) s += m / (m + lambda);
  return s;
}

DofSettings settings_for(DofNormalize mode, int64_t samples = 1 << 20) {
  DofSettings s;
  s.normalize = mode;
  s.samples = samples;
  s.max_samples = samples;  // J as given: these tests check one J's spectra (J per head: test_dof_per_head_j)
  s.exact_limit = 1 << 20;
  return s;
}


// How far two float64 computations of the same DoF may differ. A backward-stable eigensolver gets
// each eigenvalue to within a few eps * mu_max, not to a few ulps of itself, and f(mu) = mu / (mu +
// lambda) has slope at most 1 / lambda: so eigenvalues far below mu_max (a Gram dominated by one
// long vector, with samples/none scaling) are only known to J * eps * mu_max / lambda in all.
double tolerance(const std::vector<double>& mu, double lambda, double ref) {
  const double mu_max = *std::max_element(mu.begin(), mu.end());
  return 1e-9 * ref + 8.0 * double(mu.size()) * 2.2e-16 * mu_max / lambda;
}

// The spectrum (Sigma's eigenvalues) of every head of a capture, recomputed from its q and k in
// loops: all 2 T L vectors of head h in the order [queries by (t, l); keys by (t, l)].
std::vector<std::vector<std::vector<double>>> reference_capture_mu(const CaptureStore& st, DofNormalize mode) {
  std::vector<std::vector<std::vector<double>>> out;
  for (int s = 0; s < st.num_layers(); ++s) {
    const at::Tensor q = st.layer_tensor(s, "q").to(at::kDouble).contiguous();
    const at::Tensor k = st.layer_tensor(s, "k").to(at::kDouble).contiguous();
    out.emplace_back();
    for (int h = 0; h < st.num_heads(); ++h) {
      Vectors x;
      for (const at::Tensor& t : {q, k}) {
        const auto a = t.accessor<double, 4>();
        for (int ti = 0; ti < st.num_seqs(); ++ti)
          for (int l = 0; l < st.seq_len(); ++l) {
            std::vector<double> v(st.head_dim());
            for (int i = 0; i < st.head_dim(); ++i) v[i] = a[ti][h][l][i];
            x.push_back(v);
          }
      }
      const double c = max_sq_norm_over_sqrt_d(x);
      out.back().push_back(reference_mu(loop_gram(x, c), mode, c));
    }
  }
  return out;
}

}  // namespace

TEST(Dof, MatchesIndependentFloat64ReferenceForEveryNormalization) {
  const Vectors x = random_vectors(150, 16, 0.9, 1);
  const Eigen::MatrixXd g = loop_gram(x, 0.0);  // small norms: no shift needed for the reference
  const at::Tensor xt = to_tensor(x);
  for (DofNormalize mode : kModes) {
    double c = 0;
    const at::Tensor shifted = shifted_gram(xt, &c);
    EXPECT_NEAR(c, max_sq_norm_over_sqrt_d(x), 1e-12);
    const HeadSpectrum sp = spectrum_of_gram(shifted, settings_for(mode), c);
    ASSERT_TRUE(sp.exact);
    ASSERT_EQ(sp.eigenvalues.size(), 150u);
    EXPECT_TRUE(std::is_sorted(sp.eigenvalues.rbegin(), sp.eigenvalues.rend()));
    const std::vector<double> mu = reference_mu(g, mode);
    double ref_trace = 0;
    for (double m : mu) ref_trace += m;
    // Sigma's trace is exp(log_scale) times the kept one (dof.h: the spectrum stays shifted).
    EXPECT_NEAR(std::exp(sp.log_scale) * sp.trace, ref_trace, 1e-10 * ref_trace) << dof_normalize_name(mode);
    for (double lambda : {1e-4, std::pow(2.0, -8), 0.1, 3.0}) {
      const double ref = reference_dof(mu, lambda);
      const DofValue v = dof_at(sp, lambda);
      EXPECT_NEAR(v.value, ref, 1e-9 * ref) << dof_normalize_name(mode) << " lambda " << lambda;
      EXPECT_EQ(v.lower, v.value);
      EXPECT_EQ(v.upper, v.value);
    }
  }
}

TEST(Dof, HeadSpectrumPoolsQueriesAndKeys) {
  // All 2N vectors (J >= available): the DoF of head_spectrum is that of the Gram of [q; k]. The
  // queries go in as float32 (as captures store them), so the reference uses the rounded values.
  Vectors q = random_vectors(40, 8, 1.1, 2);
  const Vectors k = random_vectors(40, 8, 0.7, 3);
  for (auto& v : q)
    for (double& e : v) e = double(float(e));
  Vectors x = q;
  x.insert(x.end(), k.begin(), k.end());
  const double c = max_sq_norm_over_sqrt_d(x);
  const Eigen::MatrixXd g = loop_gram(x, c);
  for (DofNormalize mode : kModes) {
    const HeadSpectrum sp = head_spectrum(to_tensor(q).to(at::kFloat), to_tensor(k), settings_for(mode), 5);
    EXPECT_EQ(sp.samples, 80);
    const double ref = reference_dof(reference_mu(g, mode, c), 0.01);
    EXPECT_NEAR(dof_at(sp, 0.01).value, ref, 1e-9 * ref) << dof_normalize_name(mode);
  }
  // Fewer samples than vectors: J of them, and a different seed draws a different subset.
  const HeadSpectrum a = head_spectrum(to_tensor(q), to_tensor(k), settings_for(DofNormalize::Trace, 30), 5);
  const HeadSpectrum b = head_spectrum(to_tensor(q), to_tensor(k), settings_for(DofNormalize::Trace, 30), 6);
  const HeadSpectrum a2 = head_spectrum(to_tensor(q), to_tensor(k), settings_for(DofNormalize::Trace, 30), 5);
  EXPECT_EQ(a.samples, 30);
  EXPECT_EQ(a.eigenvalues, a2.eigenvalues);
  EXPECT_NE(a.eigenvalues, b.eigenvalues);
}

TEST(Dof, ScaledIdentityClosedForm) {
  const int J = 37;
  const double c = 2.5;
  const at::Tensor g = c * at::eye(J, at::kDouble);
  for (DofNormalize mode : kModes) {
    const double mu = mode == DofNormalize::Trace ? 1.0 / J
                      : mode == DofNormalize::Max ? 1.0
                      : mode == DofNormalize::Samples ? c / J
                                                      : c;
    const HeadSpectrum sp = spectrum_of_gram(g, settings_for(mode));
    for (double e : sp.eigenvalues) EXPECT_NEAR(e, mu, 1e-14 * mu);
    for (double lambda : {1e-3, 0.5}) EXPECT_NEAR(dof_at(sp, lambda).value, J * mu / (mu + lambda), 1e-12 * J) << dof_normalize_name(mode);
  }
}

TEST(Dof, RankOneGramGivesOneOverOnePlusLambda) {
  // Every sampled vector the same: G = exp(|x|^2 / sqrt d) 1 1^T, one eigenvalue tr G.
  at::Tensor v = at::randn({1, 8}, at::kDouble) * 2.0;
  const at::Tensor q = v.repeat({20, 1}), k = v.repeat({15, 1});
  for (DofNormalize mode : {DofNormalize::Trace, DofNormalize::Max}) {
    const HeadSpectrum sp = head_spectrum(q, k, settings_for(mode), 1);
    for (double lambda : {1e-3, 2.0}) EXPECT_NEAR(dof_at(sp, lambda).value, 1.0 / (1.0 + lambda), 1e-10);
  }
  // samples: Sigma = G / J has the one eigenvalue e = exp(|x|^2 / sqrt d); at lambda = 0.3 e the
  // DoF is 1 / 1.3.
  const double e = std::exp((v * v).sum().item<double>() / std::sqrt(8.0));
  const HeadSpectrum sp = head_spectrum(q, k, settings_for(DofNormalize::Samples), 1);
  EXPECT_NEAR(std::exp(sp.log_scale) * sp.eigenvalues[0], e, 1e-12 * e);
  EXPECT_NEAR(dof_at(sp, 0.3 * e).value, 1.0 / 1.3, 1e-10);
}

TEST(Dof, TraceAndMaxAreScaleInvariantSamplesAndNoneAreNot) {
  const at::Tensor g = shifted_gram(to_tensor(random_vectors(90, 8, 1.0, 7)));
  const double a = 7.5, lambda = 0.02;
  for (DofNormalize mode : kModes) {
    const DofSettings st = settings_for(mode);
    const HeadSpectrum base = spectrum_of_gram(g, st), scaled = spectrum_of_gram(a * g, st);
    const HeadSpectrum logged = spectrum_of_gram(g, st, std::log(a));  // the same scale, in log space
    const double d0 = dof_at(base, lambda).value, d1 = dof_at(scaled, lambda).value;
    EXPECT_NEAR(dof_at(logged, lambda).value, d1, 1e-10 * d1) << dof_normalize_name(mode);
    if (mode == DofNormalize::Trace || mode == DofNormalize::Max) {
      EXPECT_NEAR(d1, d0, 1e-10 * d0) << dof_normalize_name(mode);
    } else {
      // mu scales by a: DoF(a G, lambda) = DoF(G, lambda / a), and differs from DoF(G, lambda).
      EXPECT_NEAR(d1, dof_at(base, lambda / a).value, 1e-10 * d1) << dof_normalize_name(mode);
      EXPECT_GT(d1, d0 * 1.01) << dof_normalize_name(mode);
    }
  }
}

TEST(Dof, LogDomainHandlesNormsWhoseKernelOverflows) {
  // |x|^2 / sqrt d ~ 800: exp(800) is inf in double. Vectors clustered around one direction, so the
  // shifted Gram is far from diagonal and the DoF is not trivial.
  const int d = 16, J = 120;
  Vectors x = random_vectors(J, d, 0.3, 11);
  const double base = std::sqrt(800.0 * std::sqrt(double(d)) / d);
  for (auto& v : x)
    for (double& e : v) e += base;
  const double c = max_sq_norm_over_sqrt_d(x);
  ASSERT_GT(c, 790);
  ASSERT_TRUE(std::isinf(std::exp(c)));
  const Eigen::MatrixXd g = loop_gram(x, c);
  for (DofNormalize mode : {DofNormalize::Trace, DofNormalize::Max}) {
    const HeadSpectrum sp = head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), settings_for(mode), 3);
    const std::vector<double> mu = reference_mu(g, mode);
    for (double lambda : {1e-6, std::pow(2.0, -8)}) {
      const double v = dof_at(sp, lambda).value, ref = reference_dof(mu, lambda);
      ASSERT_TRUE(std::isfinite(v));
      EXPECT_GT(v, 1.5);
      EXPECT_LT(v, J - 1.0);
      EXPECT_NEAR(v, ref, 1e-9 * ref) << dof_normalize_name(mode) << " lambda " << lambda;
    }
  }
  // samples and none: Sigma = exp(c) G_shifted / n is beyond double range, and lambda exp(-c) at
  // lambda = 2^-8 underflows, so every eigenvalue the eigensolver resolves (above the rank tolerance
  // of rank_tolerance()) counts 1: the DoF is the numerical rank of the sampled Gram. (This used to
  // throw "out of double range".) The count may differ by one from Eigen's where an eigenvalue sits
  // on the tolerance itself.
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(g, Eigen::EigenvaluesOnly);
  const Eigen::VectorXd e = es.eigenvalues();
  const double floor = rank_tolerance(e.maxCoeff(), J, c);
  int rank = 0;
  for (int i = 0; i < e.size(); ++i) rank += e(i) > floor;
  ASSERT_GT(rank, 2);
  ASSERT_LT(rank, J - 2);
  for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
    const HeadSpectrum sp = head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), settings_for(mode), 3);
    const double v = dof_at(sp, std::pow(2.0, -8)).value;
    EXPECT_NEAR(v, rank, 1.0) << dof_normalize_name(mode);
    EXPECT_GE(v, dof_at(head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), settings_for(DofNormalize::Trace), 3),
                        std::pow(2.0, -8)).value);
  }
}

// SPEC: nothing overflows, whatever the normalizer. Sigma's eigenvalues exp(c) e_s / n are beyond
// double range once c = max |x|^2 / sqrt(d) passes ~709 (stories260K layer 0: 729.5), but
// DoF = sum e_s / (e_s + lambda n exp(-c)) is not. References: closed forms evaluated in long double,
// and Eigen's eigenvalues of the loop-built shifted Gram with the formula in long double.
TEST(Dof, SamplesAndNoneGiveTheDofOfKernelsBeyondDoubleRange) {
  // 1. Orthogonal vectors x_i = s_i e_i with a_i = s_i^2 / sqrt(d) from 690 to 715: Sigma is
  //    diagonal (off-diagonal exp(-c) ~ 1e-311) with eigenvalues exp(a_i) / n, so
  //    DoF = sum_i 1 / (1 + lambda n exp(-a_i)). lambda = 1e303 puts the knee inside the range.
  {
    const int d = 64, J = 48;
    at::Tensor x = at::zeros({J, d}, at::kDouble);
    std::vector<long double> a(J);
    for (int i = 0; i < J; ++i) {
      const double s = std::sqrt((690.0 + 25.0 * i / (J - 1)) * std::sqrt(double(d)));
      x[i][i] = s;
      a[i] = (long double)s * s / std::sqrt((long double)d);
    }
    const double lambda = 1e303;
    for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
      const HeadSpectrum sp = head_spectrum(x, at::empty({0, d}, at::kDouble), settings_for(mode), 1);
      const long double log_n = mode == DofNormalize::Samples ? std::log((long double)J) : 0.0L;
      long double ref = 0;
      for (long double ai : a) ref += 1.0L / (1.0L + std::exp(std::log((long double)lambda) + log_n - ai));
      EXPECT_GT(ref, 10) << "a non-trivial DoF";
      EXPECT_LT(ref, J - 10) << "a non-trivial DoF";
      EXPECT_NEAR(dof_at(sp, lambda).value, double(ref), 1e-9 * double(ref)) << dof_normalize_name(mode);
    }
  }
  // 2. c = 1000 and 1500 at lambda = 2^-8, where lambda exp(-c) underflows: every nonzero eigenvalue
  //    counts 1. Equal-norm orthogonal vectors (shifted Gram = I): DoF = J / (1 + lambda n exp(-c))
  //    = J. One vector repeated (rank one): DoF = 1 / (1 + lambda n exp(-c) / J) = 1, not 1 plus
  //    however many rounding-noise eigenvalues happen to come out positive.
  for (double c : {1000.0, 1500.0}) {
    const int d = 64, J = 40;
    const double s = std::sqrt(c * std::sqrt(double(d)));
    at::Tensor ortho = at::zeros({J, d}, at::kDouble);
    for (int i = 0; i < J; ++i) ortho[i][i] = s;
    at::Tensor dir = at::randn({1, d}, at::kDouble);
    dir = dir / dir.norm() * s;
    const at::Tensor same = dir.repeat({J, 1});
    const double lambda = std::pow(2.0, -8);
    for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
      const long double n = mode == DofNormalize::Samples ? J : 1;
      const long double t = (long double)lambda * n * std::exp(-(long double)c);
      const at::Tensor none = at::empty({0, d}, at::kDouble);
      EXPECT_NEAR(dof_at(head_spectrum(ortho, none, settings_for(mode), 1), lambda).value, double(J / (1 + t)), 1e-12 * J)
          << "c " << c << " " << dof_normalize_name(mode);
      const HeadSpectrum one = head_spectrum(same, none, settings_for(mode), 1);
      EXPECT_NEAR(dof_at(one, lambda).value, double(1 / (1 + t / J)), 1e-12) << "c " << c << " " << dof_normalize_name(mode);
      // The other J - 1 are below the resolution (here truly zero), and reported as such.
      EXPECT_EQ(unresolved_count(one, lambda), J - 1);
      EXPECT_EQ(unresolved_count(head_spectrum(ortho, none, settings_for(mode), 1), lambda), 0);
    }
  }
  // 3. A cluster around one direction, scaled to c = 711: a dense shifted Gram with decaying
  //    eigenvalues; lambda is chosen so that lambda n exp(-c) is 1e-3 of the largest eigenvalue.
  {
    const int d = 16, J = 120;
    Vectors x = random_vectors(J, d, 0.3, 12);
    for (auto& v : x)
      for (double& e : v) e += 13.0;
    const double scale = std::sqrt(711.0 / max_sq_norm_over_sqrt_d(x));
    for (auto& v : x)
      for (double& e : v) e *= scale;
    const double c = max_sq_norm_over_sqrt_d(x);
    ASSERT_NEAR(c, 711.0, 1e-9);
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(loop_gram(x, c), Eigen::EigenvaluesOnly);
    const Eigen::VectorXd e = es.eigenvalues();
    for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
      const long double n = mode == DofNormalize::Samples ? J : 1;
      const long double t = 1e-3L * e.maxCoeff();
      // Sigma = exp(c) G_shifted / n: mu / (mu + lambda) = e / (e + lambda n exp(-c)) = e / (e + t).
      const double lambda = double(std::exp(std::log(t) - std::log(n) + (long double)c));
      ASSERT_TRUE(std::isfinite(lambda));
      long double ref = 0;
      for (int i = 0; i < e.size(); ++i) ref += std::max(0.0, e(i)) / (std::max(0.0, e(i)) + t);
      EXPECT_GT(ref, 2);
      EXPECT_LT(ref, J - 3);
      // The shifted Gram's entries exp(s - c) carry a relative error ~ eps c, so its eigenvalues are
      // known to ~J eps (1 + c) e_max; f has slope <= 1 / t.
      const double tol = 1e-9 * double(ref) + 8.0 * J * 2.2e-16 * (1 + c) * e.maxCoeff() / double(t);
      const HeadSpectrum sp = head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), settings_for(mode), 3);
      EXPECT_NEAR(dof_at(sp, lambda).value, double(ref), tol) << dof_normalize_name(mode);
      EXPECT_LT(tol, 1e-5 * double(ref));
    }
  }
}

// The convergence check on closed forms (lambda = 1e-4, trace normalization, |x|^2 / sqrt(d) = 50
// so that vectors along different axes have kernel exp(-50) ~ 2e-22 between them):
// (a) J equal-norm orthogonal vectors: Sigma = I / J, DoF = J / (1 + lambda J), which nearly doubles
//     from J/2 to J: never converged.
// (b) r = 5 directions, each repeated: the shifted Gram is block-diagonal of all-ones blocks, Sigma's
//     eigenvalues are n_i / J (n_i copies of direction i) and DoF = sum_i (n_i / J) / (n_i / J +
//     lambda) ~ r whatever J: converged. The J/2 counts come from the documented subset (dof.h).
TEST(Dof, ConvergenceFlagsAGrowingDofAndPassesASaturatedOne) {
  const int d = 64;
  const double s = std::sqrt(50.0 * std::sqrt(double(d)));
  const double lambda = 1e-4;
  const at::Tensor none = at::empty({0, d}, at::kDouble);
  {
    const int J = 60;
    at::Tensor x = at::zeros({J, d}, at::kDouble);
    for (int i = 0; i < J; ++i) x[i][i] = s;
    const HeadSpectrum sp = head_spectrum(x, none, settings_for(DofNormalize::Trace), 9);
    ASSERT_TRUE(sp.half);
    const DofConvergence c = dof_convergence(sp, lambda);
    const double full = J / (1 + lambda * J), half = (J / 2) / (1 + lambda * (J / 2));
    EXPECT_NEAR(c.dof, full, 1e-9 * full);
    EXPECT_NEAR(c.dof_half, half, 1e-9 * half);
    EXPECT_EQ(c.samples, J);
    EXPECT_EQ(c.samples_half, J / 2);
    EXPECT_NEAR(c.relative_change, (full - half) / full, 1e-9);
    EXPECT_TRUE(c.checked);
    EXPECT_FALSE(c.converged);
  }
  {
    const int r = 5, J = 200;
    const uint64_t seed = 4;
    at::Tensor x = at::zeros({J, d}, at::kDouble);
    std::vector<int> dir(J), n(r, 0), nh(r, 0);
    for (int i = 0; i < J; ++i) {
      dir[i] = (i * 7) % r;
      x[i][dir[i]] = s;
      ++n[dir[i]];
    }
    for (int64_t i : sample_without_replacement(J, J / 2, derive_seed(seed, 1))) ++nh[dir[i]];
    auto closed = [&](const std::vector<int>& counts, int total) {
      double v = 0;
      for (int ni : counts) v += (double(ni) / total) / (double(ni) / total + lambda);
      return v;
    };
    const DofConvergence c = dof_convergence(head_spectrum(x, none, settings_for(DofNormalize::Trace), seed), lambda);
    EXPECT_NEAR(c.dof, closed(n, J), 1e-9 * r);
    EXPECT_NEAR(c.dof_half, closed(nh, J / 2), 1e-9 * r);
    EXPECT_NE(nh, std::vector<int>(r, J / 2 / r)) << "the half is a random subset, not a stratified one";
    EXPECT_TRUE(c.checked);
    EXPECT_TRUE(c.converged);
    EXPECT_LT(c.relative_change, 1e-2);
  }
  // No half (spectrum_of_gram, or a version-1 file): not checked, so not reported as converged.
  const DofConvergence c = dof_convergence(spectrum_of_gram(at::eye(4, at::kDouble), settings_for(DofNormalize::Trace)), lambda);
  EXPECT_FALSE(c.checked);
  EXPECT_FALSE(c.converged);
  EXPECT_TRUE(std::isnan(c.dof_half));
  EXPECT_NEAR(c.dof, 4 * 0.25 / (0.25 + lambda), 1e-12);
}

TEST(Dof, SampleIndicesReproducibleDistinctAndComplete) {
  const auto a = sample_without_replacement(1000, 100, 42), b = sample_without_replacement(1000, 100, 42), c = sample_without_replacement(1000, 100, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (const auto& s : {a, c}) {
    ASSERT_EQ(s.size(), 100u);
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
    EXPECT_EQ(std::set<int64_t>(s.begin(), s.end()).size(), 100u) << "duplicates";
    EXPECT_GE(s.front(), 0);
    EXPECT_LT(s.back(), 1000);
  }
  // Spread over the range, not a prefix: the mean of 100 uniform draws from [0, 1000) is ~500.
  double mean = 0;
  for (int64_t i : a) mean += double(i) / 100;
  EXPECT_NEAR(mean, 500, 120);
  for (int64_t J : {50, 51, 500}) {
    const auto all = sample_without_replacement(50, J, 1);
    ASSERT_EQ(all.size(), 50u);
    for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(all[i], i);
  }
  EXPECT_TRUE(sample_without_replacement(0, 10, 1).empty());
  EXPECT_NE(derive_seed(0, 0, 1), derive_seed(0, 1, 0));
  EXPECT_NE(derive_seed(0, 0, 0), derive_seed(1, 0, 0));
  EXPECT_EQ(derive_seed(9, 3, 4), derive_seed(9, 3, 4));
}

TEST(Dof, SaveLoadRoundTrip) {
  DofSpectra sp;
  sp.settings.samples = 777;
  sp.settings.normalize = DofNormalize::Samples;
  sp.settings.seed = 0xFFFFFFFFFFFFFFF1ull;
  sp.settings.exact_limit = 300;
  sp.settings.top_k = 17;
  sp.capture_dir = "/some/capture dir";
  sp.model = "/models/gpt2";
  sp.num_layers = 3, sp.num_heads = 2, sp.head_dim = 64;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 6; ++i) {
    HeadSpectrum h;
    h.exact = i % 2 == 0;
    h.samples = h.exact ? 5 + i : 40 + i;
    const int n = h.exact ? int(h.samples) : 3;
    for (int j = 0; j < n; ++j) h.eigenvalues.push_back(u(rng) * std::pow(0.3, j));
    std::sort(h.eigenvalues.rbegin(), h.eigenvalues.rend());
    h.trace = 1.5 + u(rng);
    sp.heads.push_back(h);
  }
  const std::string path = test::temp_dir("dof_io") + "/spectra.safetensors";
  save_spectra(path, sp);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const DofSpectra back = load_spectra(path);
  EXPECT_EQ(back.settings.samples, 777);
  EXPECT_EQ(back.settings.normalize, DofNormalize::Samples);
  EXPECT_EQ(back.settings.seed, 0xFFFFFFFFFFFFFFF1ull);
  EXPECT_EQ(back.settings.exact_limit, 300);
  EXPECT_EQ(back.settings.top_k, 17);
  EXPECT_EQ(back.capture_dir, sp.capture_dir);
  EXPECT_EQ(back.model, sp.model);
  EXPECT_EQ(back.num_layers, 3);
  EXPECT_EQ(back.num_heads, 2);
  EXPECT_EQ(back.head_dim, 64);
  ASSERT_EQ(back.heads.size(), 6u);
  for (int s = 0; s < 3; ++s)
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(back.head(s, h).eigenvalues, sp.head(s, h).eigenvalues);
      EXPECT_EQ(back.head(s, h).trace, sp.head(s, h).trace);
      EXPECT_EQ(back.head(s, h).samples, sp.head(s, h).samples);
      EXPECT_EQ(back.head(s, h).exact, sp.head(s, h).exact);
    }
  const auto a = head_dofs(sp, 0.01), b = head_dofs(back, 0.01);
  EXPECT_EQ(a[2][1].lower, b[2][1].lower);
  EXPECT_THROW(sp.head(3, 0), Error);
  EXPECT_THROW(sp.head(0, -1), Error);
}

// Version 2 keeps the log scale and the J/2 half spectrum: a samples-normalized head at c = 1000
// (its DoF only exists in shifted form) gives the same DoF and convergence after a round trip.
TEST(Dof, SaveLoadKeepsTheLogScaleAndTheHalfSpectrum) {
  const int d = 16;
  DofSpectra sp;
  sp.settings = settings_for(DofNormalize::Samples, 64);
  sp.num_layers = 1, sp.num_heads = 2, sp.head_dim = d;
  for (uint32_t h = 0; h < 2; ++h) {
    Vectors x = random_vectors(50, d, 0.3, 40 + h);
    for (auto& v : x)
      for (double& e : v) e += 15.0;
    const double scale = std::sqrt(1000.0 / max_sq_norm_over_sqrt_d(x));
    for (auto& v : x)
      for (double& e : v) e *= scale;
    sp.heads.push_back(head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), sp.settings, 3 + h));
    ASSERT_NEAR(sp.heads.back().log_scale, 1000.0, 1e-9);
    ASSERT_TRUE(sp.heads.back().half);
  }
  const std::string path = test::temp_dir("dof_io2") + "/spectra.safetensors";
  save_spectra(path, sp);
  const DofSpectra back = load_spectra(path);
  for (int h = 0; h < 2; ++h) {
    const HeadSpectrum &a = sp.head(0, h), &b = back.head(0, h);
    EXPECT_EQ(b.eigenvalues, a.eigenvalues);
    EXPECT_EQ(b.log_scale, a.log_scale);
    EXPECT_EQ(b.resolution, a.resolution);
    EXPECT_GT(b.resolution, 0);
    ASSERT_TRUE(b.half);
    EXPECT_EQ(b.half->eigenvalues, a.half->eigenvalues);
    EXPECT_EQ(b.half->log_scale, a.half->log_scale);
    EXPECT_EQ(b.half->samples, 25);
    EXPECT_EQ(b.half->trace, a.half->trace);
    EXPECT_EQ(b.half->exact, a.half->exact);
    for (double lambda : {std::pow(2.0, -8), 1e300}) {
      const DofConvergence ca = dof_convergence(a, lambda), cb = dof_convergence(b, lambda);
      EXPECT_EQ(cb.dof, ca.dof);
      EXPECT_EQ(cb.dof_half, ca.dof_half);
      EXPECT_EQ(cb.converged, ca.converged);
    }
  }
  // A head without a half saves and loads without one.
  sp.heads[1].half.reset();
  save_spectra(path, sp);
  EXPECT_FALSE(load_spectra(path).head(0, 1).half);
  EXPECT_TRUE(load_spectra(path).head(0, 0).half);
}

// A version-1 file (before the log scale and the half spectra), written here tensor by tensor as
// that version did: it loads with log scale 0 and no half, and gives the DoF of its eigenvalues.
TEST(Dof, LoadsVersionOneFiles) {
  const std::string path = test::temp_dir("dof_v1") + "/spectra.safetensors";
  const std::vector<double> eig = {0.6, 0.3, 0.1};
  at::Tensor trace = at::ones({1, 1}, at::kDouble), samples = at::full({1, 1}, 3, at::kLong), exact = at::ones({1, 1}, at::kBool);
  write_safetensors(path,
                    {{"layer_0.head_0.eigenvalues", at::tensor(eig, at::kDouble)}, {"trace", trace}, {"samples", samples}, {"exact", exact}},
                    {{"format", "attnscope.dof_spectra"},
                     {"version", "1"},
                     {"settings", R"({"samples":3,"normalize":"samples","seed":1,"exact_limit":2048,"top_k":256})"},
                     {"capture_dir", "/c"},
                     {"model", "m"},
                     {"num_layers", "1"},
                     {"num_heads", "1"},
                     {"head_dim", "8"}});
  const DofSpectra sp = load_spectra(path);
  const HeadSpectrum& h = sp.head(0, 0);
  EXPECT_EQ(h.eigenvalues, eig);
  EXPECT_EQ(h.log_scale, 0.0);
  EXPECT_EQ(h.resolution, 0.0);
  EXPECT_FALSE(h.half);
  EXPECT_NEAR(dof_at(h, 0.1).value, 0.6 / 0.7 + 0.3 / 0.4 + 0.1 / 0.2, 1e-15);
  EXPECT_FALSE(dof_convergence(h, 0.1).checked);
}

TEST(Dof, LoadRejectsMissingCorruptAndForeignFiles) {
  const std::string dir = test::temp_dir("dof_bad");
  auto expect_error = [](const std::string& path, const std::string& needle) {
    try {
      load_spectra(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(dir + "/missing.safetensors", "no such file");

  { std::ofstream(dir + "/garbage.safetensors") << "this is not a safetensors file at all"; }
  expect_error(dir + "/garbage.safetensors", "");

  DofSpectra sp;
  sp.num_layers = 1, sp.num_heads = 1, sp.head_dim = 8;
  sp.heads.push_back({{0.6, 0.3, 0.1}, 1.0, 3, true, 0.0, 0.0, nullptr});
  save_spectra(dir + "/good.safetensors", sp);
  std::string bytes;
  {
    std::ifstream in(dir + "/good.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  { std::ofstream(dir + "/truncated.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() - 9); }
  expect_error(dir + "/truncated.safetensors", "");

  write_safetensors(dir + "/weights.safetensors", {{"w", at::ones({2, 2})}}, {{"format", "pt"}});
  expect_error(dir + "/weights.safetensors", "not a DoF spectra file");

  // Eigenvalues out of order (ascending), or more than the head's sample count.
  sp.heads[0].eigenvalues = {0.1, 0.3, 0.6};
  save_spectra(dir + "/ascending.safetensors", sp);
  expect_error(dir + "/ascending.safetensors", "descending");
  sp.heads[0] = {{0.6, 0.3, 0.1}, 1.0, 2, false, 0.0, 0.0, nullptr};
  save_spectra(dir + "/count.safetensors", sp);
  expect_error(dir + "/count.safetensors", "sample count");

  sp.heads.clear();
  EXPECT_THROW(save_spectra(dir + "/empty.safetensors", sp), Error);
}

TEST(Dof, ParseLambdaAndNormalize) {
  EXPECT_EQ(parse_lambda("2^-8"), 0.00390625);
  EXPECT_EQ(parse_lambda("0.0625"), 0.0625);
  EXPECT_EQ(parse_lambda("1e-3"), 1e-3);
  EXPECT_EQ(parse_lambda("2^4"), 16.0);
  for (const char* bad : {"abc", "-1", "0", "2^", "^3", "", "1e-3x", " 1", "nan", "inf", "1e999", "-2^3", "2^-2000"})
    EXPECT_THROW(parse_lambda(bad), Error) << bad;
  try {
    parse_lambda("-1");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positive"), std::string::npos) << e.what();
  }
  for (DofNormalize m : kModes) EXPECT_EQ(parse_dof_normalize(dof_normalize_name(m)), m);
  try {
    parse_dof_normalize("frobenius");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace, max, samples, none"), std::string::npos) << e.what();
  }
}

TEST(Dof, BadInputsFail) {
  HeadSpectrum sp{{0.5, 0.5}, 1.0, 2, true, 0.0, 0.0, nullptr};
  EXPECT_THROW(dof_at(sp, 0), Error);
  EXPECT_THROW(dof_at(sp, -1), Error);
  EXPECT_THROW(dof_at(sp, NAN), Error);
  EXPECT_THROW(shifted_gram(at::tensor({1.0, NAN}).view({1, 2})), Error);
  EXPECT_THROW(shifted_gram(at::ones({3})), Error);
  EXPECT_THROW(spectrum_of_gram(at::ones({2, 3}, at::kDouble), DofSettings()), Error);
  EXPECT_THROW(spectrum_of_gram(at::ones({2, 2}, at::kFloat), DofSettings()), Error);
  EXPECT_THROW(spectrum_of_gram(at::tensor({1.0, 2.0, 0.0, 1.0}).view({2, 2}), DofSettings()), Error);  // not symmetric
  DofSettings zero;
  zero.samples = 0;
  EXPECT_THROW(head_spectrum(at::ones({3, 4}), at::ones({3, 4}), zero, 0), Error);
  EXPECT_THROW(head_spectrum(at::ones({3, 4}), at::ones({3, 5}), DofSettings(), 0), Error);
  EXPECT_THROW(head_dofs(DofSpectra(), -1.0), Error);
}

TEST(Dof, ComputeSpectraOnTinyCaptureMatchesLoops) {
  LoadedModel m = load_model(test::tiny_gpt2_dir());
  const std::string dir = test::temp_dir("dof_cap") + "/store";
  CaptureOptions o;
  o.seq_len = 24, o.num_seqs = 3, o.seed = 4, o.batch = 2;
  capture_to_dir(m, test::sample_documents(), o, dir);
  const CaptureStore st(dir);

  for (DofNormalize mode : {DofNormalize::Trace, DofNormalize::Samples}) {
    DofSettings s = settings_for(mode, 4096);  // >= 2 T L = 144: every vector
    int calls = 0;
    double last = -1;
    const DofSpectra sp = compute_spectra(st, s, [&](double f, const std::string&) {
      EXPECT_GE(f, last);
      last = f;
      ++calls;
    });
    EXPECT_EQ(last, 1.0);
    EXPECT_GE(calls, 4);
    EXPECT_EQ(sp.num_layers, 2);
    EXPECT_EQ(sp.num_heads, 2);
    EXPECT_EQ(sp.head_dim, 8);
    EXPECT_EQ(sp.capture_dir, dir);
    EXPECT_FALSE(sp.model.empty());
    const auto mu = reference_capture_mu(st, mode);
    // samples scales Sigma by exp(c) / J, so lambda is also taken relative to each head's largest
    // eigenvalue, where the comparison stays tight (see tolerance()).
    for (double lambda : {std::pow(2.0, -8), 0.1, -1e-3, -0.1}) {
      for (int l = 0; l < 2; ++l) {
        double ref_max = 0, tol_max = 0;
        for (int h = 0; h < 2; ++h) {
          const double lam = lambda > 0 ? lambda : -lambda * *std::max_element(mu[l][h].begin(), mu[l][h].end());
          const double ref = reference_dof(mu[l][h], lam), tol = tolerance(mu[l][h], lam, ref);
          EXPECT_EQ(sp.head(l, h).samples, 144);
          // The check has teeth, except for samples at an absolute lambda far below exp(c) / J.
          if (mode == DofNormalize::Trace || lambda < 0) {
            EXPECT_LT(tol, 1e-6 * ref);
          }
          EXPECT_NEAR(dof_at(sp.head(l, h), lam).value, ref, tol) << "layer " << l << " head " << h << " lambda " << lam;
          if (lambda > 0 && ref > ref_max) ref_max = ref, tol_max = tol;
        }
        if (lambda > 0) {
          EXPECT_NEAR(layer_dofs(sp, lambda)[l].value, ref_max, tol_max);
        }
      }
      if (lambda > 0) {  // heads differ: the test can tell them apart
        EXPECT_NE(head_dofs(sp, lambda)[0][0].value, head_dofs(sp, lambda)[0][1].value);
      }
    }
  }
  // Fewer samples: reproducible, J each, and per-head seeds make heads draw different subsets.
  const DofSpectra a = compute_spectra(st, settings_for(DofNormalize::Trace, 50));
  const DofSpectra b = compute_spectra(st, settings_for(DofNormalize::Trace, 50));
  EXPECT_EQ(a.head(1, 1).samples, 50);
  EXPECT_EQ(a.head(1, 1).eigenvalues, b.head(1, 1).eigenvalues);
  DofSettings other = settings_for(DofNormalize::Trace, 50);
  other.seed = 1;
  EXPECT_NE(compute_spectra(st, other).head(1, 1).eigenvalues, a.head(1, 1).eigenvalues);
}

// A real capture: every head's trace-normalized DoF (all 2 x T x L vectors) against the loops.
void expect_real_capture_matches_loops(const std::string& model, int seq_len) {
  LoadedModel m = load_model(model);
  const std::string dir = test::temp_dir("dof_real") + "/store";
  CaptureOptions o;
  o.seq_len = seq_len, o.num_seqs = 3, o.seed = 2, o.batch = 3;
  capture_to_dir(m, test::sample_documents(), o, dir);
  const CaptureStore st(dir);
  const DofSpectra sp = compute_spectra(st, settings_for(DofNormalize::Trace, 1024));
  const double lambda = std::pow(2.0, -8);
  const auto mu = reference_capture_mu(st, DofNormalize::Trace);
  const auto got = head_dofs(sp, lambda);
  for (int l = 0; l < st.num_layers(); ++l)
    for (int h = 0; h < st.num_heads(); ++h) {
      const double ref = reference_dof(mu[l][h], lambda);
      EXPECT_EQ(sp.head(l, h).samples, 2 * 3 * seq_len);
      EXPECT_NEAR(got[l][h].value, ref, tolerance(mu[l][h], lambda, ref)) << "layer " << l << " head " << h;
      EXPECT_LT(tolerance(mu[l][h], lambda, ref), 1e-8 * ref);
    }
}

TEST(Dof, Stories260KSpectraMatchLoops) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  expect_real_capture_matches_loops(bin, 32);
}

TEST(Dof, BundledModelSpectraMatchLoops) {
  expect_real_capture_matches_loops(test::source_dir() + "/resources/models/brown-gpt2-mini", 32);
}


// stories260K on the capture of docs/PERFORMANCE.md (8 x 256 tokens of the sample texts, seed 0).
// (1) Layer 1 heads 3 and 6 have queries with |x|^2 / sqrt(d) ~ 770, where samples and none used to
// fail ("exp(...) out of double range"). On the 256 longest of their queries and keys (every one in
// the sample), lambda exp(-c) is ~e^-50 at any representable lambda, below the resolution, so the
// DoF at the CLI's default lambda is the number of eigenvalues resolved above it: counted here on
// Eigen's eigenvalues of the loop-built shifted Gram (a tie at the resolution may move it by one).
// (2) Every head of layer 0 at J = 256 against the loops on the documented sample
// (sample_without_replacement over [queries; keys], derive_seed(seed, 0, h)): the trace DoF at J
// and at J/2 (the convergence check) at 2^-8.
TEST(Dof, Stories260KBeyondDoubleRangeAndConvergenceMatchLoops) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  LoadedModel m = load_model(bin);
  const std::string dir = test::temp_dir("dof_s260") + "/store";
  CaptureOptions o;
  o.seq_len = 256, o.num_seqs = 8, o.seed = 0;
  capture_to_dir(m, test::sample_documents(), o, dir);
  const CaptureStore st(dir);
  const int64_t d = st.head_dim();
  auto vectors = [&](const at::Tensor& t) {
    Vectors x;
    const at::Tensor c = t.to(at::kDouble).contiguous();
    for (int64_t i = 0; i < c.size(0); ++i) x.emplace_back(c[i].data_ptr<double>(), c[i].data_ptr<double>() + d);
    return x;
  };
  auto head_qk = [&](int layer, int h) {
    return std::make_pair(st.layer_tensor(layer, "q").select(1, h).reshape({-1, d}).to(at::kDouble),
                          st.layer_tensor(layer, "k").select(1, h).reshape({-1, d}).to(at::kDouble));
  };

  for (int h : {3, 6}) {
    auto [q, k] = head_qk(1, h);
    auto longest = [](const at::Tensor& t) { return t.index_select(0, std::get<1>((t * t).sum(1).topk(128))); };
    const at::Tensor ql = longest(q), kl = longest(k);
    const Vectors x = vectors(at::cat({ql, kl}));
    const double c = max_sq_norm_over_sqrt_d(x);
    EXPECT_GT(c, 709.8) << "head " << h << ": the capture no longer exercises the overflow";
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(loop_gram(x, c), Eigen::EigenvaluesOnly);
    const Eigen::VectorXd e = es.eigenvalues();
    const double floor = rank_tolerance(e.maxCoeff(), int(x.size()), c);
    int rank = 0;
    for (int i = 0; i < e.size(); ++i) rank += e(i) >= floor;
    for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
      const double v = dof_at(head_spectrum(ql, kl, settings_for(mode), 1), std::pow(2.0, -8)).value;
      EXPECT_NEAR(v, rank, 1.0) << "head " << h << " " << dof_normalize_name(mode);
      EXPECT_NEAR(double(unresolved_count(head_spectrum(ql, kl, settings_for(mode), 1), std::pow(2.0, -8))), 256.0 - rank, 1.0);
      std::printf("stories260K layer 1 head %d, 256 longest q/k: c = %.1f, %s DoF(2^-8) = %.2f (resolved rank %d)\n", h, c,
                  dof_normalize_name(mode), v, rank);
    }
  }

  const int64_t J = 256;
  const DofSettings trace = settings_for(DofNormalize::Trace, J);
  const double lambda = std::pow(2.0, -8);
  for (int h = 0; h < st.num_heads(); ++h) {
    auto [q, k] = head_qk(0, h);
    const Vectors all = vectors(at::cat({q, k}));
    auto rows = [](const std::vector<int64_t>& idx, const Vectors& from) {
      Vectors x;
      for (int64_t i : idx) x.push_back(from[i]);
      return x;
    };
    const uint64_t head_seed = derive_seed(trace.seed, 0, h);
    const Vectors x = rows(sample_without_replacement(int64_t(all.size()), J, head_seed), all);
    const Vectors xh = rows(sample_without_replacement(J, J / 2, derive_seed(head_seed, 1)), x);
    const double ref_full = reference_dof(reference_mu(loop_gram(x, max_sq_norm_over_sqrt_d(x)), DofNormalize::Trace), lambda);
    const double ref_half = reference_dof(reference_mu(loop_gram(xh, max_sq_norm_over_sqrt_d(xh)), DofNormalize::Trace), lambda);
    const DofConvergence cv = dof_convergence(head_spectrum(q, k, trace, head_seed), lambda);
    EXPECT_NEAR(cv.dof, ref_full, 1e-8 * ref_full) << "head " << h;
    EXPECT_NEAR(cv.dof_half, ref_half, 1e-8 * ref_half) << "head " << h;
    EXPECT_EQ(cv.converged, std::abs(ref_full - ref_half) <= 0.1 * ref_full) << "head " << h;
    std::printf("stories260K layer 0 head %d: trace DoF(2^-8) J = %lld: %.2f, J/2: %.2f%s\n", h, (long long)J, cv.dof, cv.dof_half,
                cv.converged ? "" : " (not converged)");
  }
}

}  // namespace test_dof
