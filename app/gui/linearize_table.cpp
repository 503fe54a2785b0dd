#include "linearize_table.h"

#include <cmath>
#include <string>

namespace attnscope::gui {

Table linearize_table(const LinearizeReport& r) {
  Table t;
  const std::string share =
      std::isfinite(r.heldout_share) ? "the last " + fmt_number(100 * r.heldout_share, 0) + "% of the text, " : "";
  t.caption = "Held-out perplexity (" + share + std::to_string(r.heldout_tokens) +
              " tokens never trained on) by window length. \"original finetuned\" is the original with softmax "
              "attention finetuned by stage 2's recipe: the anchor to compare \"final\" with.";
  t.header = {"tokens", "original", "original finetuned", "untrained map", "stage 1", "final", "final / original finetuned"};
  const auto ppl = [](double loss) { return std::isfinite(loss) ? fmt_number(std::exp(loss), 2) : std::string("-"); };
  for (const LengthResult& l : r.lengths)
    t.add_row({std::to_string(l.seq_len), ppl(l.original_loss), ppl(l.adapted_loss), ppl(l.untrained_loss),
               ppl(l.stage1_loss), ppl(l.final_loss),
               std::isfinite(l.adapted_loss) ? fmt_number(std::exp(l.final_loss - l.adapted_loss), 3) : std::string("-")});
  return t;
}

}  // namespace attnscope::gui
