// DoF of a head (SPEC section 5). The references here build the Gram matrix in plain loops over
// double and take eigenvalues with Eigen's SelfAdjointEigenSolver (the implementation uses LAPACK's
// dsyevd and Spectra), so an error in core's Gram, shift, normalization or sum cannot be mirrored.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "attnscope/capture.h"
#include "attnscope/dof.h"
#include "attnscope/random.h"
#include "attnscope/error.h"
#include "attnscope/model.h"
#include "attnscope/safetensors.h"
#include "attnscope/text_source.h"
#include "test_support.h"
#include "tiny_models.h"

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

double reference_dof(const std::vector<double>& mu, double lambda) {
  double s = 0;
  for (double m : mu) s += m / (m + lambda);
  return s;
}

DofSettings settings_for(DofNormalize mode, int64_t samples = 1 << 20) {
  DofSettings s;
  s.normalize = mode;
  s.samples = samples;
  s.exact_limit = 1 << 20;
  return s;
}

std::vector<TextDocument> sample_docs() {
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(test::source_dir() + "/resources/texts")) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return read_text_documents(paths);
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
    EXPECT_NEAR(sp.trace, ref_trace, 1e-10 * ref_trace) << dof_normalize_name(mode);
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
  EXPECT_NEAR(sp.eigenvalues[0], e, 1e-12 * e);
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
  // samples and none cannot undo exp(-c) in a double: a clear error, pointing at trace.
  for (DofNormalize mode : {DofNormalize::Samples, DofNormalize::None}) {
    try {
      head_spectrum(to_tensor(x), at::empty({0, d}, at::kDouble), settings_for(mode), 3);
      ADD_FAILURE() << "expected an overflow error for " << dof_normalize_name(mode);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--normalize trace"), std::string::npos) << e.what();
    }
  }
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

TEST(Dof, FastPathBoundsBracketTheExactDofAndTightenWithTopK) {
  const Vectors x = random_vectors(300, 16, 1.0, 21);
  const at::Tensor g = shifted_gram(to_tensor(x));
  const HeadSpectrum exact = spectrum_of_gram(g, settings_for(DofNormalize::Trace));
  ASSERT_TRUE(exact.exact);
  for (double lambda : {1e-4, std::pow(2.0, -8), 0.05}) {
    const double truth = dof_at(exact, lambda).value;
    double last_gap = 1e300;
    for (int64_t k : {8, 32, 128}) {
      DofSettings st = settings_for(DofNormalize::Trace);
      st.exact_limit = 64;
      st.top_k = k;
      const HeadSpectrum fast = spectrum_of_gram(g, st);
      ASSERT_FALSE(fast.exact);
      ASSERT_EQ(int64_t(fast.eigenvalues.size()), k);
      EXPECT_EQ(fast.samples, 300);
      EXPECT_NEAR(fast.trace, 1.0, 1e-12);
      for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(fast.eigenvalues[i], exact.eigenvalues[i], 1e-9 * exact.eigenvalues[0]);
      const DofValue v = dof_at(fast, lambda);
      EXPECT_LE(v.lower, truth * (1 + 1e-9)) << "k " << k << " lambda " << lambda;
      EXPECT_GE(v.upper, truth * (1 - 1e-9)) << "k " << k << " lambda " << lambda;
      EXPECT_GE(v.value, v.lower);
      EXPECT_LE(v.value, v.upper);
      const double gap = v.upper - v.lower;
      EXPECT_LT(gap, last_gap) << "k " << k << " lambda " << lambda;
      last_gap = gap;
    }
  }
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
  sp.heads.push_back({{0.6, 0.3, 0.1}, 1.0, 3, true});
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
  sp.heads[0] = {{0.6, 0.3, 0.1}, 1.0, 2, false};
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
  HeadSpectrum sp{{0.5, 0.5}, 1.0, 2, true};
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
  capture_to_dir(m, sample_docs(), o, dir);
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
  capture_to_dir(m, sample_docs(), o, dir);
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

