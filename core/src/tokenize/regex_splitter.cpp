#include "regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "attnscope/base/error.h"
#include "utf8.h"

namespace attnscope {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // MATCH_INVALID_UTF: tokenizer input may hold any bytes; without it PCRE2 rejects the subject.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                                   &err_offset, nullptr);
  if (!code)
    fail(where, "bad pre-tokenizer regex at offset " + std::to_string(err_offset) + ": " +
                    pcre2_message(err));
  code_ = code;
  // JIT is several times faster; the interpreter gives the same matches when JIT is unavailable.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  if (!md) fail(where_, "out of memory creating regex match data");

  std::vector<std::string_view> pieces;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;        // where the next search starts
  std::size_t gap_start = 0;  // start of the text not yet emitted
  while (pos < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md.get(), nullptr)
                        : pcre2_match(code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail(where_, "regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match would loop forever: step over one character and keep it in the gap.
      if (begin >= text.size()) break;
      pos = begin + utf8_split_len(text, begin);
      continue;
    }
    if (begin > gap_start) pieces.push_back(text.substr(gap_start, begin - gap_start));
    pieces.push_back(text.substr(begin, end - begin));
    pos = gap_start = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
  return pieces;
}

}  // namespace attnscope
