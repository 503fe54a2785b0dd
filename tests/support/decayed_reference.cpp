// decayed_reference.h: plain loops in float64.
#include "decayed_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnscope::test {

DecayedLosses decayed_losses_reference(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& lambda) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3), dv = v.size(3);
  const double ninf = -std::numeric_limits<double>::infinity();
  const bool relu = maps.map == "t2r";  // its kernel is formed directly, with the floors distill.h names
  const at::Tensor lam = lambda.to(at::kDouble).contiguous();
  auto LAM = lam.accessor<double, 3>();
  DecayedLosses r;
  int64_t rows = 0;
  for (int64_t h = 0; h < H; ++h) {
    auto fm = maps.head_map(h);
    const double g = maps.window > 0 ? 1 / (1 + std::exp(-maps.param(kGammaParam)[h].item<double>())) : 0;
    for (int64_t b = 0; b < B; ++b) {
      const at::Tensor qd = q[b][h].to(at::kDouble), kd = k[b][h].to(at::kDouble), vd = v[b][h].to(at::kDouble);
      const at::Tensor pq = fm->query_features(qd), pk = fm->key_features(kd);
      auto Q = qd.accessor<double, 2>();
      auto K = kd.accessor<double, 2>();
      auto V = vd.accessor<double, 2>();
      auto PQ = pq.accessor<double, 2>();
      auto PK = pk.accessor<double, 2>();
      std::vector<double> s, lw;
      for (int64_t i = 0; i < L; ++i) {
        s.assign(size_t(i + 1), 0.0);
        lw.assign(size_t(i + 1), ninf);
        double mx = ninf, mw = ninf;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0, f = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[i][c] * K[j][c];
          for (int64_t m = 0; m < pq.size(1); ++m) f += PQ[i][m] * PK[j][m];
          s[size_t(j)] = dot / std::sqrt(double(d));
          mx = std::max(mx, s[size_t(j)]);
          const double log_lin = (f > 0 ? std::log(f) : ninf) + LAM[b][h][i] - LAM[b][h][j];
          if (maps.window == 0) lw[size_t(j)] = log_lin;
          else if (i - j < maps.window) lw[size_t(j)] = std::log(g) + s[size_t(j)];
          else lw[size_t(j)] = std::log(1 - g) + (relu ? std::max(log_lin, std::log(1e-30)) : log_lin);
          mw = std::max(mw, lw[size_t(j)]);
        }
        double z = 0, zh = 0;
        for (int64_t j = 0; j <= i; ++j) z += std::exp(s[size_t(j)] - mx), zh += std::exp(lw[size_t(j)] - mw);
        std::vector<double> y(size_t(dv), 0.0), yh(size_t(dv), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const double log_p = s[size_t(j)] - mx - std::log(z), log_ph = lw[size_t(j)] - mw - std::log(zh);
          const double a = std::exp(log_p), ah = std::exp(log_ph);
          r.kl += a * (log_p - (relu ? std::max(log_ph, std::log(1e-30)) : log_ph));
          for (int64_t c = 0; c < dv; ++c) y[size_t(c)] += a * V[j][c], yh[size_t(c)] += ah * V[j][c];
        }
        for (int64_t c = 0; c < dv; ++c) r.output += (y[size_t(c)] - yh[size_t(c)]) * (y[size_t(c)] - yh[size_t(c)]);
        ++rows;
      }
    }
  }
  r.kl /= double(rows);
  r.output /= double(rows * dv);
  return r;
}

}  // namespace attnscope::test
