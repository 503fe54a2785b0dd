// Sample text as one stream of token ids, as `attnscope eval` and the workbench's evaluation read
// it: each document's tokens in order, followed by EOS when the tokenizer has one and adds no BOS
// (so documents do not run into each other).
#pragma once
#include <cstdint>
#include <vector>

#include "attnscope/text_source.h"

namespace attnscope {

class Tokenizer;

std::vector<int64_t> text_token_ids(const Tokenizer& tokenizer, const std::vector<TextDocument>& documents);

}  // namespace attnscope
