// The heads view's data: one head's maps, row KL and entropies, and the reduced images the view
// draws. Every number is checked against a computation written here in plain float64 loops from
// the q and k the test itself wrote into a synthetic capture: softmax, the ReLU feature map's
// linear map, KL and entropy conventions (head_metrics.h), block-max pooling and colour scales.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_head_detail {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// q and k of a synthetic capture, [S][T][H][L][d] flattened, as the float32 values on disk.
struct Synthetic {
  int S = 1, T = 1, H = 1, L = 8, d = 4;
  std::vector<float> q, k;
  std::string dir;
  size_t at(int s, int t, int h, int i, int c) const {
    return ((((size_t(s) * T + t) * H + h) * L + i) * d) + c;
  }
  std::vector<double> qrow(int s, int t, int h, int i) const { return row(q, s, t, h, i); }
  std::vector<double> krow(int s, int t, int h, int i) const { return row(k, s, t, h, i); }

 private:
  std::vector<double> row(const std::vector<float>& x, int s, int t, int h, int i) const {
    return std::vector<double>(x.begin() + at(s, t, h, i, 0), x.begin() + at(s, t, h, i, 0) + d);
  }
};

// Writes a capture store by hand (manifest + safetensors), q, k ~ N(0, scale^2), v = 1, ids
// 100 + position. The tokenizer path does not exist, so labels are "#<id>".
Synthetic write_capture(const std::string& tag, int S, int T, int H, int L, int d, double scale, uint32_t seed) {
  Synthetic x;
  x.S = S, x.T = T, x.H = H, x.L = L, x.d = d;
  x.dir = test::temp_dir(tag) + "/cap";
  fs::create_directories(x.dir);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, float(scale));
  const size_t n = size_t(S) * T * H * L * d;
  x.q.resize(n);
  x.k.resize(n);
  for (size_t e = 0; e < n; ++e) x.q[e] = normal(rng), x.k[e] = normal(rng);
  for (int s = 0; s < S; ++s) {
    const size_t per_layer = size_t(T) * H * L * d;
    auto slice = [&](const std::vector<float>& v) {
      return at::from_blob(const_cast<float*>(v.data()) + s * per_layer, {T, H, L, d}, at::kFloat).clone();
    };
    write_safetensors(x.dir + "/layer_" + std::to_string(s) + ".safetensors",
                      {{"q", slice(x.q)}, {"k", slice(x.k)}, {"v", at::ones({T, H, L, d})}},
                      {{"format", "attnscope-capture"}});
  }
  write_safetensors(x.dir + "/ids.safetensors", {{"ids", (at::arange(L, at::kLong) + 100).repeat({T, 1})}},
                    {{"format", "attnscope-capture"}});
  nlohmann::json m = {{"format", "attnscope-capture"},
                      {"version", 2},
                      {"model", {{"path", "/nonexistent/model"}, {"layers", S}, {"heads", H}, {"kv_heads", H},
                                 {"head_dim", d}, {"vocab_size", 100 + L}}},
                      {"tokenization", {{"tokenizer", "hf"}, {"tokenizer_path", "/nonexistent/tokenizer.json"}}},
                      {"seq_len", L},
                      {"num_seqs", T}};
  std::ofstream(x.dir + "/manifest.json") << m.dump(2);
  return x;
}

// Overwrites the float32 q of (layer 0, window t, head h, position i) on disk and in x.
void set_query(Synthetic& x, int t, int h, int i, const std::vector<float>& value) {
  for (int c = 0; c < x.d; ++c) x.q[x.at(0, t, h, i, c)] = value[c];
  at::Tensor q = at::from_blob(x.q.data(), {x.T, x.H, x.L, x.d}, at::kFloat).clone();
  at::Tensor k = at::from_blob(x.k.data(), {x.T, x.H, x.L, x.d}, at::kFloat).clone();
  write_safetensors(x.dir + "/layer_0.safetensors", {{"q", q}, {"k", k}, {"v", at::ones({x.T, x.H, x.L, x.d})}},
                    {{"format", "attnscope-capture"}});
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t c = 0; c < a.size(); ++c) s += a[c] * b[c];
  return s;
}

// Row i of causal softmax(q k^T / sqrt d), [L] with zeros above the diagonal, by max-shifted exp.
std::vector<double> softmax_row(const Synthetic& x, int s, int t, int h, int i) {
  std::vector<double> r(x.L, 0.0);
  const auto qi = x.qrow(s, t, h, i);
  double mx = -INFINITY;
  for (int j = 0; j <= i; ++j) r[j] = dot(qi, x.krow(s, t, h, j)) / std::sqrt(double(x.d)), mx = std::max(mx, r[j]);
  double z = 0;
  for (int j = 0; j <= i; ++j) z += (r[j] = std::exp(r[j] - mx));
  for (int j = 0; j <= i; ++j) r[j] /= z;
  return r;
}

// Row i of the ReLU map's Ahat: relu(q_i).relu(k_j) normalized over j <= i; NaN on j <= i when the
// row sum is 0 (an undefined row).
std::vector<double> relu_row(const Synthetic& x, int t, int h, int i) {
  auto relu = [](std::vector<double> v) {
    for (double& e : v) e = std::max(e, 0.0);
    return v;
  };
  std::vector<double> r(x.L, 0.0);
  const auto qi = relu(x.qrow(0, t, h, i));
  double z = 0;
  for (int j = 0; j <= i; ++j) z += (r[j] = dot(qi, relu(x.krow(0, t, h, j))));
  for (int j = 0; j <= i; ++j) r[j] = z > 0 ? r[j] / z : kNaN;
  return r;
}

// Full L x L maps from the rows above.
std::vector<std::vector<double>> softmax_full(const Synthetic& x, int t, int h) {
  std::vector<std::vector<double>> a;
  for (int i = 0; i < x.L; ++i) a.push_back(softmax_row(x, 0, t, h, i));
  return a;
}
std::vector<std::vector<double>> relu_full(const Synthetic& x, int t, int h) {
  std::vector<std::vector<double>> a;
  for (int i = 0; i < x.L; ++i) a.push_back(relu_row(x, t, h, i));
  return a;
}

bool same(double a, double b, double tol) { return (std::isnan(a) && std::isnan(b)) || std::abs(a - b) <= tol; }

// A map as the view shows it, per cell and in a scale, computed cell by cell (the scale applied to
// every cell before pooling, unlike core, which pools first and transforms each pixel).
struct Reference {
  std::vector<std::vector<double>> cells;  // scaled; NaN above the diagonal and in undefined rows
  double lo = INFINITY, hi = -INFINITY;
};

Reference reference(const std::vector<std::vector<double>>& A, const std::vector<std::vector<double>>* B,
                    MapKind kind, ColourScale scale) {
  const int L = int(A.size());
  const bool diff = kind == MapKind::Difference;
  Reference r;
  r.cells.assign(L, std::vector<double>(L, kNaN));
  for (int i = 0; i < L; ++i) {
    std::vector<double> row(L, kNaN);
    for (int j = 0; j <= i; ++j)
      row[j] = kind == MapKind::Softmax ? A[i][j] : kind == MapKind::Linear ? (*B)[i][j] : (*B)[i][j] - A[i][j];
    double peak = 0;
    for (int j = 0; j <= i; ++j)
      if (!std::isnan(row[j])) peak = std::max(peak, diff ? std::abs(row[j]) : row[j]);
    for (int j = 0; j <= i; ++j) {
      double v = row[j];
      if (std::isnan(v)) continue;
      if (scale == ColourScale::RowNormalized && peak > 0) v /= peak;
      if (scale == ColourScale::Log)
        v = diff ? (v < 0 ? -1 : 1) * std::log10(1 + std::abs(v) / 1e-4) : std::log10(std::max(v, 1e-6));
      r.cells[i][j] = v;
      r.lo = std::min(r.lo, v);
      r.hi = std::max(r.hi, v);
    }
  }
  if (diff) {
    r.hi = std::max(std::abs(r.lo), std::abs(r.hi));
    r.lo = -r.hi;
  }
  return r;
}

// The pixel over cells [i0, i1) x [j0, j1): the largest value (largest |value| for the
// difference) among the non-NaN cells; NaN when all are NaN.
double block_value(const std::vector<std::vector<double>>& cells, int i0, int i1, int j0, int j1, bool diff) {
  double best = kNaN;
  for (int i = i0; i < i1; ++i)
    for (int j = j0; j < j1; ++j) {
      const double v = cells[i][j];
      if (std::isnan(v)) continue;
      if (std::isnan(best) || (diff ? std::abs(v) > std::abs(best) : v > best)) best = v;
    }
  return best;
}

void expect_image(const MapImage& img, const Reference& ref, MapRegion region, int b, bool diff, const std::string& what) {
  EXPECT_EQ(img.cells_per_pixel, b) << what;
  const int rows = (region.row1 - region.row0 + b - 1) / b, cols = (region.col1 - region.col0 + b - 1) / b;
  ASSERT_EQ(img.pixels.rows, rows) << what;
  ASSERT_EQ(img.pixels.cols, cols) << what;
  int mismatches = 0;
  for (int pr = 0; pr < rows; ++pr)
    for (int pc = 0; pc < cols; ++pc) {
      const int i0 = region.row0 + pr * b, j0 = region.col0 + pc * b;
      const double want = block_value(ref.cells, i0, std::min(i0 + b, region.row1), j0, std::min(j0 + b, region.col1), diff);
      if (!same(img.pixels.at(pr, pc), want, 1e-12 * (1 + std::abs(want))) && ++mismatches <= 5)
        ADD_FAILURE() << what << " pixel (" << pr << ", " << pc << "): " << img.pixels.at(pr, pc) << " != " << want;
    }
  EXPECT_NEAR(img.lo, ref.lo, 1e-12 * (1 + std::abs(ref.lo))) << what;
  EXPECT_NEAR(img.hi, ref.hi, 1e-12 * (1 + std::abs(ref.hi))) << what;
  EXPECT_EQ(img.diverging, diff) << what;
}

AnalysisOptions relu_map() {
  AnalysisOptions o;
  o.feature_map = "relu";
  return o;
}

}  // namespace

TEST(HeadDetail, MapsScoresAndLabelsMatchAnIndependentSoftmax) {
  const Synthetic x = write_capture("hv_softmax", 2, 3, 2, 23, 6, 1.5, 1);
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 1, 1, 2, AnalysisOptions{});
  EXPECT_EQ(v.layer, 1);
  EXPECT_EQ(v.head, 1);
  EXPECT_EQ(v.seq, 2);
  EXPECT_EQ(v.head_dim, 6);
  ASSERT_EQ(v.length(), 23);
  EXPECT_FALSE(v.has_linear());
  EXPECT_TRUE(v.row_kl.empty());
  EXPECT_TRUE(v.row_entropy_linear.empty());
  ASSERT_EQ(v.ids.size(), 23u);
  ASSERT_EQ(v.labels.size(), 23u);
  EXPECT_EQ(v.ids[4], 104);
  EXPECT_EQ(v.labels[4], "#104");  // the recorded tokenizer is gone

  double max_err = 0;
  for (int i = 0; i < 23; ++i) {
    const auto a = softmax_row(x, 1, 2, 1, i);
    double h = 0;
    for (int j = 0; j < 23; ++j) {
      max_err = std::max(max_err, std::abs(v.softmax.at(i, j) - a[j]));
      if (a[j] > 0) h -= a[j] * std::log(a[j]);
      EXPECT_NEAR(v.score(i, j), dot(x.qrow(1, 2, 1, i), x.krow(1, 2, 1, j)) / std::sqrt(6.0), 1e-12);
    }
    EXPECT_NEAR(v.row_entropy_softmax[i], h, 1e-12) << i;
  }
  EXPECT_LT(max_err, 1e-13);
  EXPECT_EQ(v.softmax.at(3, 4), 0.0) << "zero above the diagonal";
  EXPECT_NE(test::error_of([&] { v.score(23, 0); }), "");
}

TEST(HeadDetail, LinearMapRowKlAndUndefinedRows) {
  Synthetic x = write_capture("hv_relu", 1, 2, 2, 19, 4, 1.0, 2);
  // Two queries with no positive coordinate: ReLU features all zero, so Ahat has no row there.
  set_query(x, 1, 0, 5, {-1, -2, -0.5, -3});
  set_query(x, 1, 0, 11, {-0.1f, -0.1f, -0.1f, -0.1f});
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 0, 0, 1, relu_map());
  ASSERT_TRUE(v.has_linear());
  const auto A = softmax_full(x, 1, 0), B = relu_full(x, 1, 0);
  // Random queries can also miss every visible key's positive coordinates: count from the reference.
  int undefined = 0;
  for (int i = 0; i < 19; ++i) undefined += std::isnan(B[i][0]);
  ASSERT_TRUE(std::isnan(B[5][0]) && std::isnan(B[11][0]));
  EXPECT_EQ(v.undefined_rows, undefined);
  EXPECT_NEAR(v.nonpositive_row_fraction, double(undefined) / 19, 1e-15);

  int floored = 0;
  for (int i = 0; i < 19; ++i) {
    for (int j = 0; j < 19; ++j) EXPECT_TRUE(same(v.linear.at(i, j), B[i][j], 1e-13)) << i << "," << j;
    if (std::isnan(B[i][0])) {
      EXPECT_TRUE(std::isnan(v.row_kl[i])) << i;
      EXPECT_TRUE(std::isnan(v.row_entropy_linear[i])) << i;
      EXPECT_EQ(v.linear.at(i, i + 1), 0.0) << "above the diagonal stays 0";
      continue;
    }
    // KL(A_i || Ahat_i) with 0 log 0 = 0 and Ahat read at 1e-300 where A > 0 (head_metrics.h).
    double kl = 0, h = 0;
    for (int j = 0; j <= i; ++j) {
      if (A[i][j] > 0) kl += A[i][j] * std::log(A[i][j] / std::max(B[i][j], 1e-300));
      if (B[i][j] > 0) h -= B[i][j] * std::log(B[i][j]);
      if (A[i][j] > 0 && B[i][j] == 0) ++floored;
    }
    EXPECT_NEAR(v.row_kl[i], kl, 1e-10 * (1 + kl)) << i;
    EXPECT_NEAR(v.row_entropy_linear[i], h, 1e-12) << i;
    EXPECT_TRUE(std::isfinite(v.row_kl[i]));
  }
  EXPECT_GT(floored, 0) << "the data should exercise the 1e-300 floor (ReLU zeros where softmax is positive)";

  // The images keep the undefined rows empty: NaN for linear and difference, softmax drawn.
  const MapImage lin = map_image(v, MapKind::Linear, ColourScale::Linear, {0, 19, 0, 19}, 64);
  const MapImage dif = map_image(v, MapKind::Difference, ColourScale::RowNormalized, {0, 19, 0, 19}, 64);
  const MapImage sm = map_image(v, MapKind::Softmax, ColourScale::Linear, {0, 19, 0, 19}, 64);
  for (int j = 0; j <= 5; ++j) {
    EXPECT_TRUE(std::isnan(lin.pixels.at(5, j)));
    EXPECT_TRUE(std::isnan(dif.pixels.at(5, j)));
    EXPECT_FALSE(std::isnan(sm.pixels.at(5, j)));
  }
  // A 2x2 block holding one undefined row and one defined row shows the defined row's maximum.
  const MapImage pooled = map_image(v, MapKind::Linear, ColourScale::Linear, {4, 6, 0, 2}, 1);
  EXPECT_EQ(pooled.cells_per_pixel, 2);
  EXPECT_NEAR(pooled.pixels.at(0, 0), std::max(B[4][0], B[4][1]), 1e-13);
  // A block of only the undefined row's causal cells is NaN.
  const MapImage empty = map_image(v, MapKind::Linear, ColourScale::Log, {5, 6, 0, 6}, 1);
  EXPECT_TRUE(std::isnan(empty.pixels.at(0, 0)));
}

TEST(HeadDetail, MapImagePoolsBlocksAndScalesAsIndependentLoops) {
  // L = 37 at 8 pixels: blocks of 5 cells, the last block 2 cells wide.
  Synthetic x = write_capture("hv_pool", 1, 1, 1, 37, 4, 2.0, 3);
  set_query(x, 0, 0, 20, {-1, -1, -1, -1});  // one undefined ReLU row
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 0, 0, 0, relu_map());
  const auto A = softmax_full(x, 0, 0), B = relu_full(x, 0, 0);
  const MapRegion all{0, 37, 0, 37};
  for (MapKind kind : {MapKind::Softmax, MapKind::Linear, MapKind::Difference})
    for (ColourScale scale : {ColourScale::Linear, ColourScale::Log, ColourScale::RowNormalized}) {
      const std::string what = std::to_string(int(kind)) + "/" + colour_scale_name(scale);
      const Reference ref = reference(A, &B, kind, scale);
      const bool diff = kind == MapKind::Difference;
      const MapImage overview = map_image(v, kind, scale, all, 8);
      expect_image(overview, ref, all, 5, diff, what + " overview");
      EXPECT_EQ(overview.region.row1, 37);
      // The whole map fits: exact cells.
      const MapImage exact = map_image(v, kind, scale, all, 37);
      expect_image(exact, ref, all, 1, diff, what + " exact");
      // Zoomed: the cells of the region, and the colour range of the whole map, unchanged.
      const MapRegion zoom{9, 21, 3, 14};
      const MapImage z = map_image(v, kind, scale, zoom, 12);
      expect_image(z, ref, zoom, 1, diff, what + " zoom");
      EXPECT_EQ(z.lo, overview.lo);
      EXPECT_EQ(z.hi, overview.hi);
      // A zoomed region still wider than the pixels: blocks of 3 inside the region.
      const MapRegion wide{2, 30, 0, 25};
      expect_image(map_image(v, kind, scale, wide, 10), ref, wide, 3, diff, what + " wide zoom");
    }
  // Above the diagonal: nothing to draw. On the diagonal block: the causal half's maximum.
  const MapImage img = map_image(v, MapKind::Softmax, ColourScale::Linear, all, 8);
  EXPECT_TRUE(std::isnan(img.pixels.at(0, 1)));
  EXPECT_FALSE(std::isnan(img.pixels.at(1, 1)));
  // The log scale's floor: a zero ReLU weight shows as log10(1e-6).
  bool saw_floor = false;
  const MapImage lg = map_image(v, MapKind::Linear, ColourScale::Log, all, 37);
  for (int i = 0; i < 37; ++i)
    for (int j = 0; j <= i; ++j)
      if (B[i][j] == 0) {
        saw_floor = true;
        EXPECT_EQ(lg.pixels.at(i, j), -6.0);
      }
  EXPECT_TRUE(saw_floor);
  EXPECT_EQ(lg.lo, -6.0);
  // Row scale: every defined row peaks at exactly 1.
  const MapImage row = map_image(v, MapKind::Softmax, ColourScale::RowNormalized, all, 37);
  for (int i = 0; i < 37; ++i) {
    double peak = 0;
    for (int j = 0; j <= i; ++j) peak = std::max(peak, row.pixels.at(i, j));
    EXPECT_EQ(peak, 1.0) << i;
  }
  EXPECT_EQ(row.hi, 1.0);
}

TEST(HeadDetail, MapImageClipsRegionsAndRefusesBadRequests) {
  const Synthetic x = write_capture("hv_bad", 1, 1, 1, 10, 4, 1.0, 4);
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 0, 0, 0, AnalysisOptions{});
  const MapImage img = map_image(v, MapKind::Softmax, ColourScale::Linear, {-5, 50, 8, 99}, 100);
  EXPECT_EQ(img.region.row0, 0);
  EXPECT_EQ(img.region.row1, 10);
  EXPECT_EQ(img.region.col0, 8);
  EXPECT_EQ(img.region.col1, 10);
  EXPECT_EQ(img.pixels.rows, 10);
  EXPECT_EQ(img.pixels.cols, 2);
  EXPECT_NEAR(img.pixels.at(9, 1), v.softmax.at(9, 9), 0);

  std::string msg = test::error_of([&] { map_image(v, MapKind::Softmax, ColourScale::Linear, {3, 3, 0, 10}, 8); });
  EXPECT_NE(msg.find("map region"), std::string::npos) << msg;
  msg = test::error_of([&] { map_image(v, MapKind::Softmax, ColourScale::Linear, {0, 10, 12, 20}, 8); });
  EXPECT_NE(msg.find("map region"), std::string::npos) << msg;
  msg = test::error_of([&] { map_image(v, MapKind::Softmax, ColourScale::Linear, {0, 10, 0, 10}, 0); });
  EXPECT_NE(msg.find("image size"), std::string::npos) << msg;
  msg = test::error_of([&] { map_image(v, MapKind::Linear, ColourScale::Linear, {0, 10, 0, 10}, 8); });
  EXPECT_NE(msg.find("feature map"), std::string::npos) << msg;
  msg = test::error_of([&] { map_image(v, MapKind::Difference, ColourScale::Log, {0, 10, 0, 10}, 8); });
  EXPECT_NE(msg.find("feature map"), std::string::npos) << msg;
  EXPECT_NE(test::error_of([&] { map_image(HeadDetail{}, MapKind::Softmax, ColourScale::Linear, {0, 1, 0, 1}, 8); }), "");
}

TEST(HeadDetail, OutOfRangeSelectionsNameTheQuantityAndRange) {
  const Synthetic x = write_capture("hv_range", 2, 3, 4, 8, 4, 1.0, 5);
  CaptureStore store(x.dir);
  struct Case {
    int layer, head, seq;
    const char* quantity;
    const char* text;
  };
  for (const Case& c : {Case{2, 0, 0, "layer", "layer 2 is out of range 0..1"},
                        Case{-1, 0, 0, "layer", "layer -1 is out of range 0..1"},
                        Case{0, 4, 0, "head", "head 4 is out of range 0..3"},
                        Case{0, 0, 3, "text window", "text window 3 is out of range 0..2"}}) {
    try {
      head_detail(store, c.layer, c.head, c.seq, AnalysisOptions{});
      ADD_FAILURE() << c.text;
    } catch (const Error& e) {
      EXPECT_EQ(e.quantity(), c.quantity);
      EXPECT_NE(std::string(e.what()).find(c.text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(x.dir), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(test::error_of([&] { head_thumbnails(store, 3, 8); }).find("text window 3 is out of range 0..2"), std::string::npos);
  EXPECT_NE(test::error_of([&] { head_thumbnails(store, 0, 0); }), "");
  AnalysisOptions bad;
  bad.feature_map = "no-such-map";
  EXPECT_NE(test::error_of([&] { head_detail(store, 0, 0, 0, bad); }), "");
}

TEST(HeadDetail, ThumbnailsAreRowNormalizedBlockMaxima) {
  const Synthetic x = write_capture("hv_thumbs", 2, 2, 3, 37, 4, 1.5, 6);
  CaptureStore store(x.dir);
  std::vector<double> fractions;
  const auto th = head_thumbnails(store, 1, 8, [&](double f, const std::string&) { fractions.push_back(f); });
  ASSERT_EQ(th.size(), 2u);
  EXPECT_EQ(fractions, (std::vector<double>{0.5, 1.0}));
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(th[s].size(), 3u);
    for (int h = 0; h < 3; ++h) {
      std::vector<std::vector<double>> a;
      for (int i = 0; i < 37; ++i) a.push_back(softmax_row(x, s, 1, h, i));
      const Reference ref = reference(a, nullptr, MapKind::Softmax, ColourScale::RowNormalized);
      MapImage img;
      img.pixels = th[s][h];
      img.cells_per_pixel = 5;
      img.lo = ref.lo, img.hi = ref.hi;  // thumbnails carry no range; only the pixels are compared
      expect_image(img, ref, {0, 37, 0, 37}, 5, false, "layer " + std::to_string(s) + " head " + std::to_string(h));
    }
  }
  // Different heads and layers give different pictures (compared on the drawn pixels: NaN never
  // compares equal, so comparing whole vectors would pass whatever they held).
  auto differ = [](const Matrix& a, const Matrix& b) {
    double d = 0;
    for (size_t e = 0; e < a.values.size(); ++e)
      if (!std::isnan(a.values[e])) d += std::abs(a.values[e] - b.values[e]);
    return d;
  };
  EXPECT_GT(differ(th[0][0], th[0][1]), 0.1);
  EXPECT_GT(differ(th[0][0], th[1][0]), 0.1);
  // Cancellation at the layer boundary.
  EXPECT_THROW(head_thumbnails(store, 0, 8, [](double, const std::string&) { throw Cancelled(); }), Cancelled);
}

TEST(HeadDetail, ScatterSamplesCausalCellsOfRowsWithThreeKeys) {
  const Synthetic x = write_capture("hv_scatter", 1, 1, 1, 12, 4, 1.0, 7);
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 0, 0, 0, relu_map());
  const auto A = softmax_full(x, 0, 0), B = relu_full(x, 0, 0);
  // All cells: rows 2..11 with i + 1 keys each, in row order.
  const ScatterPoints all = monotonicity_scatter(v, 1000, 1);
  ASSERT_EQ(all.score.size(), size_t(3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12));
  size_t p = 0;
  for (int i = 2; i < 12; ++i)
    for (int j = 0; j <= i; ++j, ++p) {
      EXPECT_NEAR(all.score[p], dot(x.qrow(0, 0, 0, i), x.krow(0, 0, 0, j)) / 2.0, 1e-12);
      EXPECT_NEAR(all.softmax[p], A[i][j], 1e-13);
      EXPECT_TRUE(same(all.linear[p], B[i][j], 1e-13)) << i << "," << j;
    }
  // A sample: that many distinct cells out of those, reproducible by seed.
  const ScatterPoints some = monotonicity_scatter(v, 20, 7);
  ASSERT_EQ(some.score.size(), 20u);
  std::set<std::pair<double, double>> universe, drawn;
  for (size_t e = 0; e < all.score.size(); ++e) universe.insert({all.score[e], all.softmax[e]});
  for (size_t e = 0; e < 20; ++e) {
    EXPECT_TRUE(universe.count({some.score[e], some.softmax[e]})) << e;
    drawn.insert({some.score[e], some.softmax[e]});
  }
  EXPECT_EQ(drawn.size(), 20u) << "without replacement";
  EXPECT_EQ(monotonicity_scatter(v, 20, 7).score, some.score);
  EXPECT_NE(monotonicity_scatter(v, 20, 8).score, some.score);
  // Without a map the linear weights are NaN.
  const HeadDetail plain = head_detail(store, 0, 0, 0, AnalysisOptions{});
  const ScatterPoints np = monotonicity_scatter(plain, 5, 1);
  ASSERT_EQ(np.linear.size(), 5u);
  for (double w : np.linear) EXPECT_TRUE(std::isnan(w));
  EXPECT_NE(test::error_of([&] { monotonicity_scatter(v, -1, 0); }), "");
}

TEST(HeadDetail, HistogramCountsFiniteValuesInEqualBins) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-2.0, 5.0);
  std::vector<double> values;
  for (int e = 0; e < 1000; ++e) values.push_back(u(rng));
  values.push_back(kNaN);
  values.push_back(INFINITY);
  values.push_back(-INFINITY);
  const Histogram h = histogram(values, 7);
  ASSERT_EQ(h.edges.size(), 8u);
  ASSERT_EQ(h.counts.size(), 7u);
  const double lo = *std::min_element(values.begin(), values.begin() + 1000);
  const double hi = *std::max_element(values.begin(), values.begin() + 1000);
  EXPECT_EQ(h.edges.front(), lo);
  EXPECT_EQ(h.edges.back(), hi);
  double total = 0;
  for (int b = 0; b < 7; ++b) {
    EXPECT_NEAR(h.edges[b + 1] - h.edges[b], (hi - lo) / 7, 1e-12);
    double n = 0;
    for (int e = 0; e < 1000; ++e)
      n += values[e] >= h.edges[b] && (values[e] < h.edges[b + 1] || (b == 6 && values[e] == hi));
    EXPECT_EQ(h.counts[b], n) << b;
    total += h.counts[b];
  }
  EXPECT_EQ(total, 1000) << "NaN and inf left out, the maximum counted";

  const Histogram one = histogram({2.5, 2.5, kNaN, 2.5}, 10);
  EXPECT_EQ(one.edges, (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(one.counts, (std::vector<double>{3}));
  EXPECT_TRUE(histogram({kNaN}, 4).counts.empty());
  EXPECT_NE(test::error_of([&] { histogram(values, 0); }).find("bins"), std::string::npos);
}

TEST(HeadDetail, SingleTokenView) {
  // L = 1 (a capture always has L >= 2, but the view is a plain struct the GUI may build).
  HeadDetail v;
  v.head_dim = 2;
  v.softmax = {1, 1, {1.0}};
  v.linear = {1, 1, {1.0}};
  v.q = {1, 0};
  v.k = {0.5, 2};
  EXPECT_NEAR(v.score(0, 0), 0.5 / std::sqrt(2.0), 1e-15);
  const MapImage a = map_image(v, MapKind::Softmax, ColourScale::Linear, {0, 1, 0, 1}, 512);
  ASSERT_EQ(a.pixels.rows, 1);
  EXPECT_EQ(a.pixels.at(0, 0), 1.0);
  EXPECT_LT(a.lo, a.hi) << "a usable colour range even with one value";
  EXPECT_EQ(a.hi, 1.0);
  const MapImage d = map_image(v, MapKind::Difference, ColourScale::Log, {0, 1, 0, 1}, 512);
  EXPECT_EQ(d.pixels.at(0, 0), 0.0);
  EXPECT_EQ(d.lo, -d.hi);
  EXPECT_GT(d.hi, 0);
  EXPECT_TRUE(monotonicity_scatter(v, 10, 0).score.empty()) << "no row has 3 keys";
}

TEST(HeadDetail, LabelsAreTheCaptureTokenizersPieces) {
  LoadedModel m = load_model(test::tiny_gpt2_dir());
  std::vector<TextDocument> docs = {{"t", test::read_file(test::source_dir() + "/resources/texts/brown_news_ca44.txt")}};
  CaptureOptions co;
  co.seq_len = 16;
  co.num_seqs = 2;
  const CaptureStore store = capture_to_dir(m, docs, co, test::temp_dir("hv_labels") + "/cap");
  const HeadDetail v = head_detail(store, 1, 1, 1, AnalysisOptions{});
  const at::Tensor ids = store.ids()[1];
  ASSERT_EQ(v.labels.size(), 16u);
  int pieces_with_space = 0;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(v.ids[i], ids[i].item<int64_t>());
    std::string want;
    for (char c : m.tokenizer->piece(v.ids[i])) want += c == '\n' ? "\\n" : c == '\t' ? "\\t" : std::string(1, c);
    EXPECT_EQ(v.labels[i], want) << i;
    pieces_with_space += v.labels[i].find(' ') != std::string::npos;
  }
  EXPECT_GT(pieces_with_space, 0) << "real word pieces, not ids";
}

TEST(HeadDetail, LongWindowOverviewIsBlockMaximaAndZoomIsExact) {
  // L = 4096: the overview at 512 pixels is 8-cell blocks; a 64 x 64 zoom is exact. One softmax
  // map is 4096^2 doubles = 134 MB; the reference computes only the rows it checks.
  const int L = 4096;
  const Synthetic x = write_capture("hv_long", 1, 1, 1, L, 8, 1.5, 8);
  CaptureStore store(x.dir);
  const HeadDetail v = head_detail(store, 0, 0, 0, AnalysisOptions{});
  ASSERT_EQ(v.length(), L);
  const MapImage over = map_image(v, MapKind::Softmax, ColourScale::Linear, {0, L, 0, L}, 512);
  EXPECT_EQ(over.cells_per_pixel, 8);
  ASSERT_EQ(over.pixels.rows, 512);
  ASSERT_EQ(over.pixels.cols, 512);
  std::mt19937 rng(1);
  int checked = 0;
  for (int n = 0; n < 24; ++n) {
    const int pr = int(rng() % 512), pc = int(rng() % (pr + 1));  // on or below the diagonal
    std::vector<std::vector<double>> rows;
    for (int i = pr * 8; i < pr * 8 + 8; ++i) rows.push_back(softmax_row(x, 0, 0, 0, i));
    double want = -1;
    for (int r = 0; r < 8; ++r)
      for (int j = pc * 8; j < pc * 8 + 8; ++j)
        if (j <= pr * 8 + r) want = std::max(want, rows[r][j]);
    EXPECT_NEAR(over.pixels.at(pr, pc), want, 1e-13 + 1e-10 * want) << pr << "," << pc;
    ++checked;
  }
  EXPECT_EQ(checked, 24);
  EXPECT_TRUE(std::isnan(over.pixels.at(10, 300)));
  // Last block row: the last query row and the last 8 keys.
  {
    std::vector<std::vector<double>> rows;
    double want = -1;
    for (int i = L - 8; i < L; ++i) {
      const auto r = softmax_row(x, 0, 0, 0, i);
      for (int j = L - 8; j <= i; ++j) want = std::max(want, r[j]);
    }
    EXPECT_NEAR(over.pixels.at(511, 511), want, 1e-13 + 1e-10 * want);
  }

  const MapRegion zoom{3000, 3064, 2990, 3054};
  const MapImage z = map_image(v, MapKind::Softmax, ColourScale::Linear, zoom, 512);
  EXPECT_EQ(z.cells_per_pixel, 1);
  ASSERT_EQ(z.pixels.rows, 64);
  ASSERT_EQ(z.pixels.cols, 64);
  for (int i = 0; i < 64; ++i) {
    const auto r = softmax_row(x, 0, 0, 0, zoom.row0 + i);
    for (int j = 0; j < 64; ++j) {
      const int col = zoom.col0 + j;
      if (col > zoom.row0 + i)
        EXPECT_TRUE(std::isnan(z.pixels.at(i, j)));
      else
        EXPECT_NEAR(z.pixels.at(i, j), r[col], 1e-13 + 1e-10 * r[col]) << i << "," << j;
    }
  }
  EXPECT_EQ(z.lo, over.lo);
  EXPECT_EQ(z.hi, over.hi);
  EXPECT_EQ(over.hi, 1.0) << "row 0 has one key with weight 1";
  // Row entropy of the last row, independently.
  const auto last = softmax_row(x, 0, 0, 0, L - 1);
  double h = 0;
  for (double a : last)
    if (a > 0) h -= a * std::log(a);
  EXPECT_NEAR(v.row_entropy_softmax[L - 1], h, 1e-10);
}

}  // namespace test_head_detail
