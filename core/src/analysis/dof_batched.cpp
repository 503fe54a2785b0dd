// Every head of a layer at once on a device (dof.h, "Batched"): [H, J, J] shifted Grams in float64
// and LibTorch's batched symmetric eigensolver (cuSOLVER on a GPU, LAPACK per matrix on the CPU).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "attnscope/analysis/dof_solvers.h"
#include "attnscope/base/device.h"
#include "attnscope/base/error.h"

namespace attnscope {
namespace {

// Grams of at most this many bytes at once: H x J x J doubles is 1 GiB for 8 heads at J = 4096,
// and eigvalsh needs about as much again as workspace.
constexpr int64_t kBatchBytes = int64_t(2) << 30;

// Exact spectra of the vectors x[i] ([J, d] float64 each, one J), as head_spectrum computes them
// one by one: the same shift c = max |x|^2 / sqrt d per head, the same operations, batched.
std::vector<HeadSpectrum> exact_spectra(const std::vector<at::Tensor>& x, const DofSettings& settings,
                                        const at::Device& device) {
  const int64_t n = int64_t(x.size()), J = x[0].size(0), d = x[0].size(1);
  const int64_t group = std::max<int64_t>(1, kBatchBytes / (J * J * int64_t(sizeof(double))));
  std::vector<HeadSpectrum> out;
  for (int64_t first = 0; first < n; first += group) {
    const int64_t count = std::min(group, n - first);
    const at::Tensor X = at::stack(std::vector<at::Tensor>(x.begin() + first, x.begin() + first + count)).to(device);
    if (!at::isfinite(X).all().item<bool>()) fail("dof", "the sampled vectors contain NaN or infinity");
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    const at::Tensor c = (X * X).sum(2).amax(1) * inv_sqrt_d;  // [count]
    at::Tensor G = at::matmul(X, X.transpose(1, 2));
    G.mul_(inv_sqrt_d).sub_(c.view({count, 1, 1})).exp_();
    const at::Tensor diag = G.diagonal(0, 1, 2).sum(1).cpu();
    const at::Tensor eig = at::linalg_eigvalsh(G, "L").flip(1).cpu().contiguous();  // descending
    G = at::Tensor();
    const at::Tensor shift = c.cpu();
    for (int64_t i = 0; i < count; ++i) {
      const double* e = eig[i].data_ptr<double>();
      out.push_back(spectrum_from_eigenvalues(std::vector<double>(e, e + J), true, J, diag[i].item<double>(), settings,
                                              shift[i].item<double>()));
    }
  }
  return out;
}

}  // namespace

std::vector<HeadSpectrum> batched_spectra(const std::vector<at::Tensor>& x, const std::vector<uint64_t>& seeds,
                                          const DofSettings& settings, const at::Device& device) {
  if (x.empty()) return {};
  if (seeds.size() != x.size()) fail("dof", "one seed per head is needed for the batched spectra");
  for (const at::Tensor& t : x)
    if (t.dim() != 2 || t.sizes() != x[0].sizes() || t.scalar_type() != at::kDouble)
      fail("dof", "the batched spectra need every head's sampled vectors as float64 [J, d] of one shape");
  std::vector<HeadSpectrum> full = exact_spectra(x, settings, device);
  const int64_t J = x[0].size(0);
  if (J >= 2) {
    std::vector<at::Tensor> halves;
    for (size_t h = 0; h < x.size(); ++h)
      halves.push_back(x[h].index_select(0, at::tensor(half_sample(J, seeds[h]), at::kLong)));
    std::vector<HeadSpectrum> half = exact_spectra(halves, settings, device);
    for (size_t h = 0; h < x.size(); ++h) full[h].half = std::make_shared<const HeadSpectrum>(std::move(half[h]));
  }
  return full;
}

}  // namespace attnscope
