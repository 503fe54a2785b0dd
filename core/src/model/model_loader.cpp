// Turning what the user typed (--model) into a loaded model: a Hugging Face directory, a bare name
// in the HF cache, or a llama2.c .bin. Pickle checkpoints are refused: unpickling runs code.
#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "attnscope/convert/converted_model.h"
#include "attnscope/base/error.h"
#include "model/llama2c.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

const char* kModelPickleRefusal =
    "is a pickle checkpoint; attnscope never unpickles (it executes arbitrary code). Convert it to "
    "safetensors first, e.g. with the Hugging Face `safetensors` convert script";

bool has_pickle_magic(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  unsigned char b[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(b), 4);
  return (b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4) ||  // torch.save zip archive
         (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5);                   // raw pickle protocol 2-5
}

bool is_pickle_file_name(const fs::path& p) {
  const std::string ext = p.extension().string();
  return p.filename() == "pytorch_model.bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" ||
         ext == ".pkl";
}

fs::path hf_cache_root() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return fs::path(h) / "hub";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : ".") / ".cache" / "huggingface" / "hub";
}

// ORG/NAME -> hub/models--ORG--NAME/snapshots/<ref>/; prefers the snapshot refs/main points to.
std::string resolve_cached_name(const std::string& name) {
  std::string mangled = "models--";
  for (char ch : name) mangled += ch == '/' ? std::string("--") : std::string(1, ch);
  const fs::path repo = hf_cache_root() / mangled;
  const fs::path snaps = repo / "snapshots";
  if (!fs::is_directory(snaps))
    fail(name, "no such file or directory, and not in the Hugging Face cache (looked for " + snaps.string() + ")");
  std::ifstream ref(repo / "refs" / "main");
  std::string commit;
  if (ref >> commit && fs::is_directory(snaps / commit)) return (snaps / commit).string();
  fs::path best;
  for (const auto& e : fs::directory_iterator(snaps))
    if (e.is_directory() && (best.empty() || fs::last_write_time(e) > fs::last_write_time(best))) best = e.path();
  if (best.empty()) fail(snaps.string(), "the cache holds no snapshot of " + name);
  return best.string();
}

std::string find_llama2c_tokenizer(const fs::path& bin) {
  const fs::path dir = bin.has_parent_path() ? bin.parent_path() : fs::path(".");
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("tok", 0) == 0 && e.path().extension() == ".bin") return e.path().string();
  }
  throw Error(bin.string() + ": no tokenizer given and no tokenizer.bin or tok*.bin beside it", "tokenizer");
}

}  // namespace

std::string resolve_model_path(const std::string& spec) {
  if (spec.empty()) fail_value("model", "is empty: give a model directory, ORG/NAME or a llama2.c .bin");
  const fs::path p(spec);
  if (fs::is_regular_file(p)) {
    if (is_pickle_file_name(p) || has_pickle_magic(p)) fail(spec, kModelPickleRefusal);
    if (p.filename() == "config.json") return p.parent_path().string();
    return spec;
  }
  if (fs::is_directory(p)) return spec;
  if (fs::exists(p)) fail(spec, "neither a file nor a directory");
  // A bare "ORG/NAME" or "NAME" is looked up in the Hugging Face cache.
  if (spec.find("..") == std::string::npos && spec.front() != '/' && spec.front() != '.')
    return resolve_cached_name(spec);
  fail(spec, "no such file or directory");
}

LoadedModel load_model(const std::string& spec, const std::string& tokenizer) {
  LoadedModel m;
  m.path = resolve_model_path(spec);
  const fs::path p(m.path);
  if (fs::is_regular_file(p)) {  // llama2.c checkpoint
    m.model = std::make_unique<Model>(load_llama2c_model(m.path));
    const std::string tok = tokenizer.empty() ? find_llama2c_tokenizer(p) : tokenizer;
    m.tokenizer = load_llama2c_tokenizer(tok, m.model->config().vocab_size);
    m.tokenizer_path = fs::absolute(tok).string();
    m.weight_files = {m.path};
    return m;
  }
  const fs::path cfg = p / "config.json";
  const bool has_st = fs::exists(p / "model.safetensors") || fs::exists(p / "model.safetensors.index.json");
  if (!has_st && !fs::exists(p / "feature_maps.safetensors")) {
    for (const char* pk : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(p / pk)) fail((p / pk).string(), kModelPickleRefusal);
  }
  if (!fs::exists(cfg)) fail(m.path, "not a model directory: no config.json");
  ModelConfig c = load_hf_config(cfg.string());
  // A converted model (SPEC 7): the original weights (here, or where attnscope.source points) with
  // every attention layer run as linear attention by the stored feature maps.
  const bool converted = is_converted_model(m.path);
  WeightStore store(converted ? converted_weights_dir(m.path) : m.path);
  store.validate_all();
  m.model = std::make_unique<Model>(c, load_hf_weights(c, store));
  if (converted) m.model->set_feature_maps(load_head_feature_maps(m.path, c));
  m.tokenizer_path = fs::absolute(tokenizer.empty() ? m.path : tokenizer).string();
  // A llama2.c model converted to Hugging Face layout keeps its tokenizer.bin.
  if (tokenizer.empty() && !fs::exists(p / "tokenizer.json") && fs::exists(p / "tokenizer.bin")) {
    m.tokenizer_path = fs::absolute(p / "tokenizer.bin").string();
    m.tokenizer = load_llama2c_tokenizer(m.tokenizer_path, c.vocab_size);
  } else {
    m.tokenizer = load_hf_tokenizer(m.tokenizer_path);
  }
  if (m.tokenizer->vocab_size() > c.vocab_size)
    fail(m.path, "tokenizer has " + std::to_string(m.tokenizer->vocab_size()) + " tokens but the model only " +
                     std::to_string(c.vocab_size));
  m.weight_files = store.files();
  return m;
}

}  // namespace attnscope
