// The eigensolvers behind the DoF spectra (dof.h): every eigenvalue (LAPACK dsyevd), the Ritz
// values of a block Krylov subspace (the certified fast path), every head of a layer at once on a
// device, and the steps the paths share. Private to core/src/analysis.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "attnscope/analysis/dof.h"

namespace attnscope {

// All eigenvalues of the symmetric [J, J] column-major (= row-major) matrix `a`, descending, from
// its lower triangle. `a` is overwritten. Error when LAPACK fails.
std::vector<double> all_eigenvalues(std::vector<double>& a, int64_t J);

struct RitzValues {
  // Descending, >= 0, each lowered by a rounding slack so that value i is at most the i-th largest
  // eigenvalue of the matrix (Cauchy interlacing, dof.h). As many as the basis has columns.
  std::vector<double> values;
  bool accepted = false;  // accept() said so before the cap
};

// Ritz values of the symmetric positive semi-definite float64 [J, J] `gram` on a block Krylov
// subspace grown `block` columns at a time, from a Gaussian block drawn with `seed`. After each
// block, accept(values) decides whether to stop; the basis never grows past `cap` columns (nor J).
// `trace` is tr gram (it scales the rounding slack).
RitzValues block_krylov_ritz(const at::Tensor& gram, int64_t block, int64_t cap, double trace, uint64_t seed,
                             const std::function<bool(const std::vector<double>&)>& accept);

// A head's spectrum from its Gram's eigenvalues (descending, in the Gram's units; all J when exact,
// Ritz values otherwise), the Gram's diagonal sum and (fast path) the sum of its squared entries:
// normalized as the settings say (gram_scale),
// with the resolution of dof.h. Every path ends here, so they agree on everything but the solver.
HeadSpectrum spectrum_from_eigenvalues(std::vector<double> eig, bool exact, int64_t J, double diag_trace,
                                       const DofSettings& settings, double log_scale, double sum_squares = 0);

// The J vectors head_spectrum samples from q and k (dof.h), float64 [J, d], and the rows of the J/2
// half spectrum among them.
at::Tensor sampled_vectors(const at::Tensor& q, const at::Tensor& k, int64_t samples, uint64_t head_seed);
std::vector<int64_t> half_sample(int64_t J, uint64_t head_seed);

// Exact spectra (and J/2 halves) of the heads whose sampled vectors are x[h] (all the same [J, d]),
// batched on `device`: the [H, J, J] shifted Grams and LibTorch's batched eigvalsh (cuSOLVER on a
// GPU). Equal to head_spectrum with exact_limit >= J up to rounding.
std::vector<HeadSpectrum> batched_spectra(const std::vector<at::Tensor>& x, const std::vector<uint64_t>& seeds,
                                          const DofSettings& settings, const at::Device& device);

}  // namespace attnscope
