// `attnscope eval`: mean next-token loss and perplexity of a model on a text. On a converted model
// (SPEC 7) also the comparison with its original: loss, per-layer attention KL and output error,
// and tokens/s of softmax against linear attention (core: converted_eval.h).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/base/option_defs.h"
#include "attnscope/convert/convert_options.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_eval_json.h"
#include "attnscope/base/error.h"
#include "attnscope/io/text_source.h"
#include "common.h"

namespace attnscope::cli {
namespace {

void print_table(const ConvertedEvaluation& e) {
  std::printf("tokens %lld, windows of %d (closeness on %d of them), computing in %s\n\n", (long long)e.tokens, e.seq_len,
              e.closeness_windows, e.compute_dtype.c_str());
  std::printf("%-10s %12s %12s\n", "model", "loss", "perplexity");
  std::printf("%-10s %12.4f %12.3f\n", "original", e.original_loss, std::exp(e.original_loss));
  std::printf("%-10s %12.4f %12.3f\n\n", "converted", e.converted_loss, std::exp(e.converted_loss));
  std::printf("%-12s %8s %12s %12s %14s\n", "positions", "tokens", "original", "converted", "attention KL");
  for (const auto& p : e.positions)
    std::printf("%5d-%-6d %8lld %12.4f %12.4f %14.5f\n", p.first, p.last, (long long)p.tokens, p.original_loss,
                p.converted_loss, p.attention_kl);
  std::printf("\n");
  std::printf("%-6s %14s %18s\n", "layer", "attention KL", "output rel error");
  for (const auto& l : e.layers) std::printf("%-6d %14.5f %18.5f\n", l.layer, l.attention_kl, l.output_rel_error);
  std::printf("\n%-9s %8s %16s %16s %8s %14s %14s\n", "mode", "seq_len", "softmax tok/s", "linear tok/s", "speedup",
              "softmax peak", "linear peak");
  std::printf("(generate: softmax with a key-value cache, linear with its recurrent state)\n");
  for (const auto& s : e.speed)
    std::printf("%-9s %8d %16.1f %16.1f %8.2f %12.2f MB %12.2f MB\n", s.generate ? "generate" : "batch", s.seq_len,
                s.softmax_tokens_per_s, s.linear_tokens_per_s, s.linear_tokens_per_s / s.softmax_tokens_per_s,
                s.softmax_peak_bytes / 1e6, s.linear_peak_bytes / 1e6);
  std::printf("(peak: extra tensor memory of one run above the weights)\n");
  if (!e.recall.empty()) {
    std::printf("\nrecall at distance (a segment written twice; drop: loss on the first copy minus the second, nats)\n");
    std::printf("%8s %20s %20s %8s\n", "lag", "original drop", "converted drop", "kept");
    for (const auto& b : e.recall) {
      std::printf("%8d %11.4f ± %6.4f %11.4f ± %6.4f ", b.lag, b.original_drop, b.original_se, b.converted_drop, b.converted_se);
      if (b.measurable()) std::printf("%8.3f\n", b.kept());
      else std::printf("%8s\n", "-");
    }
    std::printf("(kept: where the original copies at all, its drop above twice its standard error)\n");
  }
  if (e.generation)
    std::printf("\ngeneration (%d prompts, %d greedy tokens): tokens as the original's %.3f, first different token %.1f, "
                "free-running KL %.4f nats/token\n",
                e.generation->prompts, e.generation->new_tokens, e.generation->token_match, e.generation->first_divergence,
                e.generation->free_running_kl);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Mean next-token loss (nats) and perplexity on a text; on a converted model, "
                                         "the comparison with its original (closeness and speed)");
  auto o = std::make_shared<EvalOptions>();
  auto format = std::make_shared<FormatOptions>();
  o->model.model = default_model();
  add_option_table(cmd, eval_option_table(), o);
  require(cmd, "--text");
  add_format_options(cmd, format, {OutputFormat::Json});
  cmd->callback([=] {
    const bool json = format->format == OutputFormat::Json;
    auto docs = read_text_documents(o->texts);
    LoadedModel m = load_model_of(o->model);
    const std::vector<int64_t> ids = encode_documents(*m.tokenizer, docs);
    // The model a converted one was made from, for recall and generation: the same shape and vocabulary.
    LoadedModel original;
    if (!o->original.empty()) {
      if (!m.model->feature_maps())
        throw CLI::ValidationError("--original", "compares a converted model with its original; " + m.path + " runs softmax attention");
      ModelOptions mo = o->model;
      mo.model = o->original;
      original = load_model_of(mo);
      const ModelConfig &a = m.model->config(), &b = original.model->config();
      if (a.n_layer != b.n_layer || a.n_head != b.n_head || a.d_model != b.d_model || a.vocab_size != b.vocab_size)
        fail(original.path, "is not the shape of " + m.path + " (layers, heads, width or vocabulary differ): not its original");
    }
    const int n_ctx = m.model->config().n_ctx;
    std::vector<int> lengths = o->seq_lens;
    if (lengths.empty()) lengths.push_back(n_ctx);
    for (int L : lengths)
      if (L > n_ctx)
        throw CLI::ValidationError(option_for_quantity(opt::seq_len.quantity), std::to_string(L) + " is outside 2.." +
                                                                                   std::to_string(n_ctx) + " (the context length)");
    // One result per length; the first carries the timings. With one length the JSON is that
    // result (SPEC 7); with several, the first's fields and "by_length" with all of them.
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < lengths.size(); ++i) {
      const int L = lengths[i];
      nlohmann::json j;
      if (m.model->feature_maps()) {
        ConvertedEvalOptions c = o->converted;
        c.seq_len = L;
        c.speed = i == 0;
        c.original = original.model.get();
        const ConvertedEvaluation e = evaluate_converted(*m.model, ids, c, terminal_progress("eval"));
        if (e.beyond_trained_length())
          std::cerr << "eval: warning: the maps were trained on " << e.trained_length << "-token windows and are evaluated at "
                    << L << " tokens; maps break beyond the length they were trained at (see the positions table)\n";
        j = converted_eval_to_json(e);
        if (!json) print_table(e);
      } else {
        const double loss = m.model->mean_loss(ids, L, terminal_progress("eval"));
        j = {{"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", ids.size()}, {"seq_len", L}};
        if (!json)
          std::cout << "tokens      " << ids.size() << "\nseq_len     " << L << "\nloss        " << loss
                    << " nats/token\nperplexity  " << std::exp(loss) << "\n";
      }
      if (!json && i + 1 < lengths.size()) std::cout << "\n";
      all.push_back(j);
    }
    if (json) {
      nlohmann::json out = all[0];
      if (all.size() > 1) out["by_length"] = all;
      std::cout << out.dump(2) << "\n";
    }
  });
}

}  // namespace attnscope::cli
