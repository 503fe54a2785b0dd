// Sample text as token ids (text_ids.h).
#include "attnscope/text_ids.h"

#include "attnscope/tokenizer.h"

namespace attnscope {

std::vector<int64_t> text_token_ids(const Tokenizer& tokenizer, const std::vector<TextDocument>& documents) {
  std::vector<int64_t> ids;
  for (const auto& d : documents) {
    const auto t = tokenizer.encode_for_model(d.text);
    ids.insert(ids.end(), t.begin(), t.end());
    if (tokenizer.eos_id() >= 0 && !tokenizer.adds_bos()) ids.push_back(tokenizer.eos_id());
  }
  return ids;
}

}  // namespace attnscope
