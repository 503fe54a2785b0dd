// The eigensolvers of the DoF spectra: dsyevd for every eigenvalue, and block Krylov Ritz values
// whose products are matrix-matrix (dof_solvers.h; the bounds built on them are derived in dof.h).
#include "attnscope/analysis/dof_solvers.h"

#include <ATen/ATen.h>
#ifdef ATTNSCOPE_HAVE_LAPACKE
#include <lapacke.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attnscope/base/error.h"

namespace attnscope {

#ifdef ATTNSCOPE_HAVE_LAPACKE
// dsyevd without eigenvectors reduces to tridiagonal form (dsytrd, half of its O(J^3) work in
// blocked BLAS-3 updates) and runs root-free QR on the result; with OpenBLAS that is 2-4x faster
// than Eigen's SelfAdjointEigenSolver here (docs/PERFORMANCE.md).
std::vector<double> all_eigenvalues(std::vector<double>& a, int64_t J) {
  std::vector<double> w(J);
  const lapack_int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', lapack_int(J), a.data(), lapack_int(J), w.data());
  if (info != 0)
    fail("dof", "LAPACK dsyevd failed (info " + std::to_string(info) + ") on a " + std::to_string(J) + "x" +
                    std::to_string(J) + " Gram matrix");
  std::reverse(w.begin(), w.end());
  return w;
}
#else
// Without LAPACKE (e.g. a pip LibTorch build): LibTorch's own LAPACK, the same eigenvalues.
std::vector<double> all_eigenvalues(std::vector<double>& a, int64_t J) {
  const at::Tensor w = at::linalg_eigvalsh(at::from_blob(a.data(), {J, J}, at::kDouble), "L").flip(0).contiguous();
  return std::vector<double>(w.data_ptr<double>(), w.data_ptr<double>() + J);
}
#endif

namespace {

// An orthonormal basis of the block `z`, orthogonal to the orthonormal columns of `q` (J x b each).
// z has already had its components along q removed once. Block classical Gram-Schmidt "twice"
// (BCGS2): normalize the block by QR, remove its components along q again, QR again. The first QR
// makes the block well conditioned, so the second projection leaves it orthogonal to q to rounding
// level even when z's columns were nearly dependent; a column the second QR shrinks (|R_jj| < 1/2:
// it was mostly rounding noise inside span q) gets another round, and one that vanishes (the
// Krylov space is exhausted, e.g. a rank-one Gram) is replaced by a fresh Gaussian direction. An
// orthonormal basis is all the interlacing needs.
at::Tensor orthonormal_block(const at::Tensor& q, const at::Tensor& z, at::Generator& gen) {
  at::Tensor v = std::get<0>(at::linalg_qr(z, "reduced"));
  for (int round = 0; round < 4; ++round) {
    if (q.size(1) > 0) v = v - at::mm(q, at::mm(q.t(), v));
    auto [w, r] = at::linalg_qr(v, "reduced");
    const at::Tensor kept = r.diagonal().abs();
    if (kept.min().item<double>() >= 0.5) return w.contiguous();
    const at::Tensor fresh = at::randn(w.sizes(), gen, at::kDouble);
    v = at::where((kept < 1e-8).unsqueeze(0), fresh / std::sqrt(double(w.size(0))), w);
  }
  fail("dof", "the block Krylov basis could not be extended (the Gram matrix has fewer dimensions than the subspace)");
}

}  // namespace

// Method: block Lanczos with full reorthogonalization, i.e. Rayleigh-Ritz on the block Krylov space
// span{Omega, G Omega, G^2 Omega, ...} (randomized block Krylov, Musco & Musco 2015). Why this one:
//  - every product is G times a J x b block, a GEMM that runs near the BLAS peak, where the
//    Lanczos it replaces made one matrix-vector product at a time (memory bound, ~10x slower per flop);
//  - for the same number of products a Krylov space captures the top of the spectrum much better
//    than subspace iteration, which keeps only the last block (iterations ~ 1/sqrt(gap) instead of
//    1/gap); and keeping every block's product G Q_j gives the projected matrix Q^T G Q without any
//    further product;
//  - the bounds (dof.h) need no convergence: any orthonormal basis gives Ritz values that interlace,
//    so the basis grows until the bounds are tight enough, not until eigenpairs converge.
RitzValues block_krylov_ritz(const at::Tensor& gram, int64_t block, int64_t cap, double trace, uint64_t seed,
                             const std::function<bool(const std::vector<double>&)>& accept) {
  const int64_t J = gram.size(0);
  const at::Tensor g = gram.contiguous();
  cap = std::min(cap, J);
  const int64_t b = std::max<int64_t>(1, std::min(block, cap));
  at::Generator gen = at::detail::createCPUGenerator(seed);
  // Q = [Q_1 .. Q_m] in the first k columns, P = Q^T G Q in the leading k x k block.
  at::Tensor Q = at::zeros({J, cap}, at::kDouble);
  at::Tensor P = at::zeros({cap, cap}, at::kDouble);
  at::Tensor V = orthonormal_block(Q.narrow(1, 0, 0), at::randn({J, b}, gen, at::kDouble), gen);
  int64_t k = 0;
  RitzValues out;
  while (true) {
    const int64_t nb = V.size(1);
    Q.narrow(1, k, nb).copy_(V);
    const at::Tensor W = at::mm(g, V);  // the one product with G per block
    const at::Tensor Qk = Q.narrow(1, 0, k + nb);
    const at::Tensor C = at::mm(Qk.t(), W);  // rows 0..k+nb of P's new column block
    P.narrow(0, 0, k + nb).narrow(1, k, nb).copy_(C);
    P.narrow(0, k, nb).narrow(1, 0, k + nb).copy_(C.t());
    k += nb;

    // Ritz values of the exact projection of G on span(Q) interlace G's eigenvalues: theta_i <= mu_i.
    // The computed ones differ by the rounding of the products (|dW| <~ J eps |G| |Q|, with G
    // entrywise positive so || |G| || = mu_1 <= tr G) and of Q's orthonormality (a relative k eps):
    // lowered by a margin of that size, they stay below the mu_i.
    std::vector<double> p(k * k);
    const at::Tensor Pk = P.narrow(0, 0, k).narrow(1, 0, k).contiguous();
    std::copy(Pk.data_ptr<double>(), Pk.data_ptr<double>() + k * k, p.begin());
    std::vector<double> theta = all_eigenvalues(p, k);
    const double slack = 4 * std::numeric_limits<double>::epsilon() * double(J + k) * std::sqrt(double(k)) * trace;
    for (double& t : theta) t = std::max(0.0, t - slack);
    out.values = std::move(theta);
    if (accept(out.values)) {
      out.accepted = true;
      return out;
    }
    if (k >= cap) return out;

    // The next block: G Q_j made orthogonal to the basis (its components along Q are C).
    const int64_t next = std::min(b, cap - k);
    at::Tensor Z = W - at::mm(Qk, C);
    if (next < nb) Z = Z.narrow(1, 0, next);
    V = orthonormal_block(Qk, Z, gen);
  }
}

}  // namespace attnscope
