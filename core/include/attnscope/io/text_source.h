// Reading sample text: .txt files (one document each), .jsonl files (the "text" field of each line)
// and standard input ("-").
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnscope {

class Tokenizer;

struct TextDocument {
  std::string source;  // "file.txt", "file.jsonl:12", "<stdin>"
  std::string text;
};

// Throws Error for a missing/unreadable file, a malformed .jsonl line, or when no text at all is
// found (every document empty).
std::vector<TextDocument> read_text_documents(const std::vector<std::string>& paths);

// The documents as one token stream, as `eval` reads a text: each document encoded for the model
// (encode_for_model), followed by EOS when the tokenizer has one and adds no BOS.
std::vector<int64_t> encode_documents(const Tokenizer& tokenizer, const std::vector<TextDocument>& docs);

// The documents joined (blank lines between them) and split by characters: the first
// (1 - heldout_share) to train on, the rest held out. The cut moves forward to the next whitespace
// so no word is split between the two.
std::pair<std::string, std::string> split_text(const std::vector<TextDocument>& docs, double heldout_share);

}  // namespace attnscope
