#include "tiny_models.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/model/model.h"
#include "attnscope/tokenize/tokenizer.h"
#include "hf_checkpoint_writer.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace attnscope::test {

std::string tiny_llama_dir(const std::string& tag, uint32_t seed) {
  RefConfig rc;
  rc.arch = RefArch::Llama;
  rc.n_layer = 2;
  rc.n_head = 4;
  rc.n_kv_head = 2;
  rc.d_model = 32;
  rc.d_ff = 64;
  rc.vocab = 4096;  // the bundled tokenizer's
  rc.n_ctx = 64;
  const std::string dir = temp_dir(tag) + "/src";
  fs::create_directories(dir);
  write_hf_checkpoint(dir, rc, random_weights(rc, seed));
  fs::copy_file(source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json", dir + "/tokenizer.json");
  return dir;
}

std::string tiny_gpt2_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  dir = temp_dir("tiny_gpt2");
  std::string text;
  for (const auto& e : fs::directory_iterator(source_dir() + "/resources/texts")) {
    std::ifstream in(e.path());
    text += std::string(std::istreambuf_iterator<char>(in), {});
  }
  train_bytelevel_bpe(text, 320, dir + "/tokenizer.json");
  ModelConfig c;
  c.arch = Arch::GPT2, c.arch_name = "GPT2LMHeadModel";
  c.n_layer = 2, c.n_head = 2, c.n_kv_head = 2, c.d_model = 16, c.head_dim = 8, c.d_ff = 64;
  c.vocab_size = 320, c.n_ctx = 64, c.tied_embeddings = true, c.attn_bias = c.mlp_bias = true;
  at::Generator gen = at::detail::createCPUGenerator(1234);
  auto r = [&](std::vector<int64_t> s) { return at::normal(0.0, 0.3, s, gen); };
  ModelWeights w;
  w.tok_emb = r({320, 16}), w.pos_emb = r({64, 16});
  for (int s = 0; s < 2; ++s) {
    LayerWeights l;
    l.ln1_w = 1 + r({16}), l.ln1_b = r({16}), l.ln2_w = 1 + r({16}), l.ln2_b = r({16});
    l.wq = r({16, 16}), l.wk = r({16, 16}), l.wv = r({16, 16}), l.wo = r({16, 16});
    l.bq = r({16}), l.bk = r({16}), l.bv = r({16}), l.bo = r({16});
    l.w_up = r({64, 16}), l.b_up = r({64}), l.w_down = r({16, 64}), l.b_down = r({16});
    w.layers.push_back(l);
  }
  w.lnf_w = 1 + r({16}), w.lnf_b = r({16}), w.lm_head = w.tok_emb;
  save_gpt2_model(Model(c, w), dir);
  return dir;
}

std::string bundled_capture() {
  static const std::string dir = [] {
    LoadedModel m = load_model(source_dir() + "/resources/models/brown-gpt2-mini");
    CaptureOptions o;
    o.seq_len = 64;
    o.num_seqs = 6;
    o.seed = 3;
    const std::string d = temp_dir("bundled_cap") + "/cap";
    capture_to_dir(m, sample_documents(), o, d);
    return d;
  }();
  return dir;
}

std::string tiny_gpt2_capture(const std::string& tag, int seq_len, int num_seqs, uint64_t seed) {
  LoadedModel m = load_model(tiny_gpt2_dir());
  const std::string d = temp_dir(tag) + "/store";
  CaptureOptions o;
  o.seq_len = seq_len, o.num_seqs = num_seqs, o.seed = seed, o.batch = num_seqs;
  capture_to_dir(m, sample_documents(), o, d);
  return d;
}

std::string hedgehog_conversion(const std::string& model, const std::string& tag) {
  const std::string out = temp_dir(tag) + "/conv";
  LoadedModel m = load_model(model);
  const ModelConfig& c = m.model->config();
  ConvertOptions o;
  o.map.name = "hedgehog";
  o.map.seed = 3;
  o.dims.assign(size_t(c.n_layer), std::vector<int64_t>(size_t(c.n_head), 8));
  o.budget = 8;
  o.python_module = source_dir() + "/resources/python/attnscope_linear.py";
  convert_model(m, o, out);
  return out;
}

std::string bundled_hedgehog16(const std::string& dir, int64_t window) {
  std::string out;
  const std::string cmd = cli_path() + " convert --model " + source_dir() + "/resources/models/brown-gpt2-mini" +
                          " --feature-map hedgehog --features 16 --seed 11" +
                          (window > 0 ? " --window " + std::to_string(window) : std::string()) + " --out " + dir + " 2>&1";
  if (run_command(cmd, &out) != 0) throw Error(cmd + " failed: " + out);
  return dir;
}

ConvertOptions hedgehog16_convert_options(std::shared_ptr<const HeadFeatureMaps> maps, const std::string& plain, int S, int H,
                                          int64_t window) {
  ConvertOptions co;
  co.maps = std::move(maps);
  co.map = convert::parse_header(convert::read_config(plain), plain, S, H).map;
  co.dims = std::vector<std::vector<int64_t>>(size_t(S), std::vector<int64_t>(size_t(H), 16));
  co.window = window;
  co.python_module = source_dir() + "/resources/python/attnscope_linear.py";
  return co;
}

std::vector<int64_t> greedy_by_forward(const Model& m, std::vector<int64_t> seq, int n) {
  for (int t = 0; t < n; ++t) {
    const at::Tensor lg = m.forward(at::tensor(seq, at::kLong).view({1, -1}));
    seq.push_back(lg[0][-1].argmax().item<int64_t>());
  }
  return seq;
}

void expect_distill_resumes_exactly(DistillOptions o, const std::string& root) {
  o.checkpoint_every = 5;
  distill(o, root + "/whole5");
  const ProgressFn kill_at_7 = [](double, const std::string& what) {
    if (what.rfind("step 7/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(distill(o, root + "/killed", kill_at_7), Cancelled);
  resume_distill(root + "/killed");
  const auto a = read_tensors(root + "/whole5/feature_maps.safetensors"), b = read_tensors(root + "/killed/feature_maps.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_LE((t - b.at(name)).abs().max().item<double>(), 1e-6) << name;
}

}  // namespace attnscope::test
