// Degrees of freedom of the attention kernel per head (SPEC section 5; paper 000, sec. 3.2).
//
// For a head, J vectors x_1..x_J are drawn (seeded) from its pooled queries and keys, the Gram
// matrix G_ij = exp(x_i.x_j / sqrt d) is formed in float64, Sigma = G / n, and
//
//     DoF(lambda) = tr(Sigma (Sigma + lambda I)^{-1}) = sum_i mu_i / (mu_i + lambda)
//
// over the eigenvalues mu of Sigma. The eigenvalues are kept, so DoF at a new lambda is O(J): that
// is what makes the lambda slider instant.
//
// The kernel of pooled vectors, not a causal map: a model's sliding window (Mistral), which only
// decides which pairs a query reads, does not enter (deliberately: DoF measures the kernel that a
// feature map must reproduce, for every pair).
//
// Log-domain scaling: exp(x_i.x_j / sqrt d) overflows a double once |x|^2 / sqrt d passes ~709, which
// real models reach (stories260K layer 0: 729.5). Every entry is therefore computed as
// exp(x_i.x_j / sqrt d - c) with c = max_i |x_i|^2 / sqrt d (so every entry is <= 1), and
// eig(G) = exp(c) eig(shifted). The spectrum stays in that shifted form with its log scale:
// HeadSpectrum holds e_s with Sigma's eigenvalues exp(log_scale) e_s. The trace and max normalizers
// cancel exp(c) (log_scale = 0: e_s are Sigma's eigenvalues); samples (n = J) and none (n = 1) keep
// it (log_scale = c). DoF is evaluated without ever forming exp(c):
//     mu / (mu + lambda) = e / (e + lambda exp(-c)),
// and when lambda exp(-c) underflows every nonzero eigenvalue contributes exactly 1.
//
// Resolution: computed eigenvalues below res = J eps (1 + |c|) e_max are not resolved from zero.
// The eigensolver gets them to ~J eps e_max (backward stability; numpy.linalg.matrix_rank's default
// tolerance), and the shifted entries exp(s - c) carry a relative error ~eps |c| from their
// exponents. As long as the ridge t = lambda exp(-c) is at least res, such an eigenvalue adds at
// most res / t to the DoF and is kept as computed. Below (samples/none at a huge c, where t
// underflows to 0, or an absurdly small lambda) each of them would count ~1 by the accident of its
// rounding, so they count 0: DoF is then that of the resolved spectrum (at t = 0 the numerical rank
// of the sampled Gram), not 1 plus however many rounding errors came out positive. That is a lower
// bound: in exact arithmetic the exp kernel's Gram of distinct vectors is positive definite and
// each dropped eigenvalue would count up to 1 (unresolved_count says how many; the JSON and text
// output report it). On real heads (stories260K layer 1, c ~ 770) the eigenvalues dsyevd resolves
// under samples/none are a handful: use trace (or max) there.
//
// Convergence: the estimate depends on J (stories260K layer 0, trace: 20.2 at J = 1024, 54.4 at
// J = 4096). Each head also keeps the spectrum of a J/2 subset of its J samples
// (sample_without_replacement(J, J/2, derive_seed(head_seed, 1)), rows of the J sample), so the DoF
// at J/2 is as cheap as the DoF at J at any lambda; dof_convergence flags heads whose DoF moves by
// more than kDofConvergenceTolerance between the two. (The J/2 spectrum costs ~1/8 of the J one.)
//
// Exact path (J <= exact_limit): every eigenvalue, from LAPACK's dsyevd (LibTorch's eigvalsh in
// builds without LAPACKE).
//
// Certified fast path (J > exact_limit, top_k < J, normalizer trace, samples or none: max divides by
// the largest eigenvalue, which a Ritz value only bounds from below): Rayleigh-Ritz on a block Krylov subspace (block Lanczos
// with full reorthogonalization, block columns at a time; every product of the Gram with the basis
// is a GEMM; the method is argued in core/src/analysis/dof_solvers.cpp), plus the trace T (the sum
// of all J eigenvalues, free from the diagonal). Convergence is never assumed. The Ritz values
// theta_1 >= .. >= theta_n of the Gram on any n-dimensional subspace interlace its eigenvalues
// mu_1 >= .. >= mu_J (Cauchy): theta_i <= mu_i (kept lowered by a rounding margin so that this holds
// in floating point too). So the spectrum lies in the set
//     S = {mu : mu_i >= theta_i (i <= n), mu >= 0, sum mu = T},
// and as f(mu) = mu / (mu + lambda) is concave and increasing with f(0) = 0 (in the shifted units,
// f(e) = e / (e + lambda exp(-c))), DofValue's bounds are the exact minimum and maximum of sum f(mu)
// over S, with r = T - sum theta the mass the subspace has not found:
//   lower = sum f(theta_i) + f(theta_1 + r) - f(theta_1)
//       (a concave function is least at a vertex of S, where all the leftover mass sits on one
//       eigenvalue; f(theta_i + r) - f(theta_i) is least for the largest theta_i);
//   upper = sum_i f(max(theta_i, tau)) + (J - n) f(tau), with the water level tau set by sum = T
//       (water-filling: the KKT point, all raised eigenvalues at one slope f').
// The sum of squares F = sum mu^2 (the Gram's squared Frobenius norm, O(J^2) from its entries)
// sharpens the lower bound: for any parabola q(mu) = a mu - b mu^2 tangent to f from below at some
// m >= 0 (b = 1 / (m + lambda)^2, a = 2 sqrt(b) - b lambda), f - q = b mu (mu - m)^2 / (mu + lambda)
// >= 0, increasing beyond m. So sum f(mu) = sum (f - q)(mu) + a T - b F
//     >= sum_{theta_i >= m} b theta_i (theta_i - m)^2 / (theta_i + lambda) + a T - b F,
// best over a grid of m. Where the piled-up bound assumes the unfound mass could sit on the top
// eigenvalue, this one knows from F that it cannot (it would square to more than F allows), which is
// what makes the lower bound tight for the flat tails of real heads.
// When unresolved eigenvalues count 0 (the ridge below the resolution, see above), mass can also
// hide under the resolution in any eigenvalue, so the lower bound piles up only what exceeds that
// room, and the upper bound is also at most the number of eigenvalues the mass can lift to the
// resolution. The trace is bracketed by T (1 -+ 2 J eps). Width: about r / lambda, so a head
// certifies once the subspace holds all but ~tolerance x DoF x lambda of the trace. The value is the
// midpoint, off the true DoF by at most half the width.
//
// The basis grows block by block until the bounds at settings.lambda are within settings.tolerance
// (relative: (upper - lower) / value); a head whose bounds are still wider at top_k columns (a
// spectrum that decays too slowly: DoF near J, or a heavy tail) takes the exact path (exact = true).
// The kept spectrum holds the Ritz values and the trace, so the bounds are recomputed at any lambda
// (the slider); away from settings.lambda they may be wider than the tolerance (wide_bounds).
// Spectra saved by the earlier Lanczos fast path (top_k Ritz values, also interlacing) load and get
// the same certified bounds. Timings: docs/PERFORMANCE.md.
//
// Batched (settings.batched, or a CUDA settings.device): every head of a layer at once on the
// device, the [H, J, J] shifted Grams in float64 (each head's own shift) and LibTorch's batched
// eigvalsh (cuSOLVER on a GPU); the same samples, the exact path's spectra up to rounding.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/attention/gram.h"
#include "attnscope/base/progress.h"

namespace attnscope {

class CaptureStore;


// The DoF tolerance lambda everywhere one is not given: 2^-8 (paper 000's setting).
constexpr double kDefaultLambda = 1.0 / 256;

// "2^-8", "0.0625", "1e-3"; must be > 0 and finite, else Error. Only the front ends parse: core
// takes lambda as a double.
double parse_lambda(const std::string& text);

struct DofSettings {
  int64_t samples = 1024;  // J requested per head (the first J; see max_samples)
  // J per head: a head whose DoF at `lambda` is unconverged at J (dof_convergence: it moves by more
  // than kDofConvergenceTolerance between J/2 and J) is computed again at 2J, 4J, ... until it
  // converges, J reaches this cap (the last step is min(2J, cap)) or every vector of the head is
  // used. Each head's spectrum records the J it ended with (HeadSpectrum::samples); a head still
  // unconverged at the cap stays flagged. <= samples: no doubling.
  int64_t max_samples = kDefaultMaxSamples;
  static constexpr int64_t kDefaultMaxSamples = 4096;
  DofNormalize normalize = DofNormalize::Trace;
  uint64_t seed = 0;
  int64_t exact_limit = 1024;  // J above this takes the certified fast path
  int64_t top_k = 1024;        // the fast path's largest Krylov subspace (Ritz values kept), then exact
  int64_t block = 64;          // columns added to the Krylov subspace per step
  double lambda = kDefaultLambda;  // where the fast path's bounds must be within the tolerance
  double tolerance = 0.01;     // (upper - lower) / value the fast path must reach
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"; CUDA computes a layer's heads batched
  bool batched = false;        // all heads of a layer at once (exact) on `device`, the CPU included
};

struct HeadSpectrum {
  // e_s, descending, >= 0: Sigma's eigenvalues are exp(log_scale) * e_s. All J when exact; otherwise
  // Ritz values, each at most the matching eigenvalue (the certified fast path).
  std::vector<double> eigenvalues;
  double trace = 0;     // sum of ALL e_s (tr Sigma = exp(log_scale) trace): what bounds the rest on the fast path
  int64_t samples = 0;  // J actually used (min(requested, available))
  bool exact = true;
  double log_scale = 0;   // 0 for trace and max; the Gram's shift c for samples and none
  double resolution = 0;  // res above, in the units of e_s (0: unknown, e.g. a version-1 file)
  // The same head on a J/2 subset of its J samples (see Convergence above); null when J < 2 or read
  // from a version-1 spectra file.
  std::shared_ptr<const HeadSpectrum> half;
  double sum_squares = 0;  // sum of ALL e_s^2 (the squared Frobenius norm) on the fast path; 0: unknown
};

struct DofValue {
  double value = 0, lower = 0, upper = 0;  // exact: all three equal
};

// O(#eigenvalues). lambda must be > 0.
DofValue dof_at(const HeadSpectrum& spectrum, double lambda);


// How many of the J eigenvalues dof_at counts 0 only for being below the resolution (above): 0
// when the ridge lambda exp(-c) is at least the resolution. On the fast path the J - n eigenvalues
// beyond the Ritz values all count (any of them may be).
int64_t unresolved_count(const HeadSpectrum& spectrum, double lambda);

// The DoF at J and at J/2 (the half spectrum), both the midpoint value on the fast path.
constexpr double kDofConvergenceTolerance = 0.1;
struct DofConvergence {
  double dof = 0;
  double dof_half = 0;         // NaN when the spectrum has no J/2 half
  double relative_change = 0;  // |dof - dof_half| / dof; NaN without a half
  int64_t samples = 0, samples_half = 0;
  bool checked = false;    // a J/2 spectrum exists
  bool converged = false;  // checked and relative_change <= kDofConvergenceTolerance
  bool unconverged() const { return checked && !converged; }  // flagged: needs a larger J
};
DofConvergence dof_convergence(const HeadSpectrum& spectrum, double lambda);


// The spectrum of Sigma = exp(log_scale) gram / n: `gram` is a float64 symmetric [J, J] matrix, the
// Gram itself (log_scale = 0) or a shifted one (log_scale = c from shifted_gram). No half spectrum.
// Throws Error for a bad shape, non-finite entries or no positive diagonal.
HeadSpectrum spectrum_of_gram(const at::Tensor& gram, const DofSettings& settings, double log_scale = 0);

// q, k: [N, d] each, all query and key vectors of one head. Samples J of the 2N pooled vectors with
// sample_without_replacement(2N, J, head_seed) (random.h) (index i < N is query i, else key i - N),
// in that pooled order, and the half spectrum on rows sample_without_replacement(J, J/2,
// derive_seed(head_seed, 1)) of them.
HeadSpectrum head_spectrum(const at::Tensor& q, const at::Tensor& k, const DofSettings& settings,
                           uint64_t head_seed);

struct DofSpectra {
  DofSettings settings;
  std::string capture_dir, model;
  int num_layers = 0, num_heads = 0;
  int64_t head_dim = 0;
  std::vector<HeadSpectrum> heads;  // layer-major, num_layers * num_heads

  const HeadSpectrum& head(int s, int h) const;  // throws Error when out of range
};

// Whether the fast path gave up on this head computed with these settings (its bounds still wider
// than the tolerance at top_k, so it was solved exactly): an exact spectrum of a J the fast path takes.
bool fast_path_fell_back(const DofSettings& settings, const HeadSpectrum& head);

// Every head of layer s; head h samples with derive_seed(settings.seed, s, h). Per head on the CPU
// (exact or certified fast path), or batched on settings.device (Batched above); then every head
// unconverged at settings.lambda doubles its J up to settings.max_samples (per head on the CPU). Error for a bad
// layer, and for a device this build or machine cannot use (device.h).
std::vector<HeadSpectrum> layer_spectra(const CaptureStore& store, int layer, const DofSettings& settings,
                                        const ProgressFn& progress = nullptr);

// Every head of every layer (layer_spectra), one layer in memory at a time.
DofSpectra compute_spectra(const CaptureStore& store, const DofSettings& settings,
                           const ProgressFn& progress = nullptr);

std::vector<std::vector<DofValue>> head_dofs(const DofSpectra& spectra, double lambda);  // [S][H]
// The values alone ([S][H]), as allocate() takes them.
std::vector<std::vector<double>> dof_values(const std::vector<std::vector<DofValue>>& head_dof);
// Per layer the max over heads, of value, lower and upper each.
std::vector<DofValue> layer_dofs(const DofSpectra& spectra, double lambda);
std::vector<std::vector<DofConvergence>> head_convergence(const DofSpectra& spectra, double lambda);  // [S][H]

// Heads whose fast-path bounds are wider than `fraction` of their value: whoever uses the midpoint
// (allocate) says so.
struct WideBound {
  int layer = 0, head = 0;
  DofValue dof;
};
std::vector<WideBound> wide_bounds(const std::vector<std::vector<DofValue>>& head_dof, double fraction = 0.01);

// safetensors (atomic write), version 2: per head "layer_{s}.head_{h}.eigenvalues" float64 and, when
// it has one, "layer_{s}.head_{h}.half_eigenvalues"; [S, H] tables "trace", "log_scale" (float64),
// "samples" (int64), "exact" (bool), and of the half spectra "half_trace", "half_log_scale",
// "half_samples" (0: none), "half_exact", "resolution", "half_resolution", "sum_squares",
// "half_sum_squares" (since the block Krylov path; absent: 0, unknown); settings, capture dir,
// model and shape in __metadata__ (format "attnscope.dof_spectra"). A head with exact false holds
// Ritz values (lower bounds on its largest eigenvalues) and its trace, whichever fast path wrote it
// (the Lanczos one before 2026-11-26 too). The settings' block, lambda and tolerance (since the
// block Krylov path), device and batched read as the defaults from older files.
void save_spectra(const std::string& path, const DofSpectra& spectra);
// Reads versions 1 (no log scale: c = 0; resolution 0; no half spectra) and 2. Throws Error naming the file when it
// is missing, corrupt or not a spectra file.
DofSpectra load_spectra(const std::string& path);

}  // namespace attnscope
