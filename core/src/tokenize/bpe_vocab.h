// The vocabulary of a BPE tokenizer (id <-> token, added/special tokens, ranked merges) and the
// readers for the Hugging Face files it comes from: tokenizer.json, vocab.json/encoder.json,
// merges.txt/vocab.bpe.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_merges.h"

namespace attnscope {

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool special = false;
};

using MergeList = std::vector<std::pair<std::string, std::string>>;

struct BpeVocab {
  enum class Kind : uint8_t { kUnused, kModel, kAdded, kSpecial };

  std::vector<std::string> tokens;                 // id -> token text ("" for unused ids)
  std::vector<Kind> kinds;                         // id -> what the id is
  std::unordered_map<std::string, int32_t> model;  // BPE vocabulary: token -> id
  std::unordered_map<std::string, int32_t> added;  // added tokens: content -> id
  BpeMerges merges;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Id of a model token, else of an added token with that content, else -1.
  int32_t id_of(const std::string& token) const;
  int32_t model_id(const std::string& token) const {
    auto it = model.find(token);
    return it == model.end() ? -1 : it->second;
  }
  bool is_special(int64_t id) const { return kinds[id] == Kind::kSpecial; }
};

// Builds the tables and checks them: ids non-negative, plausible and unique, every merge's parts
// and result in the vocabulary. Errors name `where` (the file).
BpeVocab build_bpe_vocab(const nlohmann::json& vocab, const MergeList& merges,
                         const std::vector<AddedToken>& added, const std::string& where);

// obj[key] when obj is an object and the value a string, else "" (tokenizer.json is read leniently
// where a field only selects a behaviour).
std::string json_string(const nlohmann::json& obj, const char* key);
// obj[key] when it is a boolean, else `fallback`.
bool json_bool(const nlohmann::json& obj, const char* key, bool fallback);

// A tokenizer.json component (root[key]) as a flat list: a "Sequence" is unpacked from its
// list_key ("normalizers", "pretokenizers", "decoders"); absent or null gives an empty list.
std::vector<const nlohmann::json*> json_components(const nlohmann::json& root, const char* key,
                                                   const char* list_key);
// Whether one of those components has the given "type".
bool has_json_component(const nlohmann::json& root, const char* key, const char* list_key,
                        const std::string& type);

std::string read_file_bytes(const std::string& path, const std::string& what);
// Parses `text` as JSON; errors name `where` and say it is not valid JSON for `what`.
nlohmann::json parse_json_text(std::string_view text, const std::string& where, const std::string& what);

// "merges" of a tokenizer.json: strings "left right" or pairs ["left", "right"].
MergeList parse_json_merges(const nlohmann::json& merges, const std::string& where);
// merges.txt / vocab.bpe: one "left right" per line, an optional "#version" first line. Errors
// name `where` and the line.
MergeList parse_merges_text(std::string_view text, const std::string& where);
MergeList read_merges_file(const std::string& path);
// "added_tokens" of a tokenizer.json (absent: none).
std::vector<AddedToken> parse_added_tokens(const nlohmann::json& root, const std::string& where);
// The special token a TemplateProcessing post_processor puts first for a single sequence (the BOS
// the model expects, e.g. "<s>"), or "" when there is none.
std::string template_leading_special(const nlohmann::json& root);

}  // namespace attnscope
