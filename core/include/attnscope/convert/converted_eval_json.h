// A converted model's evaluation as JSON: the schema of `attnscope eval --json` (SPEC 7), which
// `attnscope compare` repeats per strategy, kept beside the results so both write the same thing.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "attnscope/convert/converted_eval.h"

namespace attnscope {

// {tokens, seq_len, closeness_windows, original: {loss, perplexity}, converted: {loss, perplexity},
//  layers: [{layer, attention_kl, output_rel_error}], speed: [{seq_len, mode: "batch" | "generate",
//  softmax_tokens_per_s, linear_tokens_per_s, softmax_peak_bytes, linear_peak_bytes}]}
nlohmann::json converted_eval_to_json(const ConvertedEvaluation& evaluation);

}  // namespace attnscope
