#include "capture/capture_manifest.h"

#include <climits>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"

namespace attnscope {

namespace {

// The JSON object at `key` of `obj`; `name` is how errors call it.
const nlohmann::json& object_field(const nlohmann::json& obj, const char* key, const std::string& name,
                                   const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, "missing field \"" + name + "\"");
  if (!it->is_object()) fail(where, "\"" + name + "\" is not a JSON object");
  return *it;
}

// An integer in [lo, INT_MAX]: a float, a string or a value that does not fit an int is refused
// rather than rounded or wrapped.
int int_field(const nlohmann::json& obj, const char* key, const std::string& name, int lo,
              const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, "missing field \"" + name + "\"");
  if (!it->is_number_integer()) fail(where, "\"" + name + "\" is not an integer: " + it->dump());
  // nlohmann stores non-negative integers as unsigned (up to UINT64_MAX), negative ones as signed.
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= uint64_t(INT_MAX) && int64_t(it->get<uint64_t>()) >= lo
                            : it->get<int64_t>() >= lo && it->get<int64_t>() <= INT_MAX;
  if (!in_range)
    fail(where, "\"" + name + "\" = " + it->dump() + " is outside " + std::to_string(lo) + ".." +
                    std::to_string(INT_MAX));
  return static_cast<int>(it->get<int64_t>());
}

// A string field; "" when absent and `required` is false.
std::string string_field(const nlohmann::json& obj, const char* key, const std::string& name,
                         bool required, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) fail(where, "missing field \"" + name + "\"");
    return "";
  }
  if (!it->is_string()) fail(where, "\"" + name + "\" is not a string: " + it->dump());
  return it->get<std::string>();
}

}  // namespace

CaptureManifest parse_capture_manifest(std::string_view text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(where, "not valid JSON");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kCaptureFormat)
    fail(where, "not an attnscope capture manifest");
  auto version = j.find("version");
  if (version != j.end() && *version != 1 && *version != kCaptureFormatVersion)
    fail(where, "capture format version " + version->dump() + " is not supported (this build reads 1.." +
                    std::to_string(kCaptureFormatVersion) + ")");
  // Version 1 said "layers" at the top and model.n_head, model.n_kv_head; version 2 uses the names
  // of `info` and the tables: model.layers, model.heads, model.kv_heads.
  const bool v1 = version == j.end() || *version == 1;

  CaptureManifest m;
  const nlohmann::json& model = object_field(j, "model", "model", where);
  m.n_layer = v1 ? int_field(j, "layers", "layers", 1, where) : int_field(model, "layers", "model.layers", 1, where);
  m.n_head = int_field(model, v1 ? "n_head" : "heads", v1 ? "model.n_head" : "model.heads", 1, where);
  m.n_kv_head = int_field(model, v1 ? "n_kv_head" : "kv_heads", v1 ? "model.n_kv_head" : "model.kv_heads", 1, where);
  m.head_dim = int_field(model, "head_dim", "model.head_dim", 1, where);
  m.vocab_size = int_field(model, "vocab_size", "model.vocab_size", 1, where);
  m.seq_len = int_field(j, "seq_len", "seq_len", 2, where);
  m.num_seqs = int_field(j, "num_seqs", "num_seqs", 1, where);
  if (m.n_head % m.n_kv_head != 0)
    fail(where, std::string(v1 ? "model.n_head = " : "model.heads = ") + std::to_string(m.n_head) +
                    " is not a multiple of " + (v1 ? "model.n_kv_head = " : "model.kv_heads = ") + std::to_string(m.n_kv_head));
  if (model.contains("sliding_window"))
    m.sliding_window = int_field(model, "sliding_window", "model.sliding_window", 0, where);
  if (model.contains("d_model")) m.d_model = int_field(model, "d_model", "model.d_model", 1, where);
  m.model_path = string_field(model, "path", "model.path", false, where);
  const nlohmann::json& tok = object_field(j, "tokenization", "tokenization", where);
  m.tokenizer_kind = string_field(tok, "tokenizer", "tokenization.tokenizer", true, where);
  m.tokenizer_path = string_field(tok, "tokenizer_path", "tokenization.tokenizer_path", false, where);
  return m;
}

}  // namespace attnscope
