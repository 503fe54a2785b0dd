// SentencePiece-style BPE as exported to a Hugging Face tokenizer.json (Llama 1/2, Mistral,
// TinyLlama): spaces become "▁" (U+2581) and a "▁" is prefixed, characters are merged by rank, and
// characters missing from the vocabulary fall back to <0xXX> byte tokens.
#pragma once
#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/tokenize/tokenizer.h"
#include "bpe_vocab.h"

namespace attnscope {

struct SentencePieceOptions {
  enum class Prefix {
    kNone,
    kAlways,     // Prepend normalizer: "▁" in front of every (non-empty) text
    kIfMissing,  // Metaspace pre-tokenizer: only when the text does not already start with "▁"
  };
  Prefix prefix = Prefix::kAlways;
  bool replace_spaces = true;  // " " -> "▁"
  bool split_words = false;    // Metaspace split: every "▁" starts a new word
  int strip_leading_spaces = 1;  // decoder: spaces removed from the front (the dummy prefix)
  bool byte_fallback = true;
  bool fuse_unk = true;        // consecutive unknown characters become one <unk>
  bool ignore_merges = false;  // a word that is itself a token is kept whole
  int64_t unk_id = -1, bos_id = -1, eos_id = -1;
  bool adds_bos = true;
};

class SentencePieceBpeTokenizer final : public Tokenizer {
 public:
  SentencePieceBpeTokenizer(std::string source, BpeVocab vocab, const SentencePieceOptions& options);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  std::string piece(int64_t id) const override;
  int64_t vocab_size() const override { return vocab_.size(); }
  int64_t bos_id() const override { return options_.bos_id; }
  int64_t eos_id() const override { return options_.eos_id; }
  bool adds_bos() const override { return options_.adds_bos && options_.bos_id >= 0; }
  std::string kind() const override { return "sentencepiece-bpe"; }

 private:
  void encode_word(std::string_view word, std::vector<int64_t>* out) const;
  void check_id(int64_t id) const;

  std::string source_;
  BpeVocab vocab_;
  SentencePieceOptions options_;
  std::array<int32_t, 256> byte_ids_{};  // id of <0xXX>, or -1
  std::vector<int> byte_of_id_;          // id -> the byte a <0xXX> token stands for, or -1
};

// True when a tokenizer.json describes SentencePiece-style BPE rather than byte-level BPE.
bool is_sentencepiece_json(const nlohmann::json& root);

std::unique_ptr<Tokenizer> sentencepiece_tokenizer_from_json(const nlohmann::json& root,
                                                             const std::string& path);

}  // namespace attnscope
