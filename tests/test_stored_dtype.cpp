// Weights in their stored dtype (issue 16 item 1): a BF16/F16 checkpoint is read as views of its
// memory-mapped file, each layer is converted to the compute dtype when it runs, and nothing numerically
// delicate leaves float32. Checked against an independent float64 reference, against the same values
// stored as float32, and by the tensor bytes the loader and the forward pass allocate.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attnscope/base/memory_meter.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "hf_checkpoint_writer.h"
#include "reference_transformer.h"
#include "test_support.h"

namespace attnscope::test {
namespace test_stored_dtype {

// float32 -> bfloat16 bits, round to nearest even (the inputs here are finite).
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The weights with every value rounded to bfloat16 (still float32 numbers).
RefWeights rounded_to_bf16(const RefWeights& w) {
  RefWeights out = w;
  for (auto& [name, t] : out)
    for (float& x : t.data) x = from_bf16(bf16_bits(x));
  return out;
}

// A minimal safetensors writer of 2-byte dtypes, separate from core's writer: "BF16" stores the bf16
// bits of each value; "F16" stores IEEE half bits (converted by at::Tensor). `poison`: tensor name
// -> (flat index, bits) written over one element, for NaN/Inf tests. `int64_name` is stored as I64.
void write_16bit(const std::string& path, const RefWeights& w, const std::string& dtype,
                 const std::map<std::string, std::pair<int64_t, uint16_t>>& poison = {},
                 const std::string& int64_name = "") {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const auto& [name, t] : w) {
    std::string bytes;
    if (name == int64_name) {
      for (float x : t.data) {
        const int64_t v = int64_t(x * 100);
        bytes.append(reinterpret_cast<const char*>(&v), 8);
      }
    } else {
      std::vector<uint16_t> bits(t.data.size());
      if (dtype == "BF16") {
        for (size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_bits(t.data[i]);
      } else {
        const at::Tensor h = at::tensor(t.data).to(at::kHalf).contiguous();
        std::memcpy(bits.data(), h.data_ptr(), bits.size() * 2);
      }
      if (auto p = poison.find(name); p != poison.end()) bits[size_t(p->second.first)] = p->second.second;
      bytes.assign(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
    }
    while (data.size() % 8) data.push_back('\0');
    header[name] = {{"dtype", name == int64_name ? "I64" : dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

RefConfig small(RefArch arch, int layers) {
  RefConfig c;
  c.arch = arch;
  c.n_layer = layers;
  c.d_model = 64;
  c.n_head = 4;
  c.n_kv_head = arch == RefArch::Llama ? 2 : 4;
  c.d_ff = 192;
  c.vocab = 96;
  c.n_ctx = 64;
  c.tied = arch == RefArch::Llama;
  return c;
}

void write_config(const std::string& dir, const RefConfig& c) {
  std::ofstream(dir + "/config.json") << hf_config_json(c).dump(2);
}

Model open(const std::string& dir, at::ScalarType compute) {
  const ModelConfig mc = load_hf_config(dir + "/config.json");
  ModelWeights w = load_hf_weights(mc, WeightStore(dir));
  w.compute = compute;
  return Model(mc, std::move(w));
}

std::vector<int64_t> random_ids(int L, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(size_t(L), 0);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

// max |model - reference| / max |reference| over the logits of one sequence.
double rel_error(const at::Tensor& logits, const RefResult& ref) {
  const at::Tensor got = logits.to(at::kDouble).contiguous().reshape({-1});
  const at::Tensor want = at::tensor(ref.logits, at::kDouble);
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

at::Tensor ids_of(const std::vector<int64_t>& ids) { return at::tensor(ids).view({1, -1}); }

TEST(StoredDtype, HalfWeightsStayHalfAndComputeExactlyAsTheirFloat32Values) {
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    for (const std::string dtype : {"BF16", "F16"}) {
      SCOPED_TRACE(std::string(arch == RefArch::GPT2 ? "gpt2 " : "llama ") + dtype);
      const RefConfig c = small(arch, 2);
      const RefWeights w = random_weights(c, 17);
      const std::string half = temp_dir("stored_half"), wide = temp_dir("stored_wide");
      write_config(half, c);
      write_16bit(half + "/model.safetensors", w, dtype);
      // The same values, exactly, stored as float32 by the test support's own writer.
      RefWeights exact = w;
      for (auto& [name, t] : exact) {
        const at::Tensor h = at::tensor(t.data).to(dtype == "BF16" ? at::kBFloat16 : at::kHalf).to(at::kFloat);
        t.data.assign(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
      }
      write_hf_checkpoint(wide, c, exact);

      const Model m = open(half, at::kFloat), f = open(wide, at::kFloat);
      const at::ScalarType want = dtype == "BF16" ? at::kBFloat16 : at::kHalf;
      EXPECT_EQ(m.weights().tok_emb.scalar_type(), want);
      EXPECT_EQ(m.weights().layers[1].wq.scalar_type(), want);
      EXPECT_EQ(m.weights().layers[1].w_down.scalar_type(), want);
      const at::Tensor ids = ids_of(random_ids(20, c.vocab, 5));
      const at::Tensor a = m.forward(ids), b = f.forward(ids);
      EXPECT_EQ(a.scalar_type(), at::kFloat);
      // Converting 16-bit floats to float32 is exact, so the two models compute the same numbers.
      EXPECT_TRUE(at::equal(a, b)) << (a - b).abs().max().item<double>();
    }
  }
}

TEST(StoredDtype, Bf16ComputeIsWithinBf16RoundingOfTheFloat64Reference) {
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    SCOPED_TRACE(arch == RefArch::GPT2 ? "gpt2" : "llama");
    const RefConfig c = small(arch, 2);
    const RefWeights w = rounded_to_bf16(random_weights(c, 23));
    const std::string dir = temp_dir("stored_bf16");
    write_config(dir, c);
    write_16bit(dir + "/model.safetensors", w, "BF16");
    const std::vector<int64_t> ids = random_ids(24, c.vocab, 9);
    const RefResult ref = reference_forward(c, w, ids);
    const double e32 = rel_error(open(dir, at::kFloat).forward(ids_of(ids)).squeeze(0), ref);
    const double e16 = rel_error(open(dir, at::kBFloat16).forward(ids_of(ids)).squeeze(0), ref);
    EXPECT_LT(e32, 1e-4);  // float32 compute: float32 rounding only
    // bf16 compute: 8-bit mantissas in the projections and MLP, a few percent at most over two
    // layers; and it really computes in bf16 (well above float32's rounding).
    EXPECT_LT(e16, 5e-2);
    EXPECT_GT(e16, 1e-3);
  }
}

TEST(StoredDtype, LoadingCopiesNoWeightAndAForwardHoldsOneLayerConverted) {
  const RefConfig c = small(RefArch::Llama, 8);
  const RefWeights w = random_weights(c, 31);
  const std::string dir = temp_dir("stored_memory");
  write_config(dir, c);
  write_16bit(dir + "/model.safetensors", w, "BF16");
  int64_t f32_bytes = 0, layer_f32 = 0;
  for (const auto& [name, t] : w) {
    f32_bytes += 4 * t.numel();
    if (name.rfind("model.layers.0.", 0) == 0) layer_f32 += 4 * t.numel();
  }
  std::unique_ptr<Model> m;
  {
    PeakMemoryMeter meter;
    m = std::make_unique<Model>(open(dir, at::kFloat));
    // Views of the mapping: the loader allocates no tensor memory for the weights (it used to hold
    // them all as float32, twice the file).
    EXPECT_LT(meter.peak_bytes(), f32_bytes / 50) << "of " << f32_bytes;
  }
  at::NoGradGuard no_grad;
  PeakMemoryMeter meter;
  m->forward(ids_of(random_ids(8, c.vocab, 3)));
  // The converted layer (plus the tied head and the few activations of 8 tokens), not the model.
  const int64_t head_f32 = 4 * int64_t(c.vocab) * c.d_model;
  EXPECT_LT(meter.peak_bytes(), 2 * layer_f32 + head_f32 + (1 << 16)) << "of " << f32_bytes;
  EXPECT_LT(2 * layer_f32 + head_f32 + (1 << 16), f32_bytes / 2);  // the bound has power
}

TEST(StoredDtype, NonFiniteAndIntegerWeightsAreNamedWithTheirFile) {
  const RefConfig c = small(RefArch::Llama, 2);
  const RefWeights w = random_weights(c, 41);
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  for (const auto& [dtype, bits] : std::vector<std::pair<std::string, uint16_t>>{
           {"BF16", 0x7FC0}, {"BF16", 0xFF80}, {"F16", 0x7C00}, {"F16", 0x7E00}}) {
    const std::string dir = temp_dir("stored_nan");
    write_config(dir, c);
    write_16bit(dir + "/model.safetensors", w, dtype, {{name, {123, bits}}});
    const std::string msg = error_of([&] { open(dir, at::kFloat); });
    EXPECT_NE(msg.find(dir + "/model.safetensors: tensor '" + name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 non-finite values (NaN or Inf), the first at flat index 123"), std::string::npos) << msg;
  }
  // The largest finite values of each format load.
  for (const auto& [dtype, bits] : std::vector<std::pair<std::string, uint16_t>>{{"BF16", 0x7F7F}, {"F16", 0x7BFF}}) {
    const std::string dir = temp_dir("stored_max");
    write_config(dir, c);
    write_16bit(dir + "/model.safetensors", w, dtype, {{name, {5, bits}}});
    EXPECT_EQ(error_of([&] { open(dir, at::kFloat); }), "");
  }
  const std::string dir = temp_dir("stored_int");
  write_config(dir, c);
  write_16bit(dir + "/model.safetensors", w, "BF16", {}, name);
  const std::string msg = error_of([&] { open(dir, at::kFloat); });
  EXPECT_NE(msg.find("tensor '" + name + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a weight must be F32, F16 or BF16"), std::string::npos) << msg;
}

TEST(StoredDtype, InfoReadsHeadersOnlyAndLoadingStillChecksTheData) {
  RefConfig c = small(RefArch::Llama, 2);
  c.vocab = 4096;  // covers the bundled tokenizer's vocabulary
  const RefWeights w = random_weights(c, 43);
  const std::string dir = temp_dir("stored_info");
  write_config(dir, c);
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  write_16bit(dir + "/model.safetensors", w, "BF16", {{name, {7, 0x7FC0}}});  // a NaN in the data
  std::filesystem::copy_file(source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json", dir + "/tokenizer.json");

  std::string out;
  ASSERT_EQ(run_command(cli_path() + " info --json --model " + dir + " 2>&1", &out), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  // Independently: the data buffer is the file less its 8-byte length and header.
  std::ifstream f(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  int64_t data_bytes = 0;
  for (const auto& [k, t] : w) data_bytes += 2 * t.numel();
  EXPECT_EQ(j["stored_bytes"]["BF16"].get<int64_t>(), data_bytes);
  EXPECT_GE(int64_t(std::filesystem::file_size(dir + "/model.safetensors")) - 8 - int64_t(n), data_bytes);
  // Loading reads the data and finds the NaN, naming the tensor.
  EXPECT_NE(run_command(cli_path() + " eval --model " + dir + " --text " + source_dir() +
                            "/resources/texts/brown_news_ca44.txt --seq-len 16 2>&1",
                        &out),
            0);
  EXPECT_NE(out.find("tensor '" + name + "'"), std::string::npos) << out;
  // A compute dtype the table does not have is a usage error naming --dtype.
  EXPECT_EQ(run_command(cli_path() + " eval --model " + dir + " --dtype f8 2>&1", &out), 2);
  EXPECT_NE(out.find("--dtype"), std::string::npos) << out;
}

TEST(StoredDtype, InfoNamesAShardTheIndexListsButTheFolderLacks) {
  const RefConfig c = small(RefArch::Llama, 2);
  const RefWeights w = random_weights(c, 47);
  const std::string dir = temp_dir("stored_shards");
  write_config(dir, c);
  RefWeights a, b;
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, t] : w) {
    const bool first = name.find("layers.1.") == std::string::npos;
    (first ? a : b)[name] = t;
    index["weight_map"][name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_16bit(dir + "/model-00001-of-00002.safetensors", a, "BF16");
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  std::filesystem::copy_file(source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json", dir + "/tokenizer.json");
  std::string out;
  EXPECT_NE(run_command(cli_path() + " info --model " + dir + " 2>&1", &out), 0);
  EXPECT_NE(out.find("model.safetensors.index.json"), std::string::npos) << out;
  EXPECT_NE(out.find("shard 'model-00002-of-00002.safetensors'"), std::string::npos) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}

}  // namespace test_stored_dtype
}  // namespace attnscope::test

namespace attnscope::test {
namespace test_stored_dtype {

// bench scale writes checkpoints from hf_tensor_shapes: the names and shapes must be exactly those of
// a Hugging Face checkpoint, here the test support's own writer's (written from the HF modules).
TEST(StoredDtype, TensorListOfACheckpointIsTheHubsLayout) {
  for (RefArch arch : {RefArch::GPT2, RefArch::Llama}) {
    for (bool tied : {true, false}) {
      if (arch == RefArch::GPT2 && !tied) continue;  // GPT-2 ties its head
      SCOPED_TRACE(std::string(arch == RefArch::GPT2 ? "gpt2" : "llama") + (tied ? " tied" : " untied"));
      RefConfig c = small(arch, 3);
      c.tied = tied;
      const RefWeights w = random_weights(c, 3);
      const std::string dir = temp_dir("tensor_list");
      write_config(dir, c);
      const ModelConfig mc = load_hf_config(dir + "/config.json");
      std::map<std::string, std::vector<int64_t>> listed;
      for (const auto& [name, shape] : hf_tensor_shapes(mc)) listed[name] = shape;
      std::map<std::string, std::vector<int64_t>> written;
      for (const auto& [name, t] : w) written[name.rfind("transformer.", 0) == 0 ? name.substr(12) : name] = t.shape;
      EXPECT_EQ(listed, written);
    }
  }
}

}  // namespace test_stored_dtype
}  // namespace attnscope::test
