#include "attnscope/analysis/head_metrics.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/base/random.h"
#include "attnscope/base/shape_str.h"
#include "attnscope/base/tensor_checks.h"

namespace attnscope {
namespace {

constexpr char kMetricsWhere[] = "compute_head_metrics";

// Where the reference is positive and the map is 0, log(map) would be -inf: read the map at this floor.
constexpr double kLogFloor = 1e-300;

// `square`: [..., L, L]; else [..., R, L] (the rows of `positions`).
void check_map(const char* where, const char* what, const at::Tensor& m, bool square = true) {
  if (!m.defined() || m.dim() < 2 || (square && m.size(-1) != m.size(-2)))
    fail(where, std::string(what) + " must be [..., " + (square ? "L" : "R") + ", L], got " + (m.defined() ? shape_str(m.sizes()) : "nothing"));
  if (!at::isFloatingType(m.scalar_type())) fail(where, std::string(what) + " must be a floating tensor");
  if (m.size(-1) < 1) fail(where, std::string(what) + " must have L >= 1, got " + shape_str(m.sizes()));
}

// Float64, contiguous, on the CPU: every metric below reads or loops over these.
at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU, at::kDouble).contiguous(); }

// The undefined rows of a float64 map a [..., R, L] whose rows are at positions pos [R], as bool
// [..., R]: rows whose entries j <= i are all NaN (linear_map's mark for a row without weight). Any
// other non-finite entry is an error.
at::Tensor undefined_rows(const char* where, const char* what, const at::Tensor& a, const at::Tensor& pos) {
  const int64_t L = a.size(-1);
  const at::Tensor visible = visible_keys(pos, L);
  const at::Tensor nan_keys = at::logical_and(at::isnan(a), visible).sum(-1);
  const at::Tensor undefined = nan_keys == pos + 1;
  const at::Tensor accepted = at::logical_or(at::isfinite(a), at::logical_and(undefined.unsqueeze(-1), visible));
  if (!accepted.all().item<bool>())
    fail(where, std::string(what) + " has non-finite entries (NaN or inf) other than undefined rows (NaN on every key j <= i)");
  return undefined;
}

// The estimate of sum y / sum x over all L positions from the measured ones, and its standard
// error (head_metrics.h, "Sampled rows"): y, x [..., R] are summed over the leading dimensions into
// per-position totals; the first `census` positions are all of [0, census), weight 1; the other
// R - census a uniform sample of the L - census others, weight (L - census) / (R - census).
struct Estimate {
  double value = 0, se = 0;
};
Estimate ratio_estimate(const at::Tensor& y, const at::Tensor& x, int64_t L, int64_t census) {
  const int64_t R = y.size(-1), n = R - census, N = L - census;
  const at::Tensor yp = y.reshape({-1, R}).sum(0), xp = x.reshape({-1, R}).sum(0);
  const at::Tensor ys = yp.narrow(0, census, n), xs = xp.narrow(0, census, n);
  const double w = double(N) / double(n);
  const double Y = yp.narrow(0, 0, census).sum().item<double>() + w * ys.sum().item<double>();
  const double X = xp.narrow(0, 0, census).sum().item<double>() + w * xs.sum().item<double>();
  Estimate e;
  e.value = X > 0 ? Y / X : std::nan("");
  if (!(X > 0) || n < 2) {
    e.se = std::nan("");
    return e;
  }
  const double var = (ys - e.value * xs).pow(2).sum().item<double>() / double(n - 1);
  e.se = std::sqrt(double(N) * double(N) * std::max(0.0, 1.0 - double(n) / double(N)) * var / double(n)) / X;
  return e;
}

// ratio_estimate of the mean of `values` over the rows where `keep` (NaN values outside it read as 0).
Estimate mean_estimate(const at::Tensor& values, const at::Tensor& keep, int64_t L, int64_t census) {
  return ratio_estimate(values.masked_fill(keep.logical_not(), 0), keep.to(at::kDouble), L, census);
}

// Mean of per-row values over the rows where `keep` is true; NaN when there is none.
double mean_where(const at::Tensor& per_row, const at::Tensor& keep) {
  return per_row.masked_select(keep).mean().item<double>();
}

// `t` must be [..., L, x] with the same leading dimensions as the map [..., R, L] and its L.
void check_rows(const at::Tensor& map, const char* what, const at::Tensor& t) {
  if (!at::isFloatingType(t.scalar_type())) fail(kMetricsWhere, std::string(what) + " must be a floating tensor");
  if (t.dim() != map.dim() || t.sizes().slice(0, t.dim() - 2) != map.sizes().slice(0, map.dim() - 2) ||
      t.size(-2) != map.size(-1))
    fail(kMetricsWhere, std::string(what) + " " + shape_str(t.sizes()) + " must be [..., L, dim] matching the map " + shape_str(map.sizes()));
}

// Pairs a < b with w[a] > w[b] strictly, by merge sort; sorts w ascending as a side effect.
int64_t strict_inversions(std::vector<double>& w, std::vector<double>& tmp, int64_t lo, int64_t hi) {
  if (hi - lo < 2) return 0;
  const int64_t mid = (lo + hi) / 2;
  int64_t count = strict_inversions(w, tmp, lo, mid) + strict_inversions(w, tmp, mid, hi);
  int64_t a = lo, b = mid, out = lo;
  while (a < mid && b < hi) {
    // An equal right element goes after the left ones: ties in weight are not discordant.
    if (w[b] < w[a]) {
      count += mid - a;
      tmp[out++] = w[b++];
    } else {
      tmp[out++] = w[a++];
    }
  }
  while (a < mid) tmp[out++] = w[a++];
  while (b < hi) tmp[out++] = w[b++];
  std::copy(tmp.begin() + lo, tmp.begin() + hi, w.begin() + lo);
  return count;
}

struct RowMonotonicity {
  bool used = false;  // false: fewer than 3 keys or all scores tied
  double spearman = 0;
  int64_t discordant = 0;
  int64_t pairs = 0;  // pairs with distinct scores
};

// One row: scores s and weights w over its n keys.
RowMonotonicity row_monotonicity(const double* s, const double* w, int64_t n, std::vector<int64_t>& order,
                                 std::vector<double>& rs, std::vector<double>& ws, std::vector<double>& buf,
                                 std::vector<double>& tmp) {
  RowMonotonicity out;
  if (n < 3) return out;
  // One indirect sort: keys by score, ties in score by weight ascending (so no pair inside a score
  // tie counts as discordant below). Everything after works in this order.
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [s, w](int64_t a, int64_t b) { return s[a] < s[b] || (s[a] == s[b] && w[a] < w[b]); });

  // Average score ranks (1-based; tied scores share the mean of their positions), and the pairs
  // with distinct scores: all pairs less those inside groups of tied scores.
  rs.resize(n);
  int64_t pairs = n * (n - 1) / 2;
  for (int64_t p = 0; p < n;) {
    int64_t q = p + 1;
    while (q < n && s[order[q]] == s[order[p]]) ++q;
    const double r = 0.5 * double(p + 1 + q);
    for (int64_t m = p; m < q; ++m) rs[m] = r;
    pairs -= (q - p) * (q - p - 1) / 2;
    p = q;
  }
  if (pairs == 0) return out;  // every score tied: nothing to be monotone in
  out.used = true;
  out.pairs = pairs;

  // Discordant pairs: strict inversions of the weights in that order (the merge sort leaves buf
  // sorted ascending, which then gives each weight its average rank by binary search).
  ws.resize(n);
  buf.resize(n);
  tmp.resize(n);
  for (int64_t m = 0; m < n; ++m) ws[m] = buf[m] = w[order[m]];
  out.discordant = strict_inversions(buf, tmp, 0, n);

  // Ranks are integers or halves and the mean (n+1)/2 is exact, so the sums below are exact (for
  // n up to ~1e5) in any order; for identical rank vectors sxy == sxx == syy and sxy / sqrt(sxx *
  // syy) is exactly 1.
  const double mean = 0.5 * double(n + 1);
  double sxx = 0, syy = 0, sxy = 0;
  for (int64_t m = 0; m < n; ++m) {
    const auto lo = std::lower_bound(buf.begin(), buf.end(), ws[m]) - buf.begin();
    const auto hi = std::upper_bound(buf.begin() + lo, buf.end(), ws[m]) - buf.begin();
    const double a = rs[m] - mean, b = 0.5 * double(lo + 1 + hi) - mean;
    sxx += a * a;
    syy += b * b;
    sxy += a * b;
  }
  out.spearman = syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;  // weights all tied: no monotonicity
  return out;
}

// Per-row monotonicity of a [..., R, L] (float64) in scores s (same shape), rows at positions pos;
// undefined rows stay unused. With window W > 0, row i reads keys i - W + 1 .. i only.
std::vector<RowMonotonicity> monotonicity_rows(const at::Tensor& a, const at::Tensor& s, const at::Tensor& pos,
                                               const at::Tensor& undefined_flat, int64_t window = 0) {
  const int64_t L = a.size(-1), R = pos.size(0);
  const at::Tensor ac = a.contiguous(), sc = s.contiguous(), posc = pos.contiguous(), und = undefined_flat.contiguous();
  const int64_t rows = ac.numel() / L;  // all rows of all sequences
  const double* A = ac.data_ptr<double>();
  const double* S = sc.data_ptr<double>();
  const int64_t* P = posc.data_ptr<int64_t>();
  const bool* skip = und.data_ptr<bool>();
  std::vector<RowMonotonicity> per_row(rows);
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order;
    std::vector<double> rs, rw, buf, tmp;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t first = window > 0 ? std::max<int64_t>(0, P[r % R] + 1 - window) : 0;
      if (!skip[r]) per_row[r] = row_monotonicity(S + r * L + first, A + r * L + first, P[r % R] + 1 - first, order, rs, rw, buf, tmp);
    }
  });
  return per_row;
}

// Reduced in row order so the result does not depend on the thread count.
Monotonicity reduce_monotonicity(const std::vector<RowMonotonicity>& per_row) {
  Monotonicity out;
  int64_t used = 0, discordant = 0, pairs = 0;
  double spearman = 0;
  for (const RowMonotonicity& r : per_row) {
    if (!r.used) continue;
    ++used;
    spearman += r.spearman;
    discordant += r.discordant;
    pairs += r.pairs;
  }
  if (used) out.spearman = spearman / double(used);
  if (pairs) out.discordant_fraction = double(discordant) / double(pairs);
  return out;
}

// The map's row positions: `positions` checked against the map [..., R, L], or 0..L-1.
at::Tensor row_positions(const at::Tensor& map, const at::Tensor& positions) {
  const int64_t L = map.size(-1);
  if (!positions.defined()) return at::arange(L, at::kLong);
  if (positions.dim() != 1 || positions.scalar_type() != at::kLong || positions.size(0) != map.size(-2))
    fail(kMetricsWhere, "positions must be int64 [R] with R = " + std::to_string(map.size(-2)) + " (the map's rows), got " +
                            shape_str(positions.sizes()));
  const at::Tensor p = positions.to(at::kCPU).contiguous();
  if (p.numel() > 0 && (p.min().item<int64_t>() < 0 || p.max().item<int64_t>() >= L))
    fail(kMetricsWhere, "positions must lie in 0.." + std::to_string(L - 1));
  if (p.numel() > 1 && !(p.narrow(0, 1, p.numel() - 1) > p.narrow(0, 0, p.numel() - 1)).all().item<bool>())
    fail(kMetricsWhere, "positions must be strictly increasing");
  return p;
}

}  // namespace

at::Tensor row_entropy(const at::Tensor& map) {
  check_map("row_entropy", "map", map);
  const at::Tensor a = f64(map);
  const at::Tensor undefined = undefined_rows("row_entropy", "map", a, at::arange(a.size(-1), at::kLong));
  if ((a < 0).any().item<bool>()) fail("row_entropy", "map has negative entries");
  return (-at::special_xlogy(a, a).sum(-1)).masked_fill(undefined, std::nan(""));  // xlogy(0, 0) = 0
}

Monotonicity monotonicity(const at::Tensor& map, const at::Tensor& scores) {
  check_map("monotonicity", "map", map);
  check_map("monotonicity", "scores", scores);
  if (map.sizes() != scores.sizes())
    fail("monotonicity", "map " + shape_str(map.sizes()) + " and scores " + shape_str(scores.sizes()) + " must have the same shape");
  const int64_t L = map.size(-1);
  const at::Tensor a = f64(map), s = f64(scores);
  // Only the causal part of the scores is read; a NaN there would make the sort's order undefined.
  check_finite("monotonicity", "scores", s.masked_select(causal_mask(L)));
  const at::Tensor pos = at::arange(L, at::kLong);
  const at::Tensor undefined = undefined_rows("monotonicity", "map", a, pos).reshape({-1});
  return reduce_monotonicity(monotonicity_rows(a, s, pos, undefined));
}

HeadMetrics compute_head_metrics(const HeadMetricsInput& in) {
  const bool subset = in.positions.defined();
  check_map(kMetricsWhere, "map", in.map, /*square=*/!subset);
  const int64_t L = in.map.size(-1);
  const at::Tensor pos = row_positions(in.map, in.positions);
  const int64_t R = pos.size(0);
  const bool sampled = R < L;
  const int64_t census = in.census;
  if (census < 0 || census > R || (sampled && census > 0 && census > R - 2) ||
      (census > 0 && !pos.narrow(0, 0, census).equal(at::arange(census, at::kLong))))
    fail(kMetricsWhere, "census must be in 0..R-2 with positions starting 0, 1, .., census - 1, got " + std::to_string(census));
  if (in.window < 0) fail(kMetricsWhere, "window must be 0 (none) or a number of keys, got " + std::to_string(in.window));
  const at::Tensor a = f64(in.map);
  const at::Tensor undefined_2d = undefined_rows(kMetricsWhere, "map", a, pos).reshape({-1, R});  // [rows / R, R]
  const at::Tensor undefined = undefined_2d.reshape({-1});                                       // [rows]
  const at::Tensor defined = undefined.logical_not();
  if ((a < 0).any().item<bool>()) fail(kMetricsWhere, "map has negative entries");
  HeadMetrics out;
  out.undefined_rows = undefined.sum().item<int64_t>();
  out.rows = undefined.numel();
  out.rows_total = out.rows / R * L;

  // Entropy: every defined row; normalized: defined rows with i + 1 >= 2 keys, divided by log(i + 1).
  const at::Tensor h = (-at::special_xlogy(a, a).sum(-1)).reshape({-1, R});  // xlogy(0, 0) = 0
  out.entropy = mean_where(h.reshape({-1}), defined);
  if (sampled) {
    const Estimate e = mean_estimate(h, undefined_2d.logical_not(), L, census);
    out.entropy = e.value, out.standard_error["entropy"] = e.se;
  }
  if (L >= 2) {
    // Keys of each row: i + 1, or min(i + 1, W) within a window.
    const at::Tensor keys = in.window > 0 ? (pos + 1).clamp_max(in.window) : pos + 1;
    const at::Tensor multi = (keys >= 2).unsqueeze(0).logical_and(undefined_2d.logical_not());  // [rows / R, R]
    const at::Tensor hn = h / at::log(keys.to(at::kDouble)).unsqueeze(0);                     // inf/NaN at 1 key: not kept
    out.normalized_entropy = mean_where(hn.reshape({-1}), multi.reshape({-1}));
    if (sampled) {
      const Estimate e = mean_estimate(hn, multi, L, census);
      out.normalized_entropy = e.value, out.standard_error["normalized_entropy"] = e.se;
    }
  }

  at::Tensor q, k;
  if (in.q.defined() || in.k.defined()) {
    if (!in.q.defined() || !in.k.defined()) fail(kMetricsWhere, "q and k must be given together");
    check_rows(in.map, "q", in.q);
    check_rows(in.map, "k", in.k);
    if (in.q.sizes() != in.k.sizes()) fail(kMetricsWhere, "q " + shape_str(in.q.sizes()) + " and k " + shape_str(in.k.sizes()) + " must have the same shape");
    q = f64(in.q);
    k = f64(in.k);
    check_finite(kMetricsWhere, "q", q);
    check_finite(kMetricsWhere, "k", k);
    if (L >= 3) {
      const at::Tensor qr = subset ? q.index_select(-2, pos) : q;
      const auto per_row = monotonicity_rows(a, at::matmul(qr, k.transpose(-2, -1)), pos, undefined, in.window);
      out.monotonicity = reduce_monotonicity(per_row);
      if (sampled) {
        const int64_t n = int64_t(per_row.size());
        at::Tensor used = at::zeros({n}, at::kDouble), rho = at::zeros({n}, at::kDouble);
        at::Tensor disc = at::zeros({n}, at::kDouble), pairs = at::zeros({n}, at::kDouble);
        auto u = used.accessor<double, 1>(), r = rho.accessor<double, 1>(), dd = disc.accessor<double, 1>(), pp = pairs.accessor<double, 1>();
        for (int64_t m = 0; m < n; ++m)
          if (per_row[m].used) u[m] = 1, r[m] = per_row[m].spearman, dd[m] = double(per_row[m].discordant), pp[m] = double(per_row[m].pairs);
        const Estimate e = ratio_estimate(rho.reshape({-1, R}), used.reshape({-1, R}), L, census);
        const Estimate f = ratio_estimate(disc.reshape({-1, R}), pairs.reshape({-1, R}), L, census);
        out.monotonicity->spearman = e.value, out.standard_error["monotonicity"] = e.se;
        out.monotonicity->discordant_fraction = f.value, out.standard_error["discordant_fraction"] = f.se;
      }
    }
  }

  at::Tensor ref;
  if (in.reference.defined()) {
    check_map(kMetricsWhere, "reference", in.reference, !subset);
    if (in.reference.sizes() != in.map.sizes())
      fail(kMetricsWhere, "reference " + shape_str(in.reference.sizes()) + " and map " + shape_str(in.map.sizes()) + " must have the same shape");
    ref = f64(in.reference);
    check_finite(kMetricsWhere, "reference", ref);
    if ((ref < 0).any().item<bool>()) fail(kMetricsWhere, "reference has negative entries");
    // Per row: sum ref log ref (0 log 0 = 0) and sum ref log max(map, floor); upper-triangle
    // entries are 0 in ref and add nothing. Undefined rows give NaN here and are left out.
    const at::Tensor ref_log_ref = at::special_xlogy(ref, ref).sum(-1).reshape({-1});
    const at::Tensor ref_log_map = at::special_xlogy(ref, a.clamp_min(kLogFloor)).sum(-1).reshape({-1});
    out.kl = mean_where(ref_log_ref - ref_log_map, defined);
    out.cross_entropy = mean_where(-ref_log_map, defined);
    if (sampled) {
      const Estimate e = mean_estimate((ref_log_ref - ref_log_map).reshape({-1, R}), undefined_2d.logical_not(), L, census);
      const Estimate f = mean_estimate((-ref_log_map).reshape({-1, R}), undefined_2d.logical_not(), L, census);
      out.kl = e.value, out.standard_error["kl"] = e.se;
      out.cross_entropy = f.value, out.standard_error["cross_entropy"] = f.se;
    }
  }

  if (in.phi_q.values.defined() || in.phi_k.values.defined()) {
    if (!in.phi_q.values.defined() || !in.phi_k.values.defined()) fail(kMetricsWhere, "phi_q and phi_k must be given together");
    if (!q.defined()) fail(kMetricsWhere, "the kernel error needs q and k besides phi_q and phi_k");
    for (const auto& [name, f] : {std::pair<const char*, const Features*>{"phi_q", &in.phi_q}, {"phi_k", &in.phi_k}}) {
      check_rows(in.map, name, f->values);
      const std::string ls = std::string(name) + " log_scale";
      std::vector<int64_t> want(f->values.sizes().begin(), f->values.sizes().end());
      want.back() = 1;
      if (!f->log_scale.defined() || f->log_scale.sizes() != at::IntArrayRef(want))
        fail(kMetricsWhere, ls + " must be " + shape_str(want) + ", got " + (f->log_scale.defined() ? shape_str(f->log_scale.sizes()) : "nothing"));
    }
    if (in.phi_q.values.sizes() != in.phi_k.values.sizes())
      fail(kMetricsWhere, "phi_q " + shape_str(in.phi_q.values.sizes()) + " and phi_k " + shape_str(in.phi_k.values.sizes()) + " must have the same shape");
    if (in.kernel_pairs < 1) fail(kMetricsWhere, "kernel_pairs must be >= 1, got " + std::to_string(in.kernel_pairs));
    const int64_t d = q.size(-1), M = in.phi_q.values.size(-1);
    const at::Tensor q2 = q.reshape({-1, d}), k2 = k.reshape({-1, d});
    const at::Tensor fq = f64(in.phi_q.values).reshape({-1, M}), fk = f64(in.phi_k.values).reshape({-1, M});
    const at::Tensor lq = f64(in.phi_q.log_scale).reshape({-1}), lk = f64(in.phi_k.log_scale).reshape({-1});
    check_finite(kMetricsWhere, "phi_q", fq);
    check_finite(kMetricsWhere, "phi_k", fk);
    check_finite(kMetricsWhere, "phi_q log_scale", lq);
    check_finite(kMetricsWhere, "phi_k log_scale", lk);
    const int64_t T = q2.size(0) / L;
    const int64_t per_seq = L * (L + 1) / 2, total = T * per_seq;

    // Query and key row of each pair, as indices into the flattened [T * L, .] rows.
    std::vector<int64_t> qi, kj;
    const int64_t n = std::min(in.kernel_pairs, total);
    qi.reserve(n);
    kj.reserve(n);
    auto add_pair = [&](int64_t u) {  // u-th causal pair in (sequence, i, j <= i) order
      const int64_t t = u / per_seq, r = u % per_seq;
      int64_t i = int64_t((std::sqrt(8.0 * double(r) + 1.0) - 1.0) / 2.0);
      while ((i + 1) * (i + 2) / 2 <= r) ++i;  // fix the rounding of the square root
      while (i * (i + 1) / 2 > r) --i;
      qi.push_back(t * L + i);
      kj.push_back(t * L + (r - i * (i + 1) / 2));
    };
    if (in.kernel_pairs >= total) {
      for (int64_t u = 0; u < total; ++u) add_pair(u);
    } else {
      Rng rng(in.seed);
      for (int64_t m = 0; m < n; ++m) add_pair(int64_t(rng.below(uint64_t(total))));
    }
    const at::Tensor iq = at::tensor(qi, at::kLong), ik = at::tensor(kj, at::kLong);
    // In the log domain: the exact kernel is exp(s), the estimate sign(dot) exp(g) with
    //   s = q.k / sqrt d,   g = ls_q + ls_k + log|values(q).values(k)|,
    // either of which may lie far beyond exp's range. Each pair's difference is taken relative to
    // its larger exponent c = max(s, g) (a number in [-1, 1] times exp(c)), and the two squared
    // norms are sums of exp(2 x), combined by logsumexp.
    const at::Tensor s = (q2.index_select(0, iq) * k2.index_select(0, ik)).sum(-1) / std::sqrt(double(d));
    const at::Tensor dot = (fq.index_select(0, iq) * fk.index_select(0, ik)).sum(-1);
    if (!at::isfinite(dot).all().item<bool>())
      fail(kMetricsWhere, "phi_q.phi_k overflows; pass scaled features (FeatureMap::scaled_query_features)");
    const at::Tensor g = lq.index_select(0, iq) + lk.index_select(0, ik) + at::log(dot.abs());  // -inf where dot = 0
    const at::Tensor c = at::maximum(s, g);  // finite: s is
    const at::Tensor log_diff = c + at::log((at::sign(dot) * at::exp(g - c) - at::exp(s - c)).abs());
    const double log_num = at::logsumexp(2 * log_diff, 0).item<double>();  // -inf when every pair is exact
    const double log_den = at::logsumexp(2 * s, 0).item<double>();
    out.kernel_rel_error = std::exp(0.5 * (log_num - log_den));
  }

  if (in.v.defined() && ref.defined()) {
    check_rows(in.map, "v", in.v);
    const at::Tensor v = f64(in.v);
    check_finite(kMetricsWhere, "v", v);
    // Undefined rows have no output: zero them in both maps so they add to neither norm.
    const at::Tensor skip = undefined.reshape(a.sizes().slice(0, a.dim() - 1)).unsqueeze(-1);
    const at::Tensor y_ref = at::matmul(ref.masked_fill(skip, 0), v);
    const at::Tensor y = at::matmul(a.masked_fill(skip, 0), v);
    out.output_rel_error = ((y - y_ref).norm() / y_ref.norm()).item<double>();
    if (sampled) {
      // A ratio of squared norms summed over rows: its estimate's error, halved over the square root.
      const at::Tensor num = (y - y_ref).pow(2).sum(-1).reshape({-1, R}), den = y_ref.pow(2).sum(-1).reshape({-1, R});
      const Estimate e = ratio_estimate(num, den, L, census);
      out.output_rel_error = std::sqrt(e.value);
      out.standard_error["output_rel_error"] = e.se / (2 * *out.output_rel_error);
    }
  }

  if (in.raw_row_sums.defined()) {
    const auto lead = in.map.sizes().slice(0, in.map.dim() - 1);
    if (in.raw_row_sums.sizes() != lead)
      fail(kMetricsWhere, "raw_row_sums " + shape_str(in.raw_row_sums.sizes()) + " must be [..., L] matching the map " + shape_str(in.map.sizes()));
    const at::Tensor sums = f64(in.raw_row_sums);
    check_finite(kMetricsWhere, "raw_row_sums", sums);
    out.nonpositive_row_fraction = (sums <= 0).to(at::kDouble).mean().item<double>();
    if (sampled) {
      const Estimate e = ratio_estimate((sums <= 0).to(at::kDouble).reshape({-1, R}), at::ones({sums.numel()}, at::kDouble).reshape({-1, R}), L, census);
      out.nonpositive_row_fraction = e.value, out.standard_error["nonpositive_row_fraction"] = e.se;
    }
  }
  return out;
}

}  // namespace attnscope
