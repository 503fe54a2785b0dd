// Tokenizers: GPT-2 byte-level BPE, SentencePiece-style BPE (Llama tokenizer.json) and the llama2.c
// tokenizer.bin. encode() never adds special tokens; encode_for_model() adds what the model expects.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text is plain text: a special token's spelling in it (e.g. "<|endoftext|>") is encoded as text.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The exact bytes back; control tokens (BOS, EOS, other special added tokens) print nothing.
  // Throws Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // The text of one token as it would read inside a sequence (for axis labels). Always valid
  // UTF-8: a token holding part of a character reads as its <0xXX> name or U+FFFD.
  virtual std::string piece(int64_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const { return -1; }  // -1: none
  virtual int64_t eos_id() const { return -1; }
  // Whether the model was trained with BOS in front of every sequence (Llama, llama2.c).
  virtual bool adds_bos() const { return false; }
  virtual std::string kind() const = 0;  // "gpt2-bpe", "sentencepiece-bpe", "llama2c"

  std::vector<int64_t> encode_for_model(std::string_view text) const;
};

// Loads the tokenizer of a Hugging Face model directory: tokenizer.json (byte-level or
// SentencePiece-style BPE), else vocab.json + merges.txt, else encoder.json + vocab.bpe.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir);
// GPT-2 byte-level BPE from an encoder (token -> id) file and a merges file.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json,
                                               const std::string& merges_file);
// The same from the contents of the files (no file system; for fuzzing and tests). The names are
// what errors call the files (their paths when loading from disk).
std::unique_ptr<Tokenizer> parse_hf_tokenizer_json(std::string_view json_text, const std::string& name);
std::unique_ptr<Tokenizer> parse_gpt2_tokenizer(std::string_view encoder_json, std::string_view merges_text,
                                                const std::string& encoder_name,
                                                const std::string& merges_name);
// llama2.c tokenizer.bin (vocab size must be given: the file does not store it).
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t vocab_size);

// Trains a GPT-2-style byte-level BPE on `text` (GPT-2 pre-tokenizer regex, 256 byte tokens, then
// merges until `vocab_size - n_special`), appends `<|endoftext|>` and writes a Hugging Face
// tokenizer.json to `out_path` (atomically). Deterministic for the same input.
void train_bytelevel_bpe(std::string_view text, int64_t vocab_size, const std::string& out_path);

}  // namespace attnscope
