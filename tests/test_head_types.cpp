// Mixed head types (SPEC 5 and 7, issue 28): a converted model whose heads are softmax (kept exact),
// hybrid or linear, in any mix within a layer. Each head is checked against an independent
// computation: a softmax head against the original model itself, a hybrid or linear head against
// the same head in a model whose heads are all of its type (those forms are checked against float64
// references in their own tests); the batch, recurrent and generation forms against each other; the
// written model against what was written and against attnscope_linear.py; training against the
// heads it must leave alone.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/formats/dims_json.h"
#include "attnscope/model/model.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_head_types {

using namespace attnscope;
namespace fs = std::filesystem;
namespace test = attnscope::test;

namespace {

using Types = std::vector<std::vector<HeadType>>;
constexpr HeadType kS = HeadType::Softmax, kH = HeadType::Hybrid, kL = HeadType::Linear;

// Every head of an S x H model of one type.
Types all_of(HeadType t, int S, int H) { return Types(size_t(S), std::vector<HeadType>(size_t(H), t)); }

// A converted model of `original` with hedgehog maps (M = 8, seed 7), window W and these types;
// gamma drawn away from 0 so the balance matters.
std::shared_ptr<HeadFeatureMaps> maps_of(const Model& original, int64_t W, const Types& types) {
  const ModelConfig& c = original.config();
  FeatureMapSpec spec;
  spec.name = "hedgehog";
  spec.seed = 7;
  auto maps = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(
      spec, std::vector<std::vector<int64_t>>(size_t(c.n_layer), std::vector<int64_t>(size_t(c.n_head), 8)), c.n_layer,
      c.n_head, c.head_dim, W, types));
  for (size_t s = 0; s < maps->gamma.size(); ++s) maps->gamma[s] = at::linspace(-1.5, 1.0, c.n_head);
  return maps;
}

// Each layer's heads' outputs [H, L, d] (batch 0) of `m` over ids.
std::vector<at::Tensor> head_outputs(const Model& m, const at::Tensor& ids) {
  std::vector<at::Tensor> out(size_t(m.config().n_layer));
  CaptureHook hook;
  hook.on_layer = [&](const AttentionActivations& a) { out[size_t(a.layer)] = a.out.select(0, 0).clone(); };
  m.forward(ids, &hook);
  return out;
}

using test::greedy_by_forward;

at::Tensor some_ids(int n, int vocab) {
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 733 + 5) % vocab);
  return at::tensor(ids, at::kLong).view({1, -1});
}

}  // namespace

// Every head softmax: the original model, exactly, in every form (GPT-2, and a Llama with RoPE and
// grouped-query attention, where a softmax head reads its shared key/value head).
TEST(HeadTypes, EveryHeadSoftmaxIsTheOriginal) {
  for (const std::string& dir : {test::source_dir() + "/resources/models/brown-gpt2-mini", test::tiny_llama_dir("types_all_softmax", 3)}) {
    SCOPED_TRACE(dir);
    LoadedModel original = load_model(dir), m = load_model(dir);
    const ModelConfig& c = original.model->config();
    const at::Tensor ids = some_ids(std::min(40, c.n_ctx), c.vocab_size);
    m.model->set_feature_maps(maps_of(*original.model, 0, all_of(kS, c.n_layer, c.n_head)));
    const at::Tensor want = original.model->forward(ids);
    EXPECT_LT((m.model->forward(ids) - want).abs().max().item<double>(), 1e-5);
    EXPECT_LT((m.model->forward_recurrent(ids) - want).abs().max().item<double>(), 1e-4);
    const std::vector<int64_t> prompt{3, 17, 42, 5};
    EXPECT_EQ(m.model->generate_greedy(prompt, 8), original.model->generate_greedy(prompt, 8));
  }
}

// A mix within each layer: head by head, layer 0's outputs (the same input in every model) equal
// the same head's in the model whose heads are all of its type; the batch form equals the recurrent
// form and generation. The hybrid heads' window (4) is far below the length (40), so each type
// differs from the others.
TEST(HeadTypes, EachHeadRunsItsOwnRule) {
  for (const std::string& dir : {test::source_dir() + "/resources/models/brown-gpt2-mini", test::tiny_llama_dir("types_mixed", 5)}) {
    SCOPED_TRACE(dir);
    LoadedModel original = load_model(dir);
    const ModelConfig& c = original.model->config();
    const int S = c.n_layer, H = c.n_head;
    const at::Tensor ids = some_ids(40, c.vocab_size);
    Types mixed = Types(size_t(S));
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h) mixed[size_t(s)].push_back(std::vector<HeadType>{kS, kH, kL}[size_t((s + h) % 3)]);
    const int64_t W = 4;
    Model m(c, original.model->weights());
    m.set_feature_maps(maps_of(*original.model, W, mixed));
    const auto got = head_outputs(m, ids);
    std::map<HeadType, std::vector<at::Tensor>> pure;
    for (HeadType t : {kS, kH, kL}) {
      Model p(c, original.model->weights());
      p.set_feature_maps(maps_of(*original.model, t == kH ? W : 0, all_of(t, S, H)));
      pure[t] = head_outputs(p, ids);
    }
    for (int h = 0; h < H; ++h) {
      const HeadType t = mixed[0][size_t(h)];
      SCOPED_TRACE(std::string("layer 0 head ") + std::to_string(h) + " " + head_type_name(t));
      EXPECT_LT((got[0][h] - pure[t][0][h]).abs().max().item<double>(), 1e-5);
      for (HeadType other : {kS, kH, kL}) {
        if (other != t) {
          EXPECT_GT((got[0][h] - pure[other][0][h]).abs().max().item<double>(), 1e-3);
        }
      }
    }
    const at::Tensor batch = m.forward(ids);
    EXPECT_LT((m.forward_recurrent(ids) - batch).abs().max().item<double>(), 1e-4);
    const std::vector<int64_t> prompt{3, 17, 42, 5, 9, 11};
    EXPECT_EQ(m.generate_greedy(prompt, 10), greedy_by_forward(m, prompt, 10));
  }
}

// The recurrent step runs a layer's heads group by group (one computation per type and feature
// dimension): on stories260K (GQA, 8 heads of dimension 8) with mixed types, hybrid heads of two
// sizes (their maps stacked) and linear heads of fixed prf maps (head by head), greedy generation
// is token-identical to greedy decoding by full forward passes (the batch form), and the recurrent
// logits match the batch ones.
TEST(HeadTypes, GroupedStepsGenerateTheBatchFormsTokensOnStories260K) {
  const std::string path = test::shared_model_file("stories260K/stories260K.bin");
  if (path.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  LoadedModel original = load_model(path);
  const ModelConfig& c = original.model->config();
  Types types = Types(size_t(c.n_layer), std::vector<HeadType>{kH, kH, kS, kH, kL, kH, kH, kL});
  types[3] = std::vector<HeadType>(size_t(c.n_head), kS);
  auto maps = maps_of(*original.model, 16, types);
  std::vector<std::vector<int64_t>> dims(size_t(c.n_layer), std::vector<int64_t>{8, 16, 0, 8, 8, 16, 8, 8});
  for (size_t s = 0; s < dims.size(); ++s)
    for (size_t h = 0; h < dims[s].size(); ++h) {
      if (types[s][h] == kS) continue;
      FeatureMapSpec spec;
      spec.name = types[s][h] == kL ? "prf" : "hedgehog";
      spec.d = c.head_dim;
      spec.features = dims[s][h];
      spec.seed = 100 + s * 8 + h;
      maps->maps[s][h] = std::shared_ptr<FeatureMap>(make_feature_map(spec));
    }
  Model m(c, original.model->weights());
  m.set_feature_maps(maps);
  const std::vector<int64_t> prompt = original.tokenizer->encode_for_model("Once upon a time, there was a little dog");
  EXPECT_EQ(m.generate_greedy(prompt, 24), greedy_by_forward(m, prompt, 24));
  const at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1});
  EXPECT_LT((m.forward_recurrent(ids) - m.forward(ids)).abs().max().item<double>(), 1e-4);
}

// The settings a mixed model refuses: a hybrid head without a window, a softmax head with a map, a
// mapped head without one, a table of the wrong shape.
TEST(HeadTypes, BadTypesAreRefused) {
  LoadedModel original = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
  const ModelConfig& c = original.model->config();
  Model m(c, original.model->weights());
  std::string msg = test::error_of([&] { maps_of(*original.model, 0, all_of(kH, c.n_layer, c.n_head)); });
  EXPECT_NE(msg.find("hybrid, which needs a window"), std::string::npos) << msg;
  auto maps = maps_of(*original.model, 4, all_of(kL, c.n_layer, c.n_head));
  maps->types[1][2] = kS;  // still has its map
  msg = test::error_of([&] { m.set_feature_maps(maps); });
  EXPECT_NE(msg.find("layer 1 head 2 is a softmax head"), std::string::npos) << msg;
  maps = maps_of(*original.model, 4, all_of(kS, c.n_layer, c.n_head));
  maps->types[0][1] = kL;  // has none
  msg = test::error_of([&] { m.set_feature_maps(maps); });
  EXPECT_NE(msg.find("layer 0 head 1 has no feature map"), std::string::npos) << msg;
  maps->types.pop_back();
  msg = test::error_of([&] { m.set_feature_maps(maps); });
  EXPECT_NE(msg.find("layers of head types"), std::string::npos) << msg;
}

// Written and read back: "head_types" and dims 0 for softmax heads in config.json, no tensors for
// softmax heads and no gamma for linear ones; the same logits from attnscope and from
// attnscope_linear.py (batch and token by token); the readers' refusals name the file and head.
TEST(HeadTypes, AMixedModelIsWrittenReadAndRunByPython) {
  const std::string tmp = test::temp_dir("head_types_model"), cli = test::cli_path();
  for (const std::string& dir : {test::source_dir() + "/resources/models/brown-gpt2-mini", test::tiny_llama_dir("types_written", 9)}) {
    SCOPED_TRACE(dir);
    const std::string out = tmp + "/" + fs::path(dir).filename().string();
    LoadedModel original = load_model(dir);
    const ModelConfig& c = original.model->config();
    const int S = c.n_layer, H = c.n_head;
    Types mixed = all_of(kH, S, H);
    mixed[0][1] = kS, mixed[1][0] = kS, mixed[0][0] = kL;
    ConvertOptions co;
    co.map.name = "hedgehog";
    co.map.seed = 7;
    co.dims = std::vector<std::vector<int64_t>>(size_t(S), std::vector<int64_t>(size_t(H), 8));
    co.maps = maps_of(*original.model, 4, mixed);
    co.python_module = test::source_dir() + "/resources/python/attnscope_linear.py";
    convert_model(original, co, out);
    const auto a = nlohmann::json::parse(test::read_file(out + "/config.json"))["attnscope"];
    EXPECT_EQ(a["head_types"][0][1], "softmax");
    EXPECT_EQ(a["head_types"][0][0], "linear");
    EXPECT_EQ(a["head_types"][1][1], "hybrid");
    EXPECT_EQ(a["dims"][0][1], 0);
    EXPECT_EQ(a["dims"][0][2], 8);
    const auto t = test::read_tensors(out + "/feature_maps.safetensors");
    for (const auto& [name, tensor] : t) {
      EXPECT_NE(name.rfind("layers.0.heads.1.", 0), 0u) << name << ": a softmax head stores nothing";
      EXPECT_NE(name, convert::gamma_name(0, 0)) << "a linear head has no balance";
    }
    EXPECT_TRUE(t.count(convert::gamma_name(0, 2)));
    const at::Tensor ids = some_ids(40, c.vocab_size);
    Model m(c, original.model->weights());
    m.set_feature_maps(co.maps);
    const at::Tensor want = m.forward(ids);
    LoadedModel back = load_model(out);
    EXPECT_EQ(head_types_of(*back.model->feature_maps()), mixed);
    EXPECT_LT((back.model->forward(ids) - want).abs().max().item<double>(), 1e-6);

    // Refusals: an unknown type; a hybrid head in a model without a window; a softmax head's dims.
    const auto broken = [&](const std::function<void(nlohmann::json&)>& edit) {
      const std::string bad = out + "_bad";
      remove_tree(bad);
      fs::copy(out, bad, fs::copy_options::recursive);
      nlohmann::json cfg = nlohmann::json::parse(test::read_file(out + "/config.json"));
      edit(cfg["attnscope"]);
      std::ofstream(bad + "/config.json") << cfg.dump();
      return test::error_of([&] { load_model(bad); });
    };
    std::string msg = broken([](nlohmann::json& j) { j["head_types"][0][3] = "exact"; });
    EXPECT_NE(msg.find("attnscope.head_types"), std::string::npos) << msg;
    EXPECT_NE(msg.find("exact"), std::string::npos) << msg;
    msg = broken([](nlohmann::json& j) { j.erase("window"); });
    EXPECT_NE(msg.find("hybrid, which needs a window"), std::string::npos) << msg;
    msg = broken([](nlohmann::json& j) { j["dims"][0][1] = 8; });
    EXPECT_NE(msg.find("layer 0 head 1 is a softmax head with feature dimension 8"), std::string::npos) << msg;

    std::vector<int64_t> id_list(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    const auto py = test::python_runner_diffs(out, id_list, 7);
    if (!py) continue;
    EXPECT_LT(py->batch, 1e-4) << py->output;
    EXPECT_LT(py->recurrent, 1e-4) << py->output;
  }
}

// distill with an allocation file that keeps heads exact: the softmax heads train nothing (no
// tensors in the run's maps), the others train as before (the same tensors as a run of every head
// as hybrid, head by head: their groups do not see the softmax heads); job.json records the types;
// a killed run resumes exactly; the run converts to a mixed model. The block loss is refused.
TEST(HeadTypes, DistillTrainsOnlyTheMappedHeads) {
  const std::string root = test::temp_dir("head_types_distill");
  const CaptureStore cap(test::bundled_capture());
  const int S = cap.num_layers(), H = cap.num_heads();
  Types types = all_of(kH, S, H);
  types[0][1] = kS, types[2][0] = kS, types[2][3] = kL;
  nlohmann::json alloc;
  alloc["dims"] = nlohmann::json::array();
  alloc["head_types"] = head_types_json(types);
  for (int s = 0; s < S; ++s) {
    alloc["dims"].push_back(nlohmann::json::array());
    for (int h = 0; h < H; ++h) alloc["dims"][size_t(s)].push_back(types[size_t(s)][size_t(h)] == kS ? 0 : 8);
  }
  std::ofstream(root + "/alloc.json") << alloc.dump();
  DistillOptions o;
  o.capture = cap.dir();
  o.val_capture = o.capture;
  o.feature_map = "hedgehog";
  o.loss = DistillLoss::Output;
  o.allocation = root + "/alloc.json";
  o.window = 4;
  o.steps = 9;
  o.seed = 5;
  o.batch = 2;
  distill(o, root + "/mixed");
  // Every head hybrid, layer 0's head 1 in a group of its own (M = 16): layer 0's other heads form
  // the same group as in the mixed run, layer 1 is the same in both.
  nlohmann::json dims = nlohmann::json::array();
  for (int s = 0; s < S; ++s) dims.push_back(std::vector<int>(size_t(H), 8));
  dims[0][1] = 16;
  std::ofstream(root + "/uniform.json") << nlohmann::json{{"dims", dims}}.dump();
  DistillOptions uniform = o;
  uniform.allocation = root + "/uniform.json";
  distill(uniform, root + "/uniform");
  const auto mixed = test::read_tensors(root + "/mixed/feature_maps.safetensors");
  const auto all = test::read_tensors(root + "/uniform/feature_maps.safetensors");
  for (const auto& [name, t] : mixed) EXPECT_NE(name.rfind("layers.0.heads.1.", 0), 0u) << name;
  EXPECT_FALSE(mixed.count(convert::gamma_name(2, 3))) << "a linear head has no balance";
  // The same groups train the same: the softmax head was only left out.
  for (const auto& [s, h] : std::vector<std::pair<int, int>>{{1, 2}, {0, 0}, {0, 3}}) {
    const std::string w = convert::tensor_prefix(s, h) + "W";
    ASSERT_TRUE(mixed.count(w)) << w;
    EXPECT_LT((mixed.at(w) - all.at(w)).abs().max().item<double>(), 1e-5) << w;
  }
  const auto job = nlohmann::json::parse(test::read_file(root + "/mixed/job.json"));
  EXPECT_EQ(job["head_types"][0][1], "softmax");
  test::expect_distill_resumes_exactly(o, root);
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " convert --job " + root + "/mixed --out " + root + "/model 2>&1", &out), 0) << out;
  LoadedModel m = load_model(root + "/model");
  EXPECT_EQ(head_types_of(*m.model->feature_maps()), types);
  const at::Tensor ids = cap.ids().narrow(0, 0, 1).narrow(1, 0, 48);
  EXPECT_LT((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-4);

  DistillOptions block = o;
  block.loss = DistillLoss::Block;
  const std::string msg = test::error_of([&] { distill(block, root + "/block"); });
  EXPECT_NE(msg.find("block with softmax heads"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(root + "/block"));
}

// Head types under a state budget, against hand counts (SPEC 5: softmax 2 T d b, linear (M d + M) b,
// hybrid + 2 W d b) and against a brute force over every subset of heads kept softmax (the least
// predicted loss, the sum of the DoF of the heads left to a map, among the subsets that fit).
TEST(HeadTypes, AllocationUnderAStateBudget) {
  // 2 layers x 4 heads, d = 8, T = 64, 2 key/value heads per layer, float32.
  std::vector<std::vector<double>> dof = {{3.0, 9.0, 1.0, 4.0}, {2.0, 8.5, 7.0, 0.5}};
  AllocOptions o;
  o.strategy = AllocStrategy::Fix;
  o.budget = 8;
  o.head_dim = 8;
  o.state = {0, 0.5, 64, 0, 2, 4};
  Allocation a = allocate(dof, o);
  const int64_t linear = (8 * 8 + 8) * 4, softmax = 64 * 16 * 4;  // 288, 4096 bytes
  EXPECT_EQ(a.original_bytes, 2 * 2 * softmax);
  // Half of 16384 bytes: the base (8 x 288 = 2304) and one head kept (+ 3808 = 6112); a second would need 9920.
  ASSERT_EQ(a.types.size(), 2u);
  EXPECT_EQ(a.types[0][1], kS) << "the largest DoF (9) stays softmax";
  EXPECT_EQ(a.dims[0][1], 0);
  EXPECT_EQ(a.state_bytes, 7 * linear + softmax);
  EXPECT_DOUBLE_EQ(a.predicted_loss, 3 + 1 + 4 + 2 + 8.5 + 7 + 0.5);
  int kept = 0;
  for (const auto& l : a.types) kept += int(std::count(l.begin(), l.end(), kS));
  EXPECT_EQ(kept, 1);
  // Hybrid heads with W = 4: each keeps a ring of 4 keys and values more (2 W d b = 256 bytes).
  o.state = {12000, 0, 64, 4, 2, 4};
  a = allocate(dof, o);
  const int64_t hybrid = linear + 2 * 4 * 8 * 4;
  EXPECT_EQ(a.types[1][2], kH);
  EXPECT_EQ(a.state_bytes, 6 * hybrid + 2 * softmax);  // 3264 + 8192 = 11456 <= 12000; a third: 15008
  EXPECT_EQ(a.types[0][1], kS);
  EXPECT_EQ(a.types[1][1], kS);

  // Random DoF, budgets from the cheapest to the original: the greedy choice's predicted loss is
  // the brute force's least.
  at::manual_seed(11);
  for (int trial = 0; trial < 20; ++trial) {
    const at::Tensor r = at::rand({2, 4}, at::kDouble) * 10;
    std::vector<std::vector<double>> d(2, std::vector<double>(4));
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 4; ++h) d[size_t(s)][size_t(h)] = r[s][h].item<double>();
    const double share = 0.27 + 0.73 * double(trial) / 19.0;  // from just above the cheapest (4352 of 16384 bytes)
    o.state = {0, share, 64, 4, 2, 4};
    const Allocation g = allocate(d, o);
    const int64_t cap = int64_t(std::floor(share * double(g.original_bytes)));
    double best = 1e300;
    for (int subset = 0; subset < 256; ++subset) {
      int64_t bytes = 0;
      double loss = 0;
      for (int i = 0; i < 8; ++i) {
        const bool kept_exact = subset >> i & 1;
        bytes += kept_exact ? softmax : hybrid;
        if (!kept_exact) loss += d[size_t(i / 4)][size_t(i % 4)];
      }
      if (bytes <= cap) best = std::min(best, loss);
    }
    EXPECT_NEAR(g.predicted_loss, best, 1e-9) << "share " << share;
    EXPECT_LE(g.state_bytes, cap);
  }

  // Bad budgets: below the cheapest model, above the original, both forms, no context.
  o.state = {1000, 0, 64, 0, 2, 4};
  std::string msg = test::error_of([&] { allocate(dof, o); });
  EXPECT_NE(msg.find("below the cheapest model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2304 bytes"), std::string::npos) << msg;
  o.state = {20000, 0, 64, 0, 2, 4};
  msg = test::error_of([&] { allocate(dof, o); });
  EXPECT_NE(msg.find("more than the original's key-value cache"), std::string::npos) << msg;
  o.state = {5000, 0.5, 64, 0, 2, 4};
  EXPECT_NE(test::error_of([&] { allocate(dof, o); }).find("not both"), std::string::npos);
  o.state = {5000, 0, 0, 0, 2, 4};
  EXPECT_NE(test::error_of([&] { allocate(dof, o); }).find("context"), std::string::npos);
}

// The same allocation from the CLI (allocate --state-share, the file distill reads) and from
// distill's own strategy (--strategy dof --state-share): the same head types; negative and
// too-large budgets are refused by the CLI, naming the flag, with nothing written.
TEST(HeadTypes, StateBudgetFromTheCliAndDistill) {
  const std::string root = test::temp_dir("head_types_budget"), cli = test::cli_path(), cap = test::bundled_capture();
  std::string out;
  ASSERT_EQ(test::run_command(cli + " allocate --capture " + cap + " --strategy dof --budget 8 --multiple-of 2 --state-share 0.4 --window 4 --json", &out), 0) << out;
  const auto a = nlohmann::json::parse(out.substr(out.find('{')));  // after the convergence note on stderr
  ASSERT_TRUE(a.contains("head_types")) << a.dump();
  EXPECT_LE(a["state_bytes"].get<double>(), 0.4 * a["original_kv_bytes"].get<double>());
  int kept = 0;
  for (const auto& l : a["head_types"])
    for (const auto& t : l) kept += t == "softmax";
  EXPECT_GT(kept, 0);
  ASSERT_EQ(test::run_command(cli + " distill --capture " + cap + " --feature-map hedgehog --strategy dof --budget 8 --state-share 0.4 --window 4 "
                                  "--loss output --steps 2 --out " + root + "/run 2>&1", &out), 0) << out;
  const auto job = nlohmann::json::parse(test::read_file(root + "/run/job.json"));
  EXPECT_EQ(job["head_types"], a["head_types"]);
  EXPECT_EQ(job["state_share"], 0.4);
  for (const std::string bad : {"--state-share 1.5", "--state-budget -3"}) {
    const int rc = test::run_command(cli + " distill --capture " + cap + " --feature-map hedgehog --strategy dof --budget 8 " + bad +
                                         " --steps 2 --out " + root + "/bad 2>&1", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(bad.substr(0, bad.find(' '))), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(root + "/bad"));
  }
  const int rc = test::run_command(cli + " distill --capture " + cap + " --feature-map hedgehog --features 8 --state-share 0.4 --steps 2 --out " +
                                       root + "/bad 2>&1", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("give a strategy"), std::string::npos) << out;
}

// The closeness measure per head (what --exact-heads-by kl ranks by): 0 for a softmax head, 0 for a
// hybrid head whose window covers every key (its row is softmax's), positive for a linear head; the
// layer's KL is the row-weighted mean of its heads' (every head has the same rows here).
TEST(HeadTypes, PerHeadAttentionKlIsZeroForExactHeads) {
  LoadedModel original = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
  const ModelConfig& c = original.model->config();
  Types types = all_of(kL, c.n_layer, c.n_head);
  types[1][0] = kS, types[1][1] = kH;
  Model m(c, original.model->weights());
  m.set_feature_maps(maps_of(*original.model, 64, types));  // window 64 >= the 48 tokens evaluated
  std::vector<int64_t> ids;
  for (int i = 0; i < 200; ++i) ids.push_back((i * 733 + 5) % c.vocab_size);
  ConvertedEvalOptions eo;
  eo.seq_len = 48;
  eo.closeness_windows = 2;
  eo.speed = false;
  eo.faithfulness = false;
  const ConvertedEvaluation ev = evaluate_converted(m, ids, eo);
  const auto& l1 = ev.layers[1];
  ASSERT_EQ(l1.head_kl.size(), size_t(c.n_head));
  EXPECT_NEAR(l1.head_kl[0], 0.0, 1e-9);
  EXPECT_NEAR(l1.head_kl[1], 0.0, 1e-6);
  EXPECT_GT(l1.head_kl[2], 1e-3);
  // Every layer's KL (compute_head_metrics, which reads Ahat at a floor of 1e-300 where it
  // underflows) is the mean of its heads' (each head has the same rows here): finite, as the heads' are.
  for (const LayerCloseness& l : ev.layers) {
    double mean = 0;
    for (double v : l.head_kl) {
      EXPECT_TRUE(std::isfinite(v)) << "layer " << l.layer;
      mean += v / double(c.n_head);
    }
    EXPECT_NEAR(l.attention_kl, mean, 1e-9 + 1e-9 * mean) << "layer " << l.layer;
  }
}

// linearize --state-share with --exact-heads-by kl (the default): stage 1 trains every head, then
// the heads kept softmax are the state budget's rule applied to stage 1's KL per head (recomputed
// here from exact_heads.json with the stage-1 dims); the final model has exactly those types.
TEST(HeadTypes, LinearizeKeepsTheHeadsStage1LosesMostExact) {
  const std::string out = test::temp_dir("head_types_linearize") + "/run";
  std::string o;
  ASSERT_EQ(test::run_command(test::cli_path() + " linearize --model " + test::source_dir() + "/resources/models/brown-gpt2-mini -t " +
                                  test::source_dir() + "/resources/texts/brown_fiction_ck29.txt --seq-len 64 --max-windows 8 --steps 4 "
                                  "--finetune-steps 2 --window 8 --state-share 0.6 --no-speed --out " + out, &o), 0) << o;
  const auto exact = nlohmann::json::parse(test::read_file(out + "/exact_heads.json"));
  EXPECT_EQ(exact["by"], "kl");
  const auto kl = exact["head_kl"].get<std::vector<std::vector<double>>>();
  const DistillJob job = read_distill_job(out + "/stage1");
  EXPECT_TRUE(job.types.empty()) << "stage 1 trains every head";
  const Types want = keep_exact_under({0, 0.6, 64, 8, 4, 4}, kl, job.dims_for(4, 4), 32);
  EXPECT_EQ(head_types_json(want).dump(), exact["head_types"].dump());
  LoadedModel m = load_model(out + "/model");
  EXPECT_EQ(head_types_of(*m.model->feature_maps()), want);
  int kept = 0;
  for (const auto& l : want) kept += int(std::count(l.begin(), l.end(), kS));
  EXPECT_GT(kept, 0);
  EXPECT_NE(test::read_file(out + "/linearize.md").find("heads kept softmax"), std::string::npos);
}

}  // namespace test_head_types
