// Converted models (SPEC 7): `convert` writes them, load_model runs them as linear attention in the
// batch and the recurrent form, and attnscope_linear.py runs them with PyTorch alone.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/convert/converted_model.h"
#include "attnscope/attention/feature_map_tensors.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "hf_checkpoint_writer.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_convert {

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string bundled() { return test::source_dir() + "/resources/models/brown-gpt2-mini"; }
std::string python_module() { return test::source_dir() + "/resources/python/attnscope_linear.py"; }

// The bundled model converted with `name` (M features where M is a choice) into a fresh directory.
std::string convert_bundled(const std::string& name, int64_t M, bool copy = true, const std::string& tag = "") {
  LoadedModel m = load_model(bundled());
  const auto& c = m.model->config();
  ConvertOptions o;
  o.map.name = name;
  o.map.seed = 7;
  o.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, M));
  o.budget = M;
  o.copy_weights = copy;
  o.python_module = python_module();
  const std::string out = test::temp_dir("convert_" + name + tag) + "/out";
  convert_model(m, o, out);
  return out;
}

at::Tensor sample_ids(int64_t L, int64_t vocab, uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(vocab, {2, L}, at::kLong);
}

// phi of one head, in float64, written from SPEC 5 directly (not through core's feature maps).
at::Tensor reference_phi(const std::string& name, const at::Tensor& x, const at::Tensor& w) {
  if (name == "elu") return 1 + at::elu(x);
  const double d = double(x.size(-1)), M = double(w.size(0));
  const at::Tensor xs = x / std::pow(d, 0.25);
  return at::exp(at::matmul(xs, w.t()) - 0.5 * (xs * xs).sum(-1, true)) / std::sqrt(M);
}

}  // namespace

TEST(Convert, WritesSpec7Directory) {
  const std::string out = convert_bundled("prf", 64);
  for (const char* f : {"config.json", "model.safetensors", "feature_maps.safetensors", "tokenizer.json",
                        "attnscope_linear.py", "README.md"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const auto cfg = nlohmann::json::parse(test::read_file(out + "/config.json"));
  const auto orig = nlohmann::json::parse(test::read_file(bundled() + "/config.json"));
  for (const auto& [k, v] : orig.items()) EXPECT_EQ(cfg.at(k), v) << k;  // the original config, unchanged
  const auto& a = cfg.at("attnscope");
  EXPECT_EQ(a.at("format_version"), 1);
  EXPECT_EQ(a.at("feature_map").at("name"), "prf");
  EXPECT_EQ(a.at("feature_map").at("seed"), 7);
  EXPECT_EQ(a.at("dims"), nlohmann::json({64, 64, 64, 64}));
  EXPECT_TRUE(a.at("loss").is_null());
  // source.sha256 is the sha256 of the original weights, as sha256sum computes it.
  std::string sum;
  ASSERT_EQ(test::run_command("sha256sum '" + bundled() + "/model.safetensors'", &sum), 0) << sum;
  EXPECT_EQ(a.at("source").at("sha256").get<std::string>(), sum.substr(0, 64));
  EXPECT_EQ(test::read_file(out + "/model.safetensors"), test::read_file(bundled() + "/model.safetensors"));

  // Every head's random draws are stored (16 heads x w [64, 32]) and they differ between heads.
  SafetensorsFile st(out + "/feature_maps.safetensors");
  EXPECT_EQ(st.entries().size(), 16u);
  const at::Tensor w00 = st.tensor("layers.0.heads.0.feature_map.w"), w31 = st.tensor("layers.3.heads.1.feature_map.w");
  EXPECT_EQ(w00.sizes(), at::IntArrayRef({64, 32}));
  EXPECT_EQ(w00.scalar_type(), at::kFloat);
  EXPECT_GT((w00 - w31).abs().max().item<double>(), 0.1);
}

TEST(Convert, ParameterFreeMapStoresNothingAndLoads) {
  const std::string out = convert_bundled("elu", 0);
  SafetensorsFile st(out + "/feature_maps.safetensors");
  EXPECT_EQ(st.entries().size(), 0u);
  LoadedModel m = load_model(out);
  ASSERT_NE(m.model->feature_maps(), nullptr);
  EXPECT_EQ(m.model->feature_maps()->maps[2][3]->name(), "elu");
  EXPECT_EQ(m.model->feature_maps()->maps[2][3]->feature_dim(), 32);
}

// The loaded model's attention layer output equals SPEC 5's Ahat @ v computed here in float64 from
// the stored tensors, and batch and recurrent logits agree.
TEST(Convert, LinearAttentionMatchesDefinitionAndRecurrentForm) {
  for (const std::string name : {"prf", "elu"}) {
    SCOPED_TRACE(name);
    const std::string out = convert_bundled(name, 64);
    LoadedModel m = load_model(out);
    ASSERT_NE(m.model->feature_maps(), nullptr);
    const auto& c = m.model->config();
    const at::Tensor ids = sample_ids(48, c.vocab_size, 3);
    at::NoGradGuard ng;

    AttentionActivations layer1;
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      if (a.layer == 1) layer1 = a;
    };
    const at::Tensor batch = m.model->forward(ids, &hook);
    ASSERT_TRUE(layer1.out.defined());
    SafetensorsFile st(out + "/feature_maps.safetensors");
    double worst = 0;
    for (int h = 0; h < c.n_head; ++h) {
      const at::Tensor w = name == "prf" ? st.tensor("layers.1.heads." + std::to_string(h) + ".feature_map.w").to(at::kDouble)
                                         : at::Tensor();
      const at::Tensor q = layer1.q.select(1, h).to(at::kDouble), k = layer1.k.select(1, h).to(at::kDouble);
      const at::Tensor v = layer1.v.select(1, h).to(at::kDouble);
      at::Tensor kern = at::matmul(reference_phi(name, q, w), reference_phi(name, k, w).transpose(-1, -2)).tril();
      const at::Tensor expected = at::matmul(kern / kern.sum(-1, true), v);
      const at::Tensor got = layer1.out.select(1, h).to(at::kDouble);
      worst = std::max(worst, ((got - expected).abs().max() / expected.abs().max()).item<double>());
    }
    EXPECT_LT(worst, 1e-4) << "relative error of layer 1's attention output against float64 SPEC 5";
    // Not softmax: the converted output differs from the original model's.
    LoadedModel orig = load_model(bundled());
    EXPECT_GT((orig.model->forward(ids) - batch).abs().max().item<double>(), 1e-2);

    const at::Tensor rec = m.model->forward_recurrent(ids);
    const double diff = (rec - batch).abs().max().item<double>();
    std::cout << "[ " << name << " ] max |batch - recurrent| logits = " << diff << "\n";
    EXPECT_LT(diff, 1e-3);
    EXPECT_GT(batch.abs().max().item<double>(), 1.0);

    // generate (recurrent) equals greedy argmax over the batch form.
    const std::vector<int64_t> prompt = {5, 17, 300, 42};
    const std::vector<int64_t> gen = m.model->generate_greedy(prompt, 12);
    ASSERT_EQ(gen.size(), 16u);
    std::vector<int64_t> seq = prompt;
    for (int i = 0; i < 12; ++i) {
      const at::Tensor l = m.model->forward(at::tensor(seq).view({1, -1}));
      seq.push_back(l.select(1, int64_t(seq.size()) - 1).argmax().item<int64_t>());
    }
    EXPECT_EQ(gen, seq);
  }
}

TEST(Convert, RecurrentNeedsLinearModel) {
  LoadedModel orig = load_model(bundled());
  EXPECT_NE(test::error_of([&] { orig.model->forward_recurrent(at::zeros({1, 3}, at::kLong)); }).find("converted"),
            std::string::npos);
}

TEST(Convert, WeightsByReferenceGiveSameLogits) {
  const std::string copied = convert_bundled("prf", 32, true, "copy");
  const std::string ref = convert_bundled("prf", 32, false, "ref");
  EXPECT_FALSE(fs::exists(ref + "/model.safetensors"));
  const at::Tensor ids = sample_ids(20, 4096, 5);
  at::NoGradGuard ng;
  const at::Tensor a = load_model(copied).model->forward(ids), b = load_model(ref).model->forward(ids);
  EXPECT_TRUE(at::equal(a, b));
}

TEST(Convert, TrainableMapsRoundTripTheirTensors) {
  // hedgehog untied: q.W, q.b, k.W, k.b, read back exactly as stored.
  FeatureMapSpec spec;
  spec.name = "hedgehog";
  spec.d = 8;
  spec.features = 12;
  spec.tied = false;
  spec.init = "random";
  spec.seed = 3;
  auto map = make_feature_map(spec);
  std::map<std::string, at::Tensor> t;
  for (auto& [n, v] : feature_map_tensors(*map)) t[n] = v.clone() + 0.25;
  EXPECT_EQ(t.size(), 4u);
  auto back = feature_map_from_tensors(spec, t, "test");
  const at::Tensor x = at::randn({5, 8}, at::kFloat);
  const at::Tensor u = at::matmul(x, t["k.W"]) + t["k.b"];
  EXPECT_TRUE(at::allclose(back->key_features(x), at::cat({at::exp(u), at::exp(-u)}, -1), 1e-5, 1e-6));
  t.erase("k.b");
  EXPECT_NE(test::error_of([&] { feature_map_from_tensors(spec, t, "F.safetensors"); }).find("missing tensor 'k.b'"),
            std::string::npos);
}

TEST(Convert, BadInputIsClearError) {
  const std::string out = convert_bundled("prf", 16);
  // A feature_maps.safetensors with a head's tensor missing names the file and the head.
  NamedTensors keep;
  {
    SafetensorsFile st(out + "/feature_maps.safetensors");
    for (const auto& e : st.entries())
      if (e.name != "layers.2.heads.1.feature_map.w") keep.emplace_back(e.name, st.tensor(e.name).clone());
  }
  write_safetensors(out + "/feature_maps.safetensors", keep);
  const std::string err = test::error_of([&] { load_model(out); });
  EXPECT_NE(err.find("feature_maps.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("layer 2 head 1"), std::string::npos) << err;

  std::string o;
  const std::string cli = test::cli_path();
  const std::string tmp = test::temp_dir("convert_cli_bad");
  // prf without a feature dimension: usage error.
  EXPECT_EQ(test::run_command(cli + " convert --feature-map prf --out " + tmp + "/a 2>&1", &o), 2) << o;
  // An allocation of the wrong layer count: exit 1, naming the file; no directory left behind.
  std::ofstream(tmp + "/alloc.json") << R"({"dims": [8, 8], "strategy": "dof"})";
  EXPECT_EQ(test::run_command(cli + " convert --feature-map prf --allocation " + tmp + "/alloc.json --out " + tmp + "/b 2>&1", &o), 1) << o;
  EXPECT_NE(o.find("alloc.json"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(tmp + "/b"));
}

// The CLI end to end, and attnscope_linear.py (PyTorch alone) against attnscope's logits.
TEST(Convert, PythonModuleMatchesAttnscope) {
  std::string o;
  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const std::string cli = test::cli_path();
  const std::string tmp = test::temp_dir("convert_py");
  std::ofstream(tmp + "/alloc.json") << R"({"dims": [16, 32, 48, 64], "strategy": "dof", "lambda": 0.01, "budget": 40})";
  const std::string ids = "5,17,300,42,7,1000,2048,3,99,12,4095,0,8,250,251,252,77,1,2,3";
  struct Case {
    std::string name, args;
  };
  for (const Case& cs : {Case{"prf", "--allocation " + tmp + "/alloc.json"}, Case{"elu", ""},
                         Case{"hedgehog", "--features 16 --untied --init random"},
                         Case{"prf-hyperbolic", "--features 32"}, Case{"taylor2", ""},
                         Case{"t2r", "--features 24"}}) {
    SCOPED_TRACE(cs.name);
    const std::string out = tmp + "/" + cs.name;
    ASSERT_EQ(test::run_command(cli + " convert --feature-map " + cs.name + " " + cs.args + " --seed 11 --out " + out + " 2>&1", &o), 0) << o;
    ASSERT_EQ(test::run_command(cli + " logits --model " + out + " --ids " + ids + " --out " + out + "/ref.safetensors 2>&1", &o), 0) << o;
    const std::string script =
        "import sys, torch; sys.path.insert(0, '" + out + "'); import attnscope_linear as a\n"
        "m = a.load('" + out + "')\n"
        "ref = a.read_safetensors('" + out + "/ref.safetensors')\n"
        "got = m(ref['ids'].view(1, -1))[0]\n"
        "print('maxdiff', float((got - ref['logits']).abs().max()), float(ref['logits'].abs().max()))\n";
    std::ofstream(tmp + "/check.py") << script;
    ASSERT_EQ(test::run_command(python + " " + tmp + "/check.py 2>&1", &o), 0) << o;
    std::istringstream in(o.substr(o.find("maxdiff")));
    std::string word;
    double diff = 1, scale = 0;
    in >> word >> diff >> scale;
    std::cout << "[ " << cs.name << " ] max |attnscope - attnscope_linear.py| logits = " << diff << " (max |logit| " << scale << ")\n";
    EXPECT_LT(diff, 1e-4);
    EXPECT_GT(scale, 1.0);

    // Greedy continuation: the script's ids equal attnscope's recurrent generation.
    ASSERT_EQ(test::run_command(python + " " + out + "/attnscope_linear.py " + out + " --ids 5,17,300 --new-tokens 8 2>&1", &o), 0) << o;
    LoadedModel m = load_model(out);
    const auto gen = m.model->generate_greedy({5, 17, 300}, 8);
    std::string expected;
    for (size_t i = 3; i < gen.size(); ++i) expected += (i > 3 ? " " : "") + std::to_string(gen[i]);
    EXPECT_EQ(o, expected + "\n");
  }
}

namespace {

// OUT's attnscope_linear.py against attnscope on the same ids: `attnscope logits` writes the
// reference, the Python runner recomputes the logits. ran is false (output says why) when either
// command fails.
struct PythonCheck {
  bool ran = false;
  bool finite = false;  // every Python logit finite
  double maxdiff = 0;   // max |Python - attnscope| logit
  std::string output;
};
PythonCheck python_against_attnscope(const std::string& python, const std::string& out, const std::string& ids) {
  PythonCheck r;
  if (test::run_command(test::cli_path() + " logits --model " + out + " --ids " + ids + " --out " + out + "/ref.safetensors 2>&1",
                        &r.output) != 0)
    return r;
  std::ofstream(out + "/check.py") << "import sys, torch; sys.path.insert(0, '" + out + "'); import attnscope_linear as a\n"
      "m = a.load('" + out + "'); ref = a.read_safetensors('" + out + "/ref.safetensors')\n"
      "y = m(ref['ids'].view(1, -1))[0]\n"
      "print('finite', bool(torch.isfinite(y).all()), 'maxdiff', float((y - ref['logits']).abs().max()))\n";
  if (test::run_command(python + " " + out + "/check.py 2>&1", &r.output) != 0) return r;
  r.ran = true;
  r.finite = r.output.find("finite True") != std::string::npos;
  r.maxdiff = std::stod(r.output.substr(r.output.find("maxdiff") + 8));
  return r;
}

// `attnscope_linear.py OUT --ids PROMPT --new-tokens n` (recurrent generation in PyTorch) against
// attnscope's generate_greedy on the same model: both outputs as space-separated new ids.
void expect_same_greedy_ids(const std::string& python, const std::string& out, const std::vector<int64_t>& prompt, int n) {
  std::string ids, o;
  for (size_t i = 0; i < prompt.size(); ++i) ids += (i ? "," : "") + std::to_string(prompt[i]);
  ASSERT_EQ(test::run_command(python + " " + out + "/attnscope_linear.py " + out + " --ids " + ids + " --new-tokens " +
                                  std::to_string(n) + " 2>&1", &o), 0) << o;
  const auto gen = load_model(out).model->generate_greedy(prompt, n);
  std::string expected;
  for (size_t i = prompt.size(); i < gen.size(); ++i) expected += (i > prompt.size() ? " " : "") + std::to_string(gen[i]);
  EXPECT_EQ(o, expected + "\n");
}
}  // namespace

// `convert --job RUN` with the trained maps of a finished distillation run (a run directory made
// here: job.json as `distill` writes it, report.json, feature_maps.safetensors of learned-prf).
TEST(Convert, FromFinishedJob) {
  const std::string run = test::temp_dir("convert_job") + "/run";
  fs::create_directories(run);
  std::ofstream(run + "/job.json") << nlohmann::json{
      {"kind", "distill"}, {"model", bundled()}, {"feature_map", {{"name", "learned-prf"}, {"init", ""}, {"tied", true}, {"activation", "exp"}, {"seed", 5}}},
      {"features", 0}, {"allocation", ""}, {"dims", {8, 16, 8, 16}}, {"loss", "kl"}, {"steps", 40}}.dump();
  NamedTensors maps;
  at::manual_seed(9);
  const int64_t dims[] = {8, 16, 8, 16};
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 4; ++h) {
      const std::string p = "layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".feature_map.";
      maps.emplace_back(p + "z", at::randn({dims[s], 32}) * 0.5);
      maps.emplace_back(p + "alpha", at::randn({dims[s]}) * 0.3);
    }
  write_safetensors(run + "/feature_maps.safetensors", maps);
  const std::string cli = test::cli_path(), out = run + "/../out";
  std::string o;
  EXPECT_EQ(test::run_command(cli + " convert --job " + run + " --out " + out + " 2>&1", &o), 1) << o;
  EXPECT_NE(o.find("has not finished"), std::string::npos) << o;
  std::ofstream(run + "/report.json") << "{}";
  EXPECT_EQ(test::run_command(cli + " convert --job " + run + " --feature-map prf --out " + out + " 2>&1", &o), 2) << o;
  ASSERT_EQ(test::run_command(cli + " convert --job " + run + " --out " + out + " 2>&1", &o), 0) << o;

  const auto a = nlohmann::json::parse(test::read_file(out + "/config.json")).at("attnscope");
  EXPECT_EQ(a.at("loss"), "kl");
  EXPECT_EQ(a.at("steps"), 40);
  EXPECT_EQ(a.at("dims"), nlohmann::json({8, 16, 8, 16}));
  EXPECT_EQ(a.at("job").at("kind"), "distill");
  LoadedModel m = load_model(out);
  auto stored = feature_map_tensors(*m.model->feature_maps()->maps[1][2]);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_TRUE(at::equal(stored[0].second, maps[2 * (4 * 1 + 2)].second));      // z of layer 1 head 2
  EXPECT_TRUE(at::equal(stored[1].second, maps[2 * (4 * 1 + 2) + 1].second));  // alpha

  at::NoGradGuard ng;
  const at::Tensor ids = sample_ids(30, 4096, 4);
  const double rec = (m.model->forward_recurrent(ids) - m.model->forward(ids)).abs().max().item<double>();
  std::cout << "[ learned-prf ] max |batch - recurrent| logits = " << rec << "\n";
  EXPECT_LT(rec, 1e-3);

  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const PythonCheck py = python_against_attnscope(python, out, "1,2,3,4,5,600,700,8,9");
  ASSERT_TRUE(py.ran) << py.output;
  const double diff = py.maxdiff;
  std::cout << "[ learned-prf ] max |attnscope - attnscope_linear.py| logits = " << diff << "\n";
  EXPECT_LT(diff, 1e-4);
}

// A Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention: 4 query heads on 2 key/value heads),
// converted: the recurrent form applies RoPE at each token's own position and agrees with the
// batch form, and attnscope_linear.py gives the same logits.
TEST(Convert, LlamaWithGroupedQueryAttention) {
  const std::string src = test::tiny_llama_dir("convert_llama", 21);
  LoadedModel orig = load_model(src);
  ConvertOptions o;
  o.map.name = "prf";
  o.map.seed = 2;
  o.dims = {{8, 8, 8, 8}, {16, 16, 24, 24}};
  o.python_module = python_module();
  const std::string out = src + "/../out";
  convert_model(orig, o, out);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(out + "/config.json")).at("attnscope").at("dims"),
            nlohmann::json({{8, 8, 8, 8}, {16, 16, 24, 24}}));
  LoadedModel m = load_model(out);
  at::NoGradGuard ng;
  const at::Tensor ids = sample_ids(40, 4096, 8);
  const at::Tensor batch = m.model->forward(ids);
  const double rec = (m.model->forward_recurrent(ids) - batch).abs().max().item<double>();
  std::cout << "[ llama prf ] max |batch - recurrent| logits = " << rec << " (max |logit| "
            << batch.abs().max().item<double>() << ")\n";
  EXPECT_LT(rec, 1e-4);

  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const PythonCheck py = python_against_attnscope(python, out, "1,2,3,4,5,600,700,8,9,4000");
  ASSERT_TRUE(py.ran) << py.output;
  const double diff = py.maxdiff;
  std::cout << "[ llama prf ] max |attnscope - attnscope_linear.py| logits = " << diff << "\n";
  EXPECT_LT(diff, 1e-4);
  // Generation past the 64-token context: the recurrent state restarts over the last 64 tokens.
  std::vector<int64_t> prompt;
  for (int i = 0; i < 60; ++i) prompt.push_back(int64_t(i * 37 % 4096));
  expect_same_greedy_ids(python, out, prompt, 8);
}

// GPT-NeoX (Pythia layout: fused per-head qkv, RoPE on a quarter of each head, parallel or
// sequential residual), converted: batch = recurrent, and attnscope_linear.py gives the same logits
// and, generating in its recurrent form past the 24-token context, the same greedy ids.
TEST(Convert, GptNeoXRunsInPyTorch) {
  for (const bool parallel : {true, false}) {
    test::RefConfig rc;
    rc.arch = test::RefArch::GPTNeoX;
    rc.n_layer = 2;
    rc.n_head = 4;
    rc.d_model = 64;
    rc.d_ff = 96;
    rc.vocab = 4096;  // the bundled tokenizer's
    rc.n_ctx = 24;
    rc.rotary_pct = 0.25;
    rc.parallel_residual = parallel;
    const std::string src = test::temp_dir(parallel ? "convert_neox_par" : "convert_neox_seq") + "/src";
    fs::create_directories(src);
    test::write_hf_checkpoint(src, rc, test::random_weights(rc, parallel ? 31 : 32));
    fs::copy_file(bundled() + "/tokenizer.json", src + "/tokenizer.json");
    ConvertOptions o;
    o.map.name = "prf";
    o.map.seed = 3;
    o.dims = {{8, 16, 8, 16}, {16, 16, 16, 16}};
    o.python_module = python_module();
    const std::string out = src + "/../out";
    convert_model(load_model(src), o, out);
    LoadedModel m = load_model(out);
    ASSERT_EQ(m.model->config().arch, Arch::GPTNeoX);
    ASSERT_EQ(m.model->config().rotary_dim, 4);
    at::NoGradGuard ng;
    const at::Tensor ids = sample_ids(20, 4096, 5);
    const at::Tensor batch = m.model->forward(ids);
    EXPECT_LT((m.model->forward_recurrent(ids) - batch).abs().max().item<double>(), 1e-4);

    const std::string python = test::python_with_torch();
    if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
    const PythonCheck py = python_against_attnscope(python, out, "1,2,3,4,5,600,700,8,9,4000,11,12");
    ASSERT_TRUE(py.ran) << py.output;
    std::cout << "[ neox " << (parallel ? "parallel" : "sequential") << " ] max |attnscope - attnscope_linear.py| logits = "
              << py.maxdiff << "\n";
    EXPECT_TRUE(py.finite);
    EXPECT_LT(py.maxdiff, 1e-4);
    expect_same_greedy_ids(python, out, {7, 300, 12, 4000, 5, 9, 18, 22, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 10);
  }
}

// stories260K (a llama2.c .bin) converts to Hugging Face Llama layout: with the maps switched off the
// converted directory is the original model (query/key rows reordered for rotate-half RoPE), and
// with them on it equals the original model running the same maps in its own coordinates.
TEST(Convert, Llama2cCheckpointToHfLayout) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "stories260K is not in ../shared/models";
  LoadedModel orig = load_model(bin);
  const auto& c = orig.model->config();
  ConvertOptions o;
  o.map.name = "prf";
  o.map.seed = 4;
  o.dims.assign(c.n_layer, std::vector<int64_t>(c.n_head, 32));
  o.python_module = python_module();
  const std::string out = test::temp_dir("convert_stories") + "/out";
  convert_model(orig, o, out);
  EXPECT_TRUE(fs::exists(out + "/tokenizer.bin"));
  LoadedModel m = load_model(out);
  EXPECT_EQ(m.model->config().arch, Arch::Llama);
  EXPECT_EQ(m.tokenizer->vocab_size(), orig.tokenizer->vocab_size());
  at::NoGradGuard ng;
  const at::Tensor ids = sample_ids(48, c.vocab_size, 6);
  const at::Tensor lin = m.model->forward(ids);
  auto maps = m.model->feature_maps();
  ASSERT_NE(maps, nullptr);
  auto keep = std::make_shared<HeadFeatureMaps>(*maps);
  m.model->set_feature_maps(nullptr);
  const double softmax_diff = (m.model->forward(ids) - orig.model->forward(ids)).abs().max().item<double>();
  orig.model->set_feature_maps(std::make_shared<HeadFeatureMaps>(make_head_feature_maps(o.map, o.dims, c.n_layer, c.n_head, c.head_dim)));
  const double linear_diff = (lin - orig.model->forward(ids)).abs().max().item<double>();
  std::cout << "[ stories260K ] max |converted - original| logits: softmax " << softmax_diff << ", prf linear " << linear_diff << "\n";
  // llama2.c computes RoPE angles in float32, the HF layout in float64: a few 1e-5 at most.
  EXPECT_LT(softmax_diff, 1e-3);
  EXPECT_LT(linear_diff, 1e-3);
  m.model->set_feature_maps(keep);
  EXPECT_LT((m.model->forward_recurrent(ids) - lin).abs().max().item<double>(), 1e-3);
}

// The whole path a researcher takes, through the CLI: capture the bundled model, distill
// learned-prf maps layerwise, convert the finished job, and run the converted model both in
// attnscope and in plain PyTorch. The converted model carries exactly the trained tensors, and the
// trained maps imitate softmax better than the same maps at initialization (held-out KL from
// report.json, which the job measures on windows it never trained on).
TEST(Convert, DistilledJobConvertsAndRunsInPyTorch) {
  const std::string dir = test::temp_dir("distill_convert"), cli = test::cli_path();
  const std::string texts = test::source_dir() + "/resources/texts/*.txt";
  std::string o;
  ASSERT_EQ(test::run_command(cli + " capture --text " + texts + " -L 64 -T 8 --seed 3 --out " + dir + "/cap 2>&1", &o), 0) << o;
  ASSERT_EQ(test::run_command(cli + " distill --capture " + dir + "/cap --feature-map learned-prf --features 16 --loss kl --steps 40 --seed 2 --out " +
                                  dir + "/run 2>&1", &o), 0) << o;
  const auto report = nlohmann::json::parse(test::read_file(dir + "/run/report.json"));
  ASSERT_EQ(report.at("layers").size(), 4u);
  for (const auto& l : report.at("layers")) EXPECT_LT(l.at("val_kl").get<double>(), l.at("initial_val_kl").get<double>()) << l.dump();

  ASSERT_EQ(test::run_command(cli + " convert --job " + dir + "/run --out " + dir + "/out 2>&1", &o), 0) << o;
  const auto a = nlohmann::json::parse(test::read_file(dir + "/out/config.json")).at("attnscope");
  EXPECT_EQ(a.at("feature_map").at("name"), "learned-prf");
  EXPECT_EQ(a.at("dims"), nlohmann::json({16, 16, 16, 16}));
  EXPECT_EQ(a.at("steps"), 40);
  const SafetensorsFile trained(dir + "/run/feature_maps.safetensors"), converted(dir + "/out/feature_maps.safetensors");
  ASSERT_EQ(trained.entries().size(), 32u);  // z and alpha of 16 heads
  for (const auto& e : trained.entries()) EXPECT_TRUE(at::equal(trained.tensor(e.name), converted.tensor(e.name))) << e.name;

  LoadedModel m = load_model(dir + "/out");
  at::NoGradGuard ng;
  const at::Tensor ids = sample_ids(40, 4096, 6);
  EXPECT_LT((m.model->forward_recurrent(ids) - m.model->forward(ids)).abs().max().item<double>(), 1e-3);

  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  const std::string out = dir + "/out";
  const PythonCheck py = python_against_attnscope(python, out, "11,22,33,44,55,600,700,8,9,1000");
  ASSERT_TRUE(py.ran) << py.output;
  EXPECT_LT(py.maxdiff, 1e-4) << py.output;
}

// ReLU-type maps (t2r at initialization) leave some queries with no positive weight on real text:
// 0/0 in SPEC 5's formula. The converted model reads 0 from that head for that token, in the batch
// and the recurrent form and in attnscope_linear.py alike, instead of NaN that would poison every
// later layer (eval used to fail with "phi_q has non-finite entries" in the next layer).
TEST(Convert, QueriesWithoutPositiveWeightReadNothing) {
  const std::string dir = test::temp_dir("convert_t2r"), cli = test::cli_path(), out = dir + "/out";
  std::string o;
  ASSERT_EQ(test::run_command(cli + " convert --feature-map t2r --features 16 --seed 0 --out " + out + " 2>&1", &o), 0) << o;
  const std::string text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  ASSERT_EQ(test::run_command(cli + " eval --model " + out + " --text " + text + " --seq-len 128 --speed-lengths 32 --json 2>&1", &o), 0) << o;
  const auto ev = nlohmann::json::parse(o.substr(o.find('{')));
  EXPECT_TRUE(std::isfinite(ev.at("converted").at("loss").get<double>())) << o;
  EXPECT_LT(ev.at("converted").at("loss").get<double>(), 3 * ev.at("original").at("loss").get<double>()) << o;

  // The same text's tokens through both forms: finite and equal.
  LoadedModel m = load_model(out);
  const std::vector<int64_t> tok = m.tokenizer->encode(test::read_file(text).substr(0, 600));
  const at::Tensor ids = at::tensor(std::vector<int64_t>(tok.begin(), tok.begin() + std::min<size_t>(tok.size(), 100))).view({1, -1});
  at::NoGradGuard ng;
  const at::Tensor batch = m.model->forward(ids), rec = m.model->forward_recurrent(ids);
  ASSERT_TRUE(at::isfinite(batch).all().item<bool>());
  EXPECT_LT((batch - rec).abs().max().item<double>(), 1e-3);

  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)";
  std::string id_list;
  for (int64_t i = 0; i < ids.size(1); ++i) id_list += (i ? "," : "") + std::to_string(ids[0][i].item<int64_t>());
  const PythonCheck py = python_against_attnscope(python, out, id_list);
  ASSERT_TRUE(py.ran) << py.output;
  EXPECT_TRUE(py.finite) << py.output;
  EXPECT_LT(py.maxdiff, 1e-4) << py.output;
}

// `convert` killed with SIGKILL while it writes (as soon as the weights are in its partial directory)
// leaves no OUT; the next convert to OUT writes a complete model and removes the killed one's debris.
TEST(Convert, KilledConvertLeavesNoDirectory) {
  const std::string root = test::temp_dir("convert_kill9"), out = root + "/out", cli = test::cli_path();
  const std::string cmd = cli + " convert --model " + bundled() + " --feature-map prf --features 64 --out " + out;
  // bash builtins only in the wait loop (compgen, kill -0): no process start between checks.
  std::ofstream(root + "/kill.sh") << "out=$1; shift; \"$@\" >/dev/null 2>&1 & pid=$!\n"
                                      "until compgen -G \"$out.partial-*/model.safetensors\" >/dev/null || ! kill -0 $pid 2>/dev/null; do :; done\n"
                                      "kill -9 $pid; wait $pid\n";
  std::string o;
  const int rc = test::run_command("bash " + root + "/kill.sh " + out + " " + cmd, &o);
  if (fs::exists(out + "/config.json")) GTEST_SKIP() << "convert finished before the kill";
  EXPECT_EQ(rc, 137) << o;
  EXPECT_FALSE(fs::exists(out)) << "a killed convert must leave no OUT";
  ASSERT_EQ(test::run_command(cmd + " 2>&1", &o), 0) << o;
  EXPECT_TRUE(is_converted_model(out));
  EXPECT_NO_THROW(load_model(out));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"kill.sh", "out"})) << "debris of the killed convert is left";
}

}  // namespace test_convert
