// GPT-2 byte-level BPE: regex pre-tokenizer, bytes shown as GPT-2's byte-level characters, then
// merges by rank inside each pre-token. Decoding maps the characters back to the exact bytes.
#pragma once
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "attnscope/tokenize/tokenizer.h"
#include "bpe_vocab.h"
#include "regex_splitter.h"

namespace attnscope {

struct Gpt2BpeOptions {
  std::optional<std::string> split_regex;  // none: the whole text is one pre-token
  bool add_prefix_space = false;           // HF ByteLevel: prepend " " unless the text starts so
  bool ignore_merges = false;              // HF: a pre-token that is itself a token is kept whole
  int64_t bos_id = -1;
  bool adds_bos = false;
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // `source` names the file(s) for error messages.
  Gpt2BpeTokenizer(std::string source, BpeVocab vocab, const Gpt2BpeOptions& options);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  std::string piece(int64_t id) const override;
  int64_t vocab_size() const override { return vocab_.size(); }
  int64_t bos_id() const override { return options_.bos_id; }
  int64_t eos_id() const override { return eos_id_; }
  bool adds_bos() const override { return options_.adds_bos; }
  std::string kind() const override { return "gpt2-bpe"; }

 private:
  void encode_word(std::string_view word, std::vector<int64_t>* out) const;
  void check_id(int64_t id) const;

  std::string source_;
  BpeVocab vocab_;
  Gpt2BpeOptions options_;
  std::unique_ptr<RegexSplitter> splitter_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single-byte token
  int64_t eos_id_ = -1;

  // Natural text repeats its words, so most pre-tokens are merged once and then looked up.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// A byte-level BPE from a parsed tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer).
std::unique_ptr<Tokenizer> gpt2_tokenizer_from_json(const nlohmann::json& root,
                                                    const std::string& path);

}  // namespace attnscope
