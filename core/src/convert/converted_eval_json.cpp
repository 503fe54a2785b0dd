#include "attnscope/convert/converted_eval_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace attnscope {

nlohmann::json converted_eval_to_json(const ConvertedEvaluation& e) {
  const auto loss_json = [](double loss) { return nlohmann::json{{"loss", loss}, {"perplexity", std::exp(loss)}}; };
  nlohmann::json layers = nlohmann::json::array(), speed = nlohmann::json::array();
  for (const auto& l : e.layers)
    layers.push_back({{"layer", l.layer}, {"attention_kl", l.attention_kl}, {"output_rel_error", l.output_rel_error}});
  for (const auto& s : e.speed)
    speed.push_back({{"seq_len", s.seq_len},
                     {"mode", s.generate ? "generate" : "batch"},
                     {"softmax_tokens_per_s", s.softmax_tokens_per_s},
                     {"linear_tokens_per_s", s.linear_tokens_per_s},
                     {"softmax_peak_bytes", s.softmax_peak_bytes},
                     {"linear_peak_bytes", s.linear_peak_bytes}});
  nlohmann::json positions = nlohmann::json::array();
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  for (const auto& p : e.positions)
    positions.push_back({{"first", p.first}, {"last", p.last}, {"tokens", p.tokens},
                         {"original_loss", num(p.original_loss)}, {"converted_loss", num(p.converted_loss)},
                         {"attention_kl", num(p.attention_kl)}});
  nlohmann::json recall = nlohmann::json::array();
  for (const auto& b : e.recall)
    recall.push_back({{"lag", b.lag}, {"sequences", b.sequences}, {"original_drop", b.original_drop},
                      {"original_se", num(b.original_se)}, {"converted_drop", b.converted_drop},
                      {"converted_se", num(b.converted_se)}, {"measurable", b.measurable()}, {"kept", num(b.kept())}});
  nlohmann::json generation;
  if (e.generation)
    generation = {{"prompts", e.generation->prompts}, {"new_tokens", e.generation->new_tokens},
                  {"token_match", e.generation->token_match}, {"first_divergence", e.generation->first_divergence},
                  {"free_running_kl", e.generation->free_running_kl}};
  return {{"tokens", e.tokens},
          {"seq_len", e.seq_len},
          {"compute_dtype", e.compute_dtype},
          {"trained_length", e.trained_length},
          {"beyond_trained_length", e.beyond_trained_length()},
          {"positions", positions},
          {"closeness_windows", e.closeness_windows},
          {"original", loss_json(e.original_loss)},
          {"converted", loss_json(e.converted_loss)},
          {"layers", layers},
          {"speed", speed},
          {"recall", recall},
          {"generation", generation}};
}

}  // namespace attnscope
