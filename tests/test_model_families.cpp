// The Llama family beyond Llama itself (issue 16 item 2): MistralForCausalLM (sliding window),
// Qwen2ForCausalLM (q/k/v biases, no o_proj bias), Qwen3ForCausalLM (per-head q/k RMSNorm before
// RoPE, head_dim != hidden_size / heads), a Llama with its own head_dim and attention biases, and a
// Llama 3 rope_scaling ("llama3" frequencies). For each, a small random checkpoint written by the
// tests' own writer is loaded through the public API and its logits (and captured attention) are
// compared with the independent float64 reference (tests/support/reference_transformer). The
// reference also runs with one convention deliberately wrong (q/k norm after RoPE, biases dropped,
// no window, a window one key wider, no rope scaling) to show each mistake is far outside the
// tolerance and the model is nearer the right convention. Bad configs give named errors. Converted
// models of each family run in attnscope_linear.py with attnscope's logits.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "hf_checkpoint_writer.h"
#include "reference_transformer.h"
#include "test_support.h"

namespace test_model_families {

namespace fs = std::filesystem;
using namespace attnscope;
using test::RefArch;
using test::RefConfig;
using test::RefOptions;
using test::rel_diff;
using test::to_doubles;

namespace {

// float32 model vs float64 reference (as test_forward_reference): max |diff| / max |reference|.
constexpr double kTol = 1e-4;
// A wrong convention must move the reference logits by at least 100x the tolerance.
constexpr double kGap = 1e-2;

RefConfig base(RefArch arch) {
  RefConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;  // grouped-query attention everywhere
  c.d_model = 32;
  c.d_ff = 48;
  c.vocab = 60;
  c.n_ctx = 64;
  return c;
}

struct Wrong {
  const char* what;
  std::function<void(RefOptions&)> set;
};

struct Family {
  const char* name;
  RefConfig cfg;
  uint32_t seed;
  int L;                     // sequence length compared
  std::vector<Wrong> wrong;  // conventions the comparison must tell apart
};

// gtest prints a failing parameter with this instead of its raw bytes.
void PrintTo(const Family& f, std::ostream* os) { *os << f.name << " (seed " << f.seed << ")"; }

std::vector<Family> families() {
  std::vector<Family> f;
  const Wrong tiled{"kv heads tiled (h % n_kv) instead of repeat_interleave",
                    [](RefOptions& o) { o.tile_kv_heads = true; }};
  const Wrong no_bias{"attention biases ignored", [](RefOptions& o) { o.drop_attn_bias = true; }};
  {
    RefConfig c = base(RefArch::Llama);
    c.head_dim_override = 12;  // != 32 / 4
    c.attention_bias = true;
    f.push_back({"llama_head_dim_bias", c, 11, 17, {tiled, no_bias}});
  }
  {
    // Llama 3.x rope_scaling with original_max_position_embeddings 64: of head_dim 8's four
    // frequencies 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283) the first is kept (< 64 / 4),
    // the second blended (between 16 and 64), the last two divided by the factor.
    RefConfig c = base(RefArch::Llama);
    c.llama3_factor = 8, c.llama3_low = 1, c.llama3_high = 4, c.llama3_original_context = 64;
    f.push_back({"llama3_rope_scaling", c, 12, 40,
                 {{"rope_scaling ignored", [](RefOptions& o) { o.no_rope_scaling = true; }}}});
  }
  {
    RefConfig c = base(RefArch::Mistral);
    c.head_dim_override = 16;
    c.sliding_window = 5;  // L = 20 > 5: most queries see only their last 5 keys
    f.push_back({"mistral_window", c, 13, 20,
                 {tiled,
                  {"no sliding window (full causal)", [](RefOptions& o) { o.no_sliding_window = true; }},
                  {"window one key wider (i - j <= W)", [](RefOptions& o) { o.window_one_wider = true; }}}});
  }
  {
    RefConfig c = base(RefArch::Mistral);
    c.sliding_window = 64;  // longer than the sequence: plain causal attention
    f.push_back({"mistral_long_window", c, 14, 20, {tiled}});
  }
  {
    RefConfig c = base(RefArch::Qwen2);
    c.tied = true;
    c.rope_theta = 1e6;
    f.push_back({"qwen2_tied", c, 15, 17, {tiled, no_bias}});
  }
  {
    RefConfig c = base(RefArch::Qwen3);
    c.head_dim_override = 16;
    f.push_back({"qwen3", c, 16, 17,
                 {tiled, {"q/k norm after RoPE instead of before", [](RefOptions& o) { o.qk_norm_after_rope = true; }}}});
  }
  {
    RefConfig c = base(RefArch::Qwen3);
    c.head_dim_override = 12;
    c.attention_bias = true;
    c.tied = true;
    c.rope_theta = 1e6;
    f.push_back({"qwen3_bias_tied", c, 17, 17,
                 {no_bias, {"q/k norm after RoPE instead of before", [](RefOptions& o) { o.qk_norm_after_rope = true; }}}});
  }
  return f;
}

std::vector<int64_t> random_ids(int L, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(L);
  for (auto& id : ids) id = dist(rng);
  return ids;
}


// The checkpoint of `f` in a fresh directory, loaded as a user's model would be (config.json, then
// the weight store).
struct Loaded {
  std::string dir;
  test::RefWeights weights;
  std::unique_ptr<Model> model;
};
Loaded load(const Family& f) {
  Loaded l;
  l.dir = test::temp_dir(std::string("families_") + f.name);
  l.weights = test::random_weights(f.cfg, f.seed);
  test::write_hf_checkpoint(l.dir, f.cfg, l.weights);
  ModelConfig mc = load_hf_config(l.dir + "/config.json");
  WeightStore store(l.dir);
  l.model = std::make_unique<Model>(mc, load_hf_weights(mc, store));
  return l;
}

// The message of the Error `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class ModelFamilies : public ::testing::TestWithParam<Family> {};

// The parsed config says what the family's config.json means.
TEST_P(ModelFamilies, ConfigParsedAsTheFamilyMeansIt) {
  const Family& f = GetParam();
  const Loaded l = load(f);
  const ModelConfig& c = l.model->config();
  EXPECT_EQ(c.head_dim, f.cfg.head_dim());
  EXPECT_EQ(c.rotary_dim, f.cfg.head_dim());
  EXPECT_EQ(c.n_kv_head, f.cfg.n_kv_head);
  EXPECT_EQ(c.tied_embeddings, f.cfg.tied);
  EXPECT_EQ(c.rope_theta, f.cfg.rope_theta);
  EXPECT_EQ(c.qk_norm, f.cfg.arch == RefArch::Qwen3);
  EXPECT_EQ(c.sliding_window, f.cfg.arch == RefArch::Mistral ? f.cfg.sliding_window : 0);  // Qwen2's 4 unused
  const bool biased = f.cfg.arch == RefArch::Qwen2 || f.cfg.attention_bias;
  EXPECT_EQ(c.attn_bias, biased);
  for (const LayerWeights& w : l.model->weights().layers) {
    EXPECT_EQ(w.bq.defined(), biased);
    EXPECT_EQ(w.bo.defined(), f.cfg.attention_bias);  // Qwen2: o_proj has no bias
    EXPECT_EQ(w.q_norm.defined(), f.cfg.arch == RefArch::Qwen3);
  }
  EXPECT_EQ(c.rope_llama3_factor, f.cfg.llama3_factor);
  // Every parameter of the checkpoint counted once (tied weights once).
  int64_t n = 0;
  for (const auto& [name, t] : l.weights) n += t.numel();
  EXPECT_EQ(c.n_params(), n);
}

TEST_P(ModelFamilies, LogitsAndAttentionMatchReference) {
  const Family& f = GetParam();
  const Loaded l = load(f);
  const std::vector<int64_t> seq = random_ids(f.L, f.cfg.vocab, f.seed * 31u);
  const test::RefResult ref = test::reference_forward(f.cfg, l.weights, seq);
  c10::InferenceMode guard;
  std::vector<AttentionActivations> seen;
  CaptureHook hook;
  hook.want_probs = true;
  hook.on_layer = [&](const AttentionActivations& a) { seen.push_back(a); };
  const at::Tensor ids = at::tensor(seq).view({1, -1});
  const double d = rel_diff(to_doubles(l.model->forward(ids, &hook)[0]), ref.logits);
  std::cout << "[ " << f.name << " ] max |attnscope - reference| / max |reference| logits = " << d << "\n";
  EXPECT_LT(d, kTol);
  ASSERT_EQ(seen.size(), size_t(f.cfg.n_layer));
  for (int s = 0; s < f.cfg.n_layer; ++s) {
    const test::RefLayerCapture& r = ref.layers[size_t(s)];
    EXPECT_LT(rel_diff(to_doubles(seen[s].q_pre[0]), r.q_pre), kTol) << "layer " << s << " q before RoPE";
    EXPECT_LT(rel_diff(to_doubles(seen[s].k[0]), r.k), kTol) << "layer " << s << " k after RoPE";
    EXPECT_LT(rel_diff(to_doubles(seen[s].probs[0]), r.probs), kTol) << "layer " << s << " probs";
    EXPECT_LT(rel_diff(to_doubles(seen[s].out[0]), r.out), kTol) << "layer " << s << " head outputs";
  }
  if (f.cfg.arch == RefArch::Mistral && f.cfg.sliding_window < f.L) {
    // Exactly zero outside the window: key j is visible from query i iff 0 <= i - j < W.
    const at::Tensor p = seen[0].probs[0];  // [H, L, L]
    const int W = f.cfg.sliding_window;
    for (int i = 0; i < f.L; ++i)
      for (int j = 0; j < f.L; ++j) {
        const bool visible = j <= i && i - j < W;
        const at::Tensor col = p.select(1, i).select(1, j);
        if (!visible) {
          EXPECT_TRUE(at::equal(col, at::zeros_like(col))) << "query " << i << " key " << j;
        } else {
          EXPECT_TRUE((col > 0).all().item<bool>()) << "query " << i << " key " << j;
        }
      }
  }
}

// Greedy decoding (the softmax path runs the whole window each step, sliding window included)
// against the reference's.
TEST_P(ModelFamilies, GreedyDecodingMatchesReference) {
  const Family& f = GetParam();
  const Loaded l = load(f);
  const std::vector<int64_t> prompt = random_ids(9, f.cfg.vocab, f.seed * 17u);
  double margin = 0;
  const std::vector<int64_t> ref = test::reference_greedy(f.cfg, l.weights, prompt, 10, -1, &margin);
  if (margin < 1e-4) GTEST_SKIP() << "a near tie in the reference's argmax; float32 cannot decide it";
  EXPECT_EQ(l.model->generate_greedy(prompt, 10), ref);
}

TEST_P(ModelFamilies, WrongConventionsAreFarOutsideTolerance) {
  const Family& f = GetParam();
  const Loaded l = load(f);
  const std::vector<int64_t> seq = random_ids(f.L, f.cfg.vocab, f.seed * 31u + 1);
  const test::RefResult right = test::reference_forward(f.cfg, l.weights, seq);
  c10::InferenceMode guard;
  const std::vector<double> model = to_doubles(l.model->forward(at::tensor(seq).view({1, -1}))[0]);
  const double model_to_right = rel_diff(model, right.logits);
  for (const Wrong& w : f.wrong) {
    RefOptions o;
    w.set(o);
    const test::RefResult wrong = test::reference_forward(f.cfg, l.weights, seq, o);
    const double gap = rel_diff(wrong.logits, right.logits);
    std::cout << "[ " << f.name << " ] " << w.what << ": moves the reference logits by " << gap << "\n";
    EXPECT_GT(gap, kGap) << w.what << ": too close to the right convention for the test to tell them apart";
    EXPECT_LT(model_to_right, rel_diff(model, wrong.logits)) << "the model is nearer the WRONG convention: " << w.what;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamilies, ::testing::ValuesIn(families()),
                         [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });

// ---- bad configs and checkpoints ------------------------------------------------------------------

nlohmann::json family_config(RefArch arch) { return test::hf_config_json(base(arch)); }

TEST(ModelFamiliesErrors, UnknownArchitectureListsTheTable) {
  nlohmann::json j = family_config(RefArch::Llama);
  j["architectures"] = {"FalconForCausalLM"};
  const std::string e = error_of([&] { parse_hf_config(j, "dir/config.json"); });
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("\"FalconForCausalLM\" is not supported"), std::string::npos) << e;
  ASSERT_EQ(hf_arch_names().size(), 6u);
  for (const std::string& name : hf_arch_names()) EXPECT_NE(e.find(name), std::string::npos) << name << " in " << e;
  j.erase("architectures");
  const std::string none = error_of([&] { parse_hf_config(j, "dir/config.json"); });
  EXPECT_NE(none.find("no \"architectures\""), std::string::npos) << none;
  EXPECT_NE(none.find("Qwen3ForCausalLM"), std::string::npos) << none;
}

// Every Arch has its name, and each config.json name parses back to its Arch.
TEST(ModelFamiliesErrors, ArchTableIsComplete) {
  for (const Arch a : {Arch::GPT2, Arch::GPTNeoX, Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3, Arch::Llama2C})
    EXPECT_STRNE(arch_label(a), "?");
  EXPECT_STREQ(arch_label(Arch::Llama2C), "llama2.c");
  for (const auto& [arch, ref] : {std::pair{Arch::Llama, RefArch::Llama}, std::pair{Arch::Mistral, RefArch::Mistral},
                                  std::pair{Arch::Qwen2, RefArch::Qwen2}, std::pair{Arch::Qwen3, RefArch::Qwen3}}) {
    const ModelConfig c = parse_hf_config(family_config(ref), "config.json");
    EXPECT_EQ(c.arch, arch);
    EXPECT_EQ(c.arch_name, arch_label(arch));
    EXPECT_TRUE(is_llama_family(c.arch));
  }
}

TEST(ModelFamiliesErrors, QwenSlidingWindowIsRefused) {
  for (const RefArch a : {RefArch::Qwen2, RefArch::Qwen3}) {
    nlohmann::json j = family_config(a);
    j["use_sliding_window"] = true;
    j["sliding_window"] = 16;
    const std::string e = error_of([&] { parse_hf_config(j, "q/config.json"); });
    EXPECT_NE(e.find("q/config.json: use_sliding_window = true is not supported"), std::string::npos) << e;
  }
}

TEST(ModelFamiliesErrors, BadRopeScalingAndWindowAreNamed) {
  nlohmann::json j = family_config(RefArch::Llama);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::string e = error_of([&] { parse_hf_config(j, "c.json"); });
  EXPECT_NE(e.find("c.json: rope_scaling of type \"yarn\" is not supported"), std::string::npos) << e;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  e = error_of([&] { parse_hf_config(j, "c.json"); });
  EXPECT_NE(e.find("original_max_position_embeddings"), std::string::npos) << e;
  j["rope_scaling"] = {{"type", "default"}};
  EXPECT_EQ(parse_hf_config(j, "c.json").rope_llama3_factor, 0);
  nlohmann::json m = family_config(RefArch::Mistral);
  m["sliding_window"] = 0;
  e = error_of([&] { parse_hf_config(m, "m.json"); });
  EXPECT_NE(e.find("m.json: \"sliding_window\" = 0 must be a positive integer"), std::string::npos) << e;
  m["sliding_window"] = nullptr;
  EXPECT_EQ(parse_hf_config(m, "m.json").sliding_window, 0);
}

// config.json's head_dim must agree with the weights: the error names the file, the tensor, both
// shapes and head_dim.
TEST(ModelFamiliesErrors, HeadDimMismatchNamesFileAndTensor) {
  RefConfig c = base(RefArch::Qwen3);
  c.head_dim_override = 16;
  const std::string dir = test::temp_dir("families_bad_head_dim");
  test::write_hf_checkpoint(dir, c, test::random_weights(c, 5));
  nlohmann::json j = test::hf_config_json(c);
  j["head_dim"] = 8;
  std::ofstream(dir + "/config.json", std::ios::trunc) << j.dump(2);
  const ModelConfig mc = load_hf_config(dir + "/config.json");
  WeightStore store(dir);
  const std::string e = error_of([&] { load_hf_weights(mc, store); });
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("'model.layers.0.self_attn.q_proj.weight' has shape [64, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("head_dim 8 need [32, 32]"), std::string::npos) << e;
  // A Qwen3 checkpoint without its q/k norm weights: the missing tensor is named.
  RefConfig q = base(RefArch::Qwen3);
  const std::string dir2 = test::temp_dir("families_no_qk_norm");
  test::RefWeights w = test::random_weights(q, 6);
  w.erase("model.layers.1.self_attn.k_norm.weight");
  test::write_hf_checkpoint(dir2, q, w);
  const ModelConfig mc2 = load_hf_config(dir2 + "/config.json");
  WeightStore store2(dir2);
  const std::string e2 = error_of([&] { load_hf_weights(mc2, store2); });
  EXPECT_NE(e2.find("model.layers.1.self_attn.k_norm.weight"), std::string::npos) << e2;
}

// ---- converted models in attnscope_linear.py --------------------------------------------------------

namespace {

// `attnscope convert` of `src` with prf (16 features), then attnscope_linear.py (PyTorch alone) and
// `attnscope logits` on the same ids: max |difference| (and whether the run worked, in `output`).
// `breaker` (Python, run on the loaded runner model `m`) switches one of the runner's family
// conventions off; wrongdiff is the difference then (the comparison's power).
struct RunnerCheck {
  bool ran = false;
  double maxdiff = 0, scale = 0, wrongdiff = 0;
  std::string output;
};
RunnerCheck runner_against_attnscope(const std::string& python, const std::string& src, const std::string& ids,
                                     const std::string& breaker) {
  RunnerCheck r;
  const std::string out = src + "/../out";
  if (test::run_command(test::cli_path() + " convert --model '" + src + "' --feature-map prf --features 16 --seed 3 --out '" +
                            out + "' 2>&1", &r.output) != 0)
    return r;
  if (test::run_command(test::cli_path() + " logits --model '" + out + "' --ids " + ids + " --out '" + out +
                            "/ref.safetensors' 2>&1", &r.output) != 0)
    return r;
  std::ofstream(out + "/check.py") << "import sys, torch; sys.path.insert(0, '" + out + "'); import attnscope_linear as a\n"
      "m = a.load('" + out + "'); ref = a.read_safetensors('" + out + "/ref.safetensors')\n"
      "y = m(ref['ids'].view(1, -1))[0]\n"
      "print('maxdiff', float((y - ref['logits']).abs().max()), 'scale', float(ref['logits'].abs().max()))\n"
      "" + breaker + "\n"
      "y = m(ref['ids'].view(1, -1))[0]\n"
      "print('wrongdiff', float((y - ref['logits']).abs().max()))\n";
  if (test::run_command(python + " '" + out + "/check.py' 2>&1", &r.output) != 0) return r;
  r.ran = true;
  r.maxdiff = std::stod(r.output.substr(r.output.find("maxdiff") + 8));
  r.scale = std::stod(r.output.substr(r.output.find("scale") + 6));
  r.wrongdiff = std::stod(r.output.substr(r.output.find("wrongdiff") + 10));
  return r;
}

}  // namespace

// One converted model per family (vocabulary 4096: the bundled tokenizer's): the Python runner's
// logits equal attnscope's. Mistral's window (4, shorter than the 20 ids) does not apply to
// converted heads, in either program. With the family's convention switched off in the runner
// (biases dropped, q/k norm skipped, rope scaling ignored) the logits are far apart.
TEST(ModelFamiliesRunner, ConvertedModelsRunInPyTorch) {
  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  std::vector<Family> fams;
  for (const Family& f : families())
    if (std::string(f.name) != "mistral_long_window") fams.push_back(f);
  for (Family& f : fams) {
    f.cfg.vocab = 4096;
    if (f.cfg.arch == RefArch::Mistral) f.cfg.sliding_window = 4;
    const std::string src = test::temp_dir(std::string("families_runner_") + f.name) + "/src";
    fs::create_directories(src);
    test::write_hf_checkpoint(src, f.cfg, test::random_weights(f.cfg, f.seed));
    fs::copy_file(test::source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json", src + "/tokenizer.json");
    std::string breaker = "pass";
    if (f.cfg.arch == RefArch::Qwen3)
      breaker = "m.qk_norm = False";
    else if (f.cfg.arch == RefArch::Qwen2 || f.cfg.attention_bias)
      breaker = "for k in [k for k in m.w if k.endswith('_proj.bias')]: del m.w[k]";
    else if (f.cfg.llama3_factor > 0)
      breaker = "m.shape.rope_llama3 = None";
    const RunnerCheck r = runner_against_attnscope(python, src, "1,2,3,4,5,600,700,8,9,4000,11,12,13,14,15,16,17,18,19,20", breaker);
    ASSERT_TRUE(r.ran) << f.name << ": " << r.output;
    std::cout << "[ " << f.name << " ] max |attnscope - attnscope_linear.py| logits = " << r.maxdiff << " (max |logit| "
              << r.scale << "); with `" << breaker << "`: " << r.wrongdiff << "\n";
    EXPECT_LT(r.maxdiff, 1e-4 * std::max(1.0, r.scale)) << f.name;
    if (breaker != "pass") {
      EXPECT_GT(r.wrongdiff, 1e-2 * r.scale) << f.name << ": " << breaker;
    }
    if (f.cfg.arch == RefArch::Qwen2) {  // the runner refuses what attnscope refuses, in its words
      const std::string out = src + "/../out";
      auto cfg = nlohmann::json::parse(test::read_file(out + "/config.json"));
      cfg["use_sliding_window"] = true;
      std::ofstream(out + "/config.json", std::ios::trunc) << cfg.dump(2);
      std::string o;
      EXPECT_EQ(test::run_command(python + " '" + out + "/attnscope_linear.py' '" + out + "' --ids 1,2 --new-tokens 1 2>&1", &o), 1) << o;
      EXPECT_NE(o.find("config.json: use_sliding_window = true is not supported"), std::string::npos) << o;
    }
  }
}

}  // namespace test_model_families
