// Model resolution and weight formats: the Hugging Face cache layout, sharded checkpoints, half
// precision weights, and config errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_model_loader {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

at::Tensor ids_for_test() { return at::tensor(std::vector<int64_t>{3, 141, 59, 26, 5, 35, 89, 79, 32, 38}).view({1, -1}); }

// Copies the tiny model to `dir` with every weight converted to `dtype`, split over two shards.
void write_sharded(const std::string& dir, at::ScalarType dtype) {
  const std::string src = test::tiny_gpt2_dir();
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json"}) fs::copy_file(src + "/" + f, dir + "/" + f);
  SafetensorsFile f(src + "/model.safetensors");
  NamedTensors a, b;
  nlohmann::json map;
  int i = 0;
  for (const auto& e : f.entries()) {
    const bool first = (i++ % 2) == 0;
    (first ? a : b).emplace_back(e.name, f.tensor(e.name).to(dtype));
    map[e.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir + "/model-00001-of-00002.safetensors", a);
  write_safetensors(dir + "/model-00002-of-00002.safetensors", b);
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump();
}

// The reference: the f32 model with its weights rounded through `dtype`.
at::Tensor rounded_reference_logits(at::ScalarType dtype) {
  LoadedModel m = load_model(test::tiny_gpt2_dir());
  ModelWeights w = m.model->weights();
  auto round = [dtype](at::Tensor& t) {
    if (t.defined()) t = t.to(dtype).to(at::kFloat);
  };
  round(w.tok_emb), round(w.pos_emb), round(w.lnf_w), round(w.lnf_b);
  for (auto& l : w.layers)
    for (at::Tensor* t : {&l.ln1_w, &l.ln1_b, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.ln2_w,
                          &l.ln2_b, &l.w_up, &l.b_up, &l.w_down, &l.b_down})
      round(*t);
  w.lm_head = w.tok_emb;
  return Model(m.model->config(), w).forward(ids_for_test());
}

struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) {
    const char* o = std::getenv(n.c_str());
    had = o != nullptr;
    if (had) old = o;
    setenv(n.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

TEST(ModelLoader, ShardedBf16AndF16Checkpoints) {
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    const std::string dir = test::temp_dir("sharded");
    write_sharded(dir, dtype);
    LoadedModel m = load_model(dir);
    EXPECT_EQ(m.weight_files.size(), 2u);
    at::Tensor got = m.model->forward(ids_for_test());
    at::Tensor want = rounded_reference_logits(dtype);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5) << dtype;
    // And the rounding is visible: half weights are not the f32 model.
    at::Tensor f32 = load_model(test::tiny_gpt2_dir()).model->forward(ids_for_test());
    EXPECT_GT((got - f32).abs().max().item<double>(), 1e-5) << dtype;
  }
}

TEST(ModelLoader, ShardIndexNamingAMissingFileFails) {
  const std::string dir = test::temp_dir("sharded_bad");
  write_sharded(dir, at::kFloat);
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  try {
    load_model(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model-00002-of-00002.safetensors"), std::string::npos) << e.what();
  }
}

TEST(ModelLoader, ResolvesBareNamesThroughTheHuggingFaceCache) {
  const std::string home = test::temp_dir("hf_home");
  const fs::path repo = fs::path(home) / "hub" / "models--acme--tiny-gpt2";
  fs::create_directories(repo / "snapshots" / "0123abc");
  fs::create_directories(repo / "snapshots" / "ffff000");  // an older snapshot, not what refs/main names
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "0123abc";
  for (const auto& e : fs::directory_iterator(test::tiny_gpt2_dir()))
    fs::copy_file(e.path(), repo / "snapshots" / "0123abc" / e.path().filename());
  ScopedEnv env("HF_HOME", home);
  ScopedEnv env2("HF_HUB_CACHE", "");
  LoadedModel m = load_model("acme/tiny-gpt2");
  EXPECT_EQ(fs::path(m.path).filename(), "0123abc");
  EXPECT_EQ(m.model->config().n_layer, 2);
  try {
    load_model("acme/absent-model");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("models--acme--absent-model"), std::string::npos) << e.what();
  }
}

TEST(ModelLoader, ConfigErrorsNameTheFileAndField) {
  const std::string dir = test::temp_dir("cfg");
  auto expect_error = [&](const nlohmann::json& j, const std::string& part) {
    std::ofstream(dir + "/config.json") << j.dump();
    try {
      load_hf_config(dir + "/config.json");
      FAIL() << "expected an error for " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  };
  expect_error({{"architectures", {"MambaForCausalLM"}}}, "MambaForCausalLM");
  expect_error({{"hidden_size", 8}}, "architectures");
  expect_error({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"num_hidden_layers", 2}}, "num_attention_heads");
  expect_error({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                {"num_attention_heads", 4}, {"num_key_value_heads", 3}, {"max_position_embeddings", 64},
                {"vocab_size", 10}, {"intermediate_size", 8}},
               "evenly");
  std::ofstream(dir + "/config.json") << "{not json";
  EXPECT_THROW(load_hf_config(dir + "/config.json"), Error);
}

TEST(ModelLoader, NonFiniteWeightsAreRejected) {
  const std::string dir = test::temp_dir("nan");
  const std::string src = test::tiny_gpt2_dir();
  for (const char* f : {"config.json", "tokenizer.json"}) fs::copy_file(src + "/" + f, dir + "/" + f);
  SafetensorsFile f(src + "/model.safetensors");
  NamedTensors t;
  for (const auto& e : f.entries()) t.emplace_back(e.name, f.tensor(e.name).clone());
  t[3].second.view({-1})[0] = NAN;
  write_safetensors(dir + "/model.safetensors", t);
  try {
    load_model(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(t[3].first), std::string::npos) << e.what();
  }
}

}  // namespace test_model_loader
