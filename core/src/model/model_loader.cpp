// Turning what the user typed (--model) into a loaded model: a Hugging Face directory, a bare name
// in the HF cache, or a llama2.c .bin. Pickle checkpoints are refused: unpickling runs code.
#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "attnscope/base/json_file.h"
#include "attnscope/formats/converted_model.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/base/error.h"
#include "model/llama2c.h"
#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/names.h"

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

constexpr Named<at::ScalarType> kComputeDtypes[] = {
    {at::kFloat, "f32"}, {at::kBFloat16, "bf16"}, {at::kHalf, "f16"}, {at::kDouble, "f64"}};

}  // namespace

at::ScalarType parse_compute_dtype(const std::string& name) { return parse_name(kComputeDtypes, name, "compute dtype"); }
const char* compute_dtype_name(at::ScalarType t) { return name_of(kComputeDtypes, t); }
std::vector<std::string> compute_dtype_names() { return names_of(kComputeDtypes); }

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

namespace {

// What loading and inspecting a model share: where it is, its config, where its weights are and
// which tokenizer goes with it. Reads config.json or the llama2.c header, nothing else.
struct Located {
  std::string path;
  bool llama2c = false;
  ModelConfig config;
  bool converted = false;  // SPEC 7: feature maps here, weights here or where attnscope.source points
  std::string weights;     // llama2.c: the .bin; else the directory WeightStore opens
  std::string tokenizer_path;
  bool llama2c_tokenizer = false;
  std::string note;  // a run directory given for its model: which model that is
};

Located locate(const std::string& spec, const std::string& tokenizer) {
  Located m;
  m.path = resolve_model_path(spec);
  const fs::path p(m.path);
  // A run of a job that makes a model (linearize, finetune) stands for its final model, RUN/model.
  if (fs::is_directory(p) && !fs::exists(p / "config.json")) {
    const std::string kind = job_kind(m.path);
    if (kind == "linearize" || kind == "finetune") {
      const fs::path model = p / "model";
      if (!fs::exists(model / "config.json"))
        fail(m.path, "is a " + kind + " run that has not finished: its final model will be " + model.string() +
                         " (continue the run with: " + resume_command(kind, m.path) + ")");
      Located final = locate(model.string(), tokenizer);
      final.note = m.path + " is a " + kind + " run: its final model " + final.path;
      return final;
    }
  }
  if (fs::is_regular_file(p)) {  // llama2.c checkpoint
    m.llama2c = m.llama2c_tokenizer = true;
    m.config = read_llama2c_config(m.path);
    m.weights = m.path;
    m.tokenizer_path = fs::absolute(tokenizer.empty() ? find_llama2c_tokenizer(p) : tokenizer).string();
    return m;
  }
  const fs::path cfg = p / "config.json";
  const bool has_st = fs::exists(p / "model.safetensors") || fs::exists(p / "model.safetensors.index.json");
  if (!has_st && !fs::exists(p / "feature_maps.safetensors")) {
    for (const char* pk : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(p / pk)) fail((p / pk).string(), kModelPickleRefusal);
  }
  if (!fs::exists(cfg)) fail(m.path, "not a model directory: no config.json");
  m.config = load_hf_config(cfg.string());
  m.converted = is_converted_model(m.path);
  m.weights = m.converted ? converted_weights_dir(m.path) : m.path;
  m.tokenizer_path = fs::absolute(tokenizer.empty() ? m.path : tokenizer).string();
  // A llama2.c model converted to Hugging Face layout keeps its tokenizer.bin.
  if (tokenizer.empty() && !fs::exists(p / "tokenizer.json") && fs::exists(p / "tokenizer.bin")) {
    m.tokenizer_path = fs::absolute(p / "tokenizer.bin").string();
    m.llama2c_tokenizer = true;
  }
  return m;
}

std::unique_ptr<Tokenizer> open_tokenizer(const Located& m) {
  std::unique_ptr<Tokenizer> t = m.llama2c_tokenizer ? load_llama2c_tokenizer(m.tokenizer_path, m.config.vocab_size)
                                                     : load_hf_tokenizer(m.tokenizer_path);
  if (t->vocab_size() > m.config.vocab_size)
    fail(m.path, "tokenizer has " + std::to_string(t->vocab_size()) + " tokens but the model only " +
                     std::to_string(m.config.vocab_size));
  return t;
}

}  // namespace

LoadedModel load_model(const std::string& spec, const std::string& tokenizer, at::ScalarType compute) {
  if (std::string(compute_dtype_name(compute)) == "?")
    fail_value("compute dtype", std::string("must be one of ") + names_list(kComputeDtypes));
  const Located where = locate(spec, tokenizer);
  LoadedModel m;
  m.path = where.path;
  m.tokenizer_path = where.tokenizer_path;
  if (where.llama2c) {
    m.model = std::make_unique<Model>(load_llama2c_model(m.path));
    m.model->mutable_weights().compute = compute;
    m.weight_files = {m.path};
  } else {
    WeightStore store(where.weights);
    store.validate_all();
    ModelWeights weights = load_hf_weights(where.config, store);
    weights.compute = compute;
    m.model = std::make_unique<Model>(where.config, std::move(weights));
    if (where.converted)
      m.model->set_feature_maps(load_head_feature_maps(m.path, where.config.n_layer, where.config.n_head, where.config.head_dim,
                                                       where.config.d_model));
    m.weight_files = store.files();
  }
  m.tokenizer = open_tokenizer(where);
  m.note = where.note;
  return m;
}

ModelInfo inspect_model(const std::string& spec, const std::string& tokenizer) {
  const Located where = locate(spec, tokenizer);
  ModelInfo m;
  m.path = where.path;
  m.config = where.config;
  m.tokenizer_path = where.tokenizer_path;
  if (where.llama2c) {
    m.weight_files = {m.path};
    m.stored_bytes["F32"] = int64_t(fs::file_size(m.path));
  } else {
    WeightStore store(where.weights);
    for (const TensorEntry& e : store.entries()) m.stored_bytes[dtype_name(e.dtype)] += int64_t(e.end - e.begin);
    m.weight_files = store.files();
    if (where.converted)
      m.feature_maps = load_head_feature_maps(m.path, where.config.n_layer, where.config.n_head, where.config.head_dim,
                                              where.config.d_model);
  }
  m.tokenizer = open_tokenizer(where);
  m.note = where.note;
  return m;
}

}  // namespace attnscope
