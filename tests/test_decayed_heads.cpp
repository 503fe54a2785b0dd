// Decayed heads (SPEC 5, issue 27): the weight of key j for query i multiplied by exp(Lambda_i -
// Lambda_j), carried as log scales on the features (head.h's decayed_features) through the
// unchanged linear and hybrid paths. Checked against a float64 pair-by-pair reference written here
// (plain loops, logsumexp per row) on random inputs and at the extremes: a = 1 (the undecayed head
// exactly), a -> 0 (only the last key), L = 1, Lambda down to -1e4, hybrid heads, gradients through
// log a, and the recurrent form.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnscope/attention/attention.h"
#include "attnscope/attention/head.h"
#include "attnscope/base/error.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/kernels/linear_attention.h"
#include "attnscope/model/model.h"
#include "test_support.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_decayed_heads {

using namespace attnscope;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One head's inputs, float64: positive feature values (as an exponential map's), their log scales,
// the raw q, k (the window part's scores), v, and log a per position.
struct Head {
  at::Tensor qv, qls, kv, kls, q, k, v, log_a;  // [L, M], [L, 1], [L, M], [L, 1], [L, d], [L, d], [L, dv], [L]
};

Head random_head(int64_t L, int64_t M, int64_t d, double decay_lo, uint64_t seed) {
  at::manual_seed(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  Head h;
  h.qv = at::rand({L, M}, o) + 0.05;
  h.kv = at::rand({L, M}, o) + 0.05;
  h.qls = at::randn({L, 1}, o) * 3;
  h.kls = at::randn({L, 1}, o) * 3;
  h.q = at::randn({L, d}, o);
  h.k = at::randn({L, d}, o);
  h.v = at::randn({L, d}, o);
  h.log_a = at::rand({L}, o) * decay_lo;  // in [decay_lo, 0]
  return h;
}

// The rule of SPEC 5, pair by pair: row i's log weights over j <= i, then a logsumexp-normalized
// sum of the values. W = 0: a decayed linear head; W > 0: a hybrid head whose linear part (i - j
// >= W) is decayed, balance g = sigmoid(gamma).
std::vector<std::vector<double>> reference(const Head& h, int64_t W = 0, double gamma = 0) {
  const int64_t L = h.qv.size(0), M = h.qv.size(1), d = h.q.size(1), dv = h.v.size(1);
  // Plain arrays of the float64 values (row-major), read by index.
  struct Rows {
    std::vector<double> x;
    int64_t cols;
    explicit Rows(const at::Tensor& t) : cols(t.dim() > 1 ? t.size(1) : 1) {
      const at::Tensor c = t.to(at::kDouble).contiguous();
      x.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    }
    double operator()(int64_t i, int64_t j) const { return x[size_t(i * cols + j)]; }
  };
  const Rows qv(h.qv), kv(h.kv), qls(h.qls), kls(h.kls), q(h.q), k(h.k), v(h.v), log_a(h.log_a);
  auto at2 = [](const Rows& t, int64_t i, int64_t j) { return t(i, j); };
  std::vector<double> lambda(static_cast<size_t>(L));
  double run = 0;
  for (int64_t t = 0; t < L; ++t) lambda[size_t(t)] = run += log_a(t, 0);
  const double g = 1 / (1 + std::exp(-gamma));
  std::vector<std::vector<double>> y(size_t(L), std::vector<double>(size_t(dv), 0.0));
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> lw(size_t(i + 1), kNegInf);
    for (int64_t j = 0; j <= i; ++j) {
      if (W > 0 && i - j < W) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += at2(q, i, c) * at2(k, j, c);
        lw[size_t(j)] = std::log(g) + s / std::sqrt(double(d));
        continue;
      }
      double kern = 0;
      for (int64_t m = 0; m < M; ++m) kern += at2(qv, i, m) * at2(kv, j, m);
      // The query's scale and Lambda_i cancel in a linear head's row; kept, they are the hybrid's.
      lw[size_t(j)] = (W > 0 ? std::log(1 - g) : 0.0) + qls(i, 0) + kls(j, 0) +
                      lambda[size_t(i)] - lambda[size_t(j)] + std::log(kern);
    }
    double mx = kNegInf;
    for (double x : lw) mx = std::max(mx, x);
    double den = 0;
    for (double x : lw) den += std::exp(x - mx);
    for (int64_t j = 0; j <= i; ++j) {
      const double p = std::exp(lw[size_t(j)] - mx) / den;
      for (int64_t c = 0; c < dv; ++c) y[size_t(i)][size_t(c)] += p * at2(v, j, c);
    }
  }
  return y;
}

double max_diff(const at::Tensor& y, const std::vector<std::vector<double>>& ref) {
  const at::Tensor yd = y.to(at::kDouble).contiguous();
  const double* p = yd.data_ptr<double>();
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t c = 0; c < ref[i].size(); ++c) worst = std::max(worst, std::abs(p[i * ref[i].size() + c] - ref[i][c]));
  return worst;
}

// The decayed linear head's output through the product's path, in `dtype`.
at::Tensor decayed_linear(const Head& h, at::ScalarType dtype) {
  const at::Tensor lambda = decay_log_cumsum(h.log_a.to(dtype));
  const DecayedFeatures f = decayed_features(Features(h.qv.to(dtype), h.qls.to(dtype)), Features(h.kv.to(dtype), h.kls.to(dtype)), lambda);
  return linear_attention_output(f.q, f.k, h.v.to(dtype));
}

}  // namespace

TEST(DecayedHeads, LinearHeadMatchesThePairByPairReference) {
  const Head h = random_head(150, 8, 4, -0.5, 1);
  const auto ref = reference(h);
  EXPECT_LT(max_diff(decayed_linear(h, at::kDouble), ref), 1e-10);
  EXPECT_LT(max_diff(decayed_linear(h, at::kFloat), ref), 2e-4);
  // The materialized map agrees too: its rows, applied to v, are the reference's outputs.
  const at::Tensor lambda = decay_log_cumsum(h.log_a);
  const DecayedFeatures f = decayed_features(Features(h.qv, h.qls), Features(h.kv, h.kls), lambda);
  EXPECT_LT(max_diff(linear_map(f.q, f.k).map.matmul(h.v), ref), 1e-10);
}

TEST(DecayedHeads, NoDecayIsTheHeadItselfAndFullDecayIsTheLastKey) {
  Head h = random_head(90, 6, 4, 0, 2);  // log a = 0: a = 1
  const at::Tensor plain = linear_attention_output(Features(h.qv, h.qls), Features(h.kv, h.kls), h.v);
  EXPECT_TRUE(at::equal(decayed_linear(h, at::kDouble), plain)) << "a = 1 must be today's head exactly";
  // a -> 0: every older key is exp(-1e4) below the newest: y_i = v_i.
  h.log_a = at::full({90}, -1e4, at::kDouble);
  EXPECT_LT((decayed_linear(h, at::kDouble) - h.v).abs().max().item<double>(), 1e-12);
  EXPECT_LT((decayed_linear(h, at::kFloat).to(at::kDouble) - h.v).abs().max().item<double>(), 1e-6);
  // L = 1: the one key.
  const Head one = random_head(1, 5, 3, -2, 3);
  EXPECT_LT((decayed_linear(one, at::kDouble) - one.v).abs().max().item<double>(), 1e-15);
}

// Strong decay over a long sequence: Lambda reaches about -1e4 (16K tokens at a = 0.54 would; here
// 2048 tokens at log a in [-10, 0]), so the log scales are ~1e4 in size. float64 keeps the
// reference's digits; float32 carries the scales to ~1e-3 (its spacing at 1e4), so its weights to
// ~0.1%.
TEST(DecayedHeads, StrongDecayOverALongSequence) {
  const Head h = random_head(2048, 4, 2, -10, 4);
  const double lambda_end = decay_log_cumsum(h.log_a)[-1].item<double>();
  ASSERT_LT(lambda_end, -9000);
  const auto ref = reference(h);
  EXPECT_LT(max_diff(decayed_linear(h, at::kDouble), ref), 1e-9);
  EXPECT_LT(max_diff(decayed_linear(h, at::kFloat), ref), 1e-2);
  // The float64 running sum: Lambda's last value as the loop adds it.
  double run = 0;
  for (int64_t t = 0; t < 2048; ++t) run += h.log_a[t].item<double>();
  EXPECT_NEAR(lambda_end, run, 1e-9);
}

// A hybrid head: the window's keys keep softmax's weights; the older keys' are decayed, and the
// query's Lambda_i weighs them against the window (not cancelled).
TEST(DecayedHeads, HybridHeadDecaysItsLinearPartOnly) {
  for (int64_t W : {1, 5, 40}) {
    const Head h = random_head(120, 8, 4, -0.3, 10 + uint64_t(W));
    const double gamma = 0.7;
    const auto ref = reference(h, W, gamma);
    const at::Tensor lambda = decay_log_cumsum(h.log_a);
    const DecayedFeatures f = decayed_features(Features(h.qv, h.qls), Features(h.kv, h.kls), lambda);
    const HybridHeads hybrid{W, at::full({}, gamma, at::kDouble)};
    EXPECT_LT(max_diff(hybrid_attention_output(f.q, f.k, h.q, h.k, h.v, hybrid), ref), 1e-10) << "W = " << W;
    EXPECT_LT(max_diff(hybrid_map(f.q, f.k, h.q, h.k, hybrid).matmul(h.v), ref), 1e-10) << "W = " << W;
  }
}

// Gradients flow into log a (what training learns): autograd through the product's path against
// central differences of the float64 reference.
TEST(DecayedHeads, GradientOfLogAMatchesFiniteDifferences) {
  Head h = random_head(24, 5, 3, -1, 5);
  at::Tensor log_a = h.log_a.clone().requires_grad_(true);
  const at::Tensor G = at::randn({24, 3}, at::kDouble);
  const DecayedFeatures f = decayed_features(Features(h.qv, h.qls), Features(h.kv, h.kls), decay_log_cumsum(log_a));
  (linear_attention_output(f.q, f.k, h.v) * G).sum().backward();
  const at::Tensor grad = log_a.grad();
  auto loss = [&](const Head& x) {
    const auto y = reference(x);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i)
      for (size_t c = 0; c < y[i].size(); ++c) s += y[i][c] * G[int64_t(i)][int64_t(c)].item<double>();
    return s;
  };
  const double eps = 1e-6;
  for (int64_t t : {1, 7, 15, 23}) {
    Head plus = h, minus = h;
    plus.log_a = h.log_a.clone();
    minus.log_a = h.log_a.clone();
    plus.log_a[t] -= eps;  // stay at or below 0
    minus.log_a[t] -= 2 * eps;
    const double numeric = (loss(plus) - loss(minus)) / eps;
    EXPECT_NEAR(grad[t].item<double>(), numeric, 1e-5 * std::max(1.0, std::abs(numeric))) << "t = " << t;
  }
}

// The recurrent form: each token's key enters the state with log scale - Lambda_t (the running
// sum), the same outputs as the batch form token by token.
TEST(DecayedHeads, RecurrentFormEqualsTheBatchForm) {
  const Head h = random_head(100, 6, 4, -0.8, 6);
  const at::Tensor batch = decayed_linear(h, at::kDouble);
  kernels::RecurrentState st;
  double lambda = 0;
  for (int64_t t = 0; t < 100; ++t) {
    lambda += h.log_a[t].item<double>();
    const at::Tensor y = kernels::recurrent_step(st, h.qv[t].unsqueeze(0), h.kv[t].unsqueeze(0),
                                                 (h.kls[t] - lambda).reshape({1}), h.v[t].unsqueeze(0));
    EXPECT_LT((y[0] - batch[t]).abs().max().item<double>(), 1e-10) << "t = " << t;
  }
}

TEST(DecayedHeads, FixedDecayIsExactAndBadDecaysAreRefused) {
  const at::Tensor delta = at::tensor({-3.0, 0.0, 5.0}, at::kDouble);
  const at::Tensor lambda = fixed_decay_lambda(delta, 16384);
  ASSERT_EQ(lambda.sizes().vec(), (std::vector<int64_t>{3, 16384}));
  for (int h = 0; h < 3; ++h) {
    const double log_a = -std::log1p(std::exp(-delta[h].item<double>()));  // log sigmoid(delta), closed form
    for (int64_t i : {0, 1, 999, 16383}) EXPECT_NEAR(lambda[h][i].item<double>(), double(i + 1) * log_a, 1e-12 * (i + 1));
  }
  // As a per-position log a, the running sum says the same.
  const at::Tensor per_position = at::log_sigmoid(delta).unsqueeze(-1).expand({3, 16384}).contiguous();
  EXPECT_LT((decay_log_cumsum(per_position) - lambda).abs().max().item<double>(), 1e-8);
  for (double bad : {0.5, std::nan("")}) {
    const std::string msg = test::error_of([&] { decay_log_cumsum(at::tensor({-0.1, bad}, at::kDouble)); });
    EXPECT_NE(msg.find("decay"), std::string::npos) << msg;
  }
}

// A converted model with fixed-decay heads (SPEC 7: "decay": "fixed", layers.{s}.heads.{h}.
// decay.delta): written by convert, read back, run in the batch form, token by token and from a
// prompt, and by attnscope_linear.py in plain PyTorch; delta -> +inf is the undecayed model. Plain
// linear heads and hybrid heads (window 4).
TEST(DecayedHeads, AConvertedModelWithFixedDecayRunsInEveryForm) {
  const std::string cli = test::cli_path(), tmp = test::temp_dir("decayed_model");
  const std::string bundled = test::source_dir() + "/resources/models/brown-gpt2-mini";
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 733 + 5) % 4096);
  const at::Tensor batch_ids = at::tensor(ids, at::kLong).view({1, -1});
  for (int64_t W : {int64_t(0), int64_t(4)}) {
    SCOPED_TRACE("window " + std::to_string(W));
    const std::string plain = test::bundled_hedgehog16(tmp + "/plain_w" + std::to_string(W), W);
    const std::string decayed = tmp + "/decayed_w" + std::to_string(W);
    std::string o;
    LoadedModel original = load_model(bundled);
    LoadedModel m = load_model(plain);
    auto maps = std::make_shared<HeadFeatureMaps>(*m.model->feature_maps());
    const at::Tensor undecayed = m.model->forward(batch_ids);
    // delta -> +inf: a -> 1, today's model.
    for (int s = 0; s < 4; ++s) maps->decay_delta.push_back(at::full({4}, 60.0, at::kFloat));
    m.model->set_feature_maps(maps);
    EXPECT_LT((m.model->forward(batch_ids) - undecayed).abs().max().item<double>(), 1e-5);
    // Real decays, from none to strong (a = sigmoid(-2) = 0.12), and they change the model.
    at::manual_seed(3);
    maps->decay_delta.clear();
    for (int s = 0; s < 4; ++s) maps->decay_delta.push_back(at::rand({4}) * 6 - 2);
    m.model->set_feature_maps(maps);
    const at::Tensor batch = m.model->forward(batch_ids);
    EXPECT_GT((batch - undecayed).abs().max().item<double>(), 1e-2);
    EXPECT_LT((m.model->forward_recurrent(batch_ids) - batch).abs().max().item<double>(), 1e-4);
    // Generation from a prompt (prefill, then steps) is the batch form's argmax.
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 5);
    EXPECT_EQ(m.model->generate_greedy(prompt, 6), test::greedy_by_forward(*m.model, prompt, 6));
    // Written and read back: the same logits.
    convert_model(original, test::hedgehog16_convert_options(maps, plain, 4, 4, W), decayed);
    const auto cfg = nlohmann::json::parse(test::read_file(decayed + "/config.json"));
    EXPECT_EQ(cfg["attnscope"]["decay"], "fixed");
    LoadedModel back = load_model(decayed);
    EXPECT_LT((back.model->forward(batch_ids) - batch).abs().max().item<double>(), 1e-6);
    // What the readers refuse, naming the file: a decay this build does not run, deltas without
    // "decay" (a stale file), "decay" without deltas.
    {
      const std::string bad = tmp + "/bad_w" + std::to_string(W);
      ASSERT_EQ(test::run_command("cp -r '" + decayed + "' '" + bad + "'", &o), 0) << o;
      auto with = [&](const nlohmann::json& decay) {
        nlohmann::json c = cfg;
        if (decay.is_null()) c["attnscope"].erase("decay");
        else c["attnscope"]["decay"] = decay;
        std::ofstream(bad + "/config.json") << c.dump();
        return test::error_of([&] { load_model(bad); });
      };
      std::string msg = with("sometimes");
      EXPECT_NE(msg.find("attnscope.decay"), std::string::npos) << msg;
      EXPECT_NE(msg.find("sometimes"), std::string::npos) << msg;
      msg = with("gated");  // deltas where gates should be
      EXPECT_NE(msg.find("layers.0.heads.0.decay.b"), std::string::npos) << msg;
      msg = with(nullptr);
      EXPECT_NE(msg.find("feature_maps.safetensors"), std::string::npos) << msg;
      EXPECT_NE(msg.find("decay.delta"), std::string::npos) << msg;
      const std::string plain_cfg = test::read_file(plain + "/config.json");
      std::ofstream(bad + "/config.json") << plain_cfg;
      ASSERT_EQ(test::run_command("cp '" + plain + "/feature_maps.safetensors' '" + bad + "/'", &o), 0) << o;
      msg = with("fixed");
      EXPECT_NE(msg.find("layers.0.heads.0.decay.delta"), std::string::npos) << msg;
    }
    // Stage 2 keeps the decay and trains it with the maps (the deltas move; the model still runs).
    if (W == 0) {
      const std::string run = tmp + "/finetune";
      ASSERT_EQ(test::run_command(cli + " finetune --model " + decayed + " --text " + test::source_dir() +
                                      "/resources/texts/brown_news_ca44.txt --steps 3 --rank 2 --batch 2 --seq-len 32 --map-lr 0.05 --out " +
                                      run + " 2>&1", &o), 0) << o;
      const auto tuned_cfg = nlohmann::json::parse(test::read_file(run + "/model/config.json"));
      EXPECT_EQ(tuned_cfg["attnscope"]["decay"], "fixed");
      LoadedModel tuned = load_model(run + "/model");
      ASSERT_FALSE(tuned.model->feature_maps()->decay_delta.empty());
      double moved = 0;
      for (int l = 0; l < 4; ++l)
        moved = std::max(moved, (tuned.model->feature_maps()->decay_delta[size_t(l)] - maps->decay_delta[size_t(l)]).abs().max().item<double>());
      EXPECT_GT(moved, 1e-4) << "finetune left every delta where it was";
      EXPECT_TRUE(at::isfinite(tuned.model->forward(batch_ids)).all().item<bool>());
    }
    // attnscope_linear.py computes the same logits in plain PyTorch.
    const auto py = test::python_runner_diffs(decayed, ids, 0,
                                              "for row in m.maps:\n"
                                              "    for head in row: head.log_a = None");
    if (!py) continue;
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
    EXPECT_GT(py->variant, 1e-2) << "the runner's decay changes nothing: " << py->output;  // the comparison has power
  }
}

}  // namespace test_decayed_heads
