// Random-weight checkpoints shaped like real models (scale_bench.h), streamed to disk block by block.
#include "attnscope/bench/scale_bench.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/names.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/text_file.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "attnscope/io/safetensors_stream_writer.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

constexpr Named<ModelShape> kModelShapes[] = {
    {ModelShape::Gpt2Small, "gpt2-small"}, {ModelShape::Llama32_1B, "llama-3.2-1b"}, {ModelShape::Llama3_8B, "llama-3-8b"}};

// config.json as the Hub publishes each model (openai-community/gpt2, meta-llama/Llama-3.2-1B,
// meta-llama/Meta-Llama-3-8B), less Llama 3.2's rope_scaling.
nlohmann::json shape_config(ModelShape s) {
  switch (s) {
    case ModelShape::Gpt2Small:
      return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", 50257},
              {"n_positions", 1024}, {"n_ctx", 1024}, {"n_embd", 768}, {"n_layer", 12}, {"n_head", 12},
              {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", true},
              {"torch_dtype", "float32"}};
    case ModelShape::Llama32_1B:
      return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 2048},
              {"intermediate_size", 8192}, {"num_hidden_layers", 16}, {"num_attention_heads", 32},
              {"num_key_value_heads", 8}, {"head_dim", 64}, {"vocab_size", 128256},
              {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
              {"hidden_act", "silu"}, {"tie_word_embeddings", true}, {"torch_dtype", "bfloat16"}};
    case ModelShape::Llama3_8B:
      return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 4096},
              {"intermediate_size", 14336}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
              {"num_key_value_heads", 8}, {"vocab_size", 128256}, {"max_position_embeddings", 8192},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"hidden_act", "silu"},
              {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
  }
  fail("model shape", "unknown");
}

bool is_norm_weight(const std::string& name) {
  return name.find("norm.weight") != std::string::npos || name.find("ln_") != std::string::npos;
}

}  // namespace

ModelShape parse_model_shape(const std::string& name) { return parse_name(kModelShapes, name, "model shape"); }
const char* model_shape_name(ModelShape s) { return name_of(kModelShapes, s); }
std::vector<std::string> model_shape_names() { return names_of(kModelShapes); }
ModelConfig model_shape_config(ModelShape s) { return parse_hf_config(shape_config(s), std::string(model_shape_name(s)) + " config"); }

ShapedCheckpoint write_shaped_checkpoint(ModelShape shape, const std::string& dir, const std::string& tokenizer_json,
                                         uint64_t seed, const ProgressFn& progress) {
  if (!tokenizer_json.empty() && !fs::is_regular_file(tokenizer_json)) fail(tokenizer_json, "no such tokenizer file");
  const nlohmann::json cj = shape_config(shape);
  const ModelConfig c = model_shape_config(shape);
  const bool bf16 = c.torch_dtype == "bfloat16";
  const DType dtype = bf16 ? DType::BF16 : DType::F32;
  const auto tensors = hf_tensor_shapes(c);

  // Shards of at most ~5 GB, in the Hub's order (as save_pretrained's max_shard_size="5GB").
  constexpr int64_t kShardBytes = 5'000'000'000;
  std::vector<std::vector<TensorEntry>> shards(1);
  int64_t in_shard = 0, total = 0, params = 0;
  for (const auto& [name, sh] : tensors) {
    TensorEntry e;
    e.name = name, e.dtype = dtype, e.shape = sh;
    const int64_t bytes = e.numel() * int64_t(dtype_size(dtype));
    if (in_shard > 0 && in_shard + bytes > kShardBytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(e);
    in_shard += bytes, total += bytes, params += e.numel();
  }
  const int n = int(shards.size());
  auto shard_name = [n](int i) {
    if (n == 1) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
    return std::string(buf);
  };

  OutputDir out(dir);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  constexpr int64_t kBlock = 1 << 23;  // elements generated and written at a time
  int64_t written = 0;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (int i = 0; i < n; ++i) {
    SafetensorsStreamWriter w(out.file(shard_name(i)), shards[size_t(i)], {{"format", "pt"}});
    for (const TensorEntry& e : shards[size_t(i)]) {
      weight_map[e.name] = shard_name(i);
      const int64_t numel = e.numel();
      const bool norm = is_norm_weight(e.name), bias = e.name.size() > 5 && e.name.rfind(".bias") == e.name.size() - 5;
      for (int64_t at0 = 0; at0 < numel; at0 += kBlock) {
        const int64_t m = std::min(kBlock, numel - at0);
        at::Tensor block = norm ? at::ones({m}) : bias ? at::zeros({m}) : at::randn({m}, gen) * 0.02;
        block = block.to(bf16 ? at::kBFloat16 : at::kFloat).contiguous();
        w.write(e.name, uint64_t(at0) * dtype_size(dtype), block.data_ptr(), uint64_t(m) * dtype_size(dtype));
        written += m * int64_t(dtype_size(dtype));
        if (progress) progress(double(written) / double(total), std::to_string(written / 1000000) + " of " + std::to_string(total / 1000000) + " MB");
      }
    }
    w.finish();
  }
  if (n > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text_file(out.file("model.safetensors.index.json"), index.dump(2) + "\n");
  }
  write_text_file(out.file("config.json"), cj.dump(2) + "\n");
  if (!tokenizer_json.empty()) fs::copy_file(tokenizer_json, out.file("tokenizer.json"));
  out.commit();
  return {out.final_path(), total, params, n, dtype_name(dtype)};
}

}  // namespace attnscope
