// Writing a converted model (SPEC 7). Everything goes through OutputDir: a killed convert leaves
// no directory at OUT, and an earlier OUT stays whole until the new one is complete.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/converted_model.h"
#include "attnscope/error.h"
#include "attnscope/feature_map_tensors.h"
#include "attnscope/model.h"
#include "attnscope/output_dir.h"
#include "attnscope/safetensors.h"
#include "attnscope/text_file.h"
#include "convert/converted_json.h"
#include "convert/sha256.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// Files a tokenizer may consist of in a Hugging Face directory; whichever exist are copied.
const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                 "vocab.json",       "merges.txt",            "tokenizer.model",
                                 "generation_config.json", "added_tokens.json"};

std::string readme(const nlohmann::ordered_json& a, const ModelConfig& c, bool copied) {
  const auto& fm = a["feature_map"];
  std::string s = "# Converted model: linear attention with feature map `" + fm["name"].get<std::string>() + "`\n\n";
  s += "Made by `attnscope convert` from `" + a["source"]["path"].get<std::string>() + "` (sha256 of its weights " +
       a["source"]["sha256"].get<std::string>() + ").\n";
  s += "Every attention layer (" + std::to_string(c.n_layer) + " layers x " + std::to_string(c.n_head) +
       " heads) runs causal linear attention\n\n    Ahat_ij = phi(q_i).phi(k_j) / sum_{m<=i} phi(q_i).phi(k_m)\n\n"
       "with one feature map phi per head; everything else is the original model.\n";
  s += a["loss"].is_null() ? "The feature maps are untrained (as initialized, seed " + fm["seed"].dump() + ").\n"
                           : "The feature maps were trained with loss `" + a["loss"].get<std::string>() + "` for " +
                                 a["steps"].dump() + " steps.\n";
  s += "Feature dimensions per layer: `" + a["dims"].dump() + "`.\n\n## Files\n\n";
  s += "- `config.json`: the original config plus the `attnscope` object (format_version 1)\n";
  s += copied ? "- `model.safetensors`: the original weights, unchanged\n"
              : "- weights: not copied; `attnscope.source.path` points at the original model directory\n";
  s += "- `feature_maps.safetensors`: `layers.{s}.heads.{h}.feature_map.{param}` (float32), every tensor each map "
       "needs, random draws included\n- tokenizer files, copied\n- `attnscope_linear.py`: runs this directory with "
       "PyTorch alone\n\n## Loading\n\n    attnscope generate --model THIS_DIR --prompt \"...\"\n"
       "    python3 attnscope_linear.py THIS_DIR --ids 1,2,3 --new-tokens 20\n\n"
       "    import attnscope_linear; m = attnscope_linear.load(\"THIS_DIR\"); logits = m(ids)\n";
  return s;
}

}  // namespace

void convert_model(const LoadedModel& original, const ConvertOptions& o, const std::string& out) {
  const fs::path src = fs::absolute(original.path);
  if (!fs::is_directory(src) || !fs::exists(src / "config.json"))
    fail(original.path, "convert needs a Hugging Face model directory (config.json + safetensors)");
  if (original.model->linear_attention()) fail(original.path, "is already a converted model; convert the original");
  const ModelConfig& c = original.model->config();
  if (o.python_module.empty() || !fs::is_regular_file(o.python_module))
    fail(o.python_module.empty() ? "attnscope_linear.py" : o.python_module, "the PyTorch module to ship is missing");

  std::shared_ptr<const LinearAttention> maps = o.maps;
  if (!maps) maps = std::make_shared<LinearAttention>(make_linear_attention(o.map, o.dims, c.n_layer, c.n_head, c.head_dim));
  // Check the maps fit before anything is written (a throw-away copy of the model is not needed:
  // set_linear_attention's checks are the same ones load_model will run).
  Model probe(c, original.model->weights());
  probe.set_linear_attention(maps);

  std::vector<std::vector<int64_t>> dims(c.n_layer);
  NamedTensors tensors;
  for (int s = 0; s < c.n_layer; ++s)
    for (int h = 0; h < c.n_head; ++h) {
      FeatureMap& m = *maps->maps[s][h];
      dims[s].push_back(m.feature_dim());
      for (const auto& [name, t] : feature_map_tensors(m))
        tensors.emplace_back(convert::tensor_prefix(s, h) + name, t.detach().to(at::kFloat).contiguous().clone());
    }

  const bool sharded = fs::exists(src / "model.safetensors.index.json");
  const fs::path weights_id = sharded ? src / "model.safetensors.index.json" : src / "model.safetensors";
  if (!fs::exists(weights_id)) fail(src.string(), "has no model.safetensors or model.safetensors.index.json");

  nlohmann::ordered_json cfg;
  {
    std::ifstream in(src / "config.json");
    cfg = nlohmann::ordered_json::parse(in);
  }
  nlohmann::ordered_json a;
  a["format_version"] = 1;
  a["feature_map"] = convert::feature_map_json(o.map);
  a["dims"] = convert::dims_json(dims);
  a["strategy"] = o.strategy;
  a["lambda"] = o.lambda;
  a["budget"] = o.budget;
  a["loss"] = o.loss.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(o.loss);
  a["steps"] = o.steps;
  a["source"] = {{"path", src.lexically_normal().string()}, {"sha256", convert::sha256_file(weights_id.string())}};
  a["job"] = o.job_json.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(o.job_json);
  cfg["attnscope"] = a;

  OutputDir dir(out);
  write_text_file(dir.file("config.json"), cfg.dump(2) + "\n");
  if (o.copy_weights) {
    if (sharded) fs::copy_file(weights_id, dir.file("model.safetensors.index.json"));
    for (const std::string& f : original.weight_files)
      fs::copy_file(f, dir.file(fs::path(f).filename().string()), fs::copy_options::overwrite_existing);
  }
  write_safetensors(dir.file("feature_maps.safetensors"), tensors, {{"format", "pt"}});
  for (const char* t : kTokenizerFiles)
    if (fs::exists(src / t)) fs::copy_file(src / t, dir.file(t));
  fs::copy_file(o.python_module, dir.file("attnscope_linear.py"));
  write_text_file(dir.file("README.md"), readme(a, c, o.copy_weights));
  dir.commit();
}

}  // namespace attnscope
