// Degrees of freedom per head: sampling, the log-domain Gram, its spectrum and DoF(lambda).
// The method and the fast-path bounds are derived in dof.h.
#include "attnscope/dof.h"

#include <ATen/ATen.h>
#ifdef ATTNSCOPE_HAVE_SPECTRA
#include <cblas.h>
#include <lapacke.h>

#include <Eigen/Core>
#include <Spectra/SymEigsSolver.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>

#include "attnscope/capture.h"
#include "attnscope/error.h"
#include "attnscope/random.h"

namespace attnscope {
namespace {

constexpr const char* kWhere = "dof";

void check_lambda(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda))
    fail(kWhere, "lambda must be positive and finite, got " + std::to_string(lambda));
}

void check_settings(const DofSettings& s) {
  if (s.samples < 1) fail(kWhere, "samples (J) must be at least 1, got " + std::to_string(s.samples));
  if (s.exact_limit < 0) fail(kWhere, "exact_limit must not be negative, got " + std::to_string(s.exact_limit));
  if (s.top_k < 1) fail(kWhere, "top_k must be at least 1, got " + std::to_string(s.top_k));
}

// A whole-string strtod: "1e-3" yes, "1e-3x", "", " " no.
bool parse_double(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE) return false;
  *out = v;
  return true;
}

#ifdef ATTNSCOPE_HAVE_SPECTRA
// All eigenvalues of the symmetric [J, J] matrix, descending. dsyevd without eigenvectors reduces
// to tridiagonal form (dsytrd, half of its O(J^3) work in blocked BLAS-3 updates) and runs
// root-free QR on the result; with OpenBLAS that is 2-4x faster than Eigen's SelfAdjointEigenSolver
// here (docs/PERFORMANCE.md). `a` is overwritten.
std::vector<double> all_eigenvalues(std::vector<double>& a, int64_t J) {
  std::vector<double> w(J);
  const lapack_int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', lapack_int(J), a.data(), lapack_int(J), w.data());
  if (info != 0) fail(kWhere, "LAPACK dsyevd failed (info " + std::to_string(info) + ") on a " + std::to_string(J) + "x" + std::to_string(J) + " Gram matrix");
  std::reverse(w.begin(), w.end());
  return w;
}

// y = A x for Spectra, by BLAS dsymv: it reads one triangle only, and the Lanczos iteration is
// nothing but these products, so this is about 1.7x faster than Spectra's own DenseSymMatProd
// (Eigen) at J = 4096 here.
struct SymmetricProduct {
  using Scalar = double;
  const double* a;
  Eigen::Index n;
  Eigen::Index rows() const { return n; }
  Eigen::Index cols() const { return n; }
  void perform_op(const double* x, double* y) const {
    cblas_dsymv(CblasColMajor, CblasLower, CBLAS_INT(n), 1.0, a, CBLAS_INT(n), x, 1, 0.0, y, 1);
  }
};

// The k largest eigenvalues, descending, by Spectra's implicitly restarted Lanczos (k < J).
// Spectra starts from a fixed pseudo-random vector, so the result is reproducible. Returns an empty
// vector when the solver does not converge.
std::vector<double> top_eigenvalues(const double* a, int64_t J, int64_t k) {
  SymmetricProduct op{a, J};
  // The usual Krylov subspace size: twice the wanted count gives quick restarts.
  const int64_t ncv = std::min(J, std::max(2 * k + 1, k + 20));
  Spectra::SymEigsSolver<SymmetricProduct> eigs(op, k, ncv);
  eigs.init();
  eigs.compute(Spectra::SortRule::LargestAlge, /*maxit=*/1000, /*tol=*/1e-12);
  if (eigs.info() != Spectra::CompInfo::Successful) return {};
  const Eigen::VectorXd v = eigs.eigenvalues();  // descending for LargestAlge
  return std::vector<double>(v.data(), v.data() + v.size());
}

#else
// Without LAPACKE/Spectra (e.g. a pip LibTorch build): LibTorch's own LAPACK, same eigenvalues.
std::vector<double> all_eigenvalues(std::vector<double>& a, int64_t J) {
  const at::Tensor w = at::linalg_eigvalsh(at::from_blob(a.data(), {J, J}, at::kDouble), "L").flip(0).contiguous();
  return std::vector<double>(w.data_ptr<double>(), w.data_ptr<double>() + J);
}

// No Lanczos here: an empty result sends the caller to the exact path.
std::vector<double> top_eigenvalues(const double*, int64_t, int64_t) { return {}; }
#endif

}  // namespace

constexpr DofNormalize kNormalizers[] = {DofNormalize::Trace, DofNormalize::Max, DofNormalize::Samples, DofNormalize::None};

std::vector<std::string> dof_normalize_names() {
  std::vector<std::string> out;
  for (DofNormalize n : kNormalizers) out.push_back(dof_normalize_name(n));
  return out;
}

DofNormalize parse_dof_normalize(const std::string& name) {
  std::string valid;
  for (DofNormalize n : kNormalizers) {
    if (name == dof_normalize_name(n)) return n;
    valid += (valid.empty() ? "" : ", ") + std::string(dof_normalize_name(n));
  }
  fail_value("normalization", "'" + name + "' is unknown (valid: " + valid + ")");
}

const char* dof_normalize_name(DofNormalize n) {
  switch (n) {
    case DofNormalize::Trace: return "trace";
    case DofNormalize::Max: return "max";
    case DofNormalize::Samples: return "samples";
    case DofNormalize::None: return "none";
  }
  return "?";
}

double parse_lambda(const std::string& text) {
  const std::string bad = "lambda '" + text + "' ";
  double v = 0;
  const auto caret = text.find('^');
  if (caret != std::string::npos) {
    double base = 0, exponent = 0;
    if (!parse_double(text.substr(0, caret), &base) || !parse_double(text.substr(caret + 1), &exponent))
      fail(kWhere, bad + "is not a number (examples: 2^-8, 0.0625, 1e-3)");
    v = std::pow(base, exponent);
  } else if (!parse_double(text, &v)) {
    fail(kWhere, bad + "is not a number (examples: 2^-8, 0.0625, 1e-3)");
  }
  if (!std::isfinite(v)) fail(kWhere, bad + "is not finite");
  if (!(v > 0)) fail(kWhere, bad + "must be positive");
  return v;
}

double shifted_ridge(double lambda, double log_scale) {
  check_lambda(lambda);
  if (!std::isfinite(log_scale)) fail(kWhere, "the spectrum's log scale is not finite");
  // log_scale = 0 (trace, max) keeps lambda bit for bit.
  return log_scale == 0 ? lambda : std::exp(std::log(lambda) - log_scale);
}

DofValue dof_at(const HeadSpectrum& sp, double lambda) {
  // mu / (mu + lambda) with mu = exp(c) e is e / (e + t), t = lambda exp(-c). When t underflows to 0,
  // every nonzero e counts 1 and every zero e (a rank-deficient spectrum) 0, not 0 / 0. When t is
  // below the resolution, unresolved eigenvalues count 0 (dof.h).
  const double t = shifted_ridge(lambda, sp.log_scale);
  const bool drop_unresolved = t < sp.resolution;
  auto f = [&](double e) {
    if (drop_unresolved && e < sp.resolution) return 0.0;
    return t > 0 ? e / (e + t) : double(e > 0);
  };
  const std::vector<double>& e = sp.eigenvalues;
  const size_t n = e.size();
  double kept = 0;
  if (t > 0 && !drop_unresolved) {
    // Four independent sums: without -ffast-math the compiler may not reorder one running sum, and
    // the single chain of dependent additions would be the bottleneck of the slider. (e >= 0 and
    // t > 0: no 0 / 0 here.)
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      a0 += e[i] / (e[i] + t);
      a1 += e[i + 1] / (e[i + 1] + t);
      a2 += e[i + 2] / (e[i + 2] + t);
      a3 += e[i + 3] / (e[i + 3] + t);
    }
    for (; i < n; ++i) a0 += e[i] / (e[i] + t);
    kept = (a0 + a1) + (a2 + a3);
  } else {
    for (double v : e) kept += f(v);
  }

  const int64_t rest = sp.samples - int64_t(n);
  if (sp.exact || rest <= 0 || n == 0) return {kept, kept, kept};

  // The tail: rest eigenvalues in [0, m] with sum r (bounds derived in dof.h), all in the shifted
  // units of e, so f is the same function.
  const double m = e.back();
  const double r = std::clamp(sp.trace - std::accumulate(e.begin(), e.end(), 0.0), 0.0, double(rest) * m);
  double tail_low = 0, tail_high = 0;
  if (m > 0 && r > 0) {
    const double full = std::min(std::floor(r / m), double(rest));
    tail_low = full * f(m) + f(std::max(0.0, r - full * m));
    // Spread evenly, over as many eigenvalues as still count.
    const double spread = drop_unresolved ? std::min(double(rest), std::floor(r / sp.resolution)) : double(rest);
    tail_high = spread >= 1 ? spread * f(r / spread) : 0.0;
  }
  const double lower = kept + tail_low, upper = kept + tail_high;
  return {0.5 * (lower + upper), lower, upper};
}

int64_t unresolved_count(const HeadSpectrum& sp, double lambda) {
  if (!(shifted_ridge(lambda, sp.log_scale) < sp.resolution)) return 0;
  int64_t n = 0;
  for (double e : sp.eigenvalues) n += e < sp.resolution;
  const int64_t rest = sp.samples - int64_t(sp.eigenvalues.size());
  if (!sp.exact && rest > 0 && !sp.eigenvalues.empty() && sp.eigenvalues.back() < sp.resolution) n += rest;
  return n;
}

DofConvergence dof_convergence(const HeadSpectrum& sp, double lambda) {
  DofConvergence c;
  c.dof = dof_at(sp, lambda).value;
  c.samples = sp.samples;
  if (!sp.half) {
    c.dof_half = c.relative_change = std::nan("");
    return c;
  }
  c.checked = true;
  c.dof_half = dof_at(*sp.half, lambda).value;
  c.samples_half = sp.half->samples;
  const double diff = std::abs(c.dof - c.dof_half);
  c.relative_change = c.dof > 0 ? diff / c.dof : (diff > 0 ? INFINITY : 0.0);
  c.converged = c.relative_change <= kDofConvergenceTolerance;
  return c;
}

GramScale gram_scale(DofNormalize normalize, double trace, double top_eigenvalue, int64_t J, double shift) {
  if (!std::isfinite(shift)) fail(kWhere, "the Gram's log scale is not finite");
  GramScale g;
  switch (normalize) {
    case DofNormalize::Trace: g = {trace, 0.0}; break;  // exp(shift) cancels
    case DofNormalize::Max: g = {top_eigenvalue, 0.0}; break;
    case DofNormalize::Samples: g = {double(J), shift}; break;
    case DofNormalize::None: g = {1.0, shift}; break;
  }
  if (!(g.divisor > 0) || !std::isfinite(g.divisor))
    fail(kWhere, std::string("normalizer '") + dof_normalize_name(normalize) + "' of the Gram matrix is " +
                     std::to_string(g.divisor) + " (the Gram needs a positive trace and largest eigenvalue)");
  return g;
}

at::Tensor shifted_gram(const at::Tensor& x_in, double* shift) {
  if (!x_in.defined() || x_in.dim() != 2 || x_in.size(0) < 1 || x_in.size(1) < 1)
    fail(kWhere, "the sampled vectors must be [J, d] with J, d >= 1");
  if (!at::isFloatingType(x_in.scalar_type())) fail(kWhere, "the sampled vectors must be a floating tensor");
  const at::Tensor x = x_in.to(at::kDouble).contiguous();
  if (!at::isfinite(x).all().item<bool>()) fail(kWhere, "the sampled vectors contain NaN or infinity");
  const double inv_sqrt_d = 1.0 / std::sqrt(double(x.size(1)));
  // c = max_i |x_i|^2 / sqrt d bounds every exponent (x_i.x_j <= |x_i| |x_j|), so entries are <= 1.
  const double c = (x * x).sum(1).max().item<double>() * inv_sqrt_d;
  at::Tensor g = at::matmul(x, x.t());
  g.mul_(inv_sqrt_d).sub_(c).exp_();
  if (shift) *shift = c;
  return g;
}

HeadSpectrum spectrum_of_gram(const at::Tensor& gram, const DofSettings& settings, double log_scale) {
  check_settings(settings);
  if (!gram.defined() || gram.dim() != 2 || gram.size(0) < 1 || gram.size(0) != gram.size(1))
    fail(kWhere, "the Gram matrix must be square [J, J] with J >= 1");
  if (gram.scalar_type() != at::kDouble) fail(kWhere, "the Gram matrix must be float64");
  if (!std::isfinite(log_scale)) fail(kWhere, "the Gram's log scale is not finite");
  const int64_t J = gram.size(0);
  const at::Tensor g = gram.contiguous();
  // Only one triangle is read below, so a matrix that is not symmetric is a caller's mistake. One
  // pass over the pairs (i, j) checks that and finiteness without temporaries of size J^2.
  const double* p = g.data_ptr<double>();
  double big = 0, asym = 0, diag_trace = 0;
  for (int64_t i = 0; i < J; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double a = p[i * J + j], b = p[j * J + i];
      if (!std::isfinite(a) || !std::isfinite(b)) fail(kWhere, "the Gram matrix contains NaN or infinity");
      big = std::max(big, std::abs(a));
      asym = std::max(asym, std::abs(a - b));
    }
    diag_trace += p[i * J + i];
  }
  if (asym > 1e-10 * big) fail(kWhere, "the Gram matrix is not symmetric");
  if (!(diag_trace > 0)) fail(kWhere, "the Gram matrix has no positive diagonal (trace " + std::to_string(diag_trace) + ")");

  HeadSpectrum sp;
  sp.samples = J;
  const int64_t k = std::min(settings.top_k, J);
  sp.exact = J <= settings.exact_limit || k >= J;
  std::vector<double> eig;
  if (!sp.exact) {
    eig = top_eigenvalues(p, J, k);
    if (eig.empty()) sp.exact = true;  // Lanczos did not converge: pay for the full decomposition
  }
  if (sp.exact) {
    std::vector<double> a(p, p + J * J);
    eig = all_eigenvalues(a, J);
  }
  // Sigma = exp(log_scale) gram / n = exp(gs.log_scale) gram / gs.divisor: the eigenvalues stay in
  // the Gram's shifted units (dof.h, log-domain scaling).
  const GramScale gs = gram_scale(settings.normalize, diag_trace, eig.front(), J, log_scale);
  // A positive semi-definite matrix: negative eigenvalues are rounding noise around zero.
  for (double& e : eig) e = std::max(e, 0.0) / gs.divisor;
  sp.log_scale = gs.log_scale;
  sp.resolution = double(J) * std::numeric_limits<double>::epsilon() * (1.0 + std::abs(log_scale)) * eig.front();
  sp.trace = sp.exact ? std::accumulate(eig.begin(), eig.end(), 0.0) : diag_trace / gs.divisor;
  sp.eigenvalues = std::move(eig);
  return sp;
}

HeadSpectrum head_spectrum(const at::Tensor& q, const at::Tensor& k, const DofSettings& settings, uint64_t head_seed) {
  check_settings(settings);
  if (!q.defined() || !k.defined() || q.dim() != 2 || k.dim() != 2 || q.size(1) != k.size(1) || q.size(1) < 1)
    fail(kWhere, "queries and keys must be [N, d] with the same d >= 1");
  if (!at::isFloatingType(q.scalar_type()) || !at::isFloatingType(k.scalar_type()))
    fail(kWhere, "queries and keys must be floating tensors");
  const int64_t nq = q.size(0), available = nq + k.size(0);
  if (available < 1) fail(kWhere, "the head has no query or key vectors");
  const std::vector<int64_t> idx = sample_without_replacement(available, settings.samples, head_seed);
  // idx is sorted, so the queries come first: the pooled order [q; k] is kept.
  std::vector<int64_t> qi, ki;
  for (int64_t i : idx) (i < nq ? qi : ki).push_back(i < nq ? i : i - nq);
  const at::Tensor x = at::cat({q.index_select(0, at::tensor(qi, at::kLong)).to(at::kDouble),
                                k.index_select(0, at::tensor(ki, at::kLong)).to(at::kDouble)});
  double c = 0;
  const at::Tensor g = shifted_gram(x, &c);  // before the call that reads c
  HeadSpectrum sp = spectrum_of_gram(g, settings, c);
  // The convergence check: the same head on a J/2 subset of these J rows, shifted by its own maximum.
  const int64_t J = x.size(0);
  if (J >= 2) {
    const std::vector<int64_t> sub = sample_without_replacement(J, J / 2, derive_seed(head_seed, 1));
    double ch = 0;
    const at::Tensor gh = shifted_gram(x.index_select(0, at::tensor(sub, at::kLong)), &ch);
    sp.half = std::make_shared<const HeadSpectrum>(spectrum_of_gram(gh, settings, ch));
  }
  return sp;
}

const HeadSpectrum& DofSpectra::head(int s, int h) const {
  if (s < 0 || s >= num_layers || h < 0 || h >= num_heads ||
      heads.size() != size_t(num_layers) * size_t(num_heads))
    fail(kWhere, "no head (" + std::to_string(s) + ", " + std::to_string(h) + ") in spectra of " +
                     std::to_string(num_layers) + " layers x " + std::to_string(num_heads) + " heads");
  return heads[size_t(s) * num_heads + h];
}

DofSpectra compute_spectra(const CaptureStore& store, const DofSettings& settings, const ProgressFn& progress) {
  check_settings(settings);
  DofSpectra out;
  out.settings = settings;
  out.capture_dir = store.dir();
  out.num_layers = store.num_layers();
  out.num_heads = store.num_heads();
  out.head_dim = store.head_dim();
  out.model = store.model_path();

  const int S = out.num_layers, H = out.num_heads;
  const int64_t d = out.head_dim;
  out.heads.reserve(size_t(S) * H);
  for (int s = 0; s < S; ++s) {
    const at::Tensor q = store.layer_tensor(s, "q"), k = store.layer_tensor(s, "k");  // [T, H, L, d]
    for (int h = 0; h < H; ++h) {
      if (progress)
        progress(double(s * H + h) / (S * H),
                 "layer " + std::to_string(s + 1) + "/" + std::to_string(S) + " head " + std::to_string(h + 1) + "/" + std::to_string(H));
      out.heads.push_back(head_spectrum(q.select(1, h).reshape({-1, d}), k.select(1, h).reshape({-1, d}), settings,
                                        derive_seed(settings.seed, s, h)));
    }
  }
  if (progress) progress(1.0, "done");
  return out;
}

std::vector<std::vector<DofValue>> head_dofs(const DofSpectra& spectra, double lambda) {
  check_lambda(lambda);
  std::vector<std::vector<DofValue>> out(spectra.num_layers);
  for (int s = 0; s < spectra.num_layers; ++s)
    for (int h = 0; h < spectra.num_heads; ++h) out[s].push_back(dof_at(spectra.head(s, h), lambda));
  return out;
}

std::vector<std::vector<double>> dof_values(const std::vector<std::vector<DofValue>>& head_dof) {
  std::vector<std::vector<double>> out(head_dof.size());
  for (size_t s = 0; s < head_dof.size(); ++s)
    for (const DofValue& v : head_dof[s]) out[s].push_back(v.value);
  return out;
}

std::vector<std::vector<DofConvergence>> head_convergence(const DofSpectra& spectra, double lambda) {
  check_lambda(lambda);
  std::vector<std::vector<DofConvergence>> out(spectra.num_layers);
  for (int s = 0; s < spectra.num_layers; ++s)
    for (int h = 0; h < spectra.num_heads; ++h) out[s].push_back(dof_convergence(spectra.head(s, h), lambda));
  return out;
}

std::vector<WideBound> wide_bounds(const std::vector<std::vector<DofValue>>& head_dof, double fraction) {
  std::vector<WideBound> out;
  for (size_t s = 0; s < head_dof.size(); ++s)
    for (size_t h = 0; h < head_dof[s].size(); ++h) {
      const DofValue& v = head_dof[s][h];
      if (v.upper - v.lower > fraction * v.value) out.push_back({int(s), int(h), v});
    }
  return out;
}

std::vector<DofValue> layer_dofs(const DofSpectra& spectra, double lambda) {
  std::vector<DofValue> out;
  for (const auto& row : head_dofs(spectra, lambda)) {
    DofValue m;
    for (const DofValue& v : row) {
      m.value = std::max(m.value, v.value);
      m.lower = std::max(m.lower, v.lower);
      m.upper = std::max(m.upper, v.upper);
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace attnscope
