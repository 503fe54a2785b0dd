// Hybrid heads (SPEC 5, issue 15 item 3): a sliding window of softmax attention beside the feature
// map, one normalizer. Checked against a long-double loop written from SPEC 5's formula, at L = 1,
// at windows around the chunk size, with huge feature scales and balances, and through the whole
// model: batch against recurrent form, conversion round trip, W >= L equal to the original model,
// and layerwise training's hybrid loss against the runtime's hybrid map.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/attention/attention.h"
#include "attnscope/attention/head.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/distill/distill.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "attnscope/distill/layer_maps.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_hybrid {

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

// SPEC 5's hybrid head for one sequence, in long double, one (query, key) pair at a time:
// w_ij = g exp(q_i.k_j / sqrt d) for i - j < W, (1 - g) max(phi(q_i).phi(k_j), 0) for i - j >= W,
// phi = exp(log_scale) values. Returns y [L, d_v] as double.
at::Tensor reference_output(const at::Tensor& fq, const at::Tensor& lq, const at::Tensor& fk, const at::Tensor& lk,
                            const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double gamma, int64_t W,
                            at::Tensor* map = nullptr) {
  const auto Q = q.to(at::kDouble).contiguous(), K = k.to(at::kDouble).contiguous(), V = v.to(at::kDouble).contiguous();
  const auto FQ = fq.to(at::kDouble).contiguous(), FK = fk.to(at::kDouble).contiguous();
  const auto LQ = lq.to(at::kDouble).contiguous(), LK = lk.to(at::kDouble).contiguous();
  const int64_t L = q.size(0), d = q.size(1), M = fq.size(1), dv = v.size(1);
  const long double g = 1.0L / (1.0L + std::exp(-(long double)gamma));
  at::Tensor y = at::zeros({L, dv}, at::kDouble);
  if (map) *map = at::zeros({L, L}, at::kDouble);
  auto a = [](const at::Tensor& t, int64_t i, int64_t j) { return (long double)t[i][j].item<double>(); };
  for (int64_t i = 0; i < L; ++i) {
    std::vector<long double> w(size_t(i + 1));
    long double top = -INFINITY;
    std::vector<long double> logw(size_t(i + 1));
    for (int64_t j = 0; j <= i; ++j) {
      long double lw;
      if (i - j < W) {
        long double s = 0;
        for (int64_t c = 0; c < d; ++c) s += a(Q, i, c) * a(K, j, c);
        lw = std::log(g) + s / std::sqrt((long double)d);
      } else {
        long double dot = 0;
        for (int64_t m = 0; m < M; ++m) dot += a(FQ, i, m) * a(FK, j, m);
        lw = dot > 0 ? std::log(1 - g) + a(LQ, i, 0) + a(LK, j, 0) + std::log(dot) : -INFINITY;
      }
      logw[size_t(j)] = lw;
      top = std::max(top, lw);
    }
    long double den = 0;
    for (int64_t j = 0; j <= i; ++j) den += (w[size_t(j)] = std::exp(logw[size_t(j)] - top));
    for (int64_t j = 0; j <= i; ++j) {
      if (map) (*map)[i][j] = double(w[size_t(j)] / den);
      for (int64_t c = 0; c < dv; ++c) y[i][c] = y[i][c].item<double>() + double(w[size_t(j)] / den * a(V, j, c));
    }
  }
  return y;
}

struct Head {
  at::Tensor q, k, v, fq, lq, fk, lk;
};

// Random head inputs: features in (0, 1], log scales spread by `scale_spread`, q and k of norm
// about `norm`.
Head random_head(int64_t L, int64_t d, int64_t M, double norm, double scale_spread, uint64_t seed,
                 at::ScalarType dtype = at::kDouble) {
  at::manual_seed(seed);
  Head h;
  h.q = at::randn({L, d}, dtype) * (norm / std::sqrt(double(d)));
  h.k = at::randn({L, d}, dtype) * (norm / std::sqrt(double(d)));
  h.v = at::randn({L, d}, dtype);
  h.fq = at::rand({L, M}, dtype);
  h.fk = at::rand({L, M}, dtype);
  h.lq = at::randn({L, 1}, dtype) * scale_spread;
  h.lk = at::randn({L, 1}, dtype) * scale_spread;
  return h;
}

double max_rel(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max().clamp_min(1e-300)).item<double>();
}

std::string bundled() { return test::source_dir() + "/resources/models/brown-gpt2-mini"; }

}  // namespace

TEST(Hybrid, OutputAndMapEqualTheLongDoubleDefinition) {
  int checked = 0;
  for (int64_t L : {1, 5, 63, 64, 65, 130})
    for (int64_t W : {1, 3, 16, 64, 200})
      for (double gamma : {0.0, 2.5, -30.0}) {
        SCOPED_TRACE("L " + std::to_string(L) + " W " + std::to_string(W) + " gamma " + std::to_string(gamma));
        const Head h = random_head(L, 8, 6, 4.0, 3.0, uint64_t(L * 1000 + W));
        at::Tensor want_map;
        const at::Tensor want = reference_output(h.fq, h.lq, h.fk, h.lk, h.q, h.k, h.v, gamma, W, &want_map);
        const HybridHeads hy{W, at::full({}, gamma, at::kDouble)};
        const at::Tensor y = hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, hy);
        EXPECT_LT(max_rel(y, want), 1e-10);
        const at::Tensor map = hybrid_map({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, hy);
        EXPECT_LT((map - want_map).abs().max().item<double>(), 1e-12);
        ++checked;
      }
  EXPECT_EQ(checked, 90);
}

TEST(Hybrid, HugeScalesAndNormsStayFiniteAndExact) {
  // Log scales of +-300 and |q|^2 / sqrt(d) in the hundreds: exp of either overflows float32 and,
  // combined, float64; the log domain keeps the output exact.
  for (double spread : {100.0, 300.0}) {
    const Head h = random_head(90, 8, 6, 40.0, spread, 11);
    const at::Tensor want = reference_output(h.fq, h.lq, h.fk, h.lk, h.q, h.k, h.v, 0.3, 16);
    const at::Tensor y = hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, {16, at::full({}, 0.3, at::kDouble)});
    ASSERT_TRUE(at::isfinite(y).all().item<bool>());
    EXPECT_LT(max_rel(y, want), 1e-9) << "spread " << spread;
    // float32: finite and close.
    const at::Tensor y32 = hybrid_attention_output({h.fq.to(at::kFloat), h.lq.to(at::kFloat)}, {h.fk.to(at::kFloat), h.lk.to(at::kFloat)},
                                                   h.q.to(at::kFloat), h.k.to(at::kFloat), h.v.to(at::kFloat),
                                                   {16, at::full({}, 0.3, at::kFloat)});
    ASSERT_TRUE(at::isfinite(y32).all().item<bool>());
    EXPECT_LT(max_rel(y32, want), 1e-3) << "spread " << spread;
  }
}

TEST(Hybrid, LongSequencesEqualTheDenseMap) {
  // 3000 tokens (47 chunks of the kernel, 47 window blocks), a window that is not a multiple of
  // either: the banded + chunked output equals the dense L x L map times V.
  const Head h = random_head(3000, 8, 6, 5.0, 4.0, 31);
  const HybridHeads hy{100, at::full({}, -0.4, at::kDouble)};
  const at::Tensor dense = at::matmul(hybrid_map({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, hy), h.v);
  EXPECT_LT(max_rel(hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, hy), dense), 1e-10);
}

TEST(Hybrid, WindowCoveringTheSequenceIsSoftmaxAttention) {
  const Head h = random_head(40, 8, 6, 6.0, 2.0, 5);
  const at::Tensor want = softmax_attention_output(h.q, h.k, h.v);
  for (int64_t W : {40, 41, 1000})
    EXPECT_LT(max_rel(hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, {W, at::full({}, -3.0, at::kDouble)}), want),
              1e-12)
        << W;
}

TEST(Hybrid, GradientsEqualThoseThroughTheDenseMap) {
  // Two different computations of the same function: the banded window plus the chunked kernel's
  // log normalizer, and the dense L x L map; every input's gradient must agree, gamma's included.
  for (int64_t W : {1, 7, 64}) {
    SCOPED_TRACE(W);
    const Head h0 = random_head(100, 8, 6, 5.0, 2.0, 21 + uint64_t(W));
    auto leaves = [&] {
      std::vector<at::Tensor> t = {h0.q.clone(), h0.k.clone(), h0.v.clone(), h0.fq.clone(), h0.lq.clone(), h0.fk.clone(),
                                   h0.lk.clone(), at::full({}, 0.7, at::kDouble)};
      for (auto& x : t) x.requires_grad_(true);
      return t;
    };
    at::manual_seed(3);
    const at::Tensor r = at::randn({100, 8}, at::kDouble);
    auto a = leaves(), b = leaves();
    (hybrid_attention_output({a[3], a[4]}, {a[5], a[6]}, a[0], a[1], a[2], {W, a[7]}) * r).sum().backward();
    (at::matmul(hybrid_map({b[3], b[4]}, {b[5], b[6]}, b[0], b[1], {W, b[7]}), b[2]) * r).sum().backward();
    const char* names[] = {"q", "k", "v", "phi_q", "q log scale", "phi_k", "k log scale", "gamma"};
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(a[i].grad().defined()) << names[i];
      EXPECT_LT(max_rel(a[i].grad(), b[i].grad().to(at::kDouble)), 1e-9) << names[i];
    }
    EXPECT_GT(a[7].grad().abs().item<double>(), 1e-6) << "gamma must receive a gradient";
  }
}

TEST(Hybrid, BadInputsAreNamed) {
  const Head h = random_head(10, 8, 6, 1.0, 1.0, 2);
  const at::Tensor g = at::zeros({}, at::kDouble);
  EXPECT_NE(test::error_of([&] { hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, {0, g}); }).find("window"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k, h.v, {4, at::full({}, NAN, at::kDouble)});
            }).find("gamma"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { hybrid_attention_output({h.fq, h.lq}, {h.fk, h.lk}, h.q, h.k.narrow(0, 0, 9), h.v, {4, g}); })
                .find("k"),
            std::string::npos);
}

// The bundled model converted with untrained hybrid heads, then balances set per head.
std::string convert_hybrid(int64_t W, const std::string& tag, LoadedModel* original = nullptr) {
  LoadedModel m = load_model(bundled());
  const auto& c = m.model->config();
  ConvertOptions o;
  o.map.name = "hedgehog";
  o.map.seed = 3;
  o.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, 16));
  o.window = W;
  o.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
  // Distinct balances per head, so that a head mix-up or a lost gamma shows.
  auto maps = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(o.map, o.dims, c.n_layer, c.n_head, c.head_dim));
  maps->window = W;
  for (int s = 0; s < c.n_layer; ++s) maps->gamma.push_back(at::linspace(-2.0 + s, 1.5 + s, c.n_head, at::kFloat));
  o.maps = maps;
  const std::string out = test::temp_dir("hybrid_" + tag) + "/out";
  convert_model(m, o, out);
  if (original) *original = std::move(m);
  return out;
}

TEST(Hybrid, ConvertedModelRoundTripsAndItsTwoFormsAgree) {
  const std::string out = convert_hybrid(5, "forms");
  const nlohmann::json cfg = nlohmann::json::parse(test::read_file(out + "/config.json"));
  EXPECT_EQ(cfg["attnscope"]["window"], 5);
  SafetensorsFile st(out + "/feature_maps.safetensors");
  ASSERT_TRUE(st.contains("layers.1.heads.2.gamma"));
  LoadedModel m = load_model(out);
  ASSERT_EQ(m.model->feature_maps()->window, 5);
  const auto& c = m.model->config();
  EXPECT_NEAR(m.model->feature_maps()->gamma[1][2].item<double>(), at::linspace(-1.0, 2.5, c.n_head)[2].item<double>(), 1e-6);

  at::NoGradGuard ng;
  at::manual_seed(4);
  const at::Tensor ids = at::randint(c.vocab_size, {2, 37}, at::kLong);
  // Layer 1's attention output against the long-double definition, head by head.
  AttentionActivations layer1;
  CaptureHook hook;
  hook.on_layer = [&](const AttentionActivations& a) {
    if (a.layer == 1) layer1 = a;
  };
  const at::Tensor batch = m.model->forward(ids, &hook);
  const HeadFeatureMaps& maps = *m.model->feature_maps();
  for (int h = 0; h < c.n_head; ++h) {
    const at::Tensor q = layer1.q[0][h], k = layer1.k[0][h], v = layer1.v[0][h];
    const Features fq = maps.maps[1][h]->scaled_query_features(q), fk = maps.maps[1][h]->scaled_key_features(k);
    const at::Tensor want = reference_output(fq.values, fq.log_scale, fk.values, fk.log_scale, q, k, v,
                                             maps.gamma[1][h].item<double>(), 5);
    EXPECT_LT(max_rel(layer1.out[0][h], want), 1e-4) << "head " << h;
  }
  // The recurrent form (ring of the last W tokens beside the sums) gives the batch form's logits.
  const at::Tensor rec = m.model->forward_recurrent(ids);
  EXPECT_LT((rec - batch).abs().max().item<double>(), 1e-3);
  // Generation (prompt in the batch form, then steps) equals greedy argmax over the batch form.
  const std::vector<int64_t> prompt = {5, 17, 300, 42, 9, 88, 7};  // longer than the window
  const std::vector<int64_t> gen = m.model->generate_greedy(prompt, 10);
  std::vector<int64_t> seq = prompt;
  for (int i = 0; i < 10; ++i) {
    const at::Tensor l = m.model->forward(at::tensor(seq).view({1, -1}));
    seq.push_back(l.select(1, int64_t(seq.size()) - 1).argmax().item<int64_t>());
  }
  EXPECT_EQ(gen, seq);
}

TEST(Hybrid, WindowAsLongAsTheTextGivesTheOriginalModel) {
  LoadedModel original;
  const std::string out = convert_hybrid(64, "full", &original);
  LoadedModel m = load_model(out);
  at::NoGradGuard ng;
  const at::Tensor ids = at::randint(m.model->config().vocab_size, {1, 64}, at::kLong);
  EXPECT_LT((m.model->forward(ids) - original.model->forward(ids)).abs().max().item<double>(), 1e-4);
  // eval measures the hybrid map and output the model runs: softmax's own here, so no distance.
  // A shorter window (the linear part in play) is measured against softmax: a distance appears.
  const std::vector<int64_t> text(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  ConvertedEvalOptions eo;
  eo.seq_len = 64;
  eo.closeness_windows = 1;
  eo.speed = false;
  const ConvertedEvaluation same = evaluate_converted(*m.model, text, eo);
  LoadedModel short_window = load_model(convert_hybrid(8, "short"));
  const ConvertedEvaluation differs = evaluate_converted(*short_window.model, text, eo);
  for (size_t s = 0; s < same.layers.size(); ++s) {
    EXPECT_LT(same.layers[s].attention_kl, 1e-6) << "layer " << s;
    EXPECT_LT(same.layers[s].output_rel_error, 1e-4) << "layer " << s;
    EXPECT_GT(differs.layers[s].attention_kl, 1e-3) << "layer " << s;
  }
}

TEST(Hybrid, BadConvertedModelsAreRefusedNamingTheFile) {
  const std::string out = convert_hybrid(4, "bad");
  const std::string cfg_file = out + "/config.json";
  const std::string cfg = test::read_file(cfg_file);
  // A window that is not a whole number of tokens.
  {
    nlohmann::json j = nlohmann::json::parse(cfg);
    j["attnscope"]["window"] = -2;
    std::ofstream(cfg_file) << j.dump();
    const std::string e = test::error_of([&] { load_model(out); });
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
    EXPECT_NE(e.find("window"), std::string::npos) << e;
  }
  // Gamma tensors in a file whose window is 0: stale, refused.
  {
    nlohmann::json j = nlohmann::json::parse(cfg);
    j["attnscope"].erase("window");
    std::ofstream(cfg_file) << j.dump();
    const std::string e = test::error_of([&] { load_model(out); });
    EXPECT_NE(e.find("feature_maps.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("gamma"), std::string::npos) << e;
  }
  // A missing gamma.
  {
    std::ofstream(cfg_file) << cfg;
    SafetensorsFile st(out + "/feature_maps.safetensors");
    NamedTensors kept;
    for (const auto& e : st.entries())
      if (e.name != "layers.0.heads.1.gamma") kept.emplace_back(e.name, st.tensor(e.name).clone());
    write_safetensors(out + "/feature_maps.safetensors", kept, {});
    const std::string e = test::error_of([&] { load_model(out); });
    EXPECT_NE(e.find("layers.0.heads.1.gamma"), std::string::npos) << e;
  }
}

TEST(Hybrid, PyTorchRunnerGivesAttnscopesLogitsAndGeneration) {
  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  std::string o;
  const std::string cli = test::cli_path();
  // Trained-looking balances (per head, per layer) through convert_model, and an untrained hybrid
  // conversion through the CLI (--window, gamma 0).
  const std::string tmp = test::temp_dir("hybrid_py");
  ASSERT_EQ(test::run_command(cli + " convert --model " + bundled() + " --feature-map hedgehog --features 16 --window 6 --out " +
                                  tmp + "/cli 2>&1",
                              &o),
            0)
      << o;
  for (const std::string& out : {convert_hybrid(9, "py"), tmp + "/cli"}) {
    SCOPED_TRACE(out);
    const std::string ids = "5,17,300,42,7,1000,2048,3,99,12,4095,0,8,250,251,252,77,1,2,3,44,45,46";
    ASSERT_EQ(test::run_command(cli + " logits --model " + out + " --ids " + ids + " --out " + out + "/ref.safetensors 2>&1", &o), 0) << o;
    std::ofstream(out + "/check.py") << "import sys, torch; sys.path.insert(0, '" + out + "'); import attnscope_linear as a\n"
                                          "m = a.load('" + out + "')\n"
                                          "ref = a.read_safetensors('" + out + "/ref.safetensors')\n"
                                          "got = m(ref['ids'].view(1, -1))[0]\n"
                                          "print('maxdiff', float((got - ref['logits']).abs().max()), float(ref['logits'].abs().max()))\n";
    ASSERT_EQ(test::run_command(python + " " + out + "/check.py 2>&1", &o), 0) << o;
    std::istringstream in(o.substr(o.find("maxdiff")));
    std::string word;
    double diff = 1, scale = 0;
    in >> word >> diff >> scale;
    EXPECT_LT(diff, 1e-4) << o;
    EXPECT_GT(scale, 1.0);
    ASSERT_EQ(test::run_command(python + " " + out + "/attnscope_linear.py " + out + " --ids 5,17,300,9,8,7,6,5,4,3,2 --new-tokens 8 2>&1", &o), 0) << o;
    LoadedModel m = load_model(out);
    std::string expected;
    const auto gen = m.model->generate_greedy({5, 17, 300, 9, 8, 7, 6, 5, 4, 3, 2}, 8);
    for (size_t i = 11; i < gen.size(); ++i) expected += std::to_string(gen[i]) + " ";  // the runner prints the new tokens
    expected.pop_back();
    EXPECT_NE(o.find(expected), std::string::npos) << "attnscope: " << expected << "\nrunner: " << o;
  }
}

TEST(Hybrid, LayerwiseLossIsTheRuntimeHybridMap) {
  // Training's hybrid weights (log domain, in layer_maps) and the runtime's hybrid_map are written
  // separately: the KL of one must equal the KL computed from the other.
  DistillOptions o;
  o.feature_map = "hedgehog";
  o.window = 6;
  o.seed = 5;
  LayerMaps m = init_layer_maps(o, 0, 2, 8, 16);
  for (auto& [name, t] : m.params)
    if (name == kGammaParam) t = at::tensor({-1.0f, 2.0f});
  at::manual_seed(8);
  const at::Tensor q = at::randn({1, 2, 30, 8}), k = at::randn({1, 2, 30, 8});
  const double loss = layer_kl(m, q, k);
  double kl = 0;
  for (int h = 0; h < 2; ++h) {
    const auto map = m.head_map(h);
    const at::Tensor qh = q[0][h].to(at::kDouble), kh = k[0][h].to(at::kDouble);
    const at::Tensor a = softmax_map(qh, kh);
    const at::Tensor ahat = hybrid_map(map->scaled_query_features(qh), map->scaled_key_features(kh), qh, kh,
                                       {6, at::full({}, h == 0 ? -1.0 : 2.0, at::kDouble)});
    kl += (a * (at::log(a.clamp_min(1e-300)) - at::log(ahat.clamp_min(1e-300)))).masked_fill(a == 0, 0).sum(-1).mean().item<double>();
  }
  EXPECT_NEAR(loss, kl / 2, 1e-5);
}

TEST(Hybrid, DistillTrainsTheBalanceAndConvertsWithIt) {
  DistillOptions o;
  o.capture = test::bundled_capture();
  o.feature_map = "hedgehog";
  o.features = 16;
  o.window = 8;
  o.loss = DistillLoss::Output;
  o.steps = 12;
  o.lr = 0.05;
  const std::string run = test::temp_dir("hybrid_distill") + "/run";
  const DistillResult r = distill(o, run);
  ASSERT_TRUE(r.maps);
  EXPECT_EQ(r.maps->window, 8);
  ASSERT_EQ(r.maps->gamma.size(), r.maps->maps.size());
  EXPECT_GT(r.maps->gamma[0].abs().max().item<double>(), 1e-4) << "gamma never moved from 0";
  EXPECT_EQ(nlohmann::json::parse(test::read_file(run + "/job.json"))["window"], 8);
  LoadedModel m = load_model(bundled());
  ConvertOptions co = distill_run_convert_options(run, m.model->config());
  co.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
  const std::string out = test::temp_dir("hybrid_distill_conv") + "/out";
  convert_model(m, co, out);
  LoadedModel conv = load_model(out);
  EXPECT_EQ(conv.model->feature_maps()->window, 8);
  EXPECT_TRUE(at::allclose(conv.model->feature_maps()->gamma[1], r.maps->gamma[1]));
  // Refused before any work: a map whose kernel can be negative, and the l2 loss. (Issue 25: t2r,
  // whose kernel is >= 0, was refused here while the model ran its hybrids; one rule now, head.h.)
  for (const std::string bad : {"flex-stationary", "l2"}) {
    DistillOptions b = o;
    if (bad == "flex-stationary") b.feature_map = "flex-stationary";
    else b.loss = DistillLoss::L2;
    const std::string dir = test::temp_dir("hybrid_bad_" + bad) + "/run";
    EXPECT_NE(test::error_of([&] { distill(b, dir); }).find("window"), std::string::npos) << bad;
    EXPECT_FALSE(fs::exists(dir)) << bad;
  }
}

// Hybrid heads take every map whose kernel values are >= 0 (head.h), t2r's ReLU features too:
// layerwise training's t2r hybrid loss is the runtime's hybrid map (the output loss: the kernel
// values of 0 that the loss floors at 1e-30 carry no weight in either), training lowers it and
// moves the balance, and the trained maps convert, load and run in both forms.
TEST(Hybrid, T2rHybridTrainsAndConverts) {
  DistillOptions o;
  o.feature_map = "t2r";
  o.window = 6;
  o.seed = 5;
  {
    LayerMaps m = init_layer_maps(o, 0, 2, 8, 16);
    for (auto& [name, t] : m.params)
      if (name == kGammaParam) t = at::tensor({-1.0f, 2.0f});
    at::manual_seed(8);
    const at::Tensor q = at::randn({1, 2, 30, 8}), k = at::randn({1, 2, 30, 8}), v = at::randn({1, 2, 30, 8});
    double err = 0;
    for (int h = 0; h < 2; ++h) {
      const auto map = m.head_map(h);
      const at::Tensor qh = q[0][h].to(at::kDouble), kh = k[0][h].to(at::kDouble), vh = v[0][h].to(at::kDouble);
      const at::Tensor ahat = hybrid_map(map->scaled_query_features(qh), map->scaled_key_features(kh), qh, kh,
                                         {6, at::full({}, h == 0 ? -1.0 : 2.0, at::kDouble)});
      err += (at::matmul(softmax_map(qh, kh), vh) - at::matmul(ahat, vh)).pow(2).mean().item<double>();
    }
    EXPECT_GT(err, 1e-3);
    EXPECT_NEAR(layer_loss(m, q, k, DistillLoss::Output, {}, v).item<double>(), err / 2, 1e-5 * err);
  }
  LoadedModel original = load_model(bundled());
  const auto& c = original.model->config();
  CaptureStore cap(test::bundled_capture());
  auto maps = std::make_shared<HeadFeatureMaps>();
  maps->window = o.window;
  for (int s = 0; s < c.n_layer; ++s) {
    LayerMaps m = init_layer_maps(o, s, cap.num_heads(), cap.head_dim(), 16);
    const at::Tensor q = cap.layer_tensor(s, "q").narrow(0, 0, 4).to(at::kFloat), k = cap.layer_tensor(s, "k").narrow(0, 0, 4).to(at::kFloat);
    for (auto& p : m.params) p.second.requires_grad_(true);
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      const at::Tensor loss = layer_loss(m, q, k, DistillLoss::Kl);
      ASSERT_TRUE(std::isfinite(loss.item<double>())) << "layer " << s << " step " << step;
      if (step == 0) first = loss.item<double>();
      last = loss.item<double>();
      loss.backward();
      at::NoGradGuard ng;
      for (auto& p : m.params) {
        ASSERT_TRUE(p.second.grad().isfinite().all().item<bool>()) << p.first;
        p.second.sub_(0.05 * p.second.grad());
        p.second.mutable_grad().zero_();
      }
    }
    EXPECT_LT(last, 0.95 * first) << "layer " << s;
    EXPECT_GT(m.param(kGammaParam).abs().max().item<double>(), 1e-4) << "layer " << s << ": gamma never moved from 0";
    std::vector<std::shared_ptr<FeatureMap>> heads;
    for (int64_t h = 0; h < m.heads; ++h) heads.push_back(m.head_map(h));
    maps->maps.push_back(heads);
    maps->gamma.push_back(m.param(kGammaParam).detach().clone());
  }
  ConvertOptions co;
  co.map.name = "t2r";
  co.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, 16));
  co.window = o.window;
  co.maps = maps;
  co.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
  const std::string out = test::temp_dir("hybrid_t2r") + "/out";
  convert_model(original, co, out);
  LoadedModel conv = load_model(out);
  const HeadFeatureMaps& back = *conv.model->feature_maps();
  EXPECT_EQ(back.window, o.window);
  ASSERT_EQ(back.gamma.size(), size_t(c.n_layer));
  for (int s = 0; s < c.n_layer; ++s) {
    EXPECT_TRUE(at::equal(back.gamma[s], maps->gamma[s])) << "layer " << s;
    EXPECT_EQ(back.maps[s][1]->name(), "t2r");
    EXPECT_TRUE(at::equal(back.maps[s][1]->parameters()[0], maps->maps[s][1]->parameters()[0])) << "layer " << s;
  }
  at::NoGradGuard ng;
  at::manual_seed(4);
  const at::Tensor ids = at::randint(c.vocab_size, {1, 29}, at::kLong);
  const at::Tensor batch = conv.model->forward(ids);
  EXPECT_TRUE(at::isfinite(batch).all().item<bool>());
  EXPECT_LT((conv.model->forward_recurrent(ids) - batch).abs().max().item<double>(), 1e-3);
}

// One check of a head's settings (head.h's check_head) wherever hybrid heads are made: a window
// beside a map whose kernel values can be negative (flex-*) is refused naming the window, by the
// converted model's maps, the model, training's maps and the analysis alike; t2r is taken.
TEST(Hybrid, OneRuleForWhichMapsAHybridHeadTakes) {
  LoadedModel m = load_model(bundled());
  const auto& c = m.model->config();
  const std::vector<std::vector<int64_t>> dims(c.n_layer, std::vector<int64_t>(c.n_head, 8));
  CaptureStore cap(test::bundled_capture());
  for (const std::string map : {"flex-stationary", "flex-nonstationary", "t2r"}) {
    SCOPED_TRACE(map);
    const bool refused = map != "t2r";
    FeatureMapSpec spec;
    spec.name = map;
    auto expect = [&](const std::string& e) {
      if (refused) {
        EXPECT_NE(e.find("window"), std::string::npos) << e;
      } else {
        EXPECT_EQ(e, "");
      }
    };
    expect(test::error_of([&] { check_head(map, 4); }));
    expect(test::error_of([&] { make_head_feature_maps(spec, dims, c.n_layer, c.n_head, c.head_dim, 4); }));
    auto maps = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(spec, dims, c.n_layer, c.n_head, c.head_dim));
    maps->window = 4;
    maps->gamma = initial_gamma(c.n_layer, c.n_head);
    Model probe(c, m.model->weights());
    expect(test::error_of([&] { probe.set_feature_maps(maps); }));
    DistillOptions o;
    o.feature_map = map;
    o.window = 4;
    expect(test::error_of([&] { init_layer_maps(o, 0, 2, 8, 8); }));
    AnalysisOptions a;
    a.feature_map = map;
    a.features = 8;
    a.window = 4;
    a.max_seqs = 1;
    expect(test::error_of([&] { head_maps(cap, 0, 0, 0, a); }));
  }
  EXPECT_NE(test::error_of([&] { check_head("hedgehog", -1); }).find("window"), std::string::npos);
  EXPECT_EQ(test::error_of([&] { check_head("", 3); }), "");
}

}  // namespace test_hybrid
