// Printable labels for the tokens of a captured window (axes of maps, CSV headers, GUI hovers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

class CaptureStore;

// Each token as its text piece, newlines and tabs escaped ("\n", "\t"); "#<id>" for every token
// when the tokenizer the capture recorded is no longer there (the figure stays usable).
std::vector<std::string> token_labels(const CaptureStore& store, const std::vector<int64_t>& ids);

}  // namespace attnscope
