// `attnscope eval` on a converted model (SPEC 7): original and converted loss, per-layer attention
// KL and output error checked against an independent float64 computation, and the speed table.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/attention/features.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_eval_converted {

using namespace attnscope;

namespace {

std::string bundled() { return test::source_dir() + "/resources/models/brown-gpt2-mini"; }
std::string text_file() { return test::source_dir() + "/resources/texts/brown_news_ca44.txt"; }

// The bundled model converted with untrained PRF, M = 64 per head (built once for the suite).
const std::string& converted_prf64() {
  static const std::string out = [] {
    LoadedModel m = load_model(bundled());
    const auto& c = m.model->config();
    ConvertOptions o;
    o.map.name = "prf";
    o.map.seed = 11;
    o.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, 64));
    o.budget = 64;
    o.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
    const std::string dir = test::temp_dir("eval_converted") + "/prf64";
    convert_model(m, o, dir);
    return dir;
  }();
  return out;
}

nlohmann::json run_json(const std::string& args) {
  std::string out;
  const int rc = test::run_command(test::cli_path() + " eval " + args + " --json 2>/dev/null", &out);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out);
}

// The text's tokens as `attnscope eval` reads them.
std::vector<int64_t> text_ids(const LoadedModel& m) {
  std::vector<int64_t> ids;
  for (const auto& d : read_text_documents({text_file()})) {
    auto t = m.tokenizer->encode_for_model(d.text);
    ids.insert(ids.end(), t.begin(), t.end());
    if (m.tokenizer->eos_id() >= 0 && !m.tokenizer->adds_bos()) ids.push_back(m.tokenizer->eos_id());
  }
  return ids;
}

}  // namespace

TEST(EvalConverted, OriginalLossMatchesPlainEvalAndPerplexityIsExpLoss) {
  const nlohmann::json plain = run_json("--model " + bundled() + " --text " + text_file() + " --seq-len 64");
  const nlohmann::json conv = run_json("--model " + converted_prf64() + " --text " + text_file() +
                                       " --seq-len 64 --speed-lengths 32,64 --min-seconds 0.01 --closeness-windows 1");
  // A plain model keeps the plain report.
  EXPECT_TRUE(plain.contains("loss"));
  EXPECT_FALSE(plain.contains("original"));
  const double orig = conv["original"]["loss"], conv_loss = conv["converted"]["loss"];
  EXPECT_NEAR(orig, plain["loss"].get<double>(), 1e-9 * std::abs(orig));
  EXPECT_NEAR(conv["original"]["perplexity"].get<double>(), std::exp(orig), 1e-9 * std::exp(orig));
  EXPECT_NEAR(conv["converted"]["perplexity"].get<double>(), std::exp(conv_loss), 1e-9 * std::exp(conv_loss));
  ASSERT_TRUE(std::isfinite(conv_loss));
  // Linear attention really ran: the converted loss is not the original's. (Not necessarily higher:
  // on the bundled model untrained PRF at M = 64 scores about the same, 5.096 against 5.099.)
  EXPECT_GT(std::abs(conv_loss - orig), 1e-4);

  ASSERT_EQ(conv["speed"].size(), 4u);
  int batch = 0, generate = 0;
  for (const auto& s : conv["speed"]) {
    const int L = s["seq_len"];
    EXPECT_TRUE(L == 32 || L == 64);
    (s["mode"] == "batch" ? batch : generate) += 1;
    EXPECT_GT(s["softmax_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(s["linear_tokens_per_s"].get<double>(), 0);
    // Peak memory is measured: at least the logits the run returns ([L, V] floats for a batch
    // forward, one row per step of generation), and a softmax batch forward holds a layer's
    // [H, L, L] scores and probabilities at once.
    const int64_t V = 4096, H = 4, floats = 4;
    const bool batch_mode = s["mode"] == "batch";
    const int64_t logits = (batch_mode ? L : 1) * V * floats;
    EXPECT_GE(s["linear_peak_bytes"].get<int64_t>(), logits);
    EXPECT_GE(s["softmax_peak_bytes"].get<int64_t>(), std::max(logits, batch_mode ? 2 * H * L * L * floats : 0));
  }
  EXPECT_EQ(batch, 2);
  EXPECT_EQ(generate, 2);

  // Per-layer closeness against a float64 computation of the same rows: the first window of 64
  // tokens, the original model's q, k, v, each head's PRF features, Ahat and A built by loops.
  ASSERT_EQ(conv["layers"].size(), 4u);
  LoadedModel m = load_model(converted_prf64());
  const auto* linear = m.model->feature_maps();
  ASSERT_NE(linear, nullptr);
  const Model original(m.model->config(), m.model->weights());
  const std::vector<int64_t> ids = text_ids(m);
  ASSERT_GE(ids.size(), 64u);
  const at::Tensor w = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + 64)).view({1, 64});
  for (int layer : {0, 2}) {
    at::Tensor q, k, v;
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      if (a.layer == layer) {
        q = a.q.select(0, 0).to(at::kDouble);
        k = a.k.select(0, 0).to(at::kDouble);
        v = a.v.select(0, 0).to(at::kDouble);
      }
    };
    {
      at::NoGradGuard ng;
      original.forward(w, &hook);
    }
    const int64_t H = q.size(0), L = q.size(1), d = q.size(2);
    double kl = 0, num = 0, den = 0;
    int64_t rows = 0;
    for (int64_t h = 0; h < H; ++h) {
      at::NoGradGuard ng;
      const auto& phi = linear->maps[layer][h];
      const Features fq = phi->scaled_query_features(q.select(0, h).to(at::kFloat));
      const Features fk = phi->scaled_key_features(k.select(0, h).to(at::kFloat));
      const at::Tensor vq = fq.values.to(at::kDouble).contiguous(), vk = fk.values.to(at::kDouble).contiguous();
      const at::Tensor sk = fk.log_scale.to(at::kDouble).contiguous();
      const at::Tensor qh = q.select(0, h).contiguous(), kh = k.select(0, h).contiguous(), vh = v.select(0, h).contiguous();
      auto Q = qh.accessor<double, 2>(), K = kh.accessor<double, 2>(), V = vh.accessor<double, 2>();
      auto FQ = vq.accessor<double, 2>(), FK = vk.accessor<double, 2>(), SK = sk.accessor<double, 2>();
      const int64_t M = vq.size(1);
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(i + 1), lw(i + 1);
        double smax = -1e300, lmax = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0, kern = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[i][c] * K[j][c];
          for (int64_t c = 0; c < M; ++c) kern += FQ[i][c] * FK[j][c];
          s[j] = dot / std::sqrt(double(d));
          lw[j] = kern > 0 ? SK[j][0] + std::log(kern) : -std::numeric_limits<double>::infinity();
          smax = std::max(smax, s[j]);
          lmax = std::max(lmax, lw[j]);
        }
        double zs = 0, zl = 0;
        for (int64_t j = 0; j <= i; ++j) {
          zs += std::exp(s[j] - smax);
          zl += std::exp(lw[j] - lmax);
        }
        std::vector<double> y(d, 0), yh(d, 0);
        for (int64_t j = 0; j <= i; ++j) {
          const double a = std::exp(s[j] - smax) / zs, ah = std::exp(lw[j] - lmax) / zl;
          if (a > 0) kl += a * std::log(a / std::max(ah, 1e-300));
          for (int64_t c = 0; c < d; ++c) {
            y[c] += a * V[j][c];
            yh[c] += ah * V[j][c];
          }
        }
        for (int64_t c = 0; c < d; ++c) {
          num += (yh[c] - y[c]) * (yh[c] - y[c]);
          den += y[c] * y[c];
        }
        ++rows;
      }
    }
    kl /= rows;
    const double err = std::sqrt(num / den);
    const auto& got = conv["layers"][layer];
    EXPECT_EQ(got["layer"].get<int>(), layer);
    EXPECT_NEAR(got["attention_kl"].get<double>(), kl, 1e-4 * kl + 1e-6) << "layer " << layer;
    EXPECT_NEAR(got["output_rel_error"].get<double>(), err, 1e-3 * err + 1e-6) << "layer " << layer;
    EXPECT_GT(kl, 1e-3);  // PRF at M = 64 is not softmax: the check is not 0 == 0
    EXPECT_GT(err, 0);
    EXPECT_LT(err, 10);
  }
}

TEST(EvalConverted, CoreRefusesSoftmaxModelAndBadLengths) {
  LoadedModel plain = load_model(bundled());
  const std::vector<int64_t> ids = text_ids(plain);
  EXPECT_NE(test::error_of([&] { evaluate_converted(*plain.model, ids, {}); }).find("not a converted model"),
            std::string::npos);
  LoadedModel conv = load_model(converted_prf64());
  ConvertedEvalOptions o;
  o.seq_len = 32;
  o.speed_lengths = {999};
  EXPECT_NE(test::error_of([&] { evaluate_converted(*conv.model, ids, o); }).find("speed length"), std::string::npos);
  std::string out;
  EXPECT_EQ(test::run_command(test::cli_path() + " eval --model " + converted_prf64() + " --text " + text_file() +
                                  " --seq-len 32 --speed-lengths 0 2>&1",
                              &out),
            2)
      << out;
  EXPECT_EQ(default_speed_lengths(256), (std::vector<int>{64, 128, 256}));
  EXPECT_EQ(default_speed_lengths(200), (std::vector<int>{64, 128, 200}));
  EXPECT_EQ(default_speed_lengths(4096), (std::vector<int>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(default_speed_lengths(32768).back(), 4096);
}

// Issue 15, item 5 (length honesty): the loss and attention KL by position. Each bucket's losses
// equal the per-token cross-entropy of an independent forward pass over the same windows; the
// buckets average back to the overall loss, and their KL (row by row, float64) to the layers' KL
// (head_metrics' means).
TEST(EvalConverted, PositionBucketsMatchAnIndependentPerTokenLoss) {
  EXPECT_EQ(position_bucket(0), 0);
  EXPECT_EQ(position_bucket(63), 0);
  EXPECT_EQ(position_bucket(64), 1);
  EXPECT_EQ(position_bucket(127), 1);
  EXPECT_EQ(position_bucket(128), 2);
  EXPECT_EQ(position_bucket(4095), 6);
  LoadedModel m = load_model(converted_prf64());
  const std::vector<int64_t> ids = text_ids(m);
  ConvertedEvalOptions o;
  o.seq_len = 160;
  o.closeness_windows = 2;
  o.speed = false;
  const ConvertedEvaluation e = evaluate_converted(*m.model, ids, o);
  ASSERT_EQ(e.positions.size(), 3u);  // 0-63, 64-127, 128-159
  EXPECT_EQ(e.positions[2].first, 128);
  EXPECT_EQ(e.positions[2].last, 159);
  EXPECT_TRUE(e.speed.empty());
  // Independent: logits of every window, cross-entropy by hand in float64, bucketed.
  at::NoGradGuard no_grad;
  std::vector<double> sum(3, 0), n(3, 0);
  for (size_t start = 0; start + 1 < ids.size(); start += 160) {
    const size_t len = std::min<size_t>(160, ids.size() - start);
    if (len < 2) break;
    const at::Tensor w = at::tensor(std::vector<int64_t>(ids.begin() + start, ids.begin() + start + len)).view({1, -1});
    const at::Tensor logp = at::log_softmax(m.model->forward(w).squeeze(0).to(at::kDouble), -1);
    for (size_t p = 1; p < len; ++p) {
      const int b = position_bucket(int(p));
      sum[b] -= logp[int64_t(p) - 1][ids[start + p]].item<double>();
      n[b] += 1;
    }
  }
  double total = 0, count = 0;
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(e.positions[b].tokens, int64_t(n[b])) << b;
    EXPECT_NEAR(e.positions[b].converted_loss, sum[b] / n[b], 1e-4) << b;
    total += e.positions[b].converted_loss * double(e.positions[b].tokens);
    count += double(e.positions[b].tokens);
  }
  EXPECT_NEAR(total / count, e.converted_loss, 1e-9);
  // Every row of these heads is defined (PRF is positive): the rows-weighted bucket KL is the
  // layers' mean KL.
  double layer_mean = 0;
  for (const auto& l : e.layers) layer_mean += l.attention_kl / double(e.layers.size());
  double kl = 0;
  for (const auto& p : e.positions) kl += p.attention_kl * double(p.last - p.first + 1);
  EXPECT_NEAR(kl / 160.0, layer_mean, 1e-6 * layer_mean);
  EXPECT_EQ(e.trained_length, 0);  // untrained maps
  EXPECT_FALSE(e.beyond_trained_length());
}

}  // namespace test_eval_converted

namespace test_eval_converted {

// Issue 28: eval reports recall at distance and generation agreement of a converted model, against
// its own weights with softmax by default and against --original when given (here a model with the
// same shape but other weights: the figures change to what faithfulness.h computes against it); an
// original of another shape is refused, naming it.
TEST(EvalConverted, RecallAndGenerationAgainstTheOriginal) {
  const std::string args = "--model " + converted_prf64() + " --text " + text_file() +
                           " --seq-len 64 --speed-lengths 32 --min-seconds 0.01 --closeness-windows 1";
  const nlohmann::json own = run_json(args);
  LoadedModel conv = load_model(converted_prf64());
  const std::vector<int64_t> ids = text_ids(conv);
  const Model same(conv.model->config(), conv.model->weights());  // softmax, the same weights
  RecallOptions ro;
  ro.seq_len = 64;
  const auto recall = recall_at_distance(same, *conv.model, ids, ro);
  ASSERT_EQ(own["recall"].size(), recall.size());
  for (size_t i = 0; i < recall.size(); ++i) {
    EXPECT_EQ(own["recall"][i]["lag"], recall[i].lag);
    EXPECT_NEAR(own["recall"][i]["kept"].get<double>(), recall[i].kept(), 1e-9);
  }
  GenerationOptions go;
  go.prompt_tokens = 32;
  go.new_tokens = 32;
  const GenerationAgreement g = generation_agreement(same, *conv.model, ids, go);
  EXPECT_NEAR(own["generation"]["token_match"].get<double>(), g.token_match, 1e-12);
  EXPECT_NEAR(own["generation"]["free_running_kl"].get<double>(), g.free_running_kl, 1e-9);
  // Another original of the same shape: the bundled model with its attention output projections
  // scaled by 1.5 (written as a model directory).
  const std::string other = test::temp_dir("eval_original") + "/other";
  std::string out;
  ASSERT_EQ(test::run_command("cp -r " + bundled() + " " + other, &out), 0) << out;
  {
    NamedTensors t;
    {
      SafetensorsFile f(other + "/model.safetensors");
      for (const auto& e : f.entries()) {
        at::Tensor x = f.tensor(e.name).clone();
        if (e.name.find("attn.c_proj.weight") != std::string::npos) x = x * 1.5;
        t.emplace_back(e.name, x);
      }
    }
    write_safetensors(other + "/model.safetensors", t);
  }
  const nlohmann::json vs = run_json(args + " --original " + other);
  LoadedModel o = load_model(other);
  const auto recall_o = recall_at_distance(*o.model, *conv.model, ids, ro);
  for (size_t i = 0; i < recall_o.size(); ++i) EXPECT_NEAR(vs["recall"][i]["original_drop"].get<double>(), recall_o[i].original_drop, 1e-9);
  EXPECT_GT(std::abs(vs["recall"][0]["original_drop"].get<double>() - own["recall"][0]["original_drop"].get<double>()), 1e-6);
  // An original of another shape: refused, naming it.
  const std::string llama = test::source_dir() + "/../shared/models/stories260K/stories260K.bin";
  const int rc = test::run_command(test::cli_path() + " eval " + args + " --original " + llama + " 2>&1", &out);
  if (std::filesystem::exists(llama)) {
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("not its original"), std::string::npos) << out;
  }
}

}  // namespace test_eval_converted
