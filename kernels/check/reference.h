// The float64 host reference of the CUDA kernel checker (cuda_kernel_check.cpp), straight from the
// definitions of cuda/launch.h and include/attnscope/kernels/linear_attention.h, one (query, key)
// pair at a time: O(L^2 (M + D)), no chunks, no states, no prefix over chunks. Plain C++ (no CUDA,
// no LibTorch), header-only, so tests/test_cuda_check_reference.cpp checks it against the CPU
// kernel on the CPU.
//
//   c_i = max_{j<=i} ls_j,  w_ij = (q_i . k_j) exp(ls_j - c_i) (0 where ls_j = -inf),
//   den_i = sum_{j<=i} w_ij,  y_i = sum_{j<=i} w_ij v_j / den_i (NaN where den_i == 0),
//   lse_i = c_i + log(den_i) (-inf where den_i <= 0).
// The gradients of sum_i gy_i . y_i + h_i lse_i (c_i a constant: y does not depend on it, and
// lse's dependence on c_i cancels), with dL/dw_ij = g'_i . [v_j, 1]:
//   g'_i = [gy_i / den_i, (h_i [den_i > 0] - gy_i . y_i) / den_i], 0 where den_i == 0,
//   dq_i = sum_{j<=i} (g'_i . v'_j) e_ij k_j,  dk_j = sum_{i>=j} (g'_i . v'_j) e_ij q_i,
//   dv_j = sum_{i>=j} w_ij g'_i[:D],  dls_j = sum_{i>=j} (g'_i . v'_j) w_ij,   e_ij = exp(ls_j - c_i).
// The recurrent state after L keys: c = max_j ls_j, S = sum_j exp(ls_j - c) k_j v_j^T, z = sum_j exp(ls_j - c) k_j.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

namespace attnscope::kernels::check {

// One problem: N sequences, q, k [N, L, M], ls [N, L], v [N, L, D], row-major.
struct Problem {
  int64_t N = 0, L = 0, M = 0, D = 0;
  std::vector<double> q, k, ls, v;
};

// Beside each result, the scale its rounding errors are measured against: the largest sum of the
// terms' absolute values over the tensor's entries (what bounds a floating-point sum's error, and
// not ~0 where the terms cancel: dq is exactly 0 at M = 1, where y does not depend on q).
struct ForwardReference {
  std::vector<double> y;    // [N, L, D]
  std::vector<double> den;  // [N, L], relative to c
  std::vector<double> c;    // [N, L]
  std::vector<double> lse;  // [N, L]
  double y_scale = 0, den_scale = 0;
};

struct BackwardReference {
  std::vector<double> dq, dk, dls, dv;
  double dq_scale = 0, dk_scale = 0, dls_scale = 0, dv_scale = 0;
};

struct StateReference {
  std::vector<double> S;  // [N, M, D]
  std::vector<double> z;  // [N, M]
  std::vector<double> c;  // [N]
  double S_scale = 0, z_scale = 0;
};

namespace detail {

// f(r) for r in [0, rows) on `threads` threads (rows are independent).
template <typename F> void parallel_rows(int64_t rows, int threads, F f) {
  if (threads <= 1 || rows < 64) {
    for (int64_t r = 0; r < rows; ++r) f(r);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int64_t r; (r = next.fetch_add(1)) < rows;) f(r);
    });
  for (auto& th : pool) th.join();
}

inline int default_threads() {
  const unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : int(std::min(h, 64u));
}

// exp(ls_j - c_i), 0 where ls_j = -inf (then c_i may be -inf too).
inline double weight_exp(double lsj, double ci) { return lsj == -INFINITY ? 0.0 : std::exp(lsj - ci); }

inline double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t m = 0; m < n; ++m) s += a[m] * b[m];
  return s;
}
inline double abs_dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t m = 0; m < n; ++m) s += std::fabs(a[m] * b[m]);
  return s;
}
inline double max_of(const std::vector<double>& x) {
  double m = 0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, e);
  return m;
}

}  // namespace detail

// The running maxima c [N, L].
inline std::vector<double> running_max(const Problem& p) {
  std::vector<double> c(size_t(p.N * p.L));
  for (int64_t n = 0; n < p.N; ++n) {
    double run = -INFINITY;
    for (int64_t i = 0; i < p.L; ++i) c[n * p.L + i] = run = std::max(run, p.ls[n * p.L + i]);
  }
  return c;
}

inline ForwardReference reference_forward(const Problem& p, int threads = detail::default_threads()) {
  const int64_t N = p.N, L = p.L, M = p.M, D = p.D;
  ForwardReference r;
  r.c = running_max(p);
  r.y.assign(size_t(N * L * D), 0.0);
  r.den.assign(size_t(N * L), 0.0);
  r.lse.assign(size_t(N * L), 0.0);
  std::vector<double> y_mag(size_t(N * L), 0.0), den_mag(size_t(N * L), 0.0);
  detail::parallel_rows(N * L, threads, [&](int64_t row) {
    const int64_t n = row / L, i = row % L;
    const double ci = r.c[row];
    const double* qi = &p.q[row * M];
    double* num = &r.y[row * D];
    std::vector<double> mag(size_t(D), 0.0);
    double den = 0, dmag = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const double e = detail::weight_exp(p.ls[n * L + j], ci);
      if (e == 0) continue;
      const double w = detail::dot(qi, &p.k[(n * L + j) * M], M) * e;
      den += w;
      dmag += detail::abs_dot(qi, &p.k[(n * L + j) * M], M) * e;
      const double* vj = &p.v[(n * L + j) * D];
      for (int64_t d = 0; d < D; ++d) num[d] += w * vj[d], mag[size_t(d)] += std::fabs(w * vj[d]);
    }
    for (int64_t d = 0; d < D; ++d) num[d] = den == 0 ? NAN : num[d] / den;
    if (den != 0) y_mag[size_t(row)] = *std::max_element(mag.begin(), mag.end()) / std::fabs(den);
    den_mag[size_t(row)] = dmag;
    r.den[row] = den;
    r.lse[row] = den > 0 ? ci + std::log(den) : -INFINITY;
  });
  r.y_scale = detail::max_of(y_mag), r.den_scale = detail::max_of(den_mag);
  return r;
}

// gy [N, L, D]; glse [N, L] or nullptr (no gradient of lse).
inline BackwardReference reference_backward(const Problem& p, const ForwardReference& f, const std::vector<double>& gy,
                                            const std::vector<double>* glse,
                                            int threads = detail::default_threads()) {
  const int64_t N = p.N, L = p.L, M = p.M, D = p.D, D1 = D + 1;
  // g'_i [N, L, D + 1]
  std::vector<double> gp(size_t(N * L * D1), 0.0);
  for (int64_t row = 0; row < N * L; ++row) {
    const double den = f.den[row];
    if (den == 0) continue;
    double gyy = 0;
    for (int64_t d = 0; d < D; ++d) {
      gp[row * D1 + d] = gy[row * D + d] / den;
      gyy += gy[row * D + d] * f.y[row * D + d];
    }
    const double h = glse != nullptr && den > 0 ? (*glse)[row] : 0.0;
    gp[row * D1 + D] = (h - gyy) / den;
  }
  // g'_i . [v_j, 1]
  auto gv = [&](int64_t rowi, int64_t rowj) {
    return detail::dot(&gp[rowi * D1], &p.v[rowj * D], D) + gp[rowi * D1 + D];
  };
  auto gv_abs = [&](int64_t rowi, int64_t rowj) {
    return detail::abs_dot(&gp[rowi * D1], &p.v[rowj * D], D) + std::fabs(gp[rowi * D1 + D]);
  };
  std::vector<double> dq_mag(size_t(N * L), 0.0), dk_mag(size_t(N * L), 0.0), dls_mag(size_t(N * L), 0.0),
      dv_mag(size_t(N * L), 0.0);
  BackwardReference b;
  b.dq.assign(size_t(N * L * M), 0.0);
  b.dk.assign(size_t(N * L * M), 0.0);
  b.dv.assign(size_t(N * L * D), 0.0);
  b.dls.assign(size_t(N * L), 0.0);
  // Queries: dq_i, a row at a time.
  detail::parallel_rows(N * L, threads, [&](int64_t rowi) {
    const int64_t n = rowi / L, i = rowi % L;
    const double ci = f.c[rowi];
    double* dq = &b.dq[rowi * M];
    std::vector<double> mag(size_t(M), 0.0);
    for (int64_t j = 0; j <= i; ++j) {
      const int64_t rowj = n * L + j;
      const double e = detail::weight_exp(p.ls[rowj], ci);
      if (e == 0) continue;
      const double a = gv(rowi, rowj) * e, a_abs = gv_abs(rowi, rowj) * e;
      const double* kj = &p.k[rowj * M];
      for (int64_t m = 0; m < M; ++m) dq[m] += a * kj[m], mag[size_t(m)] += a_abs * std::fabs(kj[m]);
    }
    dq_mag[size_t(rowi)] = *std::max_element(mag.begin(), mag.end());
  });
  // Keys: dk_j, dv_j, dls_j, a row at a time.
  detail::parallel_rows(N * L, threads, [&](int64_t rowj) {
    const int64_t n = rowj / L, j = rowj % L;
    const double lsj = p.ls[rowj];
    double *dk = &b.dk[rowj * M], *dv = &b.dv[rowj * D];
    std::vector<double> kmag(size_t(M), 0.0), vmag(size_t(D), 0.0);
    double dls = 0, lmag = 0;
    for (int64_t i = j; i < L; ++i) {
      const int64_t rowi = n * L + i;
      const double e = detail::weight_exp(lsj, f.c[rowi]);
      if (e == 0) continue;
      const double* qi = &p.q[rowi * M];
      const double g = gv(rowi, rowj), gve = g * e, w = detail::dot(qi, &p.k[rowj * M], M) * e;
      const double gve_abs = gv_abs(rowi, rowj) * e, w_abs = detail::abs_dot(qi, &p.k[rowj * M], M) * e;
      for (int64_t m = 0; m < M; ++m) dk[m] += gve * qi[m], kmag[size_t(m)] += gve_abs * std::fabs(qi[m]);
      for (int64_t d = 0; d < D; ++d) dv[d] += w * gp[rowi * D1 + d], vmag[size_t(d)] += w_abs * std::fabs(gp[rowi * D1 + d]);
      dls += g * w;
      lmag += gve_abs * w_abs / e;
    }
    b.dls[rowj] = dls;
    dk_mag[size_t(rowj)] = *std::max_element(kmag.begin(), kmag.end());
    dv_mag[size_t(rowj)] = *std::max_element(vmag.begin(), vmag.end());
    dls_mag[size_t(rowj)] = lmag;
  });
  b.dq_scale = detail::max_of(dq_mag), b.dk_scale = detail::max_of(dk_mag), b.dls_scale = detail::max_of(dls_mag),
  b.dv_scale = detail::max_of(dv_mag);
  return b;
}

// The recurrent state after all L keys of each sequence (what L recurrent steps leave).
inline StateReference reference_state(const Problem& p) {
  const int64_t N = p.N, L = p.L, M = p.M, D = p.D;
  StateReference s;
  s.S.assign(size_t(N * M * D), 0.0);
  s.z.assign(size_t(N * M), 0.0);
  s.c.assign(size_t(N), -INFINITY);
  std::vector<double> S_mag(size_t(N * M * D), 0.0), z_mag(size_t(N * M), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < L; ++j) s.c[n] = std::max(s.c[n], p.ls[n * L + j]);
    for (int64_t j = 0; j < L; ++j) {
      const double e = detail::weight_exp(p.ls[n * L + j], s.c[n]);
      if (e == 0) continue;
      for (int64_t m = 0; m < M; ++m) {
        const double ek = e * p.k[(n * L + j) * M + m];
        s.z[n * M + m] += ek;
        z_mag[size_t(n * M + m)] += std::fabs(ek);
        for (int64_t d = 0; d < D; ++d) {
          s.S[(n * M + m) * D + d] += ek * p.v[(n * L + j) * D + d];
          S_mag[size_t((n * M + m) * D + d)] += std::fabs(ek * p.v[(n * L + j) * D + d]);
        }
      }
    }
  }
  s.S_scale = detail::max_of(S_mag), s.z_scale = detail::max_of(z_mag);
  return s;
}

}  // namespace attnscope::kernels::check
