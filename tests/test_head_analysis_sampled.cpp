// Head metrics at scale: metrics on sampled query rows (head_metrics.h "Sampled rows") against
// float64 loops over the same rows, their standard errors against the exact all-row values, the
// exact softmax entropies from logsumexp at extremes, analyze_capture's row maps against
// attention.h's full maps, its cancellation points and its softmax-side cache.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/attention/attention.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_analysis_table.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/model/model.h"
#include "attnscope/base/random.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_head_analysis_sampled {

using namespace attnscope;

namespace {

// Causal softmax of one row's scores over keys 0..i, in plain loops.
std::vector<double> softmax_row(const at::Tensor& q, const at::Tensor& k, int64_t t, int64_t i) {
  const int64_t d = q.size(-1);
  std::vector<double> s(i + 1);
  double mx = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += q[t][i][c].item<double>() * k[t][j][c].item<double>();
    s[j] = dot / std::sqrt(double(d));
    mx = std::max(mx, s[j]);
  }
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - mx));
  for (double& x : s) x /= z;
  return s;
}

double entropy_of(const std::vector<double>& p) {
  double h = 0;
  for (double x : p)
    if (x > 0) h -= x * std::log(x);
  return h;
}

// A tiny captured GPT-2 (random weights), shared by the tests below.
const std::string& tiny_capture() {
  static const std::string dir = test::tiny_gpt2_capture("head_analysis_sampled", 40, 3, 2);
  return dir;
}

}  // namespace

// Metrics of a map given on a subset of its rows equal plain loops over exactly those rows; with
// every row as the subset they equal the square map's, and nothing is called an estimate.
TEST(HeadMetricsSampled, SubsetRowsMatchLoopsOverThoseRows) {
  const int64_t T = 2, L = 30, d = 6;
  const at::Tensor q = test::seeded_randn({T, L, d}, 1), k = test::seeded_randn({T, L, d}, 2), v = test::seeded_randn({T, L, 3}, 3);
  const at::Tensor A = softmax_map(q, k);
  auto phi = make_feature_map([&] {
    FeatureMapSpec s;
    s.name = "elu", s.d = d;
    return s;
  }());
  const at::Tensor B = linear_map(phi->query_features(q), phi->key_features(k)).map;
  const at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 4, 9, 17, 29}, at::kLong);
  HeadMetricsInput in;
  in.map = B.index_select(1, pos), in.reference = A.index_select(1, pos), in.positions = pos;
  in.q = q, in.k = k, in.v = v;
  const HeadMetrics m = compute_head_metrics(in);

  double h = 0, hn = 0, kl = 0, ce = 0, num = 0, den = 0;
  int64_t n = 0, nn = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < pos.size(0); ++r) {
      const int64_t i = pos[r].item<int64_t>();
      std::vector<double> b(i + 1), a(i + 1);
      for (int64_t j = 0; j <= i; ++j) b[j] = B[t][i][j].item<double>(), a[j] = A[t][i][j].item<double>();
      const double hi = entropy_of(b);
      h += hi, ++n;
      if (i >= 1) hn += hi / std::log(double(i + 1)), ++nn;
      for (int64_t j = 0; j <= i; ++j)
        if (a[j] > 0) kl += a[j] * std::log(a[j] / b[j]), ce -= a[j] * std::log(b[j]);
      for (int64_t c = 0; c < 3; ++c) {
        double y = 0, yr = 0;
        for (int64_t j = 0; j <= i; ++j) y += b[j] * v[t][j][c].item<double>(), yr += a[j] * v[t][j][c].item<double>();
        num += (y - yr) * (y - yr), den += yr * yr;
      }
    }
  EXPECT_NEAR(m.entropy, h / double(n), 1e-12);
  EXPECT_NEAR(m.normalized_entropy, hn / double(nn), 1e-12);
  EXPECT_NEAR(*m.kl, kl / double(n), 1e-12);
  EXPECT_NEAR(*m.cross_entropy, ce / double(n), 1e-12);
  EXPECT_NEAR(*m.output_rel_error, std::sqrt(num / den), 1e-12);
  EXPECT_EQ(m.rows, T * 6);
  EXPECT_EQ(m.rows_total, T * L);
  EXPECT_TRUE(m.sampled());
  for (const char* name : {"entropy", "normalized_entropy", "kl", "cross_entropy", "output_rel_error", "monotonicity"}) {
    ASSERT_TRUE(m.standard_error.count(name)) << name;
    EXPECT_GT(m.standard_error.at(name), 0) << name;
  }

  // Positions 0 and 1 as a census: weight 1, the other 4 weight (30 - 2) / 4 = 7 each.
  HeadMetricsInput cen = in;
  cen.census = 2;
  double hw = 0, nw = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < pos.size(0); ++r) {
      const int64_t i = pos[r].item<int64_t>();
      std::vector<double> b(i + 1);
      for (int64_t j = 0; j <= i; ++j) b[j] = B[t][i][j].item<double>();
      const double w = r < 2 ? 1.0 : 7.0;
      hw += w * entropy_of(b), nw += w;
    }
  EXPECT_NEAR(compute_head_metrics(cen).entropy, hw / nw, 1e-12);
  cen.census = 3;  // positions start 0, 1, 4: not a census of 0..2
  EXPECT_NE(test::error_of([&] { compute_head_metrics(cen); }).find("census"), std::string::npos);

  // Every row as the subset: the square map's metrics, exact.
  HeadMetricsInput all = in;
  all.map = B, all.reference = A, all.positions = at::arange(L, at::kLong);
  HeadMetricsInput square = all;
  square.positions = at::Tensor();
  const HeadMetrics ma = compute_head_metrics(all), ms = compute_head_metrics(square);
  EXPECT_DOUBLE_EQ(ma.entropy, ms.entropy);
  EXPECT_DOUBLE_EQ(*ma.kl, *ms.kl);
  EXPECT_DOUBLE_EQ(ma.monotonicity->spearman, ms.monotonicity->spearman);
  EXPECT_DOUBLE_EQ(*ma.output_rel_error, *ms.output_rel_error);
  EXPECT_FALSE(ma.sampled());
  EXPECT_TRUE(ma.standard_error.empty());

  // Bad positions are errors naming them.
  HeadMetricsInput bad = in;
  bad.positions = at::tensor(std::vector<int64_t>{0, 1, 4, 9, 17, 30}, at::kLong);
  EXPECT_NE(test::error_of([&] { compute_head_metrics(bad); }).find("positions"), std::string::npos);
  bad.positions = at::tensor(std::vector<int64_t>{0, 4, 1, 9, 17, 29}, at::kLong);
  EXPECT_NE(test::error_of([&] { compute_head_metrics(bad); }).find("increasing"), std::string::npos);
}

// The estimates from sampled rows lie within their stated standard errors of the exact all-row
// values: over 40 fixed draws (the first 12 positions in full, 36 of the other 388 sampled), every
// estimate within 4 SE and most within 2.
TEST(HeadMetricsSampled, EstimatesAreWithinTheirStandardErrors) {
  const int64_t T = 3, L = 400, d = 8, R = 48;
  const at::Tensor q = test::seeded_randn({T, L, d}, 11, 1.5), k = test::seeded_randn({T, L, d}, 12, 1.5), v = test::seeded_randn({T, L, 4}, 13);
  const at::Tensor A = softmax_map(q, k);
  auto phi = make_feature_map([&] {
    FeatureMapSpec s;
    s.name = "elu", s.d = d;
    return s;
  }());
  const at::Tensor B = linear_map(phi->query_features(q), phi->key_features(k)).map;
  HeadMetricsInput full;
  full.map = B, full.reference = A, full.q = q, full.k = k, full.v = v;
  const HeadMetrics exact = compute_head_metrics(full);
  int within2 = 0, checks = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < R / 4; ++i) p.push_back(i);
    for (int64_t i : sample_without_replacement(L - R / 4, R - R / 4, seed)) p.push_back(R / 4 + i);
    const at::Tensor pos = at::tensor(p, at::kLong);
    HeadMetricsInput in = full;
    in.map = B.index_select(1, pos), in.reference = A.index_select(1, pos), in.positions = pos, in.census = R / 4;
    const HeadMetrics m = compute_head_metrics(in);
    const std::vector<std::pair<const char*, std::pair<double, double>>> pairs = {
        {"entropy", {m.entropy, exact.entropy}},
        {"normalized_entropy", {m.normalized_entropy, exact.normalized_entropy}},
        {"monotonicity", {m.monotonicity->spearman, exact.monotonicity->spearman}},
        {"discordant_fraction", {m.monotonicity->discordant_fraction, exact.monotonicity->discordant_fraction}},
        {"kl", {*m.kl, *exact.kl}},
        {"cross_entropy", {*m.cross_entropy, *exact.cross_entropy}},
        {"output_rel_error", {*m.output_rel_error, *exact.output_rel_error}}};
    for (const auto& [name, v2] : pairs) {
      const double se = m.standard_error.at(name);
      ASSERT_GT(se, 0) << name;
      EXPECT_LT(se, 0.25 * std::abs(v2.second)) << name << " seed " << seed;  // informative, not vacuous
      EXPECT_LE(std::abs(v2.first - v2.second), 4 * se) << name << " seed " << seed;
      within2 += std::abs(v2.first - v2.second) <= 2 * se;
      ++checks;
    }
  }
  EXPECT_GE(within2, int(0.85 * checks)) << within2 << " of " << checks;
}

// softmax_row_entropies (logsumexp) against loops, at huge norms (scores ~1e4: exp overflows
// without the shift, most rows one-hot), L = 1 and a long L.
TEST(HeadMetricsSampled, ExactSoftmaxEntropiesMatchLoopsAtExtremes) {
  for (const auto& [L, scale] : std::vector<std::pair<int64_t, double>>{{1, 1.0}, {37, 1.0}, {37, 60.0}, {2500, 0.7}}) {
    const int64_t T = 2, d = 5;
    const at::Tensor q = test::seeded_randn({T, L, d}, 21, scale), k = test::seeded_randn({T, L, d}, 22, scale);
    const at::Tensor h = softmax_row_entropies(q, k);
    ASSERT_EQ(h.sizes(), at::IntArrayRef({T, L}));
    ASSERT_TRUE(at::isfinite(h).all().item<bool>());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i : {int64_t(0), L / 2, L - 1})
        EXPECT_NEAR(h[t][i].item<double>(), entropy_of(softmax_row(q, k, t, i)), 1e-10) << "L " << L << " scale " << scale << " row " << i;
  }
}

// analyze_capture measuring every row (sample_rows 0, or >= L) equals compute_head_metrics on
// attention.h's full maps: softmax_map, linear_map and hybrid_map.
TEST(HeadAnalysisSampled, EveryRowEqualsTheFullMaps) {
  const CaptureStore st(tiny_capture());
  for (int64_t window : {int64_t(0), int64_t(5)}) {
    AnalysisOptions o;
    o.feature_map = "hedgehog", o.features = 8, o.window = window, o.seed = 3;
    for (int64_t rows : {int64_t(0), int64_t(40), int64_t(1000)}) {
      o.sample_rows = rows;
      const auto heads = analyze_capture(st, o);
      ASSERT_EQ(heads.size(), size_t(st.num_layers() * st.num_heads()));
      for (const HeadAnalysis& a : {heads.front(), heads.back()}) {
        const at::Tensor q = st.layer_tensor(a.layer, "q").select(1, a.head).to(at::kDouble);
        const at::Tensor k = st.layer_tensor(a.layer, "k").select(1, a.head).to(at::kDouble);
        const at::Tensor v = st.layer_tensor(a.layer, "v").select(1, a.head).to(at::kDouble);
        FeatureMapSpec spec;
        spec.name = "hedgehog", spec.d = st.head_dim(), spec.features = 8, spec.seed = derive_seed(o.seed, a.layer, a.head);
        auto phi = make_feature_map(spec);
        const Features pq = phi->scaled_query_features(q), pk = phi->scaled_key_features(k);
        const LinearMap lm = linear_map(pq, pk);
        HeadMetricsInput in;
        in.map = softmax_map(q, k), in.q = q, in.k = k, in.seed = o.seed;
        const HeadMetrics sm = compute_head_metrics(in);
        HeadMetricsInput li = in;
        li.reference = in.map, li.v = v, li.phi_q = pq, li.phi_k = pk;
        li.map = window > 0 ? hybrid_map(pq, pk, q, k, {window, at::zeros({}, at::kDouble)}) : lm.map;
        const HeadMetrics lin = compute_head_metrics(li);
        EXPECT_NEAR(a.softmax.entropy, sm.entropy, 1e-12);
        EXPECT_NEAR(a.softmax.monotonicity->spearman, sm.monotonicity->spearman, 1e-12);
        EXPECT_NEAR(a.linear->entropy, lin.entropy, 1e-12);
        EXPECT_NEAR(*a.linear->kl, *lin.kl, 1e-12);
        EXPECT_NEAR(*a.linear->cross_entropy, *lin.cross_entropy, 1e-12);
        EXPECT_NEAR(*a.linear->output_rel_error, *lin.output_rel_error, 1e-12);
        EXPECT_NEAR(*a.linear->kernel_rel_error, *lin.kernel_rel_error, 1e-12);
        EXPECT_NEAR(a.linear->monotonicity->spearman, lin.monotonicity->spearman, 1e-12);
        EXPECT_DOUBLE_EQ(*a.linear->nonpositive_row_fraction, lm.nonpositive_row_fraction);
        EXPECT_FALSE(a.linear->sampled());
      }
    }
  }
}

// With R < L the softmax entropies stay exact (equal to the every-row run); the other row metrics
// are estimates from R x T rows with standard errors, and the note says which.
TEST(HeadAnalysisSampled, SampledRunKeepsEntropiesExactAndSaysWhatIsEstimated) {
  const CaptureStore st(tiny_capture());
  AnalysisOptions o;
  o.feature_map = "hedgehog", o.features = 8;
  o.sample_rows = 0;
  const auto exact = analyze_capture(st, o);
  o.sample_rows = 12;
  const auto est = analyze_capture(st, o);
  ASSERT_EQ(exact.size(), est.size());
  for (size_t i = 0; i < est.size(); ++i) {
    EXPECT_NEAR(est[i].softmax.entropy, exact[i].softmax.entropy, 1e-12);
    EXPECT_NEAR(est[i].softmax.normalized_entropy, exact[i].softmax.normalized_entropy, 1e-12);
    EXPECT_EQ(est[i].linear->rows, 12 * st.num_seqs());
    EXPECT_EQ(est[i].linear->rows_total, 40 * st.num_seqs());
    EXPECT_FALSE(est[i].softmax.standard_error.count("entropy"));
    EXPECT_TRUE(est[i].softmax.standard_error.count("monotonicity"));
    EXPECT_TRUE(est[i].linear->standard_error.count("kl"));
  }
  const std::string note = sampling_note(est);
  EXPECT_NE(note.find("36 of 120 query rows"), std::string::npos) << note;
  EXPECT_NE(note.find("kl (SE"), std::string::npos) << note;
  EXPECT_EQ(sampling_note(exact), "");
  o.sample_rows = -1;
  EXPECT_NE(test::error_of([&] { analyze_capture(st, o); }).find("sample_rows"), std::string::npos);
}

// Cancellation points: progress is called after every head and before every head's linear side,
// so at most one head's softmax or linear side (T x L rows) runs between two checks; a Cancelled
// thrown from it stops the analysis at once.
TEST(HeadAnalysisSampled, ChecksForCancellationAtLeastTwicePerHead) {
  const CaptureStore st(tiny_capture());
  AnalysisOptions o;
  o.feature_map = "hedgehog", o.features = 8;
  int calls = 0;
  analyze_capture(st, o, [&](double, const std::string&) { ++calls; });
  EXPECT_EQ(calls, 2 * st.num_layers() * st.num_heads());
  for (int stop_at : {1, 2, 5}) {
    int seen = 0;
    EXPECT_THROW(analyze_capture(st, o,
                                 [&](double, const std::string&) {
                                   if (++seen == stop_at) throw Cancelled();
                                 }),
                 Cancelled);
    EXPECT_EQ(seen, stop_at);
  }
}

// The heads of a layer run in parallel: every metric is the same whatever the thread count, and
// progress still rises to 1 in half-head steps.
TEST(HeadAnalysisSampled, ParallelHeadsGiveTheOneThreadResult) {
  const CaptureStore st(tiny_capture());
  AnalysisOptions o;
  o.feature_map = "hedgehog", o.features = 8, o.sample_rows = 16, o.mixer_state = 2, o.mixer_tokens = 12;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = analyze_capture(st, o);
  at::set_num_threads(4);
  std::vector<double> fractions;
  const auto four = analyze_capture(st, o, [&](double f, const std::string&) { fractions.push_back(f); });
  at::set_num_threads(threads);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(four[i].layer, one[i].layer);
    EXPECT_EQ(four[i].head, one[i].head);
    EXPECT_EQ(four[i].softmax.entropy, one[i].softmax.entropy);
    EXPECT_EQ(four[i].softmax.monotonicity->spearman, one[i].softmax.monotonicity->spearman);
    EXPECT_EQ(four[i].mixers->causal_low_rank, one[i].mixers->causal_low_rank);
    EXPECT_EQ(four[i].mixers->ssd, one[i].mixers->ssd);
    EXPECT_EQ(*four[i].linear->kl, *one[i].linear->kl);
    EXPECT_EQ(*four[i].linear->output_rel_error, *one[i].linear->output_rel_error);
  }
  ASSERT_EQ(fractions.size(), 2 * one.size());
  for (size_t i = 0; i < fractions.size(); ++i) EXPECT_DOUBLE_EQ(fractions[i], double(i + 1) / double(fractions.size()));
}

// The softmax side is reused from the cache under the same key (a marker planted there comes
// back) and recomputed under another (a different seed), while the linear side follows the
// feature map of each run.
TEST(HeadAnalysisSampled, SoftmaxSideCacheIsReusedAcrossFeatureMaps) {
  const CaptureStore st(tiny_capture());
  AnalysisOptions o;
  o.feature_map = "prf", o.features = 8;
  SoftmaxSideCache cache;
  const auto first = analyze_capture(st, o, nullptr, &cache);
  ASSERT_GE(first.size(), 2u);
  EXPECT_EQ(cache.size(), first.size());
  HeadAnalysis marked = first[0];
  marked.softmax.entropy = 1234.5;
  cache.store(SoftmaxSideCache::key(st, o), marked);
  o.features = 16;
  const auto second = analyze_capture(st, o, nullptr, &cache);
  EXPECT_EQ(second[0].softmax.entropy, 1234.5);
  EXPECT_EQ(second[1].softmax.entropy, first[1].softmax.entropy);
  const auto uncached = analyze_capture(st, o);
  EXPECT_DOUBLE_EQ(*second[1].linear->kl, *uncached[1].linear->kl);
  EXPECT_DOUBLE_EQ(*second[1].linear->kernel_rel_error, *uncached[1].linear->kernel_rel_error);
  EXPECT_NE(*second[1].linear->kernel_rel_error, *first[1].linear->kernel_rel_error);
  o.seed = 9;
  const auto third = analyze_capture(st, o, nullptr, &cache);
  EXPECT_NE(third[0].softmax.entropy, 1234.5);
}

}  // namespace test_head_analysis_sampled
