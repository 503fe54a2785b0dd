// Writing a converted model (SPEC 7). Everything goes through OutputDir: a killed convert leaves
// no directory at OUT, and an earlier OUT stays whole until the new one is complete.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_model.h"
#include "attnscope/allocation/allocation_file.h"
#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"
#include "attnscope/attention/feature_map_tensors.h"
#include "attnscope/model/model.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/text_file.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/formats/dims_json.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/formats/source_weights.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// Files a tokenizer may consist of in a Hugging Face directory; whichever exist are copied.
const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                 "vocab.json",       "merges.txt",            "tokenizer.model",
                                 "generation_config.json", "added_tokens.json", "tokenizer.bin"};

std::string readme(const nlohmann::ordered_json& a, const ModelConfig& c, bool copied) {
  const auto& fm = a["feature_map"];
  std::string s = "# Converted model: linear attention with feature map `" + fm["name"].get<std::string>() + "`\n\n";
  s += "Made by `attnscope convert` from `" + a["source"]["path"].get<std::string>() + "` (sha256 of its weights " +
       a["source"]["sha256"].get<std::string>() + ").\n";
  s += "Every attention layer (" + std::to_string(c.n_layer) + " layers x " + std::to_string(c.n_head) +
       " heads) runs causal linear attention\n\n    Ahat_ij = phi(q_i).phi(k_j) / sum_{m<=i} phi(q_i).phi(k_m)\n\n"
       "with one feature map phi per head; everything else is the original model.\n";
  if (a.contains("head_types")) {
    int64_t kept = 0, hybrid = 0, linear = 0;
    for (const auto& layer : a["head_types"])
      for (const auto& t : layer) (t == "softmax" ? kept : t == "hybrid" ? hybrid : linear) += 1;
    s += "Mixed head types (`head_types`, per layer): " + std::to_string(kept) + " softmax heads kept exact (their "
         "key-value cache over the whole context, no map), " + std::to_string(hybrid) + " hybrid and " +
         std::to_string(linear) + " linear heads.\n";
  }
  s += a["loss"].is_null() ? "The feature maps are untrained (as initialized, seed " + fm["seed"].dump() + ").\n"
                           : "The feature maps were trained with loss `" + a["loss"].get<std::string>() + "` for " +
                                 a["steps"].dump() + " steps.\n";
  s += "Feature dimensions per layer: `" + a["dims"].dump() + "`.\n\n## Files\n\n";
  s += "- `config.json`: the original config plus the `attnscope` object (format_version 1)\n";
  if (a.contains("finetune"))
    s += "- `model.safetensors`: the original weights, with the attention projections (q, k, v, o) finetuned: low-rank "
         "adapters of rank " + a["finetune"]["rank"].dump() + " trained " + a["finetune"]["steps"].dump() +
         " steps (stage 2), merged\n";
  else
    s += copied ? "- `model.safetensors`: the original weights, unchanged\n"
                : "- weights: not copied; `attnscope.source.path` points at the original model directory\n";
  s += "- `feature_maps.safetensors`: `layers.{s}.heads.{h}.feature_map.{param}` (float32), every tensor each map "
       "needs, random draws included" + std::string(a.contains("window") ? "; hybrid heads (window " + a["window"].dump() +
       " tokens of softmax attention beside the map): `layers.{s}.heads.{h}.gamma`, the balance" : "") + "\n- tokenizer files, copied\n- `attnscope_linear.py`: runs this directory with "
       "PyTorch alone\n\n## Loading\n\n    attnscope generate --model THIS_DIR --prompt \"...\"\n"
       "    python3 attnscope_linear.py THIS_DIR --ids 1,2,3 --new-tokens 20\n\n"
       "    import attnscope_linear; m = attnscope_linear.load(\"THIS_DIR\"); logits = m(ids)\n";
  return s;
}

// llama2.c checkpoints (a .bin, no config.json) are exported in Hugging Face Llama layout, so that
// OUT is an ordinary model directory. llama2.c rotates pairs (2i, 2i+1), HF Llama rotate-half pairs
// (i, i + d/2): every head's query and key rows are reordered to [0, 2, 4, ..., 1, 3, 5, ...] (as
// Hugging Face's own llama conversion does), which turns one rotation into the other. Attention
// scores do not change; feature maps see the reordered coordinates, so their input axis is
// reordered the same way.
struct HfExport {
  nlohmann::ordered_json config;
  NamedTensors weights;
  at::Tensor perm;  // [d] int64: new coordinate i is old coordinate perm[i]
};

HfExport export_llama2c(const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  HfExport e;
  const int64_t d = c.head_dim, half = d / 2;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < half; ++i) perm.push_back(2 * i);
  for (int64_t i = 0; i < half; ++i) perm.push_back(2 * i + 1);
  e.perm = at::tensor(perm);
  auto reorder_rows = [&](const at::Tensor& m, int64_t heads) {  // [heads*d, D]
    return m.view({heads, d, -1}).index_select(1, e.perm).reshape({heads * d, -1}).contiguous();
  };
  e.config = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", c.d_model},
              {"intermediate_size", c.d_ff},
              {"num_hidden_layers", c.n_layer},
              {"num_attention_heads", c.n_head},
              {"num_key_value_heads", c.n_kv_head},
              {"vocab_size", c.vocab_size},
              {"max_position_embeddings", c.n_ctx},
              {"rms_norm_eps", c.norm_eps},
              {"rope_theta", c.rope_theta},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", c.tied_embeddings},
              {"torch_dtype", "float32"}};
  auto add = [&](const std::string& name, const at::Tensor& t) { e.weights.emplace_back(name, t.contiguous()); };
  add("model.embed_tokens.weight", w.tok_emb);
  for (int s = 0; s < c.n_layer; ++s) {
    const LayerWeights& l = w.layers[s];
    const std::string p = "model.layers." + std::to_string(s) + ".";
    add(p + "input_layernorm.weight", l.ln1_w);
    add(p + "self_attn.q_proj.weight", reorder_rows(l.wq, c.n_head));
    add(p + "self_attn.k_proj.weight", reorder_rows(l.wk, c.n_kv_head));
    add(p + "self_attn.v_proj.weight", l.wv);
    add(p + "self_attn.o_proj.weight", l.wo);
    add(p + "post_attention_layernorm.weight", l.ln2_w);
    add(p + "mlp.gate_proj.weight", l.w_gate);
    add(p + "mlp.up_proj.weight", l.w_up);
    add(p + "mlp.down_proj.weight", l.w_down);
  }
  add("model.norm.weight", w.lnf_w);
  if (!c.tied_embeddings) add("lm_head.weight", w.lm_head);
  return e;
}

// The axis of a map tensor that runs over the head's coordinates (see feature_map_tensors.h).
int64_t input_axis(const std::string& name) {
  if (name == "w" || name == "z" || name == "omega" || name == "omega1" || name == "omega2") return 1;
  if (name == "W" || name == "q.W" || name == "k.W") return 0;
  return -1;  // alpha, b, tau: per feature
}

}  // namespace

void convert_model(const LoadedModel& original, const ConvertOptions& o, const std::string& out) {
  const bool finetuned = o.weights != nullptr;
  // A finetuned converted model's checkpoint is the one it was finetuned from (its weights: in it,
  // or where it references).
  const fs::path src = fs::absolute(finetuned ? converted_weights_dir(original.path) : original.path);
  const bool llama2c = original.model->config().arch == Arch::Llama2C;
  if (!llama2c && (!fs::is_directory(src) || !fs::exists(src / "config.json")))
    fail(original.path, "convert needs a Hugging Face model directory (config.json + safetensors) or a llama2.c .bin");
  if (llama2c && !o.copy_weights)
    throw Error(original.path + ": a llama2.c checkpoint is converted to Hugging Face layout, so its weights cannot be referenced: copy them", "weights");
  HfExport hf;
  if (llama2c) hf = export_llama2c(*original.model);
  if (original.model->feature_maps() && !finetuned) fail(original.path, "is already a converted model; convert the original");
  if (finetuned && !original.model->feature_maps()) fail(original.path, "is not a converted model: finetune converts first");
  if (finetuned && !o.copy_weights) throw Error(original.path + ": finetuned weights are written, not referenced", "weights");
  const ModelConfig& c = original.model->config();
  if (o.python_module.empty() || !fs::is_regular_file(o.python_module))
    fail(o.python_module.empty() ? "attnscope_linear.py" : o.python_module, "the PyTorch module to ship is missing");

  std::shared_ptr<const HeadFeatureMaps> maps = o.maps;
  if (!maps) {
    maps = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(o.map, o.dims, c.n_layer, c.n_head, c.head_dim, o.window, o.types));
  }
  // Check the maps fit before anything is written (a throw-away copy of the model is not needed:
  // set_feature_maps's checks are the same ones load_model will run).
  Model probe(c, original.model->weights());
  probe.set_feature_maps(maps);

  std::vector<std::vector<int64_t>> dims(c.n_layer);
  NamedTensors tensors;
  for (int s = 0; s < c.n_layer; ++s)
    for (int h = 0; h < c.n_head; ++h) {
      const HeadType type = maps->type(s, h);
      if (type == HeadType::Softmax) {  // no map, no balance, no decay: dims 0 (SPEC 7)
        dims[s].push_back(0);
        continue;
      }
      FeatureMap& m = *maps->maps[s][h];
      dims[s].push_back(m.feature_dim());
      for (const auto& [name, t] : feature_map_tensors(m)) {
        at::Tensor v = t.detach().to(at::kFloat);
        if (llama2c && input_axis(name) >= 0) v = v.index_select(input_axis(name), hf.perm);
        tensors.emplace_back(convert::tensor_prefix(s, h) + name, v.contiguous().clone());
      }
      if (type == HeadType::Hybrid)
        tensors.emplace_back(convert::gamma_name(s, h), maps->gamma[s][h].detach().to(at::kCPU, at::kFloat).clone());
      const Decay decay = maps->decay(s, h);
      if (decay == Decay::Fixed)
        tensors.emplace_back(convert::decay_delta_name(s, h), maps->decay_delta[s][h].detach().to(at::kCPU, at::kFloat).clone());
      if (decay == Decay::Gated) {
        tensors.emplace_back(convert::decay_w_name(s, h), maps->decay_w[s][h].detach().to(at::kCPU, at::kFloat).contiguous().clone());
        tensors.emplace_back(convert::decay_b_name(s, h), maps->decay_b[s][h].detach().to(at::kCPU, at::kFloat).clone());
      }
    }

  const bool sharded = !llama2c && !fs::exists(src / "model.safetensors") && fs::exists(src / "model.safetensors.index.json");
  if (!llama2c && !sharded && !fs::exists(src / "model.safetensors"))
    fail(src.string(), "has no model.safetensors or model.safetensors.index.json");

  nlohmann::ordered_json cfg = hf.config;
  if (!llama2c) {
    std::ifstream in(fs::path(original.path) / "config.json");
    cfg = nlohmann::ordered_json::parse(in);
    cfg.erase("attnscope");  // a finetuned model's earlier conversion: replaced below
  }
  nlohmann::ordered_json a;
  a["format_version"] = 1;
  a["feature_map"] = convert::feature_map_json(o.map);
  a["dims"] = dims_json(dims);
  a["strategy"] = o.strategy;
  a["lambda"] = o.lambda;
  a["budget"] = o.budget;
  a["loss"] = o.loss.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(o.loss);
  a["steps"] = o.steps;
  if (maps->window > 0) a["window"] = maps->window;
  if (maps->mixed()) a["head_types"] = head_types_json(maps->types);
  const Decay decay = uniform_decay(*maps);  // one for every head, or each head's
  if (decay == Decay::Mixer) a["head_decays"] = head_decays_json(maps->decays);
  else if (decay != Decay::None) a["decay"] = decay_name(decay);
  if (o.trained_length > 0) a["trained_length"] = o.trained_length;
  if (o.finetune_rank > 0) a["finetune"] = {{"rank", o.finetune_rank}, {"steps", o.finetune_steps}};
  a["source"] = convert::source_record(src.lexically_normal().string());
  a["job"] = o.job_json.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(o.job_json);
  cfg["attnscope"] = a;

  OutputDir dir(out);
  write_text_file(dir.file("config.json"), cfg.dump(2) + "\n");
  if (llama2c) {
    write_safetensors(dir.file("model.safetensors"), hf.weights, {{"format", "pt"}});
    fs::copy_file(original.tokenizer_path, dir.file("tokenizer.bin"));
  } else if (finetuned) {
    write_safetensors(dir.file("model.safetensors"), hf_weights_with_attention(c, WeightStore(src.string()), *o.weights),
                      {{"format", "pt"}});
  } else if (o.copy_weights) {
    if (sharded) fs::copy_file(src / "model.safetensors.index.json", dir.file("model.safetensors.index.json"));
    for (const std::string& f : original.weight_files)
      fs::copy_file(f, dir.file(fs::path(f).filename().string()), fs::copy_options::overwrite_existing);
  }
  write_safetensors(dir.file("feature_maps.safetensors"), tensors, {{"format", "pt"}});
  for (const char* t : kTokenizerFiles)
    if (!llama2c && fs::exists(fs::path(original.path) / t)) fs::copy_file(fs::path(original.path) / t, dir.file(t));
  fs::copy_file(o.python_module, dir.file("attnscope_linear.py"));
  write_text_file(dir.file("README.md"), readme(a, c, o.copy_weights));
  dir.commit();
}

void save_model_copy(const std::string& model, const std::string& out, const ProgressFn& progress) {
  std::error_code ec;
  const fs::path src = fs::canonical(model, ec);  // RUN/model is a link: the model it names
  if (ec || !fs::is_regular_file(src / "config.json")) fail(model, "is not a model folder (no config.json)");
  std::vector<TreeFile> files;
  uint64_t total = 0;
  walk_files(src.string(), [&](const TreeFile& f) {
    files.push_back(f);
    total += f.bytes;
  });
  OutputDir dir(out);
  uint64_t done = 0;
  for (const TreeFile& f : files) {
    const fs::path rel = fs::path(f.path).lexically_relative(src);
    const fs::path to = fs::path(dir.path()) / rel;
    fs::create_directories(to.parent_path(), ec);
    if (ec || !fs::copy_file(f.path, to, fs::copy_options::overwrite_existing, ec) || ec)
      fail(f.path, "cannot be copied to " + (fs::path(out) / rel).string() + (ec ? ": " + ec.message() : ""));
    done += f.bytes;
    report_progress(progress, total ? double(done) / double(total) : 1.0, rel.string());
  }
  dir.commit();
}

}  // namespace attnscope
