// libFuzzer entry point for the tokenizer files: a tokenizer.json (byte-level or SentencePiece-style
// BPE, chosen by the loader from the content), or, when the input holds a NUL byte, vocab.json before
// it and merges.txt after it. A loaded tokenizer then encodes a fixed text and the first bytes of the
// input (arbitrary, often invalid UTF-8), and decodes what it encoded. Loading must succeed or throw
// attnscope::Error; anything else (another exception, a sanitizer report, a broken promise of
// tokenizer.h) is a crash libFuzzer records.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/tokenize/tokenizer.h"

namespace {

using attnscope::Tokenizer;

// ASCII, spaces (Metaspace), digits, punctuation, 2-, 3- and 4-byte characters and a newline.
constexpr std::string_view kText = "Hello, world!  It's 42 \xC3\xBC\xC3\xB1\xC3\xAF \xE2\x96\x81x \xF0\x9F\x99\x82\n";

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), written here rather than
// taken from the code under test.
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
    else return false;
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

void exercise(const Tokenizer& tok, std::string_view text) {
  std::vector<int64_t> ids;
  try {
    ids = tok.encode_for_model(text);
  } catch (const attnscope::Error&) {
    return;  // a SentencePiece vocabulary without byte fallback or <unk> may refuse a character
  }
  // Every id encode() gives is in the vocabulary: piece() and decode() accept it.
  for (int64_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
    if (!valid_utf8(tok.piece(id))) std::abort();
  }
  (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<Tokenizer> tok;
  try {
    const std::size_t nul = input.find('\0');
    if (nul == std::string_view::npos)
      tok = attnscope::parse_hf_tokenizer_json(input, "tokenizer.json");
    else
      tok = attnscope::parse_gpt2_tokenizer(input.substr(0, nul), input.substr(nul + 1), "vocab.json",
                                            "merges.txt");
  } catch (const attnscope::Error&) {
    return 0;  // a clear rejection is the expected outcome for malformed input
  }
  const int64_t n = tok->vocab_size();
  if (n < 1) std::abort();
  for (int64_t id : {tok->bos_id(), tok->eos_id()})
    if (id < -1 || id >= n) std::abort();
  if (tok->adds_bos() && tok->bos_id() < 0) std::abort();
  exercise(*tok, kText);
  exercise(*tok, input.substr(0, std::min<std::size_t>(size, 48)));
  // Ids outside the vocabulary are refused with an Error, not read out of bounds.
  for (int64_t bad : {int64_t(-1), n}) {
    bool refused = false;
    try {
      (void)tok->decode({bad});
    } catch (const attnscope::Error&) {
      refused = true;
    }
    if (!refused) std::abort();
  }
  return 0;
}
