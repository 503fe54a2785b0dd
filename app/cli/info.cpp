// `attnscope info`: what a model is, from its config, the safetensors headers of every weight file and
// the tokenizer, without reading a weight (milliseconds for a model of any size; a weight file whose
// header is broken or a shard the index lists but the folder lacks fails here).
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_model.h"
#include "attnscope/formats/dims_json.h"
#include "attnscope/base/output_dir.h"
#include "common.h"

namespace attnscope::cli {

namespace {

std::string positions(const ModelConfig& c) {
  if (c.rotary_dim == 0) return "learned";
  std::string s = c.rope_interleaved ? "RoPE (interleaved pairs)" : "RoPE (rotate-half)";
  if (c.rotary_dim < c.head_dim) s += ", partial: " + std::to_string(c.rotary_dim) + " of " + std::to_string(c.head_dim) + " dims";
  return s + ", theta " + std::to_string(static_cast<long long>(c.rope_theta));
}

}  // namespace

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Describe a model: architecture, layers, heads, sizes, tokenizer");
  auto args = std::make_shared<ModelOptions>();
  auto format = std::make_shared<FormatOptions>();
  args->model = default_model();
  add_option_table(cmd, model_source_option_table(), args);  // headers only: nothing computes, no --dtype
  add_format_options(cmd, format, {OutputFormat::Json});
  cmd->callback([args, format] {
    const bool json = format->format == OutputFormat::Json;
    const ModelInfo m = inspect_model(args->model, args->tokenizer);
    const ModelConfig& c = m.config;
    if (!m.note.empty()) std::cerr << m.note << "\n";
    nlohmann::ordered_json stored = nlohmann::ordered_json::object();
    std::string stored_text;
    int64_t stored_total = 0;
    for (const auto& [dtype, bytes] : m.stored_bytes) {
      stored[dtype] = bytes;
      stored_total += bytes;
      stored_text += (stored_text.empty() ? "" : ", ") + dtype + " " + std::to_string(bytes / 1000000) + " MB";
    }
    nlohmann::ordered_json j = {{"path", m.path}};
    j.update(model_shape_json(c));
    j.update(nlohmann::ordered_json{
        {"d_ff", c.d_ff},
        {"parameters", c.n_params()},
        {"dtype", c.torch_dtype},
        {"stored_bytes", stored},
        {"norm", c.rms_norm ? "RMSNorm" : "LayerNorm"},
        {"positions", positions(c)},
        {"parallel_residual", c.parallel_residual},
        {"tied_embeddings", c.tied_embeddings},
        {"tokenizer", {{"kind", m.tokenizer->kind()}, {"vocab_size", m.tokenizer->vocab_size()},
                       {"bos_id", m.tokenizer->bos_id()}, {"eos_id", m.tokenizer->eos_id()}}},
        {"weight_files", m.weight_files},
    });
    // A converted model (SPEC 7) runs linear attention: name the map and its feature dimensions.
    std::string attention = "softmax";
    if (const HeadFeatureMaps* lin = m.feature_maps.get()) {
      nlohmann::ordered_json dims = nlohmann::ordered_json::array();
      std::string map_name;
      for (const auto& layer : lin->maps)
        for (const auto& map : layer)
          if (map) map_name = map->name();
      const int64_t kept = softmax_head_count(head_types_of(*lin));
      attention = "linear (" + map_name + "), features per layer";
      for (const auto& layer : head_dims(*lin)) {
        dims.push_back(layer);
        attention += " " + std::to_string(*std::max_element(layer.begin(), layer.end()));
      }
      if (kept > 0) attention += "; " + std::to_string(kept) + " softmax heads kept exact";
      j["attention"] = {{"kind", "linear"}, {"feature_map", map_name}, {"features", dims}};
      if (lin->mixed()) j["attention"]["head_types"] = head_types_json(lin->types);
    } else {
      j["attention"] = {{"kind", "softmax"}};
    }
    // What killed writers left beside the model (a convert or pretrain that died mid-way).
    const std::vector<std::string> debris = killed_writer_debris(m.path);
    j["killed_writer_debris"] = debris;
    if (json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "model         " << m.path << "\n"
              << "architecture  " << c.arch_name << "\n"
              << "layers        " << c.n_layer << "\n"
              << "heads         " << c.n_head << " (kv heads " << c.n_kv_head << ")\n"
              << "head dim      " << c.head_dim << "\n"
              << "d_model       " << c.d_model << ", d_ff " << c.d_ff << "\n"
              << "vocab         " << c.vocab_size << "\n"
              << "context       " << c.n_ctx << " tokens\n"
              << "parameters    " << c.n_params() << "\n"
              << "dtype         " << c.torch_dtype << " (stored: " << stored_text << "; " << stored_total / 1000000
              << " MB in all; computed in --dtype, f32 by default)\n"
              << "norm          " << (c.rms_norm ? "RMSNorm" : "LayerNorm") << ", eps " << c.norm_eps << "\n"
              << "positions     " << positions(c) << "\n"
              << "residual      " << (c.parallel_residual ? "parallel" : "sequential") << "\n"
              << "attention     " << attention << "\n"
              << "tokenizer     " << m.tokenizer->kind() << ", " << m.tokenizer->vocab_size() << " tokens\n"
              << "weight files  " << m.weight_files.size() << " (headers checked)\n";
    for (const std::string& d : debris)
      std::cout << "note: " << d << " is what a killed writer left (swept by the next write in that folder)\n";
  });
}

}  // namespace attnscope::cli
