#include "attnscope/analysis/head_detail.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/attention/attention.h"
#include "attnscope/base/random.h"
#include "attnscope/capture/token_labels.h"

namespace attnscope {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// KL reads Ahat at this floor where A > 0, as head_metrics does (a finite, large value, not inf).
constexpr double kDetailLogFloor = 1e-300;
// The log scale's floor and the symmetric log's linear threshold (head_detail.h).
constexpr double kLogScaleFloor = 1e-6;
constexpr double kSymlogThreshold = 1e-4;

void check_index(const char* quantity, int value, int count, const std::string& dir) {
  if (value < 0 || value >= count)
    fail_value(quantity, std::to_string(value) + " is out of range 0.." + std::to_string(count - 1) +
                             " of the capture " + dir);
}

Matrix to_matrix(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  Matrix m;
  m.rows = int(c.size(0));
  m.cols = int(c.size(1));
  m.values.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  return m;
}

std::vector<double> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// The value a scale shows for a pooled cell value x (already row-normalized for the row scale).
// Both transforms are non-decreasing (and the symmetric log odd), so transforming a block's
// maximum, or its largest |x|, equals the maximum of the transformed cells: pooling can run on
// raw values and each pixel is transformed once.
double transform(double x, ColourScale scale, bool diverging) {
  if (std::isnan(x) || scale != ColourScale::Log) return x;
  if (!diverging) return std::log10(std::max(x, kLogScaleFloor));
  return std::copysign(std::log10(1 + std::abs(x) / kSymlogThreshold), x);
}

// The colour range of a whole map and its per-row divisors. `raw(i, j)` is the map's value at a
// causal cell (NaN in undefined rows). The row scale divides row i by div[i]: its largest entry
// (largest |entry| when diverging); a row with nothing but zeros keeps its zeros (div 1).
template <class Raw>
void scan_map(int L, const Raw& raw, bool diverging, bool row_scale, std::vector<double>& div, double& lo_raw,
              double& hi_raw) {
  div.assign(L, 1.0);
  lo_raw = std::numeric_limits<double>::infinity();
  hi_raw = -lo_raw;
  for (int i = 0; i < L; ++i) {
    double mn = std::numeric_limits<double>::infinity(), mx = -mn, mabs = 0;
    bool any = false;
    for (int j = 0; j <= i; ++j) {
      const double x = raw(i, j);
      if (std::isnan(x)) continue;
      any = true;
      mn = std::min(mn, x);
      mx = std::max(mx, x);
      mabs = std::max(mabs, std::abs(x));
    }
    if (!any) continue;
    if (row_scale) {
      const double d = diverging ? mabs : mx;
      if (d > 0) div[i] = d;
      mn /= div[i], mx /= div[i], mabs /= div[i];
    }
    if (diverging) {
      hi_raw = std::max(hi_raw, mabs);
    } else {
      lo_raw = std::min(lo_raw, mn);
      hi_raw = std::max(hi_raw, mx);
    }
  }
}

// Pixels of `region` at `b` cells a side: each one the largest row-normalized value of its block
// (the signed value of largest magnitude when diverging) over the causal, defined cells; NaN when
// the block has none.
template <class Raw>
Matrix pool(const Raw& raw, const std::vector<double>& div, const MapRegion& region, int b, bool diverging,
            ColourScale scale) {
  const int nr = region.row1 - region.row0, nc = region.col1 - region.col0;
  Matrix m;
  m.rows = (nr + b - 1) / b;
  m.cols = (nc + b - 1) / b;
  m.values.assign(size_t(m.rows) * m.cols, kNaN);
  for (int pr = 0; pr < m.rows; ++pr) {
    const int i0 = region.row0 + pr * b, i1 = std::min(region.row1, i0 + b);
    for (int pc = 0; pc < m.cols; ++pc) {
      const int j0 = region.col0 + pc * b, j1 = std::min(region.col1, j0 + b);
      double best = kNaN;
      for (int i = i0; i < i1; ++i) {
        const int jend = std::min(j1, i + 1);  // keys above the diagonal show nothing
        for (int j = j0; j < jend; ++j) {
          const double x = raw(i, j) / div[i];
          if (std::isnan(x)) continue;
          if (std::isnan(best) || (diverging ? std::abs(x) > std::abs(best) : x > best)) best = x;
        }
      }
      m.values[size_t(pr) * m.cols + pc] = transform(best, scale, diverging);
    }
  }
  return m;
}

// Cells per pixel side so that the region fits in max_pixels x max_pixels (square blocks).
int block_size(const MapRegion& r, int max_pixels) {
  const int n = std::max(r.row1 - r.row0, r.col1 - r.col0);
  return (n + max_pixels - 1) / max_pixels;
}

}  // namespace

double HeadDetail::score(int i, int j) const {
  const int L = length();
  if (q.size() != size_t(L) * head_dim || k.size() != size_t(L) * head_dim)
    fail("score", "the view's q and k are not [" + std::to_string(L) + ", " + std::to_string(head_dim) + "]");
  if (i < 0 || i >= L || j < 0 || j >= L)
    fail("score", "cell (" + std::to_string(i) + ", " + std::to_string(j) + ") is outside the " +
                      std::to_string(L) + " x " + std::to_string(L) + " map");
  double s = 0;
  for (int64_t c = 0; c < head_dim; ++c) s += q[size_t(i) * head_dim + c] * k[size_t(j) * head_dim + c];
  return s / std::sqrt(double(head_dim));
}

HeadDetail head_detail(const CaptureStore& store, int layer, int head, int seq, const AnalysisOptions& opt) {
  check_index("layer", layer, store.num_layers(), store.dir());
  check_index("head", head, store.num_heads(), store.dir());
  check_index("text window", seq, store.num_seqs(), store.dir());
  at::InferenceMode guard;
  HeadMaps m = head_maps(store, layer, head, seq, opt);
  HeadDetail v;
  v.layer = layer, v.head = head, v.seq = seq;
  v.head_dim = store.head_dim();
  v.ids = m.ids;
  v.labels = token_labels(store, m.ids);
  v.q = to_vector(store.layer_tensor(layer, "q")[seq][head]);
  v.k = to_vector(store.layer_tensor(layer, "k")[seq][head]);
  v.row_entropy_softmax = to_vector(row_entropy(m.softmax));
  v.softmax = to_matrix(m.softmax);
  m.softmax = at::Tensor();  // an L x L double apiece: keep one copy of each map, not two
  if (!m.linear.defined()) return v;

  v.row_entropy_linear = to_vector(row_entropy(m.linear));
  v.linear = to_matrix(m.linear);
  m.linear = at::Tensor();
  v.nonpositive_row_fraction = m.nonpositive_row_fraction;
  const int L = v.length();
  v.row_kl.assign(L, kNaN);
  for (int i = 0; i < L; ++i) {
    // An undefined row is NaN on every key j <= i, key 0 included.
    if (std::isnan(v.linear.at(i, 0))) {
      ++v.undefined_rows;
      continue;
    }
    double kl = 0;
    for (int j = 0; j <= i; ++j) {
      const double a = v.softmax.at(i, j);
      if (a > 0) kl += a * (std::log(a) - std::log(std::max(v.linear.at(i, j), kDetailLogFloor)));  // 0 log 0 = 0
    }
    v.row_kl[i] = kl;
  }
  return v;
}

std::vector<std::vector<Matrix>> head_thumbnails(const CaptureStore& store, int seq, int pixels,
                                                 const ProgressFn& progress) {
  check_index("text window", seq, store.num_seqs(), store.dir());
  if (pixels < 1) fail_value("thumbnail size", std::to_string(pixels) + " must be at least 1 pixel");
  at::InferenceMode guard;
  const int S = store.num_layers(), H = store.num_heads(), L = store.seq_len();
  const MapRegion all{0, L, 0, L};
  const int b = block_size(all, pixels);
  std::vector<std::vector<Matrix>> out(S);
  for (int s = 0; s < S; ++s) {
    const at::Tensor Q = store.layer_tensor(s, "q")[seq], K = store.layer_tensor(s, "k")[seq];
    for (int h = 0; h < H; ++h) {
      // The map the model ran: within its sliding window, if it has one.
      const at::Tensor a = softmax_map(Q[h].to(at::kDouble), K[h].to(at::kDouble), store.sliding_window()).contiguous();
      const double* A = a.data_ptr<double>();
      auto raw = [A, L](int i, int j) { return A[size_t(i) * L + j]; };
      std::vector<double> div;
      double lo, hi;
      scan_map(L, raw, false, true, div, lo, hi);
      out[s].push_back(pool(raw, div, all, b, false, ColourScale::RowNormalized));
    }
    report_progress(progress, double(s + 1) / S, "layer " + std::to_string(s + 1) + "/" + std::to_string(S));
  }
  return out;
}

ColourScale parse_colour_scale(const std::string& name) {
  for (ColourScale s : {ColourScale::Linear, ColourScale::Log, ColourScale::RowNormalized})
    if (name == colour_scale_name(s)) return s;
  fail_value("colour scale", "'" + name + "' is unknown (valid: linear, log, row)");
}

const char* colour_scale_name(ColourScale s) {
  switch (s) {
    case ColourScale::Linear: return "linear";
    case ColourScale::Log: return "log";
    case ColourScale::RowNormalized: return "row";
  }
  return "linear";
}

std::vector<std::string> colour_scale_names() { return {"linear", "log", "row"}; }

MapImage map_image(const HeadDetail& view, MapKind kind, ColourScale scale, MapRegion region, int max_pixels) {
  const int L = view.length();
  if (L < 1 || view.softmax.cols != L || view.softmax.values.size() != size_t(L) * L)
    fail("map_image", "the view has no square softmax map");
  if (kind != MapKind::Softmax) {
    if (!view.has_linear()) fail("map_image", "the linear map and the difference need a feature map; this view has none");
    if (view.linear.rows != L || view.linear.cols != L || view.linear.values.size() != size_t(L) * L)
      fail("map_image", "the linear map is not " + std::to_string(L) + " x " + std::to_string(L) + " like the softmax map");
  }
  if (max_pixels < 1) fail_value("image size", std::to_string(max_pixels) + " must be at least 1 pixel");
  MapImage img;
  img.region = {std::max(region.row0, 0), std::min(region.row1, L), std::max(region.col0, 0), std::min(region.col1, L)};
  const MapRegion& r = img.region;
  if (r.row0 >= r.row1 || r.col0 >= r.col1)
    fail_value("map region", "rows " + std::to_string(region.row0) + ".." + std::to_string(region.row1) + " x cols " +
                                 std::to_string(region.col0) + ".." + std::to_string(region.col1) +
                                 " has no cell of the " + std::to_string(L) + " x " + std::to_string(L) + " map");
  img.diverging = kind == MapKind::Difference;
  img.cells_per_pixel = block_size(r, max_pixels);

  const double* A = view.softmax.values.data();
  const double* B = view.has_linear() ? view.linear.values.data() : nullptr;
  auto make = [&](const auto& raw) {
    std::vector<double> div;
    double lo, hi;
    scan_map(L, raw, img.diverging, scale == ColourScale::RowNormalized, div, lo, hi);
    if (img.diverging) {
      img.hi = hi > 0 ? transform(hi, scale, true) : 1;  // all zero (or no defined row): [-1, 1]
      img.lo = -img.hi;
    } else if (lo > hi) {  // no defined value at all: the header's default range
      img.lo = 0, img.hi = 1;
    } else {
      img.lo = transform(lo, scale, false);
      img.hi = transform(hi, scale, false);
      if (!(img.hi > img.lo)) img.lo = img.hi - 1;  // one value everywhere (L = 1): shown at the top
    }
    img.pixels = pool(raw, div, r, img.cells_per_pixel, img.diverging, scale);
  };
  const size_t n = size_t(L);
  if (kind == MapKind::Softmax)
    make([A, n](int i, int j) { return A[i * n + j]; });
  else if (kind == MapKind::Linear)
    make([B, n](int i, int j) { return B[i * n + j]; });
  else
    make([A, B, n](int i, int j) { return B[i * n + j] - A[i * n + j]; });
  return img;
}

ScatterPoints monotonicity_scatter(const HeadDetail& view, int max_points, uint64_t seed) {
  if (max_points < 0) fail_value("scatter points", std::to_string(max_points) + " must not be negative");
  const int L = view.length();
  // Rows i >= 2 have i + 1 >= 3 keys; cells before row i: sum_{r=2}^{i-1} (r + 1).
  int64_t total = 0;
  for (int i = 2; i < L; ++i) total += i + 1;
  const std::vector<int64_t> picks = sample_without_replacement(total, max_points, seed);  // sorted
  ScatterPoints out;
  int i = 2;
  int64_t row_start = 0;
  for (int64_t p : picks) {
    while (p >= row_start + i + 1) row_start += i + 1, ++i;
    const int j = int(p - row_start);
    out.score.push_back(view.score(i, j));
    out.softmax.push_back(view.softmax.at(i, j));
    out.linear.push_back(view.has_linear() ? view.linear.at(i, j) : kNaN);
  }
  return out;
}

Histogram histogram(const std::vector<double>& values, int bins) {
  if (bins < 1) fail_value("histogram bins", std::to_string(bins) + " must be at least 1");
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double x : values)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  Histogram h;
  if (lo > hi) return h;  // no finite value: nothing to count, no range to invent
  if (lo == hi) {
    h.edges = {lo, hi};
    h.counts = {0};
    for (double x : values) h.counts[0] += std::isfinite(x);
    return h;
  }
  h.edges.resize(bins + 1);
  for (int b = 0; b <= bins; ++b) h.edges[b] = b == bins ? hi : lo + (hi - lo) * b / bins;
  h.counts.assign(bins, 0);
  for (double x : values) {
    if (!std::isfinite(x)) continue;
    // Bin b is [edges[b], edges[b+1]), found from the edges themselves so that a value on an edge
    // lands where the edges say; the maximum belongs to the last bin (closed on the right).
    const int b = std::min(bins - 1, int(std::upper_bound(h.edges.begin(), h.edges.end(), x) - h.edges.begin()) - 1);
    h.counts[b] += 1;
  }
  return h;
}

}  // namespace attnscope
