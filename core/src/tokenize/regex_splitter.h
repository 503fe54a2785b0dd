// Pre-tokenizer regex split with PCRE2 in UTF + UCP mode, so \p{L}, \p{N}, \s and the (?!\S)
// lookahead behave as in GPT-2's encoder.py and Hugging Face tokenizers.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

class RegexSplitter {
 public:
  // `where` names the source of the pattern for error messages.
  RegexSplitter(const std::string& pattern, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Splits like findall, but also keeps the text between matches (HF's "Isolated" behaviour): the
  // pieces always concatenate back to `text`. Invalid UTF-8 never matches, so it ends up in the
  // between-match pieces instead of making the match fail.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;
  void* code_ = nullptr;  // pcre2_code*, kept opaque so PCRE2 stays private to this file
  bool jit_ = false;
};

}  // namespace attnscope
