#include "byte_level.h"

#include <unordered_map>

#include "utf8.h"

namespace attnscope {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

struct ByteLevelTables {
  std::array<uint8_t, 256> order{};
  std::array<std::string, 256> to_unicode;
  std::unordered_map<uint32_t, uint8_t> from_codepoint;

  ByteLevelTables() {
    // Printable Latin-1 bytes keep their own code point; the other 68 bytes are given the code
    // points 256, 257, ... in byte order, exactly as GPT-2's bytes_to_unicode().
    std::array<bool, 256> printable{};
    int k = 0;
    for (int b = 0; b < 256; ++b) {
      printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      if (printable[b]) order[k++] = static_cast<uint8_t>(b);
    }
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable[b] ? static_cast<uint32_t>(b) : next++;
      if (!printable[b]) order[k++] = static_cast<uint8_t>(b);
      to_unicode[b] = utf8_encode(cp);
      from_codepoint[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

uint32_t decode_codepoint(std::string_view s, std::size_t i, std::size_t n) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) return c;
  uint32_t cp = c & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().to_unicode; }

const std::array<uint8_t, 256>& byte_level_order() { return tables().order; }

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& map = tables().to_unicode;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += map[static_cast<unsigned char>(c)];
  return out;
}

std::string byte_level_to_bytes(std::string_view text) {
  const auto& map = tables().from_codepoint;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_char_len(text, i);
    if (n == 0) {
      out += text[i++];
      continue;
    }
    auto it = map.find(decode_codepoint(text, i, n));
    if (it != map.end())
      out += static_cast<char>(it->second);
    else
      out.append(text, i, n);
    i += n;
  }
  return out;
}

}  // namespace attnscope
