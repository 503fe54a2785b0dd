// The workbench's comparison of a converted model with its original, as one of core's tables (so
// it exports as Markdown, LaTeX or CSV like every table): loss and perplexity, per-layer attention
// KL and output error, and tokens/s of softmax against linear attention. The numbers are
// `attnscope eval --json`'s on the same model and text.
#pragma once
#include "attnscope/convert/converted_eval.h"
#include "attnscope/base/table.h"

namespace attnscope::gui {

// Columns: measure | original (softmax) | converted (linear) | change. Loss to 4 decimals,
// perplexity to 3, KL and output error to 4 significant digits, tokens/s to 1 decimal; change is
// the loss difference, the perplexity ratio or the speed-up (converted / original).
Table comparison_table(const ConvertedEvaluation& e);

}  // namespace attnscope::gui
