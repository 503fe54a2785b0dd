// GPT-2's byte-level alphabet: every byte 0..255 is shown as one printable Unicode character
// (bytes_to_unicode in GPT-2's encoder.py), so byte-level vocabularies and merges are valid text and
// a space reads as "Ġ".
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnscope {

// The default GPT-2 pre-tokenizer pattern (contractions, letters, numbers, other, whitespace).
extern const char* const kGpt2SplitPattern;

// Byte b -> its character (UTF-8 encoded).
const std::array<std::string, 256>& byte_to_unicode();

// The 256 bytes in GPT-2's bytes_to_unicode order: printable '!'..'~', '¡'..'¬', '®'..'ÿ' first,
// then the rest. Position k holds the byte whose token has id k in GPT-2's vocabulary.
const std::array<uint8_t, 256>& byte_level_order();

// Maps text bytes to byte-level characters.
std::string bytes_to_byte_level(std::string_view bytes);

// Maps byte-level characters back to bytes. A character outside the alphabet (e.g. in an added
// token) is kept as its own UTF-8 bytes.
std::string byte_level_to_bytes(std::string_view text);

}  // namespace attnscope
