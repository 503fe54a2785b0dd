// A model's sliding window (Mistral, ModelConfig::sliding_window) everywhere softmax attention is
// rebuilt outside the model's forward: softmax_map, the capture (which records the window), the
// head analysis and its maps and thumbnails, and the distillation's layerwise targets. Each is
// checked against a windowed softmax computed independently (the float64 reference transformer,
// or a masked softmax written out below) on a small random Mistral with window W < L, and shown to
// differ from the unwindowed softmax.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/attention/attention.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/io/text_source.h"
#include "attnscope/model/model.h"
#include "capture/capture_manifest.h"
#include "attnscope/distill/layer_maps.h"
#include "hf_checkpoint_writer.h"
#include "reference_transformer.h"
#include "test_support.h"

namespace attnscope::test {
namespace test_sliding_window {

namespace fs = std::filesystem;

constexpr int kWindow = 4, kLen = 12, kSeqs = 3;

// Row-softmax of q k^T / sqrt(d) over keys j <= i with i - j < window (0: every j <= i), written
// out in float64 loops: q, k [L, d] -> [L][L].
std::vector<std::vector<double>> masked_softmax(const at::Tensor& q, const at::Tensor& k, int window) {
  const at::Tensor qd = q.to(at::kDouble).contiguous(), kd = k.to(at::kDouble).contiguous();
  const int64_t L = qd.size(0), d = qd.size(1);
  auto Q = qd.accessor<double, 2>();
  auto K = kd.accessor<double, 2>();
  std::vector<std::vector<double>> a(size_t(L), std::vector<double>(size_t(L), 0.0));
  for (int64_t i = 0; i < L; ++i) {
    const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
    double mx = -1e300;
    std::vector<double> s(size_t(L), 0.0);
    for (int64_t j = first; j <= i; ++j) {
      for (int64_t c = 0; c < d; ++c) s[size_t(j)] += Q[i][c] * K[j][c];
      s[size_t(j)] /= std::sqrt(double(d));
      mx = std::max(mx, s[size_t(j)]);
    }
    double z = 0;
    for (int64_t j = first; j <= i; ++j) z += std::exp(s[size_t(j)] - mx);
    for (int64_t j = first; j <= i; ++j) a[size_t(i)][size_t(j)] = std::exp(s[size_t(j)] - mx) / z;
  }
  return a;
}

double max_abs_diff(const at::Tensor& got, const std::vector<std::vector<double>>& want) {
  const at::Tensor g = got.to(at::kDouble).contiguous();
  double m = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want.size(); ++j) m = std::max(m, std::abs(g[int64_t(i)][int64_t(j)].item<double>() - want[i][j]));
  return m;
}

TEST(SlidingWindow, SoftmaxMapIsTheWindowedSoftmax) {
  at::manual_seed(41);
  const at::Tensor q = at::randn({2, 10, 8}, at::kDouble) * 1.5, k = at::randn({2, 10, 8}, at::kDouble) * 1.5;
  const at::Tensor v = at::randn({2, 10, 5}, at::kDouble);
  for (int W : {1, 3, 7}) {
    SCOPED_TRACE("window " + std::to_string(W));
    const at::Tensor a = softmax_map(q, k, W);
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_LT(max_abs_diff(a[b], masked_softmax(q[b], k[b], W)), 1e-12);
      EXPECT_GT(max_abs_diff(a[b], masked_softmax(q[b], k[b], 0)), 1e-2);  // not the unwindowed map
    }
    EXPECT_TRUE(at::allclose(softmax_attention_output(q, k, v, W), at::matmul(a, v), 1e-12, 1e-12));
  }
  // A window of L keys or more is plain causal softmax, bit for bit.
  EXPECT_TRUE(at::equal(softmax_map(q, k, 10), softmax_map(q, k)));
  EXPECT_TRUE(at::equal(softmax_map(q, k, 50), softmax_map(q, k, 0)));
  try {
    softmax_map(q, k, -1);
    ADD_FAILURE() << "a negative window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window"), std::string::npos) << e.what();
  }
}

// A small Mistral with window 4 (the bundled tokenizer's vocabulary), captured on a sample text:
// 3 windows of 12 tokens, with the float64 reference's attention of each.
struct Captured {
  RefConfig cfg;
  RefWeights weights;
  std::unique_ptr<CaptureStore> store;
  std::vector<RefResult> ref, ref_unwindowed;  // per captured window
};

const Captured& captured() {
  static std::unique_ptr<Captured> c;
  if (c) return *c;
  c = std::make_unique<Captured>();
  RefConfig& rc = c->cfg;
  rc.arch = RefArch::Mistral;
  rc.n_layer = 2, rc.n_head = 4, rc.n_kv_head = 2, rc.d_model = 32, rc.d_ff = 64;
  rc.vocab = 4096;  // the bundled tokenizer's
  rc.n_ctx = 64;
  rc.sliding_window = kWindow;
  c->weights = random_weights(rc, 43);
  const std::string root = temp_dir("sliding_window_capture");
  const std::string dir = root + "/src";
  fs::create_directories(dir);
  write_hf_checkpoint(dir, rc, c->weights);
  fs::copy_file(source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json", dir + "/tokenizer.json");
  const LoadedModel m = load_model(dir);
  std::vector<TextDocument> docs = {{"t", read_file(source_dir() + "/resources/texts/brown_news_ca44.txt")}};
  CaptureOptions co;
  co.seq_len = kLen;
  co.num_seqs = kSeqs;
  co.seed = 5;
  c->store = std::make_unique<CaptureStore>(capture_to_dir(m, docs, co, root + "/cap"));
  const at::Tensor ids = c->store->ids();
  RefOptions full;
  full.no_sliding_window = true;
  for (int t = 0; t < kSeqs; ++t) {
    const at::Tensor row = ids[t].contiguous();
    const std::vector<int64_t> seq(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + kLen);
    c->ref.push_back(reference_forward(rc, c->weights, seq));
    c->ref_unwindowed.push_back(reference_forward(rc, c->weights, seq, full));
  }
  return *c;
}

// The reference's softmax map of (layer, head) on captured window t, [L][L].
std::vector<std::vector<double>> ref_map(const RefResult& r, int layer, int head) {
  std::vector<std::vector<double>> a(kLen, std::vector<double>(kLen));
  const std::vector<double>& p = r.layers[size_t(layer)].probs;
  for (int i = 0; i < kLen; ++i)
    for (int j = 0; j < kLen; ++j) a[size_t(i)][size_t(j)] = p[(size_t(head) * kLen + size_t(i)) * kLen + size_t(j)];
  return a;
}

TEST(SlidingWindow, TheCaptureRecordsTheWindowAndItsMapsApplyIt) {
  const Captured& c = captured();
  EXPECT_EQ(c.store->sliding_window(), kWindow);
  double worst = 0, nearest_unwindowed = 1e9;
  for (int s = 0; s < c.cfg.n_layer; ++s)
    for (int h = 0; h < c.cfg.n_head; ++h)
      for (int t = 0; t < kSeqs; ++t) {
        const HeadMaps m = head_maps(*c.store, s, h, t, {});
        worst = std::max(worst, max_abs_diff(m.softmax, ref_map(c.ref[size_t(t)], s, h)));
        nearest_unwindowed = std::min(nearest_unwindowed, max_abs_diff(m.softmax, ref_map(c.ref_unwindowed[size_t(t)], s, h)));
      }
  EXPECT_LT(worst, 1e-5);               // float32 q, k against the float64 reference
  EXPECT_GT(nearest_unwindowed, 1e-2);  // every head's map differs from full causal softmax

  // The overview thumbnails (exact cells: L pixels), row-normalized: 0 exactly on the keys the
  // window hides, positive on those it shows.
  const std::vector<std::vector<Matrix>> thumbs = head_thumbnails(*c.store, 1, kLen);
  for (int s = 0; s < c.cfg.n_layer; ++s)
    for (int h = 0; h < c.cfg.n_head; ++h) {
      const Matrix& m = thumbs[size_t(s)][size_t(h)];
      ASSERT_EQ(m.rows, kLen);
      for (int i = 0; i < kLen; ++i)
        for (int j = 0; j <= i; ++j) {
          if (i - j >= kWindow) {
            EXPECT_EQ(m.at(i, j), 0.0) << "layer " << s << " head " << h << " (" << i << ", " << j << ")";
          } else {
            EXPECT_GT(m.at(i, j), 0.0) << "layer " << s << " head " << h << " (" << i << ", " << j << ")";
          }
        }
    }
}

TEST(SlidingWindow, HeadAnalysisMeasuresTheWindowedSoftmax) {
  const Captured& c = captured();
  for (int64_t rows : {int64_t(0), int64_t(8)}) {  // every row; 8 sampled rows (exact entropies)
    SCOPED_TRACE("sample_rows " + std::to_string(rows));
    AnalysisOptions opt;
    opt.sample_rows = rows;
    opt.feature_map = "elu";
    const std::vector<HeadAnalysis> all = analyze_capture(*c.store, opt);
    ASSERT_EQ(all.size(), size_t(c.cfg.n_layer * c.cfg.n_head));
    for (const HeadAnalysis& a : all) {
      SCOPED_TRACE("layer " + std::to_string(a.layer) + " head " + std::to_string(a.head));
      // Entropies from the reference's windowed map: every row; normalized by log min(i + 1, W).
      double ent = 0, ent_full = 0, norm = 0, kl = 0;
      int norm_rows = 0;
      for (int t = 0; t < kSeqs; ++t) {
        const auto A = ref_map(c.ref[size_t(t)], a.layer, a.head), F = ref_map(c.ref_unwindowed[size_t(t)], a.layer, a.head);
        const at::Tensor lin = head_maps(*c.store, a.layer, a.head, t, opt).linear;  // elu: every row defined
        for (int i = 0; i < kLen; ++i) {
          double h = 0, hf = 0, k = 0;
          for (int j = 0; j <= i; ++j) {
            if (A[size_t(i)][size_t(j)] > 0) {
              h -= A[size_t(i)][size_t(j)] * std::log(A[size_t(i)][size_t(j)]);
              k += A[size_t(i)][size_t(j)] * std::log(A[size_t(i)][size_t(j)] / lin[i][j].item<double>());
            }
            if (F[size_t(i)][size_t(j)] > 0) hf -= F[size_t(i)][size_t(j)] * std::log(F[size_t(i)][size_t(j)]);
          }
          ent += h, ent_full += hf, kl += k;
          const int keys = std::min(i + 1, kWindow);
          if (keys >= 2) norm += h / std::log(double(keys)), ++norm_rows;
        }
      }
      ent /= kSeqs * kLen, ent_full /= kSeqs * kLen, norm /= norm_rows, kl /= kSeqs * kLen;
      EXPECT_NEAR(a.softmax.entropy, ent, 1e-5 * ent);
      EXPECT_GT(std::abs(a.softmax.entropy - ent_full), 1e-2);  // not the unwindowed map's
      EXPECT_NEAR(a.softmax.normalized_entropy, norm, 1e-5 * norm);
      // Softmax is monotone in the score over the keys it sees: within the window exactly.
      ASSERT_TRUE(a.softmax.monotonicity.has_value());
      EXPECT_NEAR(a.softmax.monotonicity->spearman, 1.0, 1e-12);
      EXPECT_EQ(a.softmax.monotonicity->discordant_fraction, 0.0);
      // The linear side is measured against the windowed softmax.
      ASSERT_TRUE(a.linear.has_value());
      if (rows == 0) {
        EXPECT_NEAR(*a.linear->kl, kl, 1e-4 * kl);
      } else {
        EXPECT_NEAR(*a.linear->kl, kl, 5 * a.linear->standard_error.at("kl") + 1e-4 * kl);
      }
    }
  }
}

TEST(SlidingWindow, ManifestWindowIsOptionalAndChecked) {
  const std::string base =
      R"({"format": "attnscope-capture", "version": 2, "seq_len": 8, "num_seqs": 1,
          "tokenization": {"tokenizer": "hf"},
          "model": {"layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 4, "vocab_size": 10)";
  EXPECT_EQ(parse_capture_manifest(base + "}}", "m.json").sliding_window, 0);  // older captures
  EXPECT_EQ(parse_capture_manifest(base + R"(, "sliding_window": 4096}})", "m.json").sliding_window, 4096);
  try {
    parse_capture_manifest(base + R"(, "sliding_window": -2}})", "m.json");
    ADD_FAILURE() << "a negative window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.sliding_window"), std::string::npos) << e.what();
  }
}

// The layerwise losses' target A is the windowed softmax: each loss equals its float64 value with
// A written out above (Ahat from the head's own map over every key j <= i), and differs from the
// loss against full causal softmax.
TEST(SlidingWindow, DistillationTargetsAreTheWindowedSoftmax) {
  at::manual_seed(47);
  const int64_t B = 2, H = 3, L = 12, d = 8, W = 4;
  const at::Tensor q = at::randn({B, H, L, d}) * 1.5, k = at::randn({B, H, L, d}) * 1.5, v = at::randn({B, H, L, d});
  for (const std::string map : {"hedgehog", "t2r"}) {
    SCOPED_TRACE(map);
    DistillOptions o;
    o.feature_map = map;
    o.seed = 3;
    LayerMaps maps = init_layer_maps(o, 0, H, d, 16);
    for (auto& [name, t] : maps.params) t.add_(at::randn(t.sizes()) * 0.3);
    // float64 values of the kl, softmax (cross-entropy) and output losses for a window w.
    struct Want {
      double kl = 0, ce = 0, out = 0;
    };
    auto want = [&](int w) {
      Want r;
      int64_t rows = 0;
      for (int64_t h = 0; h < H; ++h) {
        auto fm = maps.head_map(h);
        for (int64_t b = 0; b < B; ++b) {
          const auto A = masked_softmax(q[b][h], k[b][h], w);
          const at::Tensor pq = fm->query_features(q[b][h].to(at::kDouble)), pk = fm->key_features(k[b][h].to(at::kDouble));
          const at::Tensor kh = at::matmul(pq, pk.transpose(0, 1)).clamp_min(0);
          const at::Tensor vd = v[b][h].to(at::kDouble);
          for (int64_t i = 0; i < L; ++i) {
            const double z = kh[i].narrow(0, 0, i + 1).sum().item<double>();
            if (!(z > 0)) continue;  // no Ahat: left out (t2r)
            ++rows;
            at::Tensor y = at::zeros({d}, at::kDouble), yh = at::zeros({d}, at::kDouble);
            for (int64_t j = 0; j <= i; ++j) {
              const double a = A[size_t(i)][size_t(j)], ah = std::max(kh[i][j].item<double>() / z, 1e-30);
              if (a > 0) r.kl += a * std::log(a / ah), r.ce -= a * std::log(ah);
              y += a * vd[j], yh += (kh[i][j].item<double>() / z) * vd[j];
            }
            r.out += (y - yh).pow(2).mean().item<double>();
          }
        }
      }
      r.kl /= double(rows), r.ce /= double(rows), r.out /= double(rows);
      return r;
    };
    const Want windowed = want(int(W)), full = want(0);
    maps.softmax_window = W;
    const double kl = layer_loss(maps, q, k, DistillLoss::Kl).item<double>();
    const double ce = layer_loss(maps, q, k, DistillLoss::Softmax).item<double>();
    const double out = layer_loss(maps, q, k, DistillLoss::Output, {}, v).item<double>();
    EXPECT_NEAR(kl, windowed.kl, 1e-4 * windowed.kl);
    EXPECT_NEAR(ce, windowed.ce, 1e-4 * windowed.ce);
    EXPECT_NEAR(out, windowed.out, 1e-6 + 1e-4 * windowed.out);
    EXPECT_NEAR(layer_kl(maps, q, k), windowed.kl, 1e-4 * windowed.kl);
    EXPECT_GT(std::abs(windowed.kl - full.kl), 1e-2 * full.kl);
    EXPECT_GT(std::abs(windowed.out - full.out), 1e-2 * full.out);
    // Finite gradients: the entries the window hides (0 log 0) add nothing, not NaN.
    for (auto& p : maps.params) p.second.requires_grad_(true);
    layer_loss(maps, q, k, DistillLoss::Kl).backward();
    for (auto& p : maps.params) EXPECT_TRUE(p.second.grad().isfinite().all().item<bool>()) << p.first;
    // Without the window, the loss is the full causal one.
    maps.softmax_window = 0;
    EXPECT_NEAR(layer_kl(maps, q, k), full.kl, 1e-4 * full.kl);
  }
}

}  // namespace test_sliding_window
}  // namespace attnscope::test
