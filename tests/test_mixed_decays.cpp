// Heads with their own decays in one model (issue 27's per-head student: `--decay mixer`, each head
// the student its structured-mixer distances point at). Checked: each head's Lambda in a layer that
// mixes none, fixed and gated heads against float64 loops (a = 1, a fixed a^(i+1), a gate's sum of
// log sigmoids); the model in its batch, recurrent and generating forms; written as "head_decays"
// with each head's own tensors, read back, and run by attnscope_linear.py; the reader's refusals.
// distill --decay mixer gives each head of stories260K the student `attnscope metrics` names for it,
// trains the gated heads' gates only, resumes exactly and converts; convert --decay mixer starts the
// same heads; what needs a capture is refused without one, before anything is written.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/analysis/structured_mixers.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/model/model.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_mixed_decays {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// Head (s, h)'s kind in the hand-made mixed model: none, fixed, gated in turn.
Decay kind_of(int s, int h) { return Decay((s + h) % 3); }

// Lambda [B, H, L] of one layer by loops in float64: 0 for a head without decay, (t + 1) log
// sigmoid(delta_h) for a fixed one, the running sum of log sigmoid(w_h.x_t + b_h) for a gated one.
at::Tensor lambda_by_loops(const std::vector<Decay>& kinds, const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w,
                           const at::Tensor& bias) {
  const at::Tensor xd = x.to(at::kDouble).contiguous(), wd = w.to(at::kDouble).contiguous();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), H = int64_t(kinds.size());
  at::Tensor out = at::zeros({B, H, L}, at::kDouble);
  auto X = xd.accessor<double, 3>();
  auto Wt = wd.accessor<double, 2>();
  auto O = out.accessor<double, 3>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double run = 0;
      for (int64_t t = 0; t < L; ++t) {
        if (kinds[size_t(h)] == Decay::Fixed) run += log_sigmoid(delta[h].item<double>());
        if (kinds[size_t(h)] == Decay::Gated) {
          double z = bias[h].item<double>();
          for (int64_t c = 0; c < D; ++c) z += X[b][t][c] * Wt[h][c];
          run += log_sigmoid(z);
        }
        O[b][h][t] = run;
      }
    }
  return out;
}

std::vector<int64_t> some_ids(int n) {
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 733 + 5) % 4096);
  return ids;
}

}  // namespace

// A model whose layers mix none, fixed and gated heads (plain and hybrid): each head's Lambda is
// its own kind's against float64 loops (strong decays included: delta -8, a gate shut at logit -40),
// batch = recurrent = generation, written with "head_decays" and only each head's own tensors, read
// back to the same logits, and attnscope_linear.py computes them too. The reader refuses a head
// that names mixer, a decayed softmax head, "decay" beside "head_decays", and a fixed head without
// its delta, naming the file.
TEST(MixedDecays, AModelMixingNoneFixedAndGatedHeadsRunsInEveryForm) {
  const std::string tmp = test::temp_dir("mixed_decays");
  const std::string bundled = test::source_dir() + "/resources/models/brown-gpt2-mini";
  const std::vector<int64_t> ids = some_ids(40);
  const at::Tensor batch_ids = at::tensor(ids, at::kLong).view({1, -1});
  for (int64_t W : {int64_t(0), int64_t(4)}) {
    SCOPED_TRACE("window " + std::to_string(W));
    const std::string plain = test::bundled_hedgehog16(tmp + "/plain_w" + std::to_string(W), W);
    const std::string mixed = tmp + "/mixed_w" + std::to_string(W);
    std::string o;
    LoadedModel original = load_model(bundled);
    LoadedModel m = load_model(plain);
    const at::Tensor undecayed = m.model->forward(batch_ids);
    const int S = 4, H = 4;
    const int64_t D = m.model->config().d_model;
    auto maps = std::make_shared<HeadFeatureMaps>(*m.model->feature_maps());
    at::manual_seed(7);
    maps->decays.assign(size_t(S), std::vector<Decay>(size_t(H)));
    for (int s = 0; s < S; ++s) {
      at::Tensor delta = at::rand({H}) * 6 - 1, b = at::rand({H}) * 6 - 1;
      if (s == 1) delta[1] = -8.0, b[2] = -40.0;  // strong: a = 3e-4 per token; a shut gate
      maps->decay_delta.push_back(delta);
      maps->decay_b.push_back(b);
      maps->decay_w.push_back(at::randn({H, D}) * 0.6);
      for (int h = 0; h < H; ++h) maps->decays[size_t(s)][size_t(h)] = kind_of(s, h);
    }
    m.model->set_feature_maps(maps);
    EXPECT_EQ(uniform_decay(*maps), Decay::Mixer);
    // Lambda of each layer, each head its own kind.
    const at::Tensor x = at::randn({2, 23, D}) * 2;
    for (int s = 0; s < S; ++s) {
      const at::Tensor ref = lambda_by_loops(maps->decays[size_t(s)], x, maps->decay_delta[size_t(s)], maps->decay_w[size_t(s)],
                                             maps->decay_b[size_t(s)]);
      const at::Tensor got = decay_lambda(*maps, s, x);
      ASSERT_EQ(got.sizes(), ref.sizes());
      EXPECT_LT((got - ref).abs().max().item<double>(), 1e-9 * std::max(1.0, ref.abs().max().item<double>())) << "layer " << s;
      // One token's log a: the step of the same Lambda.
      const at::Tensor step = decay_log_a_step(*maps, s, x.select(1, 5));
      EXPECT_LT((step - (ref.select(2, 5) - ref.select(2, 4))).abs().max().item<double>(), 1e-9) << "layer " << s;
    }
    const at::Tensor batch = m.model->forward(batch_ids);
    EXPECT_GT((batch - undecayed).abs().max().item<double>(), 1e-2) << "the decays change the model";
    EXPECT_LT((m.model->forward_recurrent(batch_ids) - batch).abs().max().item<double>(), 1e-4);
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 5);
    EXPECT_EQ(m.model->generate_greedy(prompt, 6), test::greedy_by_forward(*m.model, prompt, 6));
    // The state a decayed head keeps is the one a plain head keeps (SPEC 5: no state for the decay).
    EXPECT_EQ(state_values(*maps, 4, 512), state_values(*load_model(plain).model->feature_maps(), 4, 512));

    // Written: head_decays, and only each head's own tensors.
    convert_model(original, test::hedgehog16_convert_options(maps, plain, S, H, W), mixed);
    const auto cfg = nlohmann::json::parse(test::read_file(mixed + "/config.json"));
    EXPECT_FALSE(cfg["attnscope"].contains("decay"));
    ASSERT_TRUE(cfg["attnscope"].contains("head_decays"));
    const auto written = test::read_tensors(mixed + "/feature_maps.safetensors");
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h) {
        EXPECT_EQ(cfg["attnscope"]["head_decays"][s][h], decay_name(kind_of(s, h)));
        EXPECT_EQ(written.count(convert::decay_delta_name(s, h)), size_t(kind_of(s, h) == Decay::Fixed)) << s << " " << h;
        EXPECT_EQ(written.count(convert::decay_w_name(s, h)), size_t(kind_of(s, h) == Decay::Gated)) << s << " " << h;
        EXPECT_EQ(written.count(convert::decay_b_name(s, h)), size_t(kind_of(s, h) == Decay::Gated)) << s << " " << h;
      }
    LoadedModel back = load_model(mixed);
    EXPECT_LT((back.model->forward(batch_ids) - batch).abs().max().item<double>(), 1e-6);
    EXPECT_EQ(back.model->feature_maps()->decays, maps->decays);

    // The reader's refusals, each naming the file and what is wrong.
    {
      const std::string bad = tmp + "/bad_w" + std::to_string(W);
      ASSERT_EQ(test::run_command("cp -r '" + mixed + "' '" + bad + "'", &o), 0) << o;
      struct Case {
        std::function<void(nlohmann::json&)> edit;
        std::string says;
      };
      const std::vector<Case> cases = {
          {[](nlohmann::json& a) { a["head_decays"][0][0] = "mixer"; }, "mixer"},
          {[](nlohmann::json& a) { a["decay"] = "fixed"; }, "head_decays"},
          {[](nlohmann::json& a) { a["head_decays"][0][0] = "fixed"; }, "layers.0.heads.0.decay.delta"},
          {[](nlohmann::json& a) { a["head_decays"][1].erase(3); }, "head_decays"},
          {[](nlohmann::json& a) { a["head_decays"][2][2] = "sometimes"; }, "sometimes"},
      };
      for (const Case& c : cases) {
        nlohmann::json j = cfg;
        c.edit(j["attnscope"]);
        std::ofstream(bad + "/config.json") << j.dump();
        const std::string msg = test::error_of([&] { load_model(bad); });
        EXPECT_NE(msg.find(bad), std::string::npos) << msg;
        EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
      }
    }
    // attnscope_linear.py: the same logits; with every head undecayed they differ.
    const auto py = test::python_runner_diffs(mixed, ids, 7,
                                              "for row in m.maps:\n"
                                              "    for head in row:\n"
                                              "        head.log_a = None\n"
                                              "        head.gate_w = None\n"
                                              "        head.gate_b = None");
    if (!py) continue;
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
    EXPECT_GT(py->variant, 1e-2) << "the runner's decays change nothing: " << py->output;
  }
  // A table of head decays that names mixer: refused where the model takes its maps.
  LoadedModel m = load_model(tmp + "/plain_w0");
  auto maps = std::make_shared<HeadFeatureMaps>(*m.model->feature_maps());
  maps->decays.assign(4, std::vector<Decay>(4, Decay::Mixer));
  maps->decay_delta.assign(4, at::zeros({4}));
  const std::string msg = test::error_of([&] { m.model->set_feature_maps(maps); });
  EXPECT_NE(msg.find("mixer"), std::string::npos) << msg;
}

// distill --decay mixer on stories260K (128-token windows, where `attnscope metrics --mixer-state
// 16` names gated for most heads and none for two): job.json records each head's decay as metrics'
// student column says, only the gated heads have gates and they train, a killed run resumes exactly, `convert --job` writes the same head_decays and
// runs the same in the batch and recurrent forms, and `convert --decay mixer` starts the same heads.
// Without a capture, mixer is refused before anything is written.
TEST(MixedDecays, DistillByMixerGivesEachHeadTheStudentMetricsNames) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  const std::string cli = test::cli_path(), root = test::temp_dir("mixer_distill");
  const std::string capture = root + "/capture", text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  std::string out;
  ASSERT_EQ(test::run_command(cli + " capture -m " + bin + " -t " + text + " -L 128 -n 4 --seed 3 -o " + capture + " 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(cli + " metrics --capture " + capture + " --mixer-state " + std::to_string(kStudentMixerState) +
                                  " --json > " + root + "/metrics.json", &out), 0) << out;
  const auto metrics = nlohmann::json::parse(test::read_file(root + "/metrics.json"));
  std::vector<std::vector<std::string>> students(5, std::vector<std::string>(8));
  int none = 0, gated = 0;
  for (const auto& h : metrics["heads"]) {
    const std::string st = h["mixers"]["student"];
    students[h["layer"].get<size_t>()][h["head"].get<size_t>()] = st;
    none += st == "none", gated += st == "gated";
  }
  ASSERT_GT(none, 0) << "this capture should have heads that point at no decay";
  ASSERT_GT(gated, 0);

  DistillOptions o;
  o.capture = capture;
  o.feature_map = "hedgehog";
  o.loss = DistillLoss::Output;
  o.features = 8;
  o.seed = 5;
  o.batch = 2;
  o.steps = 10;
  o.decay = Decay::Mixer;
  distill(o, root + "/run");
  const auto job = nlohmann::json::parse(test::read_file(root + "/run/job.json"));
  ASSERT_TRUE(job.contains("head_decays")) << job.dump();
  EXPECT_EQ(job["decay"], "mixer");
  const auto tensors = test::read_tensors(root + "/run/feature_maps.safetensors");
  for (size_t s = 0; s < 5; ++s)
    for (size_t h = 0; h < 8; ++h) {
      SCOPED_TRACE("layer " + std::to_string(s) + " head " + std::to_string(h));
      EXPECT_EQ(job["head_decays"][s][h], students[s][h]);
      const bool is_gated = students[s][h] == "gated";
      EXPECT_EQ(tensors.count(convert::decay_w_name(int(s), int(h))), size_t(is_gated));
      EXPECT_FALSE(tensors.count(convert::decay_delta_name(int(s), int(h))));
      if (is_gated) EXPECT_GT(tensors.at(convert::decay_w_name(int(s), int(h))).abs().max().item<double>(), 0.0) << "the gate trains";
    }
  test::expect_distill_resumes_exactly(o, root);

  ASSERT_EQ(test::run_command(cli + " convert --job " + root + "/run --out " + root + "/model 2>&1", &out), 0) << out;
  const auto cfg = nlohmann::json::parse(test::read_file(root + "/model/config.json"));
  EXPECT_EQ(cfg["attnscope"]["head_decays"], job["head_decays"]);
  LoadedModel m = load_model(root + "/model");
  const at::Tensor ids = CaptureStore(capture).ids().narrow(0, 0, 1).narrow(1, 0, 48);
  EXPECT_LT((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-4);

  // convert --decay mixer: the same heads, untrained (gates w = 0 at the fitted decay).
  ASSERT_EQ(test::run_command(cli + " convert --model " + bin + " --feature-map hedgehog --features 8 --decay mixer --capture " +
                                  capture + " --out " + root + "/untrained 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/untrained/config.json"))["attnscope"]["head_decays"], job["head_decays"]);

  // Refused without a capture, nothing written.
  EXPECT_NE(test::run_command(cli + " convert --model " + bin + " --feature-map hedgehog --features 8 --decay mixer --out " + root +
                                  "/refused 2>&1", &out), 0);
  EXPECT_NE(out.find("--capture"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/refused"));
  EXPECT_NE(test::run_command(cli + " distill --loss direct --model " + bin + " --text " + text +
                                  " --feature-map hedgehog --features 8 --decay mixer --decay-init none --steps 2 --out " + root +
                                  "/refused 2>&1", &out), 0);
  EXPECT_NE(out.find("mixer"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/refused"));
  // A job.json that says mixer without each head's decay cannot resume.
  fs::copy(root + "/run", root + "/broken", fs::copy_options::recursive);
  nlohmann::json broken = job;
  broken.erase("head_decays");
  std::ofstream(root + "/broken/job.json") << broken.dump();
  const std::string msg = test::error_of([&] { read_distill_job(root + "/broken"); });
  EXPECT_NE(msg.find("head_decays"), std::string::npos) << msg;
  EXPECT_NE(msg.find(root + "/broken"), std::string::npos) << msg;
}

// --decay mixer beside a window (issue 27, item 4): each head hybrid (the last W keys exact) where
// metrics' student column says "window + ...", linear elsewhere, with the decay the column names;
// job.json, the converted model and `convert --decay mixer --window` all carry those types; the model
// runs batch = recurrent; its state is the per-head sum computed here; the block loss, which has no
// mixed-type form, is refused before anything is written. (Resuming reads the types from job.json:
// HeadTypes.DistillTrainsOnlyTheMappedHeads.) 256 tokens: the mixers' default map length, where heads differ.
TEST(MixedDecays, MixerBesideAWindowKeepsItForTheHeadsThatNeedIt) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  const std::string cli = test::cli_path(), root = test::temp_dir("mixer_window");
  const std::string capture = root + "/capture", text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  constexpr int64_t W = 16, M = 8, d = 8;
  std::string out;
  ASSERT_EQ(test::run_command(cli + " capture -m " + bin + " -t " + text + " -L 256 -n 4 --seed 3 -o " + capture + " 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(cli + " metrics --capture " + capture + " --mixer-state " + std::to_string(kStudentMixerState) +
                                  " --window " + std::to_string(W) + " --json > " + root + "/metrics.json", &out), 0) << out;
  const auto metrics = nlohmann::json::parse(test::read_file(root + "/metrics.json"));
  std::vector<std::vector<std::string>> students(5, std::vector<std::string>(8));
  int windows = 0;
  for (const auto& h : metrics["heads"]) {
    std::string st = h["mixers"]["student"];
    EXPECT_EQ(h["mixers"]["window_size"], W);
    const bool window = st.rfind("window + ", 0) == 0;
    windows += window;
    students[h["layer"].get<size_t>()][h["head"].get<size_t>()] = st;
  }
  ASSERT_GT(windows, 0) << "this capture should have heads that need the window: " << metrics.dump();
  ASSERT_LT(windows, 40) << "and heads that do not: " << metrics.dump();

  DistillOptions o;
  o.capture = capture;
  o.feature_map = "hedgehog";
  o.loss = DistillLoss::Output;
  o.features = M;
  o.seed = 5;
  o.batch = 2;
  o.steps = 10;
  o.decay = Decay::Mixer;
  o.window = W;
  distill(o, root + "/run");
  const auto job = nlohmann::json::parse(test::read_file(root + "/run/job.json"));
  ASSERT_TRUE(job.contains("head_types")) << job.dump();
  int64_t expected_state = 0;
  for (size_t s = 0; s < 5; ++s)
    for (size_t h = 0; h < 8; ++h) {
      SCOPED_TRACE("layer " + std::to_string(s) + " head " + std::to_string(h));
      const std::string& st = students[s][h];
      const bool window = st.rfind("window + ", 0) == 0;
      EXPECT_EQ(job["head_types"][s][h], window ? "hybrid" : "linear");
      EXPECT_EQ(job["head_decays"][s][h], window ? st.substr(9) : st);
      expected_state += M * d + M + (window ? W * 2 * d : 0);
    }

  ASSERT_EQ(test::run_command(cli + " convert --job " + root + "/run --out " + root + "/model 2>&1", &out), 0) << out;
  const auto cfg = nlohmann::json::parse(test::read_file(root + "/model/config.json"));
  EXPECT_EQ(cfg["attnscope"]["head_types"], job["head_types"]);
  EXPECT_EQ(cfg["attnscope"]["head_decays"], job["head_decays"]);
  LoadedModel m = load_model(root + "/model");
  EXPECT_EQ(state_values(*m.model->feature_maps(), d, 512), expected_state);
  const at::Tensor ids = CaptureStore(capture).ids().narrow(0, 0, 1).narrow(1, 0, 48);
  EXPECT_LT((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-4);
  // attnscope_linear.py: the same logits; with every hybrid head's window shut they differ.
  const at::Tensor row = ids.select(0, 0).contiguous();
  const auto py = test::python_runner_diffs(root + "/model", std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()), 7,
                                            "for row in m.maps:\n"
                                            "    for head in row:\n"
                                            "        head.window = 0");
  if (py) {
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
    EXPECT_GT(py->variant, 1e-2) << "the runner's windows change nothing: " << py->output;
  }

  ASSERT_EQ(test::run_command(cli + " convert --model " + bin + " --feature-map hedgehog --features 8 --decay mixer --window " +
                                  std::to_string(W) + " --capture " + capture + " --out " + root + "/untrained 2>&1", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/untrained/config.json"))["attnscope"]["head_types"], job["head_types"]);

  o.loss = DistillLoss::Block;
  const std::string msg = test::error_of([&] { check_distill_options(o); });
  EXPECT_NE(msg.find("block"), std::string::npos) << msg;
  EXPECT_THROW(distill(o, root + "/block"), Error);
  EXPECT_FALSE(fs::exists(root + "/block"));
}

}  // namespace test_mixed_decays
