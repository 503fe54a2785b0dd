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
  // What perplexity hides, in the same columns: the original's recall kept at each lag (the
  // original itself keeps 1), greedy generation's agreement with the original and the free-running KL.
  const auto num = [](double x, int digits) { return std::isfinite(x) ? fmt_number(x, digits) : std::string("-"); };
  for (const auto& x : r.recall)
    t.add_row({"recall kept, lag " + std::to_string(x.lag), x.measurable ? "1" : "no recall", x.measurable ? num(x.adapted_kept, 3) : "-",
               "-", "-", x.measurable ? num(x.final_kept, 3) : "-", "-"});
  if (r.final_generation) {
    const auto& a = r.adapted_generation;
    t.add_row({"greedy tokens as the original's", "1", a ? num(a->token_match, 3) : "-", "-", "-",
               num(r.final_generation->token_match, 3), "-"});
    t.add_row({"free-running KL from the original", "0", a ? num(a->free_running_kl, 4) : "-", "-", "-",
               num(r.final_generation->free_running_kl, 4), "-"});
  }
  if (!r.recall.empty())
    t.caption += " Below the lengths: how much of the original's in-context recall each model keeps by distance (\"no "
                 "recall\": the original does not copy at that lag), and how its greedy generation agrees with the "
                 "original's (linearize.md says how they are measured).";
  return t;
}

}  // namespace attnscope::gui
