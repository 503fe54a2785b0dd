// The Train tab's final table of a linearize run, as one of core's tables (so it exports as
// Markdown, LaTeX or CSV like every table): per length, the held-out perplexity of the original, the
// original finetuned with softmax attention (the anchor), the same maps untrained, stage 1 and the
// final model, the numbers of OUT/linearize.json (read by core's read_linearize_report).
#pragma once
#include "attnscope/base/table.h"
#include "attnscope/pipeline/linearize.h"

namespace attnscope::gui {

// Columns: tokens | original | original finetuned (softmax) | untrained map | stage 1 | final |
// final / original finetuned. Perplexities to 2 decimals ("-" without stage 2). The caption says
// what the text is: the held-out share (how many tokens, never trained on) and which row is the anchor.
Table linearize_table(const LinearizeReport& r);

}  // namespace attnscope::gui
