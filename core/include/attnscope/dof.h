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
// Log-domain scaling: exp(x_i.x_j / sqrt d) overflows a double once |x|^2 / sqrt d passes ~709, which
// real models reach. Every entry is therefore computed as exp(x_i.x_j / sqrt d - c) with
// c = max_i |x_i|^2 / sqrt d (so every entry is <= 1), and eig(G) = exp(c) eig(shifted). The trace
// and max normalizers cancel exp(c); samples (n = J) and none (n = 1) put it back, in log space,
// and fail when the result itself does not fit in a double.
//
// Exact path (J <= exact_limit): every eigenvalue, from LAPACK's dsyevd (LibTorch's eigvalsh in
// builds without LAPACKE/Spectra, which also have no fast path). Fast path (J >
// exact_limit): the top_k largest eigenvalues from Spectra's Lanczos solver plus tr(Sigma) (the
// sum of all eigenvalues, free from the diagonal). The unknown tail t_{k+1..J} is then only known
// to lie in [0, mu_k] with sum r = tr - sum(kept). As f(t) = t / (t + lambda) is concave and
// increasing with f(0) = 0, sum f(t) over the tail is
//   smallest when the mass is packed into as few eigenvalues as possible:
//       floor(r / mu_k) f(mu_k) + f(r - floor(r / mu_k) mu_k),
//   largest when it is spread evenly:
//       (J - k) f(r / (J - k)),
// which gives DofValue's certified lower and upper bounds (up to the eigensolver's tolerance);
// its value is their midpoint, off the true DoF by at most half their gap. Should Lanczos not
// converge, the head falls back to the exact path (exact = true). Timings: docs/PERFORMANCE.md.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/progress.h"

namespace attnscope {

class CaptureStore;

// The normalizer n of Sigma = G / n: tr G (default; attention is invariant to scaling the kernel,
// so DoF should be too), the largest eigenvalue (also scale-invariant), J (the empirical operator
// of the theory) or 1 (the Gram as printed in the paper).
enum class DofNormalize { Trace, Max, Samples, None };
DofNormalize parse_dof_normalize(const std::string& name);  // trace|max|samples|none; else Error
const char* dof_normalize_name(DofNormalize n);

// "2^-8", "0.0625", "1e-3"; must be > 0 and finite, else Error.
double parse_lambda(const std::string& text);

struct DofSettings {
  int64_t samples = 1024;  // J requested per head
  DofNormalize normalize = DofNormalize::Trace;
  uint64_t seed = 0;
  int64_t exact_limit = 2048;  // J above this takes the fast path
  int64_t top_k = 256;         // eigenvalues kept on the fast path
};

struct HeadSpectrum {
  std::vector<double> eigenvalues;  // of Sigma = G / n, descending; all J when exact, top_k otherwise
  double trace = 0;                 // tr(Sigma), the sum of ALL eigenvalues (bounds on the fast path)
  int64_t samples = 0;              // J actually used (min(requested, available))
  bool exact = true;
};

struct DofValue {
  double value = 0, lower = 0, upper = 0;  // exact: all three equal
};

// O(#eigenvalues). lambda must be > 0.
DofValue dof_at(const HeadSpectrum& spectrum, double lambda);

// x: [J, d], any floating dtype. Returns the float64 Gram exp(x_i.x_j / sqrt d - c) with
// c = max_i |x_i|^2 / sqrt d, and c through `shift` when given.
at::Tensor shifted_gram(const at::Tensor& x, double* shift = nullptr);

// The spectrum of Sigma = exp(log_scale) gram / n: `gram` is a float64 symmetric [J, J] matrix, the
// Gram itself (log_scale = 0) or a shifted one (log_scale = c from shifted_gram). Throws Error for
// a bad shape, non-finite entries, or a samples/none normalization that overflows a double.
HeadSpectrum spectrum_of_gram(const at::Tensor& gram, const DofSettings& settings, double log_scale = 0);

// q, k: [N, d] each, all query and key vectors of one head. Samples J of the 2N pooled vectors with
// sample_without_replacement(2N, J, head_seed) (random.h) (index i < N is query i, else key i - N).
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

// Every head of every layer, one layer in memory at a time; head (s, h) samples with
// derive_seed(settings.seed, s, h).
DofSpectra compute_spectra(const CaptureStore& store, const DofSettings& settings,
                           const ProgressFn& progress = nullptr);

std::vector<std::vector<DofValue>> head_dofs(const DofSpectra& spectra, double lambda);  // [S][H]
// Per layer the max over heads, of value, lower and upper each.
std::vector<DofValue> layer_dofs(const DofSpectra& spectra, double lambda);

// safetensors (atomic write): "layer_{s}.head_{h}.eigenvalues" float64 per head, "trace" float64
// [S, H], "samples" int64 [S, H], "exact" bool [S, H]; settings, capture dir, model and shape in
// __metadata__ (format "attnscope.dof_spectra").
void save_spectra(const std::string& path, const DofSpectra& spectra);
// Throws Error naming the file when it is missing, corrupt or not a spectra file.
DofSpectra load_spectra(const std::string& path);

}  // namespace attnscope
