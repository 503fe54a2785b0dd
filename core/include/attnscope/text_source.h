// Reading sample text: .txt files (one document each), .jsonl files (the "text" field of each line)
// and standard input ("-").
#pragma once
#include <string>
#include <vector>

namespace attnscope {

struct TextDocument {
  std::string source;  // "file.txt", "file.jsonl:12", "<stdin>"
  std::string text;
};

// Throws Error for a missing/unreadable file, a malformed .jsonl line, or when no text at all is
// found (every document empty).
std::vector<TextDocument> read_text_documents(const std::vector<std::string>& paths);

}  // namespace attnscope
