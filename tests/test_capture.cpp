// The capture store on a real model (stories260K): layout, manifest, reproducible windows, and
// queries/keys that (a) reproduce the forward pass's own attention probabilities and (b) equal an
// independent float64 recomputation from the raw checkpoint bytes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_capture {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

#define REQUIRE_STORIES(path)                                                      \
  const std::string path = test::shared_model_file("stories260K/stories260K.bin"); \
  if (path.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin"


CaptureOptions opts(int L, int T, uint64_t seed) {
  CaptureOptions o;
  o.seq_len = L;
  o.num_seqs = T;
  o.seed = seed;
  o.batch = 2;
  return o;
}

// Reads float32 values [offset, offset + n) of the llama2.c file body (after the 28-byte header).
std::vector<double> read_floats(const std::string& bin, int64_t offset, int64_t n) {
  std::ifstream in(bin, std::ios::binary);
  in.seekg(28 + offset * 4);
  std::vector<float> f(n);
  in.read(reinterpret_cast<char*>(f.data()), n * 4);
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace

TEST(Capture, LayoutManifestAndReproducibleWindows) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string dir = test::temp_dir("cap") + "/store";
  capture_to_dir(m, test::sample_documents(), opts(32, 3, 7), dir);

  CaptureStore st(dir);
  EXPECT_EQ(st.num_layers(), 5);
  EXPECT_EQ(st.num_heads(), 8);
  EXPECT_EQ(st.num_kv_heads(), 4);
  EXPECT_EQ(st.head_dim(), 8);
  for (int s = 0; s < 5; ++s)
    for (const char* w : {"q", "k", "v"})
      EXPECT_EQ(st.layer_tensor(s, w).sizes().vec(), (std::vector<int64_t>{3, 8, 32, 8})) << s << w;
  at::Tensor ids = st.ids();
  EXPECT_EQ(ids.sizes().vec(), (std::vector<int64_t>{3, 32}));
  EXPECT_TRUE((ids.select(1, 0) == 1).all().item<bool>()) << "llama2.c windows start with BOS";

  nlohmann::json man = nlohmann::json::parse(st.manifest_json());
  EXPECT_EQ(man["seed"], 7);
  EXPECT_EQ(man["num_seqs"], 3);
  EXPECT_EQ(man["seq_len"], 32);
  EXPECT_EQ(man["dtype"], "F32");
  EXPECT_EQ(man["model"]["kv_heads"], 4);  // the name `info` and the tables use
  EXPECT_EQ(man["texts"].size(), 5u);

  // Same seed, same windows; another seed, other windows.
  const std::string again = test::temp_dir("cap") + "/again";
  capture_to_dir(m, test::sample_documents(), opts(32, 3, 7), again);
  EXPECT_TRUE(at::equal(CaptureStore(again).ids(), ids));
  EXPECT_TRUE(at::equal(CaptureStore(again).layer_tensor(2, "k"), st.layer_tensor(2, "k")));
  const std::string other = test::temp_dir("cap") + "/other";
  capture_to_dir(m, test::sample_documents(), opts(32, 3, 8), other);
  EXPECT_FALSE(at::equal(CaptureStore(other).ids(), ids));
}

TEST(Capture, SoftmaxOfStoredQKEqualsForwardAttention) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string dir = test::temp_dir("cap") + "/store";
  capture_to_dir(m, test::sample_documents(), opts(48, 2, 3), dir);
  CaptureStore st(dir);

  std::vector<at::Tensor> probs(5);
  CaptureHook hook;
  hook.want_probs = true;
  hook.on_layer = [&](const AttentionActivations& a) { probs[a.layer] = a.probs.clone(); };
  {
    at::InferenceMode guard;
    m.model->forward(st.ids(), &hook);
  }
  const int64_t L = 48;
  at::Tensor future = at::ones({L, L}, at::kBool).triu(1);
  for (int s = 0; s < 5; ++s) {
    at::Tensor q = st.layer_tensor(s, "q").to(at::kDouble), k = st.layer_tensor(s, "k").to(at::kDouble);
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0);
    at::Tensor a = at::softmax(scores.masked_fill(future, -INFINITY), -1);
    EXPECT_LT((a - probs[s].to(at::kDouble)).abs().max().item<double>(), 1e-5) << "layer " << s;
  }
}

TEST(Capture, LayerZeroQueriesMatchFloat64FromRawWeights) {
  // q = RoPE_interleaved(Wq . rmsnorm(emb[id]) ), computed here in double straight from the file.
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string dir = test::temp_dir("cap") + "/store";
  capture_to_dir(m, test::sample_documents(), opts(16, 2, 11), dir);
  CaptureStore st(dir);
  const int64_t D = 64, V = 512, H = 8, d = 8, Hkv = 4;
  const auto emb = read_floats(bin, 0, V * D);
  const auto rms = read_floats(bin, V * D, D);            // rms_att[0]
  const auto wq = read_floats(bin, V * D + 5 * D, D * D);  // wq[0]
  const int64_t wk_off = V * D + 5 * D + 5 * D * D;
  const auto wk = read_floats(bin, wk_off, Hkv * d * D);  // wk[0]
  at::Tensor ids = st.ids(), q = st.layer_tensor(0, "q"), k = st.layer_tensor(0, "k");
  double max_err = 0, max_abs = 0;
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t pos = 0; pos < 16; ++pos) {
      const int64_t id = ids[t][pos].item<int64_t>();
      std::vector<double> x(D);
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += emb[id * D + i] * emb[id * D + i];
      const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
      for (int64_t i = 0; i < D; ++i) x[i] = emb[id * D + i] * inv * rms[i];
      auto project = [&](const std::vector<double>& w, int64_t rows) {
        std::vector<double> y(rows, 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < D; ++i) y[r] += w[r * D + i] * x[i];
        for (int64_t r = 0; r < rows; r += 2) {  // pairs (2i, 2i+1) within each head
          const double freq = std::pow(10000.0, -double(r % d) / d), a = pos * freq;
          const double y0 = y[r], y1 = y[r + 1];
          y[r] = y0 * std::cos(a) - y1 * std::sin(a);
          y[r + 1] = y0 * std::sin(a) + y1 * std::cos(a);
        }
        return y;
      };
      const auto yq = project(wq, H * d), yk = project(wk, Hkv * d);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < d; ++j) {
          max_err = std::max(max_err, std::abs(q[t][h][pos][j].item<double>() - yq[h * d + j]));
          // GQA: query head h reads kv head h / 2 (two query heads per kv head).
          max_err = std::max(max_err, std::abs(k[t][h][pos][j].item<double>() - yk[(h / 2) * d + j]));
          max_abs = std::max(max_abs, std::abs(yq[h * d + j]));
        }
    }
  EXPECT_GT(max_abs, 0.1);
  EXPECT_LT(max_err, 1e-4 * max_abs);
}

TEST(Capture, PreRopeAndHalfPrecision) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  auto o = opts(24, 2, 5);
  const std::string post = test::temp_dir("cap") + "/post";
  capture_to_dir(m, test::sample_documents(), o, post);
  o.pre_rope = true;
  const std::string pre = test::temp_dir("cap") + "/pre";
  capture_to_dir(m, test::sample_documents(), o, pre);
  o.pre_rope = false;
  o.dtype = DType::F16;
  const std::string half = test::temp_dir("cap") + "/half";
  capture_to_dir(m, test::sample_documents(), o, half);

  at::Tensor qpost = CaptureStore(post).layer_tensor(1, "q"), qpre = CaptureStore(pre).layer_tensor(1, "q");
  // Position 0 is not rotated; later positions are, and rotation preserves each pair's norm.
  EXPECT_TRUE(at::allclose(qpre.select(2, 0), qpost.select(2, 0), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(qpre, qpost, 1e-3, 1e-3));
  auto pair_norm = [](const at::Tensor& x) { return x.unflatten(-1, {4, 2}).pow(2).sum(-1); };
  EXPECT_TRUE(at::allclose(pair_norm(qpre), pair_norm(qpost), 1e-4, 1e-5));
  EXPECT_TRUE(at::equal(CaptureStore(pre).layer_tensor(1, "v"), CaptureStore(post).layer_tensor(1, "v")));

  SafetensorsFile f(half + "/layer_1.safetensors");
  EXPECT_EQ(f.find("q")->dtype, DType::F16);
  at::Tensor qhalf = CaptureStore(half).layer_tensor(1, "q");
  EXPECT_LT((qhalf - qpost).abs().max().item<double>(), 2e-3 * qpost.abs().max().item<double>());
}

TEST(Capture, BadRequestsFailAndLeaveExistingOutputIntact) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::string dir = test::temp_dir("cap") + "/keep";
  fs::create_directories(dir);
  { std::ofstream(dir + "/marker") << "precious"; }
  // L above the context length (512).
  EXPECT_THROW(capture_to_dir(m, test::sample_documents(), opts(1024, 1, 0), dir), Error);
  // T x L above the corpus.
  try {
    capture_to_dir(m, test::sample_documents(), opts(256, 10000, 0), dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir + "/marker"));
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
}

// Issue 26: a short text. Where T is a default (the workbench, `capture` without --num-seqs) the
// windows the text has are taken; an explicit T is strict and the error says what would fit, and
// what it says fits does fit. Not one window is an error either way.
TEST(Capture, AShortTextGivesTheWindowsItHasOrSaysWhatWouldFit) {
  REQUIRE_STORIES(bin);
  LoadedModel m = load_model(bin);
  const std::vector<TextDocument> docs = {test::sample_documents().front()};
  const int L = 256, n_ctx = m.model->config().n_ctx;
  // How many windows the text has, found by asking: T = A is accepted, T = A + 1 refused.
  int A = 0;
  for (int T = 1; T < 1000; ++T) {
    try {
      draw_windows(*m.tokenizer, n_ctx, docs, opts(L, T, 3));
      A = T;
    } catch (const Error&) {
      break;
    }
  }
  ASSERT_GE(A, 1);
  ASSERT_LT(A, 999) << "the first sample text should be short at L = 256";

  CaptureOptions lenient = opts(L, A + 5, 3);
  lenient.fewer_windows_ok = true;
  const auto taken = draw_windows(*m.tokenizer, n_ctx, docs, lenient);
  EXPECT_EQ(taken, draw_windows(*m.tokenizer, n_ctx, docs, opts(L, A, 3))) << "all the windows, in text order";
  for (const auto& w : taken) EXPECT_EQ(int(w.size()), L);
  // The store says how many it holds.
  const std::string dir = test::temp_dir("cap") + "/short";
  EXPECT_EQ(capture_to_dir(m, docs, lenient, dir).num_seqs(), A);
  EXPECT_EQ(CaptureStore(dir).ids().size(0), A);

  // Strict: the error names the text, the count, and two ways that fit.
  const int T = A + 5;
  std::string message;
  try {
    draw_windows(*m.tokenizer, n_ctx, docs, opts(L, T, 3));
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(docs[0].source), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(A) + " windows fit"), std::string::npos) << message;
  const std::string marker = std::to_string(T) + " windows of ";
  const size_t at = message.find(marker, message.find("fit"));
  ASSERT_NE(at, std::string::npos) << message;
  const int fits_len = std::stoi(message.substr(at + marker.size()));
  EXPECT_LT(fits_len, L);
  EXPECT_EQ(draw_windows(*m.tokenizer, n_ctx, docs, opts(fits_len, T, 3)).size(), size_t(T)) << message;

  // Not one window: refused even where fewer are taken.
  CaptureOptions tiny = opts(L, 8, 3);
  tiny.fewer_windows_ok = true;
  try {
    draw_windows(*m.tokenizer, n_ctx, {{"tiny.txt", "Once upon a time."}}, tiny);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not one window fits"), std::string::npos) << e.what();
  }
}

}  // namespace test_capture
