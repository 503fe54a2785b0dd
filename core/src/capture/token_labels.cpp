#include "attnscope/capture/token_labels.h"

#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"

namespace attnscope {

std::vector<std::string> token_labels(const CaptureStore& store, const std::vector<int64_t>& ids) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = store.load_tokenizer();
  } catch (const Error&) {
    tok.reset();  // the tokenizer moved: label by id
  }
  std::vector<std::string> labels;
  for (int64_t id : ids) {
    const std::string s = tok ? tok->piece(id) : "#" + std::to_string(id);
    std::string clean;
    for (char c : s) clean += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    labels.push_back(clean);
  }
  return labels;
}

}  // namespace attnscope
