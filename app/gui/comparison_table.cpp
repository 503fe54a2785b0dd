#include "comparison_table.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace attnscope::gui {

namespace {

std::string significant(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string ratio(double converted, double original) {
  if (!(original > 0)) return "";
  return "×" + fmt_number(converted / original, 2);
}

}  // namespace

Table comparison_table(const ConvertedEvaluation& e) {
  Table t;
  t.caption = "Converted (linear attention) vs original (softmax) on " + std::to_string(e.tokens) + " tokens, windows of " +
              std::to_string(e.seq_len);
  t.header = {"measure", "original (softmax)", "converted (linear)", "change"};
  const double d = e.converted_loss - e.original_loss;
  t.add_row({"loss (nats/token)", fmt_number(e.original_loss, 4), fmt_number(e.converted_loss, 4),
             (d >= 0 ? "+" : "") + fmt_number(d, 4)});
  const double ppl_o = std::exp(e.original_loss), ppl_c = std::exp(e.converted_loss);
  t.add_row({"perplexity", fmt_number(ppl_o, 3), fmt_number(ppl_c, 3), ratio(ppl_c, ppl_o)});
  for (const LayerCloseness& l : e.layers) {
    const std::string layer = "layer " + std::to_string(l.layer);
    t.add_row({layer + " attention KL (nats)", "—", significant(l.attention_kl, 4), ""});
    t.add_row({layer + " output rel. error", "—", significant(l.output_rel_error, 4), ""});
  }
  for (const SpeedEntry& s : e.speed)
    t.add_row({std::string("tokens/s, ") + (s.generate ? "generate " : "batch ") + std::to_string(s.seq_len),
               fmt_number(s.softmax_tokens_per_s, 1), fmt_number(s.linear_tokens_per_s, 1),
               ratio(s.linear_tokens_per_s, s.softmax_tokens_per_s)});
  return t;
}

}  // namespace attnscope::gui
