// Gated decays (SPEC 5, issue 27's `--decay gated`: Mamba-2's scalar gate): a_t = sigmoid(w_h.x_t +
// b_h) from the layer's input x_t, Lambda_i = sum_{t <= i} log a_t. Checked against float64 loops
// written here: Lambda itself at the extremes (a gate shut at logit -60, open at +60, L = 1, w = 0
// equal to a fixed decay), the layerwise losses pair by pair with gradients reaching w and b, the
// converted model in its batch, recurrent and generating forms, written and read back, and in
// attnscope_linear.py; distill trains the gates from the capture's layer inputs, resumes exactly
// and converts; a capture without layer inputs is refused before any work.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/attention/head.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "test_support.h"
#include "decayed_reference.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_gated_decay {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// Lambda [B, H, L] by loops in float64: sum over t <= i of log sigmoid(sum_c x[b][t][c] w[h][c] + b[h]).
at::Tensor lambda_by_loops(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const at::Tensor xd = x.to(at::kDouble).contiguous(), wd = w.to(at::kDouble).contiguous(), bd = bias.to(at::kDouble).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), H = w.size(0);
  at::Tensor out = at::zeros({B, H, L}, at::kDouble);
  auto X = xd.accessor<double, 3>();
  auto Wt = wd.accessor<double, 2>();
  auto Bt = bd.accessor<double, 1>();
  auto O = out.accessor<double, 3>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double run = 0;
      for (int64_t t = 0; t < L; ++t) {
        double z = Bt[h];
        for (int64_t c = 0; c < D; ++c) z += X[b][t][c] * Wt[h][c];
        run += log_sigmoid(z);
        O[b][h][t] = run;
      }
    }
  return out;
}

// The gated heads' float64 reference: decayed_losses_reference with Lambda by loops.
test::DecayedLosses reference(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& x) {
  return test::decayed_losses_reference(maps, q, k, v,
                                        lambda_by_loops(x, maps.param(kGateWeightParam).detach(), maps.param(kGateBiasParam).detach()));
}

}  // namespace

// Lambda of a gate against loops, at the extremes: a shut gate (logit -60: log a = -60 per token, so
// Lambda reaches -1.2e4 over 200 tokens), an open one (+60: log a = -9e-27, no decay), L = 1, and
// w = 0 is the fixed decay with delta = b.
TEST(GatedDecay, LambdaMatchesLoopsAtTheExtremes) {
  const int64_t B = 2, L = 200, D = 6, H = 3;
  const at::Tensor x = test::seeded_randn({B, L, D}, 1, 2.0);
  const at::Tensor w = test::seeded_randn({H, D}, 2, 0.5);
  const at::Tensor b = at::tensor({-60.0, 0.3, 60.0}, at::kDouble);
  at::Tensor wx = w.clone();
  wx[0].zero_(), wx[2].zero_();  // heads 0 and 2: the bias alone (shut, open)
  const at::Tensor got = gated_decay_lambda(x, wx, b), ref = lambda_by_loops(x, wx, b);
  EXPECT_LT((got - ref).abs().max().item<double>(), 1e-9 * 1.2e4);
  EXPECT_NEAR(got[0][0][L - 1].item<double>(), -60.0 * double(L), 1e-6);
  EXPECT_EQ(got[1][2][L - 1].item<double>(), ref[1][2][L - 1].item<double>());
  EXPECT_LT(std::abs(got[1][2][L - 1].item<double>()), 1e-20);
  // Random gates, every head fed by x.
  const at::Tensor br = test::seeded_randn({H}, 3);
  EXPECT_LT((gated_decay_lambda(x, w, br) - lambda_by_loops(x, w, br)).abs().max().item<double>(), 1e-10);
  EXPECT_LT((gated_decay_lambda(x.narrow(1, 0, 1), w, br) - lambda_by_loops(x.narrow(1, 0, 1), w, br)).abs().max().item<double>(), 1e-12);
  // w = 0: the fixed decay of delta = b, for every sequence.
  const at::Tensor fixed = fixed_decay_lambda(br, L);
  const at::Tensor gated0 = gated_decay_lambda(x, at::zeros_like(w), br);
  for (int64_t s = 0; s < B; ++s) EXPECT_LT((gated0[s] - fixed).abs().max().item<double>(), 1e-9);
  // NaN in the layer input: refused, naming the decay.
  at::Tensor bad = x.clone();
  bad[0][5][1] = std::nan("");
  EXPECT_NE(test::error_of([&] { gated_decay_lambda(bad, w, br); }).find("decay"), std::string::npos);
}

// layer_loss of gated heads (kl, output) against the float64 pair-by-pair reference for every map
// form and a hybrid window, with the gradient reaching w and b; and w = 0 gives the fixed decay's
// loss with delta = b.
TEST(GatedDecay, LayerLossMatchesAFloat64Reference) {
  const int64_t B = 2, H = 3, L = 32, d = 8, D = 12;
  const at::Tensor q = test::seeded_randn({B, H, L, d}, 4, 1.5).to(at::kFloat), k = test::seeded_randn({B, H, L, d}, 5, 1.5).to(at::kFloat);
  const at::Tensor v = test::seeded_randn({B, H, L, 4}, 6).to(at::kFloat);
  const at::Tensor x = test::seeded_randn({B, L, D}, 7).to(at::kFloat);
  for (const std::string map : {"learned-prf", "hedgehog", "t2r"})
    for (int64_t W : {int64_t(0), int64_t(5)}) {
      SCOPED_TRACE(map + " window " + std::to_string(W));
      DistillOptions o;
      o.feature_map = map;
      o.window = W;
      o.decay = Decay::Gated;
      o.seed = 4;
      LayerMaps m = init_layer_maps(o, 0, H, d, 16, D);
      for (auto& [name, t] : m.params) {
        if (name == kGateWeightParam) t.copy_(test::seeded_randn({H, D}, 8, 0.8).to(at::kFloat));
        if (name == kGateBiasParam) t.copy_(at::tensor({-1.0f, 1.5f, 4.0f}));
        if (name == kGammaParam) t.copy_(at::tensor({0.5f, -1.0f, 0.0f}));
      }
      const test::DecayedLosses ref = reference(m, q, k, v, x);
      const double kl = layer_loss(m, q, k, DistillLoss::Kl, {}, {}, x).item<double>();
      const double out = layer_loss(m, q, k, DistillLoss::Output, {}, v, x).item<double>();
      if (map != "t2r" || W > 0) {  // here t2r's linear heads have rows with no weight, which the reference keeps
        EXPECT_NEAR(kl, ref.kl, 2e-4 * std::max(1.0, ref.kl));
        EXPECT_NEAR(out, ref.output, 2e-4 * std::max(1e-2, ref.output));
      }
      for (auto& [name, t] : m.params) t.requires_grad_(true);
      layer_loss(m, q, k, DistillLoss::Kl, {}, {}, x).backward();
      EXPECT_GT(m.param(kGateWeightParam).grad().abs().sum().item<double>(), 0.0);
      EXPECT_GT(m.param(kGateBiasParam).grad().abs().sum().item<double>(), 0.0);
    }
  // w = 0: the fixed decay with delta = b; no layer input: a clear error.
  DistillOptions o;
  o.feature_map = "hedgehog";
  o.seed = 4;
  o.decay = Decay::Fixed;
  LayerMaps fixed = init_layer_maps(o, 0, H, d, 16);
  o.decay = Decay::Gated;
  LayerMaps gated = init_layer_maps(o, 0, H, d, 16, D);
  for (LayerMaps* m : {&fixed, &gated})
    for (auto& [name, t] : m->params)
      if (name == kDecayParam || name == kGateBiasParam) t.copy_(at::tensor({-0.5f, 2.0f, 6.0f}));
  EXPECT_NEAR(layer_loss(gated, q, k, DistillLoss::Kl, {}, {}, x).item<double>(), layer_loss(fixed, q, k, DistillLoss::Kl).item<double>(), 1e-5);
  EXPECT_NE(test::error_of([&] { layer_loss(gated, q, k, DistillLoss::Kl); }).find("layer's inputs"), std::string::npos);
}

// A converted model with gated heads (plain and hybrid): batch = recurrent = generation, w = 0 is
// the fixed decay, written as "decay": "gated" with decay.w / decay.b and read back to the same
// logits, and attnscope_linear.py computes them too; the reader refuses a gated model without its
// gates, naming the file and tensor.
TEST(GatedDecay, AConvertedModelWithGatesRunsInEveryForm) {
  const std::string tmp = test::temp_dir("gated_model");
  const std::string bundled = test::source_dir() + "/resources/models/brown-gpt2-mini";
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 733 + 5) % 4096);
  const at::Tensor batch_ids = at::tensor(ids, at::kLong).view({1, -1});
  for (int64_t W : {int64_t(0), int64_t(4)}) {
    SCOPED_TRACE("window " + std::to_string(W));
    const std::string plain = test::bundled_hedgehog16(tmp + "/plain_w" + std::to_string(W), W);
    const std::string gated = tmp + "/gated_w" + std::to_string(W);
    std::string o;
    LoadedModel original = load_model(bundled);
    LoadedModel m = load_model(plain);
    const int64_t S = 4, H = 4, D = m.model->config().d_model;
    // w = 0: the model with fixed decays delta = b.
    auto fixed = std::make_shared<HeadFeatureMaps>(*m.model->feature_maps());
    auto maps = std::make_shared<HeadFeatureMaps>(*m.model->feature_maps());
    at::manual_seed(5);
    for (int s = 0; s < S; ++s) {
      const at::Tensor b = at::rand({H}) * 6 - 1;
      fixed->decay_delta.push_back(b);
      maps->decay_b.push_back(b);
      maps->decay_w.push_back(at::zeros({H, D}));
    }
    m.model->set_feature_maps(fixed);
    const at::Tensor with_fixed = m.model->forward(batch_ids);
    m.model->set_feature_maps(maps);
    EXPECT_LT((m.model->forward(batch_ids) - with_fixed).abs().max().item<double>(), 1e-5);
    // Real gates: they depend on the token, and change the model.
    for (int s = 0; s < S; ++s) maps->decay_w[size_t(s)] = at::randn({H, D}) * 0.6;
    m.model->set_feature_maps(maps);
    const at::Tensor batch = m.model->forward(batch_ids);
    EXPECT_GT((batch - with_fixed).abs().max().item<double>(), 1e-2);
    EXPECT_LT((m.model->forward_recurrent(batch_ids) - batch).abs().max().item<double>(), 1e-4);
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 5);
    EXPECT_EQ(m.model->generate_greedy(prompt, 6), test::greedy_by_forward(*m.model, prompt, 6));
    // Written and read back.
    convert_model(original, test::hedgehog16_convert_options(maps, plain, int(S), int(H), W), gated);
    const auto cfg = nlohmann::json::parse(test::read_file(gated + "/config.json"));
    EXPECT_EQ(cfg["attnscope"]["decay"], "gated");
    const auto written = test::read_tensors(gated + "/feature_maps.safetensors");
    ASSERT_TRUE(written.count(convert::decay_w_name(2, 1)));
    EXPECT_EQ(written.at(convert::decay_w_name(2, 1)).sizes(), at::IntArrayRef{D});
    LoadedModel back = load_model(gated);
    EXPECT_LT((back.model->forward(batch_ids) - batch).abs().max().item<double>(), 1e-6);
    // The reader's refusals: a gated model without its gates; a decay name it does not know.
    {
      const std::string bad = tmp + "/bad_w" + std::to_string(W);
      ASSERT_EQ(test::run_command("cp -r '" + plain + "' '" + bad + "'", &o), 0) << o;
      nlohmann::json c = nlohmann::json::parse(test::read_file(plain + "/config.json"));
      c["attnscope"]["decay"] = "gated";
      std::ofstream(bad + "/config.json") << c.dump();
      std::string msg = test::error_of([&] { load_model(bad); });
      EXPECT_NE(msg.find("feature_maps.safetensors"), std::string::npos) << msg;
      EXPECT_NE(msg.find("layers.0.heads.0.decay.b"), std::string::npos) << msg;
      c["attnscope"]["decay"] = "sometimes";
      std::ofstream(bad + "/config.json") << c.dump();
      msg = test::error_of([&] { load_model(bad); });
      EXPECT_NE(msg.find("attnscope.decay"), std::string::npos) << msg;
    }
    // attnscope_linear.py: the same logits, batch and token by token; without gates they differ.
    const auto py = test::python_runner_diffs(gated, ids, 7,
                                              "for row in m.maps:\n"
                                              "    for head in row: head.gate_w = torch.zeros_like(head.gate_w)");
    if (!py) continue;
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
    EXPECT_GT(py->variant, 1e-2) << "the runner's gates change nothing: " << py->output;
  }
}

// Hedgehog maps of 16 features with `decay` distilled on the bundled capture (KL, seed 5, batch 2).
DistillOptions hedgehog_on_bundled_capture(Decay decay) {
  DistillOptions o;
  o.capture = test::bundled_capture();
  o.val_capture = o.capture;
  o.feature_map = "hedgehog";
  o.loss = DistillLoss::Kl;
  o.features = 16;
  o.seed = 5;
  o.batch = 2;
  o.decay = decay;
  return o;
}

// distill --decay gated on the bundled capture: the gates start at w = 0 and b = the fixed decay's
// fitted delta, both train from the capture's layer inputs, a killed run resumes exactly, and the
// run converts to a model that says "decay": "gated" and runs the same in the batch and recurrent
// forms. A capture without layer inputs is refused before the run directory exists.
TEST(GatedDecay, DistillTrainsGatesResumesAndConverts) {
  const std::string root = test::temp_dir("gated_distill");
  DistillOptions o = hedgehog_on_bundled_capture(Decay::Gated);
  o.steps = 12;
  o.lr = 0.02;
  const CaptureStore cap(o.capture);
  {
    DistillOptions start = o;
    start.steps = 1;
    start.lr = start.lr_alpha = 1e-12;
    distill(start, root + "/start");
    start.decay = Decay::Fixed;
    distill(start, root + "/start_fixed");
  }
  const auto start = test::read_tensors(root + "/start/feature_maps.safetensors");
  const auto start_fixed = test::read_tensors(root + "/start_fixed/feature_maps.safetensors");
  for (int s = 0; s < cap.num_layers(); ++s)
    for (int h = 0; h < cap.num_heads(); ++h) {
      EXPECT_NEAR(start.at(convert::decay_b_name(s, h)).item<double>(), start_fixed.at(convert::decay_delta_name(s, h)).item<double>(), 1e-6);
      EXPECT_LT(start.at(convert::decay_w_name(s, h)).abs().max().item<double>(), 1e-9);
    }
  distill(o, root + "/whole");
  const auto whole = test::read_tensors(root + "/whole/feature_maps.safetensors");
  EXPECT_GT(whole.at(convert::decay_w_name(1, 2)).abs().max().item<double>(), 1e-3) << "the gates learn from x";
  test::expect_distill_resumes_exactly(o, root);
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " convert --job " + root + "/whole --out " + root + "/model 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/model/config.json"))["attnscope"]["decay"], "gated");
  LoadedModel m = load_model(root + "/model");
  const at::Tensor ids = cap.ids().narrow(0, 0, 1).narrow(1, 0, 48);
  EXPECT_LT((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-4);

  // A capture made before layer inputs were stored: refused, naming it, nothing written.
  const std::string old = root + "/old_capture";
  fs::copy(o.capture, old, fs::copy_options::recursive);
  nlohmann::json man = nlohmann::json::parse(test::read_file(old + "/manifest.json"));
  man["model"].erase("d_model");
  std::ofstream(old + "/manifest.json") << man.dump();
  const int rc = test::run_command(test::cli_path() + " distill --capture " + old + " --feature-map hedgehog --features 8 --steps 2 --decay gated --out " +
                                       root + "/refused 2>&1", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(old), std::string::npos) << out;
  EXPECT_NE(out.find("layer inputs"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/refused"));
}

// `convert --decay` (untrained decayed heads, issue 27): each head starts where distill starts it
// (fixed: the delta a one-step run at lr 1e-12 leaves; gated: w = 0 and b = that delta, so the
// same logits as the fixed model), --decay-init none is kUndecayedDelta, the model runs the same in
// attnscope_linear.py, and an allocation file's head types are kept. Refused before anything is
// written: fit without a capture, a capture of another model, --decay with --job.
TEST(GatedDecay, ConvertStartsDecayedHeadsWhereTrainingDoes) {
  const std::string cli = test::cli_path(), root = test::temp_dir("convert_decay");
  const std::string bundled = test::source_dir() + "/resources/models/brown-gpt2-mini";
  const std::string capture = test::bundled_capture();
  const CaptureStore cap(capture);
  DistillOptions o = hedgehog_on_bundled_capture(Decay::Fixed);
  o.steps = 1;
  o.lr = o.lr_alpha = 1e-12;  // where training starts
  distill(o, root + "/start_fixed");
  const auto start = test::read_tensors(root + "/start_fixed/feature_maps.safetensors");

  const std::string base = cli + " convert --model " + bundled + " --feature-map hedgehog --features 16 --seed 5";
  std::string out;
  ASSERT_EQ(test::run_command(base + " --decay fixed --capture " + capture + " --out " + root + "/fixed 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(base + " --decay gated --capture " + capture + " --out " + root + "/gated 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(base + " --decay fixed --decay-init none --out " + root + "/none 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/gated/config.json"))["attnscope"]["decay"], "gated");
  const auto fixed = test::read_tensors(root + "/fixed/feature_maps.safetensors");
  const auto gated = test::read_tensors(root + "/gated/feature_maps.safetensors");
  const auto none = test::read_tensors(root + "/none/feature_maps.safetensors");
  double spread_lo = 1e9, spread_hi = -1e9;
  for (int s = 0; s < cap.num_layers(); ++s)
    for (int h = 0; h < cap.num_heads(); ++h) {
      const double d = start.at(convert::decay_delta_name(s, h)).item<double>();
      spread_lo = std::min(spread_lo, d), spread_hi = std::max(spread_hi, d);
      EXPECT_NEAR(fixed.at(convert::decay_delta_name(s, h)).item<double>(), d, 1e-6) << s << " " << h;
      EXPECT_NEAR(gated.at(convert::decay_b_name(s, h)).item<double>(), d, 1e-6) << s << " " << h;
      EXPECT_EQ(gated.at(convert::decay_w_name(s, h)).abs().max().item<double>(), 0.0);
      EXPECT_EQ(none.at(convert::decay_delta_name(s, h)).item<double>(), kUndecayedDelta);
    }
  EXPECT_GT(spread_hi - spread_lo, 0.5) << "the fitted decays differ between heads";
  LoadedModel mf = load_model(root + "/fixed"), mg = load_model(root + "/gated"), mn = load_model(root + "/none");
  const at::Tensor ids = cap.ids().narrow(0, 0, 1).narrow(1, 0, 48);
  const at::Tensor lf = mf.model->forward(ids);
  EXPECT_LT((mg.model->forward(ids) - lf).abs().max().item<double>(), 1e-5);
  EXPECT_GT((mn.model->forward(ids) - lf).abs().max().item<double>(), 1e-2) << "the fitted decays change the model";
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 24; ++i) tokens.push_back(ids[0][i].item<int64_t>());
  if (const auto py = test::python_runner_diffs(root + "/fixed", tokens, 5)) {
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
  }

  // An allocation file's head types reach the converted model (softmax heads have no decay tensor).
  nlohmann::json alloc;
  alloc["dims"] = nlohmann::json::array();
  alloc["head_types"] = nlohmann::json::array();
  for (int s = 0; s < cap.num_layers(); ++s) {
    alloc["dims"].push_back({s == 1 ? 0 : 8, 8, 8, 8});
    alloc["head_types"].push_back({s == 1 ? "softmax" : "linear", "linear", "linear", "linear"});
  }
  std::ofstream(root + "/alloc.json") << alloc.dump();
  ASSERT_EQ(test::run_command(cli + " convert --model " + bundled + " --feature-map hedgehog --allocation " + root +
                                  "/alloc.json --decay fixed --capture " + capture + " --out " + root + "/mixed 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/mixed/config.json"))["attnscope"]["head_types"][1][0], "softmax");
  const auto mixed = test::read_tensors(root + "/mixed/feature_maps.safetensors");
  EXPECT_FALSE(mixed.count(convert::decay_delta_name(1, 0)));
  EXPECT_NEAR(mixed.at(convert::decay_delta_name(1, 1)).item<double>(), start.at(convert::decay_delta_name(1, 1)).item<double>(), 1e-6);

  // Refusals, each before the output exists.
  struct Bad {
    std::string args, says;
  };
  const std::string other = root + "/other_capture";
  fs::copy(capture, other, fs::copy_options::recursive);
  nlohmann::json man = nlohmann::json::parse(test::read_file(other + "/manifest.json"));
  man["model"]["heads"] = 2;
  std::ofstream(other + "/manifest.json") << man.dump();
  for (const Bad& b : {Bad{" --decay fixed", "--capture"}, Bad{" --decay gated --capture " + other, other},
                       Bad{" --capture " + capture, "--capture"}, Bad{" --decay sometimes", "--decay"}}) {
    SCOPED_TRACE(b.args);
    const int rc = test::run_command(base + b.args + " --out " + root + "/refused 2>&1", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(b.says), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(root + "/refused"));
  }
  EXPECT_NE(test::run_command(cli + " convert --job " + root + "/start_fixed --decay gated --out " + root + "/refused 2>&1", &out), 0);
  EXPECT_NE(out.find("--decay"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/refused"));
}

}  // namespace test_gated_decay
