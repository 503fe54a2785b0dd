#include "attnscope/tokenize/tokenizer.h"

#include <filesystem>

#include "attnscope/base/error.h"
#include "bpe_vocab.h"
#include "gpt2_bpe_tokenizer.h"
#include "sentencepiece_bpe_tokenizer.h"

namespace fs = std::filesystem;

namespace attnscope {

std::vector<int64_t> Tokenizer::encode_for_model(std::string_view text) const {
  std::vector<int64_t> ids;
  if (adds_bos() && bos_id() >= 0) ids.push_back(bos_id());
  const std::vector<int64_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::unique_ptr<Tokenizer> parse_hf_tokenizer_json(std::string_view json_text, const std::string& path) {
  const nlohmann::json root = parse_json_text(json_text, path, "tokenizer.json");
  if (!root.is_object()) fail(path, "tokenizer.json is not a JSON object");
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) fail(path, "tokenizer.json has no \"model\" object");
  const std::string type = json_string(*model, "type");
  // Old files leave out model.type; a vocab with merges is BPE.
  if (!(type == "BPE" || (type.empty() && model->contains("merges"))))
    fail(path, "model type \"" + type + "\" is not supported (only BPE)");
  // SentencePiece-style files are recognised by their byte fallback, Metaspace or "▁" prefix;
  // everything else must be byte-level (the ByteLevel pre-tokenizer or decoder).
  if (is_sentencepiece_json(root)) return sentencepiece_tokenizer_from_json(root, path);
  if (!has_json_component(root, "pre_tokenizer", "pretokenizers", "ByteLevel") &&
      !has_json_component(root, "decoder", "decoders", "ByteLevel"))
    fail(path, "BPE without a ByteLevel pre-tokenizer/decoder or SentencePiece byte fallback: "
               "cannot tell how to map text to tokens");
  return gpt2_tokenizer_from_json(root, path);
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) fail(dir, "not a directory (expected a model directory with a tokenizer)");
  if (fs::exists(d / "tokenizer.json")) {
    const std::string path = (d / "tokenizer.json").string();
    return parse_hf_tokenizer_json(read_file_bytes(path, "tokenizer.json"), path);
  }
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    return load_gpt2_tokenizer((d / "vocab.json").string(), (d / "merges.txt").string());
  if (fs::exists(d / "encoder.json") && fs::exists(d / "vocab.bpe"))
    return load_gpt2_tokenizer((d / "encoder.json").string(), (d / "vocab.bpe").string());
  fail(dir, "no tokenizer found: expected tokenizer.json, vocab.json+merges.txt, or "
            "encoder.json+vocab.bpe");
}

}  // namespace attnscope
