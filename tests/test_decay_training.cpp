// Training decayed heads (issue 27, `--decay fixed`): the decay fitted to a head's attention by lag
// (fit_decay_by_lag) against a closed case and a brute-force likelihood over a fine grid; the
// layerwise losses of decayed heads against a float64 pair-by-pair reference written here (plain
// loops) for every map form and for hybrid heads, with the gradient reaching delta; and distill's
// runs: the deltas start at the fit, train, are written under SPEC 7's names, resume exactly, and
// convert to a model that says "decay": "fixed" and runs the same in the batch and recurrent forms.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/structured_mixers.h"
#include "attnscope/attention/head.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/model/model.h"
#include "attnscope/run/run_dir.h"
#include "test_support.h"
#include "decayed_reference.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_decay_training {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

// P_a(i, j) = a^(i-j) / sum_{j' <= i} a^(i-j'), float64 by loops: the decay-only head.
at::Tensor decay_only_map(double a, int64_t L) {
  at::Tensor P = at::zeros({L, L}, at::kDouble);
  auto p = P.accessor<double, 2>();
  for (int64_t i = 0; i < L; ++i) {
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) z += std::pow(a, double(i - j));
    for (int64_t j = 0; j <= i; ++j) p[i][j] = std::pow(a, double(i - j)) / z;
  }
  return P;
}

// The mean over rows of sum_j A_ij log P_theta(i, j), by loops (the fit's objective, written
// directly: no mean lag, no bisection).
double log_likelihood(const at::Tensor& A, double theta) {
  const int64_t L = A.size(0);
  auto a = A.accessor<double, 2>();
  double total = 0;
  for (int64_t i = 0; i < L; ++i) {
    double mx = 0, z = 0;  // log-sum-exp of theta * l over l = 0..i; theta <= 0, so l = 0 is the max
    for (int64_t l = 0; l <= i; ++l) z += std::exp(theta * double(l) - mx);
    const double log_z = std::log(z);
    for (int64_t j = 0; j <= i; ++j) total += a[i][j] * (theta * double(i - j) - log_z);
  }
  return total / double(L);
}


// The fixed decay's Lambda_i = (i + 1) log sigmoid(delta_h), by loops, for every window: [B, H, L].
at::Tensor fixed_lambda(const LayerMaps& maps, int64_t B, int64_t L) {
  const int64_t H = maps.heads;
  at::Tensor lam = at::zeros({B, H, L}, at::kDouble);
  auto A = lam.accessor<double, 3>();
  for (int64_t h = 0; h < H; ++h) {
    const double log_a = -std::log1p(std::exp(-maps.param(kDecayParam)[h].item<double>()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) A[b][h][i] = double(i + 1) * log_a;
  }
  return lam;
}

test::DecayedLosses reference(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return test::decayed_losses_reference(maps, q, k, v, fixed_lambda(maps, q.size(0), q.size(2)));
}

DistillOptions decay_options(int64_t steps) {
  DistillOptions o;
  o.capture = test::bundled_capture();
  o.val_capture = o.capture;  // every window of the capture trains (and the fit reads them all)
  o.feature_map = "learned-prf";
  o.loss = DistillLoss::Kl;
  o.features = 16;
  o.steps = steps;
  o.seed = 5;
  o.batch = 2;
  o.decay = Decay::Fixed;
  o.schedule = LrSchedule::Cosine;
  return o;
}

}  // namespace

// A decay-only map is fitted back to its own decay, from weak to strong.
TEST(DecayFit, RecoversTheDecayOfADecayOnlyMap) {
  for (double a : {0.3, 0.8, 0.97, 0.995}) {
    const at::Tensor P = decay_only_map(a, 200);
    const double fitted = fit_decay_by_lag(attention_mean_lag(P)).item<double>();
    EXPECT_NEAR(fitted, std::log(a), 1e-7 * std::max(1.0, -std::log(a))) << "a = " << a;
  }
  // Several heads at once (leading dimensions kept): [2, 3, L] -> [2, 3].
  const at::Tensor maps = at::stack({decay_only_map(0.5, 64), decay_only_map(0.9, 64), decay_only_map(0.99, 64)})
                              .unsqueeze(0).expand({2, 3, 64, 64});
  const at::Tensor fitted = fit_decay_by_lag(attention_mean_lag(maps));
  ASSERT_EQ(fitted.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_NEAR(fitted[1][2].item<double>(), std::log(0.99), 1e-7);
  EXPECT_NEAR(fitted[0][0].item<double>(), std::log(0.5), 1e-7);
  // Long windows (16K tokens) and decays near 1, where the law's mean lag is a difference of two
  // large numbers: each row's mean lag summed here by a loop, the fit exact to 1e-9 in log a.
  for (double a : {0.99999, 0.999, 0.5}) {
    const int64_t L = 16384;
    at::Tensor lag = at::empty({L}, at::kDouble);
    double num = 0, den = 0;  // sum_l l a^l, sum_l a^l over l <= i, grown row by row
    for (int64_t i = 0; i < L; ++i) {
      const double w = std::pow(a, double(i));
      num += double(i) * w, den += w;
      lag[i] = num / den;
    }
    EXPECT_NEAR(fit_decay_by_lag(lag).item<double>(), std::log(a), 1e-9) << "a = " << a;
  }
}

// On attention maps that are not decay-only (random rows, a mix of local and far keys), the fit is
// the maximum of the likelihood: no theta of a fine grid does better, and the best grid point is
// next to it.
TEST(DecayFit, IsTheMaximumLikelihoodOverAFineGrid) {
  for (uint64_t seed : {1, 2, 3}) {
    at::manual_seed(seed);
    const int64_t L = 96;
    const at::Tensor pos = at::arange(L, at::kDouble);
    const at::Tensor locality = -(pos.unsqueeze(1) - pos.unsqueeze(0)).abs() * (0.05 * double(seed));
    const at::Tensor scores = at::randn({L, L}, at::kDouble) * 2 + locality;
    const at::Tensor A = at::softmax(scores.masked_fill(at::ones({L, L}, at::kBool).triu(1), -INFINITY), -1);
    const double fitted = fit_decay_by_lag(attention_mean_lag(A)).item<double>();
    const double at_fit = log_likelihood(A, fitted);
    double best = -1e300, best_theta = 0;
    for (double theta = -3.0; theta <= 0.0; theta += 1e-3) {
      const double ll = log_likelihood(A, theta);
      if (ll > best) best = ll, best_theta = theta;
    }
    EXPECT_GE(at_fit, best - 1e-9) << "seed " << seed;
    EXPECT_NEAR(fitted, best_theta, 2e-3) << "seed " << seed;
    EXPECT_LT(fitted, 0) << "seed " << seed;
  }
}

// The extremes real heads produce: a sink on the first token (no decay fits: a = 1, delta at its
// cap), the last key only (the strongest decay), L = 1 (nothing to fit: a = 1), and bad input.
TEST(DecayFit, ExtremesAndBadInput) {
  const int64_t L = 50;
  at::Tensor sink = at::zeros({L, L}, at::kDouble);
  sink.select(1, 0).fill_(1.0);
  EXPECT_EQ(fit_decay_by_lag(attention_mean_lag(sink)).item<double>(), 0.0);
  EXPECT_EQ(delta_of_log_decay(0.0), kUndecayedDelta);
  EXPECT_EQ(fit_decay_by_lag(attention_mean_lag(at::eye(L, at::kDouble))).item<double>(), -30.0);
  EXPECT_EQ(fit_decay_by_lag(attention_mean_lag(at::ones({1, 1}, at::kDouble))).item<double>(), 0.0);
  // delta is log a - log(1 - a), exact near a = 1 and capped there.
  EXPECT_NEAR(delta_of_log_decay(std::log(0.25)), std::log(0.25 / 0.75), 1e-12);
  EXPECT_NEAR(delta_of_log_decay(-1e-3), std::log(std::exp(-1e-3) / -std::expm1(-1e-3)), 1e-9);
  EXPECT_EQ(delta_of_log_decay(-1e-9), kUndecayedDelta);
  EXPECT_NE(test::error_of([] { fit_decay_by_lag(at::tensor({0.0, std::nan("")}, at::kDouble)); }).find("mean lag"), std::string::npos);
  EXPECT_NE(test::error_of([] { fit_decay_by_lag(at::tensor({0.0, 1.5}, at::kDouble)); }).find("mean lag"), std::string::npos);
  EXPECT_NE(test::error_of([] { delta_of_log_decay(0.1); }).find("decay"), std::string::npos);
}

// The layerwise losses of decayed heads equal the float64 reference for every form of map
// (exponential features, ReLU features) and for hybrid heads; a = 1 is the undecayed loss exactly.
TEST(DecayTraining, LayerLossOfDecayedHeadsMatchesAFloat64Reference) {
  const int64_t B = 2, H = 3, L = 40, d = 8;
  const at::Tensor q = test::seeded_randn({B, H, L, d}, 1, 1.5).to(at::kFloat), k = test::seeded_randn({B, H, L, d}, 2, 1.5).to(at::kFloat);
  const at::Tensor v = test::seeded_randn({B, H, L, 4}, 3).to(at::kFloat);
  for (const std::string map : {"learned-prf", "hedgehog", "t2r"})
    for (int64_t W : {int64_t(0), int64_t(5)}) {
      SCOPED_TRACE(map + " window " + std::to_string(W));
      DistillOptions o;
      o.feature_map = map;
      o.window = W;
      o.decay = Decay::Fixed;
      o.seed = 4;
      LayerMaps m = init_layer_maps(o, 0, H, d, 16);
      for (auto& [name, t] : m.params) {
        if (name == kDecayParam) t.copy_(at::tensor({-1.0f, 1.5f, 4.0f}));  // a = 0.27, 0.82, 0.98
        if (name == kGammaParam) t.copy_(at::tensor({0.5f, -1.0f, 0.0f}));
      }
      const test::DecayedLosses ref = reference(m, q, k, v);
      const double kl = layer_loss(m, q, k, DistillLoss::Kl).item<double>();
      const double out = layer_loss(m, q, k, DistillLoss::Output, {}, v).item<double>();
      EXPECT_NEAR(kl, ref.kl, 2e-4 * std::max(1.0, ref.kl));
      EXPECT_NEAR(out, ref.output, 2e-4 * std::max(1e-2, ref.output));
      // The gradient reaches delta (the decay is learned).
      for (auto& [name, t] : m.params) t.requires_grad_(true);
      layer_loss(m, q, k, DistillLoss::Kl).backward();
      EXPECT_GT(m.param(kDecayParam).grad().abs().sum().item<double>(), 0.0);
    }
  // a -> 1 (delta large): the loss of the same maps without decay.
  DistillOptions o;
  o.feature_map = "hedgehog";
  o.seed = 4;
  LayerMaps plain = init_layer_maps(o, 0, H, d, 16);
  o.decay = Decay::Fixed;
  LayerMaps decayed = init_layer_maps(o, 0, H, d, 16);
  for (auto& [name, t] : decayed.params)
    if (name == kDecayParam) t.fill_(40.0);
  EXPECT_NEAR(layer_loss(decayed, q, k, DistillLoss::Kl).item<double>(), layer_loss(plain, q, k, DistillLoss::Kl).item<double>(), 1e-6);
}

// Strong decay at the extremes: Lambda down to about -1e4 (delta = -4: log a = -4.02 over 2048
// positions), where a linear-domain kernel would underflow to 0 after a few keys: the loss stays in
// the log domain and equals the log-domain reference.
TEST(DecayTraining, StrongDecayOverALongWindowMatchesTheReference) {
  const int64_t L = 2048, d = 8;
  const at::Tensor q = test::seeded_randn({1, 1, L, d}, 7, 3.0).to(at::kFloat), k = test::seeded_randn({1, 1, L, d}, 8, 3.0).to(at::kFloat);
  const at::Tensor v = test::seeded_randn({1, 1, L, 2}, 9).to(at::kFloat);
  DistillOptions o;
  o.feature_map = "learned-prf";
  o.decay = Decay::Fixed;
  LayerMaps m = init_layer_maps(o, 0, 1, d, 8);
  for (auto& [name, t] : m.params)
    if (name == kDecayParam) t.fill_(-4.0);
  const double kl = layer_loss(m, q, k, DistillLoss::Kl).item<double>();
  const test::DecayedLosses ref = reference(m, q, k, v);
  ASSERT_TRUE(std::isfinite(kl));
  EXPECT_GT(ref.kl, 300.0);  // far from softmax's spread rows: log Ahat reaches -4 x the lag, beyond any floor
  EXPECT_NEAR(kl, ref.kl, 1e-3 * ref.kl);
}

// distill --decay fixed: the deltas start at the fit of each head's captured attention, train, and
// are written as layers.{s}.heads.{h}.decay.delta; a killed run resumes to the uninterrupted one; the
// run converts to a model that says "decay": "fixed" with those deltas, whose batch and recurrent
// forms agree.
TEST(DecayTraining, DistillTrainsDecayResumesAndConverts) {
  const std::string root = test::temp_dir("decay_distill");
  const DistillOptions o = decay_options(12);
  {
    DistillOptions start = o;
    start.steps = 1;
    start.lr = start.lr_alpha = 1e-12;  // one step that moves nothing: the initial deltas
    distill(start, root + "/start");
  }
  // The fit, computed here from the capture by the definition: each head's attention, mean lag per
  // row over the capture's windows (loops), fitted, as delta.
  const CaptureStore cap(o.capture);
  const auto start = test::read_tensors(root + "/start/feature_maps.safetensors");
  for (int s : {0, cap.num_layers() - 1}) {
    const at::Tensor q = cap.layer_tensor(s, "q").to(at::kDouble), k = cap.layer_tensor(s, "k").to(at::kDouble);
    const int64_t T = q.size(0), L = q.size(2);
    for (int h : {0, cap.num_heads() - 1}) {
      at::Tensor lag = at::zeros({L}, at::kDouble);
      for (int64_t t = 0; t < T; ++t) {
        const at::Tensor sc = at::matmul(q[t][h], k[t][h].t()) / std::sqrt(double(q.size(3)));
        const at::Tensor A = at::softmax(sc.masked_fill(at::ones({L, L}, at::kBool).triu(1), -INFINITY), -1);
        for (int64_t i = 0; i < L; ++i) {
          double m = 0;
          for (int64_t j = 0; j <= i; ++j) m += A[i][j].item<double>() * double(i - j);
          lag[i] += m / double(T);
        }
      }
      // Compared as log a = log sigmoid(delta): near a = 1 delta itself is steep (and capped).
      const double expected = fit_decay_by_lag(lag).item<double>();
      const double got = -std::log1p(std::exp(-start.at(convert::decay_delta_name(s, h)).item<double>()));
      EXPECT_NEAR(got, std::min(expected, -std::log1p(std::exp(-kUndecayedDelta))), 1e-4 * std::abs(expected) + 1e-6)
          << "layer " << s << " head " << h;
    }
  }
  distill(o, root + "/whole");
  const auto whole = test::read_tensors(root + "/whole/feature_maps.safetensors");
  double moved = 0;
  for (int s = 0; s < cap.num_layers(); ++s)
    for (int h = 0; h < cap.num_heads(); ++h) {
      const std::string name = convert::decay_delta_name(s, h);
      ASSERT_TRUE(whole.count(name)) << name;
      moved = std::max(moved, (whole.at(name) - start.at(name)).abs().item<double>());
    }
  EXPECT_GT(moved, 1e-3);  // the deltas learn
  // Killed at step 7 (checkpoint at 5), resumed: the uninterrupted run's tensors.
  test::expect_distill_resumes_exactly(o, root);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/killed/job.json"))["decay"], "fixed");

  // Converted: "decay": "fixed", the trained deltas, batch = recurrent.
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " convert --job " + root + "/whole --out " + root + "/model 2>&1", &out), 0) << out;
  const auto cfg = nlohmann::json::parse(test::read_file(root + "/model/config.json"));
  EXPECT_EQ(cfg["attnscope"]["decay"], "fixed");
  const auto converted = test::read_tensors(root + "/model/feature_maps.safetensors");
  EXPECT_EQ(converted.at(convert::decay_delta_name(1, 2)).item<double>(), whole.at(convert::decay_delta_name(1, 2)).item<double>());
  LoadedModel m = load_model(root + "/model");
  const at::Tensor ids = cap.ids().narrow(0, 0, 1).narrow(1, 0, 48);
  EXPECT_LT((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-4);

  // Stage 2 on it: the deltas train with the maps, and a run killed after its first checkpoint
  // resumes to the uninterrupted one's model, deltas included.
  FinetuneOptions f;
  f.model = root + "/model";
  f.texts = {test::source_dir() + "/resources/texts/brown_fiction_ck29.txt"};
  f.rank = 2;
  f.steps = 6;
  f.seq_len = 32;
  f.batch = 2;
  f.checkpoint_every = 3;
  f.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
  finetune(f, root + "/ft_whole");
  const ProgressFn kill_at_5 = [](double, const std::string& what) {
    if (what.rfind("step 5/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(finetune(f, root + "/ft_killed", kill_at_5), Cancelled);
  resume_finetune(root + "/ft_killed");
  const auto fa = test::read_tensors(root + "/ft_whole/model/feature_maps.safetensors");
  const auto fb = test::read_tensors(root + "/ft_killed/model/feature_maps.safetensors");
  ASSERT_EQ(fa.size(), fb.size());
  for (const auto& [name, t] : fa) EXPECT_LE((t - fb.at(name)).abs().max().item<double>(), 1e-6) << name;
  const std::string d = convert::decay_delta_name(2, 1);
  EXPECT_GT(std::abs(fa.at(d).item<double>() - converted.at(d).item<double>()), 1e-6) << "stage 2 trains the deltas";
}

// What a user gets wrong, refused before any work with the option's name.
TEST(DecayTraining, BadDecayOptionsAreClearErrors) {
  const std::string root = test::temp_dir("decay_errors"), cli = test::cli_path();
  std::string out;
  const std::string base = cli + " distill --capture " + test::bundled_capture() + " --features 8 --steps 2 ";
  EXPECT_EQ(test::run_command(base + "--decay sometimes --out " + root + "/a 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--decay"), std::string::npos) << out;
  EXPECT_NE(out.find("none, fixed"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + "--decay fixed --loss l2 --out " + root + "/b 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("decay"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/b"));
  EXPECT_EQ(test::run_command(base + "--decay fixed --decay-init guess --out " + root + "/c 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--decay-init"), std::string::npos) << out;
}

}  // namespace test_decay_training

namespace test_decay_training {

// linearize --decay fixed: stage 1 trains decayed heads, the converted and final models say
// "decay": "fixed", and the report's "untrained map" is the untrained maps with the decays distill
// started from (fitted to the capture): its loss equals that model evaluated here.
TEST(DecayTraining, LinearizeCarriesTheDecayToTheFinalModelAndItsReport) {
  const std::string out = test::temp_dir("decay_linearize") + "/out";
  const std::string model = test::source_dir() + "/resources/models/brown-gpt2-mini";
  std::string texts, log;
  for (const auto& e : fs::directory_iterator(test::source_dir() + "/resources/texts"))
    if (e.path().extension() == ".txt") texts += " --text " + e.path().string();
  ASSERT_EQ(test::run_command(test::cli_path() + " linearize --model " + model + texts +
                                  " --seq-len 64 --window 8 --feature-map hedgehog --decay fixed --max-windows 8 --steps 4"
                                  " --finetune-steps 2 --batch 2 --rank 2 --seed 3 --no-speed --out " + out + " 2>&1", &log), 0) << log;
  for (const char* m : {"/converted", "/model"})
    EXPECT_EQ(nlohmann::json::parse(test::read_file(out + m + "/config.json"))["attnscope"]["decay"], "fixed") << m;
  // The report says how many heads forget, and how: all 16 of the bundled model's heads, fixed.
  const std::string md = test::read_file(out + "/linearize.md");
  EXPECT_NE(md.find("Decayed heads (decay fixed, started at fit): 0 gated, 16 fixed, 0 without decay"), std::string::npos) << md;
  const auto j = nlohmann::json::parse(test::read_file(out + "/linearize.json"));
  const auto& at64 = j["lengths"].back();
  ASSERT_EQ(at64["seq_len"], 64);
  // The untrained maps (distill's initialization: seed 3, the trained dims) with the fitted deltas.
  LoadedModel original = load_model(model), stage1 = load_model(out + "/converted");
  const ModelConfig& c = original.model->config();
  std::vector<std::vector<int64_t>> dims;
  for (const auto& layer : stage1.model->feature_maps()->maps) {
    dims.emplace_back();
    for (const auto& m : layer) dims.back().push_back(m->feature_dim());
  }
  FeatureMapSpec spec;
  spec.name = "hedgehog";
  spec.seed = 3;
  auto fresh = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(spec, dims, c.n_layer, c.n_head, c.head_dim, 8));
  const CaptureStore cap(out + "/capture");
  for (int s = 0; s < c.n_layer; ++s) fresh->decay_delta.push_back(fitted_decay_delta(cap, s));
  const std::vector<int64_t> ids = encode_documents(*original.tokenizer, read_text_documents({out + "/texts/heldout.txt"}));
  Model untrained(c, original.model->weights());
  untrained.set_feature_maps(fresh);
  EXPECT_NEAR(untrained.mean_loss(ids, 64), at64["untrained_loss"].get<double>(), 1e-6);
  // The state per sequence at 64 tokens, counted by hand: each head's S [M, d] and z [M] and its
  // window's 8 keys and values; the original's keys and values of 64 positions per key-value head.
  int64_t by_hand = 0;
  for (const auto& layer : dims)
    for (int64_t M : layer) by_hand += M * c.head_dim + M + 8 * 2 * c.head_dim;
  EXPECT_EQ(j["state_bytes"]["converted"].get<int64_t>(), 4 * by_hand);
  EXPECT_EQ(j["state_bytes"]["original"].get<int64_t>(), 4 * int64_t(c.n_layer) * c.n_kv_head * 64 * 2 * c.head_dim);
  // And the decay matters to it: the same maps without decay give another loss.
  auto plain = std::make_shared<HeadFeatureMaps>(*fresh);
  plain->decay_delta.clear();
  untrained.set_feature_maps(plain);
  EXPECT_GT(std::abs(untrained.mean_loss(ids, 64) - at64["untrained_loss"].get<double>()), 1e-5);  // 200x the match above
}

}  // namespace test_decay_training

namespace test_decay_training {

// Sampled rows: the estimating equation over a subset of rows recovers a decay-only map's decay
// exactly; the analysis' decay length per head (metrics, the grid's "fitted decay 1 - a") is the fit
// over every row of every window, computed here by loops, as 1 / (1 - a).
TEST(DecayFit, RowsSubsetAndTheAnalysisDecayLength) {
  const at::Tensor P = decay_only_map(0.9, 120);
  const at::Tensor rows = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 17, 60, 119}, at::kLong);
  const at::Tensor lag = attention_mean_lag(P.index_select(0, rows), rows);
  EXPECT_NEAR(fit_decay_by_lag(lag, rows).item<double>(), std::log(0.9), 1e-7);
  EXPECT_NEAR(decay_length(std::log(0.9)), 10.0, 1e-9);
  EXPECT_TRUE(std::isinf(decay_length(0.0)));

  const CaptureStore cap(test::bundled_capture());
  AnalysisOptions o;
  o.sample_rows = 0;  // every row
  const std::vector<HeadAnalysis> heads = analyze_capture(cap, o);
  for (const HeadAnalysis& a : heads) {
    if (a.head != 1) continue;
    const at::Tensor q = cap.layer_tensor(a.layer, "q").to(at::kDouble), k = cap.layer_tensor(a.layer, "k").to(at::kDouble);
    const int64_t T = q.size(0), L = q.size(2);
    at::Tensor mean = at::zeros({L}, at::kDouble);
    for (int64_t t = 0; t < T; ++t) {
      const at::Tensor sc = at::matmul(q[t][a.head], k[t][a.head].t()) / std::sqrt(double(q.size(3)));
      const at::Tensor A = at::softmax(sc.masked_fill(at::ones({L, L}, at::kBool).triu(1), -INFINITY), -1);
      auto acc = A.accessor<double, 2>();
      for (int64_t i = 0; i < L; ++i) {
        double m = 0;
        for (int64_t j = 0; j <= i; ++j) m += acc[i][j] * double(i - j);
        mean[i] += m / double(T);
      }
    }
    const double want = decay_length(fit_decay_by_lag(mean).item<double>());
    if (std::isinf(want)) EXPECT_TRUE(std::isinf(a.decay_length)) << "layer " << a.layer;
    else EXPECT_NEAR(a.decay_length, want, 1e-6 * want) << "layer " << a.layer;
  }
}

}  // namespace test_decay_training

namespace test_decay_training {

// head_cost against hand counts (d = 8, T = 512, M = 16, W = 16), and stories260K's totals as
// docs/RESULTS.md states them: 655,360 bytes of key-value cache at 512 tokens (5 layers x 4
// key-value heads), 23,040 bytes for 40 linear heads of M = 16.
TEST(HeadCost, EachTypeAgainstHandCounts) {
  const HeadCost soft = head_cost(HeadType::Softmax, 8, 8, 512);
  EXPECT_EQ(soft.state_values, 512 * 16);
  EXPECT_EQ(soft.flops_per_token, 2 * 512 * 16);
  const HeadCost lin = head_cost(HeadType::Linear, 8, 8, 512, 16);
  EXPECT_EQ(lin.state_values, 16 * 8 + 16);
  EXPECT_EQ(lin.flops_per_token, 2 * 8 * 16 + 4 * 16 * 8 + 2 * 16);  // 800
  EXPECT_EQ(head_cost(HeadType::Linear, 8, 8, 512, 16, 0, true).flops_per_token, 800 + 16 * 8 + 16);
  const HeadCost hyb = head_cost(HeadType::Hybrid, 8, 8, 512, 16, 16);
  EXPECT_EQ(hyb.state_values, 144 + 16 * 16);
  EXPECT_EQ(hyb.flops_per_token, 800 + 2 * 16 * 16);
  EXPECT_EQ(head_cost(HeadType::Linear, 8, 8, 1 << 20, 16).state_values, 144);  // constant in T
  EXPECT_EQ(4 * 5 * 4 * soft.state_values, 655360);
  EXPECT_EQ(4 * 5 * 8 * lin.state_values, 23040);
}

}  // namespace test_decay_training

namespace test_decay_training {

// Which decayed student a head's mixer distances point at (the mixer panel's "→ none|fixed|gated",
// metrics' "student"): the normalized decay-only head is SSD exactly (per-row scale 1/Z_i) and not
// low-rank, so it decays; the margin keeps the simpler student on near ties; RetNet's mask alone
// within the margin of SSD means position only, a fixed decay; NaN distances never win.
TEST(DecayStudent, TheClosestStudentWinsBeyondTheMargin) {
  MixerFitOptions fo;
  fo.state_size = 2;
  const MixerDistances decay_only = mixer_distances(decay_only_map(0.7, 48).to(at::kFloat), fo);
  EXPECT_LT(decay_only.ssd, 1e-3);
  EXPECT_GT(decay_only.causal_low_rank, 0.02);
  EXPECT_NE(best_decay_student(decay_only), Decay::None);
  MixerDistances m;
  m.causal_low_rank = 0.30, m.retnet = 0.50, m.ssd = 0.20;
  EXPECT_EQ(best_decay_student(m), Decay::Gated);        // 0.20 < 0.30 x 0.95, RetNet far
  m.retnet = 0.205;
  EXPECT_EQ(best_decay_student(m), Decay::Fixed);        // the mask alone within 5% of SSD
  m.ssd = 0.29;
  EXPECT_EQ(best_decay_student(m), Decay::None);         // within 5% of low-rank: no decay
  EXPECT_EQ(best_decay_student(m, 0.0), Decay::Fixed);   // no margin: SSD beats low-rank, the mask alone does as well
  m.ssd = std::nan("");
  EXPECT_EQ(best_decay_student(m), Decay::None);
  m.causal_low_rank = std::nan(""), m.ssd = 0.1;
  EXPECT_EQ(best_decay_student(m), Decay::Gated);
}

}  // namespace test_decay_training

namespace test_decay_training {

// The window beside the decayed student (the mixer panel's "→ window + gated", --decay mixer beside
// --window W): where the window class takes at least kWindowGain off the distance of the student's
// own class (SSD for fixed and gated, causal low-rank for none); not where it was not measured.
TEST(DecayStudent, TheWindowWhereItTakesAShareOffTheStudentsDistance) {
  MixerDistances m;
  m.causal_low_rank = 0.30, m.retnet = 0.50, m.ssd = 0.20;
  EXPECT_FALSE(best_student(m).window) << "window class not measured";
  m.window_size = 16, m.window = 0.20 - kWindowGain + 1e-9;
  EXPECT_FALSE(best_student(m).window);
  m.window = 0.20 - kWindowGain - 1e-9;
  EXPECT_TRUE(best_student(m).window);
  EXPECT_EQ(best_student(m).decay, Decay::Gated);
  EXPECT_EQ(student_name(best_student(m)), "window + gated");
  m.ssd = 0.29;  // no decay: the window against causal low-rank's 0.30
  m.window = 0.30 - kWindowGain - 1e-9;
  EXPECT_EQ(student_name(best_student(m)), "window + none");
  m.window = 0.27;
  EXPECT_EQ(student_name(best_student(m)), "none");
  m.window = std::nan("");
  EXPECT_FALSE(best_student(m).window);
}

}  // namespace test_decay_training
