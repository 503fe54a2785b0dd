#include "attnscope/capture/capture.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "capture/capture_manifest.h"
#include "attnscope/base/error.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/random.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/safetensors_stream_writer.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

constexpr const char* kStoreFormat = kCaptureFormat;
constexpr int kFormatVersion = kCaptureFormatVersion;

std::string layer_file(int s) { return "layer_" + std::to_string(s) + ".safetensors"; }

}  // namespace

namespace {

// Where the text of `docs` came from, for a message about all of it: its one file, or every file
// ("the 5 sample texts a.txt, b.txt, ..."); a .jsonl's lines ("f.jsonl:12") count as their file.
std::string text_origin(const std::vector<TextDocument>& docs) {
  if (docs.empty()) return "text";
  std::vector<std::string> files;
  for (const TextDocument& d : docs) {
    std::string f = d.source;
    const size_t colon = f.rfind(':');
    if (colon != std::string::npos && colon + 1 < f.size() &&
        f.find_first_not_of("0123456789", colon + 1) == std::string::npos && f.rfind(".jsonl", colon) == colon - 6)
      f.resize(colon);
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  if (files.size() == 1) return files.front();
  std::string out = "the " + std::to_string(files.size()) + " sample texts ";
  for (size_t i = 0; i < files.size(); ++i) out += (i ? ", " : "") + files[i];
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> draw_windows(const Tokenizer& tok, int n_ctx,
                                               const std::vector<TextDocument>& docs,
                                               const CaptureOptions& opt) {
  if (opt.seq_len < 2) fail_value("sequence length", std::to_string(opt.seq_len) + " is too short: a window needs at least 2 tokens");
  if (opt.num_seqs < 1) fail_value("number of windows", "must be at least 1, got " + std::to_string(opt.num_seqs));
  if (opt.seq_len > n_ctx)
    fail_value("sequence length", std::to_string(opt.seq_len) + " exceeds the model's context length " + std::to_string(n_ctx));
  std::vector<int64_t> stream;
  for (const auto& d : docs) {
    auto ids = tok.encode(d.text);
    stream.insert(stream.end(), ids.begin(), ids.end());
    if (!ids.empty() && tok.eos_id() >= 0) stream.push_back(tok.eos_id());
  }
  const bool bos = tok.adds_bos() && tok.bos_id() >= 0;
  const int64_t body = opt.seq_len - (bos ? 1 : 0);
  const int64_t available = int64_t(stream.size()) / body;
  if (available < opt.num_seqs && (!opt.fewer_windows_ok || available < 1)) {
    // What would fit: the windows there are at this length, or the length at which T windows fit.
    const int64_t fits_len = int64_t(stream.size()) / opt.num_seqs + (bos ? 1 : 0);
    std::string fits = available >= 1 ? std::to_string(available) + " windows fit at " + std::to_string(opt.seq_len) + " tokens"
                                      : std::string("not one window fits");
    if (fits_len >= 2) fits += ", or " + std::to_string(opt.num_seqs) + " windows of " + std::to_string(fits_len) + " tokens";
    fail(text_origin(docs), "the text has " + std::to_string(stream.size()) + " tokens: " + std::to_string(available) +
                                " windows of " + std::to_string(opt.seq_len) + ", fewer than the " +
                                std::to_string(opt.num_seqs) + " asked for; " + fits + ", or give more text");
  }
  const int64_t T = std::min<int64_t>(opt.num_seqs, available);
  // The first T of a seeded shuffle of the window indices (random.h: the same windows everywhere).
  std::vector<int64_t> idx = shuffle_indices(available, opt.seed);
  idx.resize(size_t(T));
  std::sort(idx.begin(), idx.end());
  std::vector<std::vector<int64_t>> windows;
  for (int64_t w : idx) {
    std::vector<int64_t> ids;
    if (bos) ids.push_back(tok.bos_id());
    ids.insert(ids.end(), stream.begin() + w * body, stream.begin() + (w + 1) * body);
    windows.push_back(std::move(ids));
  }
  return windows;
}

CaptureStore capture_to_dir(const LoadedModel& m, const std::vector<TextDocument>& docs, const CaptureOptions& opt,
                            const std::string& out_dir, const ProgressFn& progress) {
  if (opt.dtype != DType::F32 && opt.dtype != DType::F16) fail_value("capture dtype", "must be f32 or f16");
  const ModelConfig& c = m.model->config();
  const auto windows = draw_windows(*m.tokenizer, c.n_ctx, docs, opt);
  const int64_t T = int64_t(windows.size()), L = opt.seq_len, H = c.n_head, d = c.head_dim, D = c.d_model;

  OutputDir out(out_dir);
  const fs::path tmp = out.path();

  const at::ScalarType st = opt.dtype == DType::F16 ? at::kHalf : at::kFloat;
  const uint64_t elt = dtype_size(opt.dtype);
  const std::map<std::string, std::string> meta = {{"format", kStoreFormat}};
  std::vector<std::unique_ptr<SafetensorsStreamWriter>> writers;
  for (int s = 0; s < c.n_layer; ++s) {
    std::vector<TensorEntry> layout;
    for (const char* name : {"q", "k", "v"}) layout.push_back({name, opt.dtype, {T, H, L, d}, 0, 0});
    layout.push_back({"x", opt.dtype, {T, L, D}, 0, 0});  // the layer's input: gated decays train from it
    writers.push_back(std::make_unique<SafetensorsStreamWriter>((tmp / layer_file(s)).string(), layout, meta));
  }

  at::InferenceMode no_autograd;
  const int64_t batch = std::max(1, opt.batch);
  for (int64_t t0 = 0; t0 < T; t0 += batch) {
    const int64_t nb = std::min(batch, T - t0);
    std::vector<int64_t> flat;
    for (int64_t t = t0; t < t0 + nb; ++t) flat.insert(flat.end(), windows[t].begin(), windows[t].end());
    at::Tensor ids = at::tensor(flat).view({nb, L});
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      // Rows t0..t0+nb of a [T, ...] tensor are one contiguous block.
      auto put = [&](const char* name, const at::Tensor& x) {
        at::Tensor y = x.to(at::kCPU, st).contiguous();
        const uint64_t offset = uint64_t(t0) * uint64_t(y.numel() / nb) * elt;
        writers[a.layer]->write(name, offset, y.data_ptr(), uint64_t(y.numel()) * elt);
      };
      put("q", opt.pre_rope ? a.q_pre : a.q);
      put("k", opt.pre_rope ? a.k_pre : a.k);
      put("v", a.v);
      put("x", a.x);
    };
    m.model->hidden_states(ids, &hook);
    report_progress(progress, double(t0 + nb) / T, "windows " + std::to_string(t0 + nb) + "/" + std::to_string(T));
  }
  for (auto& w : writers) w->finish();

  std::vector<int64_t> flat;
  for (const auto& w : windows) flat.insert(flat.end(), w.begin(), w.end());
  write_safetensors((tmp / "ids.safetensors").string(), {{"ids", at::tensor(flat).view({T, L})}},
                    {{"format", kStoreFormat}});

  nlohmann::ordered_json j;
  j["format"] = kStoreFormat;
  j["version"] = kFormatVersion;
  // The same names as everywhere a person reads them (info --json, tables, the GUI).
  j["model"] = {{"path", fs::absolute(m.path).string()}};
  // With the sliding window, where there is one: analysis and distillation rebuild the softmax
  // maps from q and k and need it too.
  j["model"].update(model_shape_json(c));
  std::vector<std::string> sources;
  for (const auto& dd : docs) sources.push_back(dd.source);
  j["texts"] = sources;
  j["tokenization"] = {{"tokenizer", m.tokenizer->kind()},
                       {"tokenizer_path", m.tokenizer_path},
                       {"bos_prepended", m.tokenizer->adds_bos() && m.tokenizer->bos_id() >= 0},
                       {"eos_between_documents", m.tokenizer->eos_id() >= 0}};
  j["num_seqs"] = T;
  j["seq_len"] = L;
  j["seed"] = opt.seed;
  j["dtype"] = dtype_name(opt.dtype);
  j["rope"] = opt.pre_rope ? "pre" : "post";
  j["tensors"] = {{"q", {T, H, L, d}}, {"k", {T, H, L, d}}, {"v", {T, H, L, d}}, {"x", {T, L, D}}};
  j["kv_heads_expanded"] = c.n_kv_head != c.n_head;
  {
    std::ofstream f(tmp / "manifest.json");
    f << j.dump(2) << "\n";
    if (!f) fail((tmp / "manifest.json").string(), "cannot write");
  }
  out.commit();
  return CaptureStore(out.final_path());
}

CaptureStore::CaptureStore(const std::string& dir) : dir_(dir) {
  const fs::path mpath = fs::path(dir) / "manifest.json";
  std::ifstream in(mpath);
  if (!in) fail(dir, "not a capture directory (no manifest.json)");
  manifest_text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const CaptureManifest m = parse_capture_manifest(manifest_text_, mpath.string());
  n_layer_ = m.n_layer;
  n_head_ = m.n_head;
  n_kv_head_ = m.n_kv_head;
  head_dim_ = m.head_dim;
  seq_len_ = m.seq_len;
  num_seqs_ = m.num_seqs;
  vocab_size_ = m.vocab_size;
  sliding_window_ = m.sliding_window;
  d_model_ = m.d_model;
  tokenizer_kind_ = m.tokenizer_kind;
  tokenizer_path_ = m.tokenizer_path;
  model_path_ = m.model_path;
  for (int s = 0; s < n_layer_; ++s)
    if (!fs::exists(fs::path(dir) / layer_file(s))) fail(dir, "missing " + layer_file(s));
}

at::Tensor CaptureStore::ids() const {
  SafetensorsFile f((fs::path(dir_) / "ids.safetensors").string());
  return f.tensor("ids").clone();
}

std::unique_ptr<Tokenizer> CaptureStore::load_tokenizer() const {
  if (tokenizer_path_.empty()) fail(dir_, "the manifest does not record the tokenizer's path");
  if (!fs::exists(tokenizer_path_))
    fail(dir_, "the tokenizer it was captured with is gone: " + tokenizer_path_);
  if (tokenizer_kind_ == "llama2c") return load_llama2c_tokenizer(tokenizer_path_, vocab_size_);
  return load_hf_tokenizer(tokenizer_path_);
}

at::Tensor CaptureStore::layer_tensor(int layer, const std::string& which) const {
  if (layer < 0 || layer >= n_layer_)
    fail(dir_, "layer " + std::to_string(layer) + " out of range 0.." + std::to_string(n_layer_ - 1));
  SafetensorsFile f((fs::path(dir_) / layer_file(layer)).string());
  at::Tensor t = f.tensor(which);
  const std::vector<int64_t> want = {num_seqs_, n_head_, seq_len_, head_dim_};
  if (t.sizes().vec() != want) fail(f.path(), "tensor '" + which + "' has an unexpected shape");
  at::Tensor out = t.to(at::kFloat);
  // Every analysis downstream would turn a NaN or inf into a plausible-looking number (a uniform
  // row, a finite entropy): refuse it here, naming the head.
  const at::Tensor finite_per_head = at::isfinite(out).reshape({num_seqs_, n_head_, -1}).all(2).all(0);
  if (!finite_per_head.all().item<bool>()) {
    const int64_t head = (~finite_per_head).nonzero().min().item<int64_t>();
    fail(f.path(), "'" + which + "' of layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                       " contains NaN or infinity");
  }
  return out;
}

at::Tensor CaptureStore::layer_inputs(int layer) const {
  if (layer < 0 || layer >= n_layer_)
    fail(dir_, "layer " + std::to_string(layer) + " out of range 0.." + std::to_string(n_layer_ - 1));
  SafetensorsFile f((fs::path(dir_) / layer_file(layer)).string());
  if (d_model_ == 0 || !f.contains("x"))
    fail(dir_, "holds no layer inputs x (captured by an attnscope before gated decays): capture it again");
  const at::Tensor t = f.tensor("x");
  if (t.sizes().vec() != std::vector<int64_t>{num_seqs_, seq_len_, d_model_})
    fail(f.path(), "tensor 'x' has an unexpected shape");
  at::Tensor out = t.to(at::kFloat);
  if (!at::isfinite(out).all().item<bool>())
    fail(f.path(), "'x' of layer " + std::to_string(layer) + " contains NaN or infinity");
  return out;
}

}  // namespace attnscope
