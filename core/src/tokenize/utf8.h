// Small UTF-8 helpers for the tokenizers. Tokenizer inputs are arbitrary bytes, so every helper
// tolerates invalid UTF-8 instead of rejecting it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnscope {

// Length of the well-formed UTF-8 character starting at s[i], or 0 when the bytes there are not
// one (stray continuation byte, overlong form, surrogate, truncated sequence, ...).
std::size_t utf8_char_len(std::string_view s, std::size_t i);

// Length of the character at s[i] for splitting purposes: the well-formed length, or 1 so that an
// invalid byte becomes a character of its own.
inline std::size_t utf8_split_len(std::string_view s, std::size_t i) {
  const std::size_t n = utf8_char_len(s, i);
  return n == 0 ? 1 : n;
}

std::string utf8_encode(uint32_t codepoint);

// The text with every invalid byte replaced by U+FFFD, for labels that must be valid UTF-8.
std::string utf8_sanitize(std::string_view s);

}  // namespace attnscope
