// Degrees of freedom per head: sampling, the log-domain Gram, its spectrum and DoF(lambda).
// The method and the fast-path bounds are derived in dof.h.
#include "attnscope/analysis/dof.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>

#include "attnscope/analysis/dof_solvers.h"
#include "attnscope/capture/capture.h"
#include "attnscope/base/device.h"
#include "attnscope/base/error.h"
#include "attnscope/base/random.h"

namespace attnscope {
namespace {

constexpr const char* kWhere = "dof";
// The Krylov start block's seed: fixed, so a spectrum is reproducible.
constexpr uint64_t kKrylovSeed = 0x6b72796c6f76ull;

void check_lambda(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda))
    fail(kWhere, "lambda must be positive and finite, got " + std::to_string(lambda));
}

void check_settings(const DofSettings& s) {
  if (s.samples < 1) fail(kWhere, "samples (J) must be at least 1, got " + std::to_string(s.samples));
  if (s.exact_limit < 0) fail(kWhere, "exact_limit must not be negative, got " + std::to_string(s.exact_limit));
  if (s.top_k < 1) fail(kWhere, "top_k (the largest Krylov subspace) must be at least 1, got " + std::to_string(s.top_k));
  if (s.block < 1) fail(kWhere, "block must be at least 1, got " + std::to_string(s.block));
  if (!(s.lambda > 0) || !std::isfinite(s.lambda))
    fail(kWhere, "the lambda to certify at must be positive and finite, got " + std::to_string(s.lambda));
  if (!(s.tolerance > 0)) fail(kWhere, "tolerance must be positive, got " + std::to_string(s.tolerance));
  if (s.max_samples < 0) fail(kWhere, "max_samples (the cap on J per head) must not be negative, got " + std::to_string(s.max_samples));
}

// A whole-string strtod: "1e-3" yes, "1e-3x", "", " " no.
// The max normalizer divides by the largest eigenvalue, which Ritz values only bound from below,
// so max spectra are always exact.
bool takes_fast_path(const DofSettings& s, int64_t J) {
  return J > s.exact_limit && std::min(s.top_k, J) < J && s.normalize != DofNormalize::Max;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE) return false;
  *out = v;
  return true;
}

}  // namespace


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


DofValue dof_at(const HeadSpectrum& sp, double lambda) {
  // mu / (mu + lambda) with mu = exp(c) e is e / (e + t), t = lambda exp(-c). When t underflows to 0,
  // every nonzero e counts 1 and every zero e (a rank-deficient spectrum) 0, not 0 / 0. When t is
  // below the resolution, unresolved eigenvalues count 0 (dof.h): g below is f with that rule.
  const double t = shifted_ridge(lambda, sp.log_scale);
  const bool drop_unresolved = t < sp.resolution;
  auto f = [&](double e) { return t > 0 ? e / (e + t) : double(e > 0); };
  auto g = [&](double e) { return drop_unresolved && e < sp.resolution ? 0.0 : f(e); };
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
    for (double v : e) kept += g(v);
  }
  if (sp.exact) return {kept, kept, kept};

  // Fast path (bounds derived in dof.h): e holds theta_1 >= .. >= theta_n, lower bounds on the n
  // largest of the J eigenvalues mu, whose sum is the trace T. The trace is a sum of J rounded
  // terms: T (1 -+ 2 J eps) brackets the exact one.
  const int64_t J = std::max<int64_t>(sp.samples, int64_t(n)), others = J - int64_t(n);
  const double eps = std::numeric_limits<double>::epsilon();
  const double trace_low = sp.trace * (1 - 2 * double(J) * eps), trace_high = sp.trace * (1 + 2 * double(J) * eps);
  double theta_sum = 0;
  for (double v : e) theta_sum += v;

  // Lower: the leftover mass piled onto the largest eigenvalue. Over the set {mu_i >= theta_i,
  // mu >= 0, sum mu = T} the concave sum of f is least at a vertex, where every constraint but one
  // is tight; the leftover r then sits on one eigenvalue i and costs f(theta_i + r) - f(theta_i),
  // least for the largest theta_i (f concave). When unresolved eigenvalues count 0, mass can also
  // hide for free below the resolution (just under res in each of them): only what is left after
  // that must be piled up.
  double hidden = 0;
  if (drop_unresolved) {
    for (double v : e) hidden += std::max(0.0, sp.resolution - v);
    hidden += double(others) * sp.resolution;
  }
  const double top = n > 0 ? e[0] : 0.0;
  const double pile = std::max(0.0, trace_low - theta_sum - hidden);
  double lower = kept + std::max(0.0, g(top + pile) - (n > 0 ? g(top) : 0.0));
  // With the sum of squares F: the tangent parabolas of dof.h, touching f at m = t 2^j and at 0.
  if (sp.sum_squares > 0 && t > 0 && !drop_unresolved) {
    const double squares_high = sp.sum_squares * (1 + 4 * double(J) * eps);
    for (int j = -7; j <= 5; ++j) {
      const double m = j == -7 ? 0.0 : std::ldexp(t, j);
      const double b = 1 / ((m + t) * (m + t)), a = 2 / (m + t) - b * t;
      double bound = a * trace_low - b * squares_high;
      for (double v : e)
        if (v > m) bound += b * v * (v - m) * (v - m) / (v + t);
      lower = std::max(lower, bound);
    }
  }

  // Upper: water-filling, the maximum of the concave sum over the same set (KKT: equal slopes f'
  // wherever mu_i > theta_i): mu_i = max(theta_i, tau) and tau for the J - n others, with the water
  // level tau set by sum mu = T. p counts the theta_i above the water.
  int64_t p = std::min<int64_t>(int64_t(n), J - 1);
  double tau = 0;
  if (p >= 0) {
    double above = theta_sum;  // sum of theta_i for i < p
    for (int64_t i = p; i < int64_t(n); ++i) above -= e[i];
    tau = (trace_high - above) / double(J - p);
    while (p > 0 && tau > e[p - 1]) {
      --p;
      above -= e[p];
      tau = (trace_high - above) / double(J - p);
    }
    if (p < int64_t(n)) tau = std::max(tau, e[p]);  // only when rounding put sum theta above T
    tau = std::max(tau, 0.0);
  }
  double upper = double(J - std::max<int64_t>(p, 0)) * f(tau);
  for (int64_t i = 0; i < p; ++i) upper += f(e[i]);
  if (drop_unresolved) {
    // g <= f, so the above holds; and every eigenvalue that counts is >= res and counts at most 1:
    // the resolved theta_i, plus as many more as the leftover mass can lift to res (the cheapest
    // first: the largest unresolved theta_i, then the others at res each).
    double budget = std::max(0.0, trace_high - theta_sum), count = 0;
    size_t i = 0;
    for (; i < n && e[i] >= sp.resolution; ++i) count += 1;
    for (; i < n && budget >= sp.resolution - e[i]; ++i) {
      budget -= sp.resolution - e[i];
      count += 1;
    }
    if (i == n && sp.resolution > 0) count += std::min(double(others), std::floor(budget / sp.resolution));
    upper = std::min(upper, count);
  }
  upper = std::max(upper, lower);  // equal up to rounding when the basis holds the whole spectrum
  return {0.5 * (lower + upper), lower, upper};
}

int64_t unresolved_count(const HeadSpectrum& sp, double lambda) {
  if (!(shifted_ridge(lambda, sp.log_scale) < sp.resolution)) return 0;
  int64_t n = 0;
  for (double e : sp.eigenvalues) n += e < sp.resolution;
  // On the fast path any of the eigenvalues beyond the Ritz values may be unresolved.
  if (!sp.exact) n += std::max<int64_t>(0, sp.samples - int64_t(sp.eigenvalues.size()));
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



HeadSpectrum spectrum_from_eigenvalues(std::vector<double> eig, bool exact, int64_t J, double diag_trace,
                                       const DofSettings& settings, double log_scale, double sum_squares) {
  HeadSpectrum sp;
  sp.samples = J;
  sp.exact = exact;
  // Sigma = exp(log_scale) gram / n = exp(gs.log_scale) gram / gs.divisor: the eigenvalues stay in
  // the Gram's shifted units (dof.h, log-domain scaling).
  const GramScale gs = gram_scale(settings.normalize, diag_trace, eig.front(), J, log_scale);
  // A positive semi-definite matrix: negative eigenvalues are rounding noise around zero.
  for (double& e : eig) e = std::max(e, 0.0) / gs.divisor;
  sp.log_scale = gs.log_scale;
  sp.resolution = double(J) * std::numeric_limits<double>::epsilon() * (1.0 + std::abs(log_scale)) * eig.front();
  sp.trace = exact ? std::accumulate(eig.begin(), eig.end(), 0.0) : diag_trace / gs.divisor;
  if (!exact) sp.sum_squares = sum_squares / gs.divisor / gs.divisor;
  sp.eigenvalues = std::move(eig);
  return sp;
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
  // The same pass sums the squares of the lower triangle: F = sum mu^2 = sum_ij G_ij^2 (fast path).
  double big = 0, asym = 0, diag_trace = 0, squares = 0;
  for (int64_t i = 0; i < J; ++i) {
    double row = 0;
    for (int64_t j = 0; j < i; ++j) {
      const double a = p[i * J + j], b = p[j * J + i];
      if (!std::isfinite(a) || !std::isfinite(b)) fail(kWhere, "the Gram matrix contains NaN or infinity");
      big = std::max(big, std::abs(a));
      asym = std::max(asym, std::abs(a - b));
      row += a * a;
    }
    const double d = p[i * J + i];
    if (!std::isfinite(d)) fail(kWhere, "the Gram matrix contains NaN or infinity");
    big = std::max(big, std::abs(d));
    diag_trace += d;
    squares += 2 * row + d * d;
  }
  if (asym > 1e-10 * big) fail(kWhere, "the Gram matrix is not symmetric");
  if (!(diag_trace > 0)) fail(kWhere, "the Gram matrix has no positive diagonal (trace " + std::to_string(diag_trace) + ")");

  // The certified fast path (dof.h): grow the Krylov basis until the bounds at settings.lambda are
  // within the tolerance; past the cap, the exact path.
  const int64_t cap = std::min(settings.top_k, J);
  if (takes_fast_path(settings, J)) {
    auto tight = [&](const std::vector<double>& theta) {
      const DofValue v =
          dof_at(spectrum_from_eigenvalues(theta, false, J, diag_trace, settings, log_scale, squares), settings.lambda);
      return v.upper - v.lower <= settings.tolerance * v.value;
    };
    RitzValues ritz = block_krylov_ritz(g, settings.block, cap, diag_trace, kKrylovSeed, tight);
    if (ritz.accepted)
      return spectrum_from_eigenvalues(std::move(ritz.values), false, J, diag_trace, settings, log_scale, squares);
  }
  std::vector<double> a(p, p + J * J);
  return spectrum_from_eigenvalues(all_eigenvalues(a, J), true, J, diag_trace, settings, log_scale);
}

at::Tensor sampled_vectors(const at::Tensor& q, const at::Tensor& k, int64_t samples, uint64_t head_seed) {
  if (!q.defined() || !k.defined() || q.dim() != 2 || k.dim() != 2 || q.size(1) != k.size(1) || q.size(1) < 1)
    fail(kWhere, "queries and keys must be [N, d] with the same d >= 1");
  if (!at::isFloatingType(q.scalar_type()) || !at::isFloatingType(k.scalar_type()))
    fail(kWhere, "queries and keys must be floating tensors");
  const int64_t nq = q.size(0), available = nq + k.size(0);
  if (available < 1) fail(kWhere, "the head has no query or key vectors");
  const std::vector<int64_t> idx = sample_without_replacement(available, samples, head_seed);
  // idx is sorted, so the queries come first: the pooled order [q; k] is kept.
  std::vector<int64_t> qi, ki;
  for (int64_t i : idx) (i < nq ? qi : ki).push_back(i < nq ? i : i - nq);
  return at::cat({q.index_select(0, at::tensor(qi, at::kLong)).to(at::kDouble),
                  k.index_select(0, at::tensor(ki, at::kLong)).to(at::kDouble)});
}

std::vector<int64_t> half_sample(int64_t J, uint64_t head_seed) {
  return sample_without_replacement(J, J / 2, derive_seed(head_seed, 1));
}

HeadSpectrum head_spectrum(const at::Tensor& q, const at::Tensor& k, const DofSettings& settings, uint64_t head_seed) {
  check_settings(settings);
  const at::Tensor x = sampled_vectors(q, k, settings.samples, head_seed);
  double c = 0;
  const at::Tensor g = shifted_gram(x, &c);  // before the call that reads c
  HeadSpectrum sp = spectrum_of_gram(g, settings, c);
  // The convergence check: the same head on a J/2 subset of these J rows, shifted by its own maximum.
  const int64_t J = x.size(0);
  if (J >= 2) {
    double ch = 0;
    const at::Tensor gh = shifted_gram(x.index_select(0, at::tensor(half_sample(J, head_seed), at::kLong)), &ch);
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

bool fast_path_fell_back(const DofSettings& settings, const HeadSpectrum& head) {
  const bool batched = settings.batched || settings.device.rfind("cuda", 0) == 0;
  return !batched && head.exact && takes_fast_path(settings, head.samples);
}

std::vector<HeadSpectrum> layer_spectra(const CaptureStore& store, int layer, const DofSettings& settings,
                                        const ProgressFn& progress) {
  check_settings(settings);
  if (layer < 0 || layer >= store.num_layers())
    fail(kWhere, "no layer " + std::to_string(layer) + " in a capture of " + std::to_string(store.num_layers()) + " layers");
  const at::Device device = parse_device(settings.device);
  const int H = store.num_heads();
  const int64_t d = store.head_dim();
  const at::Tensor q = store.layer_tensor(layer, "q"), k = store.layer_tensor(layer, "k");  // [T, H, L, d]
  auto head_q = [&](int h) { return q.select(1, h).reshape({-1, d}); };
  auto head_k = [&](int h) { return k.select(1, h).reshape({-1, d}); };
  // J per head (DofSettings::max_samples): double while unconverged, up to the cap or every vector.
  const int64_t available = 2 * q.size(0) * q.size(2);  // T L queries and T L keys
  auto converge = [&](int h, HeadSpectrum& sp) {
    while (dof_convergence(sp, settings.lambda).unconverged() && sp.samples < settings.max_samples && sp.samples < available) {
      DofSettings more = settings;
      more.samples = std::min(2 * sp.samples, settings.max_samples);
      if (progress)
        progress(double(h) / H, "head " + std::to_string(h + 1) + "/" + std::to_string(H) + " unconverged: J = " + std::to_string(more.samples));
      sp = head_spectrum(head_q(h), head_k(h), more, derive_seed(settings.seed, layer, h));
    }
  };
  std::vector<HeadSpectrum> out;
  if (settings.batched || !device.is_cpu()) {
    if (progress) progress(0.0, "heads 1-" + std::to_string(H) + " batched on " + settings.device);
    std::vector<at::Tensor> x;
    std::vector<uint64_t> seeds;
    for (int h = 0; h < H; ++h) {
      seeds.push_back(derive_seed(settings.seed, layer, h));
      x.push_back(sampled_vectors(head_q(h), head_k(h), settings.samples, seeds.back()));
    }
    out = batched_spectra(x, seeds, settings, device);
    for (int h = 0; h < H; ++h) converge(h, out[h]);  // per head on the CPU
    return out;
  }
  for (int h = 0; h < H; ++h) {
    if (progress) progress(double(h) / H, "head " + std::to_string(h + 1) + "/" + std::to_string(H));
    out.push_back(head_spectrum(head_q(h), head_k(h), settings, derive_seed(settings.seed, layer, h)));
    converge(h, out.back());
  }
  return out;
}

DofSpectra compute_spectra(const CaptureStore& store, const DofSettings& settings, const ProgressFn& progress) {
  check_settings(settings);
  parse_device(settings.device);  // before any work: a clear error for a device this build cannot use
  DofSpectra out;
  out.settings = settings;
  out.capture_dir = store.dir();
  out.num_layers = store.num_layers();
  out.num_heads = store.num_heads();
  out.head_dim = store.head_dim();
  out.model = store.model_path();

  const int S = out.num_layers;
  out.heads.reserve(size_t(S) * out.num_heads);
  for (int s = 0; s < S; ++s) {
    ProgressFn in_layer;
    if (progress)
      in_layer = [&](double f, const std::string& what) {
        progress((s + f) / S, "layer " + std::to_string(s + 1) + "/" + std::to_string(S) + " " + what);
      };
    for (HeadSpectrum& hs : layer_spectra(store, s, settings, in_layer)) out.heads.push_back(std::move(hs));
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
