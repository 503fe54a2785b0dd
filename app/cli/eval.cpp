// `attnscope eval`: mean next-token loss and perplexity of a model on a text. On a converted model
// (SPEC 7) also the comparison with its original: loss, per-layer attention KL and output error,
// and tokens/s of softmax against linear attention (core: converted_eval.h).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/converted_eval_json.h"
#include "attnscope/base/error.h"
#include "attnscope/io/text_source.h"
#include "common.h"

namespace attnscope::cli {
namespace {

void print_table(const ConvertedEvaluation& e) {
  std::printf("tokens %lld, windows of %d (closeness on %d of them)\n\n", (long long)e.tokens, e.seq_len,
              e.closeness_windows);
  std::printf("%-10s %12s %12s\n", "model", "loss", "perplexity");
  std::printf("%-10s %12.4f %12.3f\n", "original", e.original_loss, std::exp(e.original_loss));
  std::printf("%-10s %12.4f %12.3f\n\n", "converted", e.converted_loss, std::exp(e.converted_loss));
  std::printf("%-6s %14s %18s\n", "layer", "attention KL", "output rel error");
  for (const auto& l : e.layers) std::printf("%-6d %14.5f %18.5f\n", l.layer, l.attention_kl, l.output_rel_error);
  std::printf("\n%-9s %8s %16s %16s %8s %14s %14s\n", "mode", "seq_len", "softmax tok/s", "linear tok/s", "speedup",
              "softmax peak", "linear peak");
  for (const auto& s : e.speed)
    std::printf("%-9s %8d %16.1f %16.1f %8.2f %12.2f MB %12.2f MB\n", s.generate ? "generate" : "batch", s.seq_len,
                s.softmax_tokens_per_s, s.linear_tokens_per_s, s.linear_tokens_per_s / s.softmax_tokens_per_s,
                s.softmax_peak_bytes / 1e6, s.linear_peak_bytes / 1e6);
  std::printf("(peak: extra tensor memory of one run above the weights)\n");
}

}  // namespace

void register_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Mean next-token loss (nats) and perplexity on a text; on a converted model, "
                                         "the comparison with its original (closeness and speed)");
  auto args = std::make_shared<ModelArgs>();
  auto texts = std::make_shared<std::vector<std::string>>();
  auto seq_len = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  auto speed_lengths = std::make_shared<std::vector<int>>();
  auto windows = std::make_shared<int>(4);
  auto min_seconds = std::make_shared<double>(0.2);
  args->add_to(cmd);
  cmd->add_option("-t,--text", *texts, ".txt or .jsonl files, or - for standard input")->required();
  cmd->add_option("-L,--seq-len", *seq_len, "window length in tokens (default: the context length)");
  cmd->add_option("--speed-lengths", *speed_lengths,
                  "converted models: sequence lengths to time (default 64, 128, ... up to the context length or 4096)")
      ->delimiter(',');
  cmd->add_option("--closeness-windows", *windows,
                  "converted models: windows of the text for attention KL and output error")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--min-seconds", *min_seconds, "converted models: each timing runs at least this long")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([=] {
    auto docs = read_text_documents(*texts);
    LoadedModel m = args->load();
    const std::vector<int64_t> ids = encode_documents(*m.tokenizer, docs);
    const int L = *seq_len > 0 ? *seq_len : m.model->config().n_ctx;
    if (L > m.model->config().n_ctx)
      fail("--seq-len", std::to_string(L) + " exceeds the context length " + std::to_string(m.model->config().n_ctx));
    if (m.model->feature_maps()) {
      ConvertedEvalOptions o;
      o.seq_len = L;
      o.closeness_windows = *windows;
      o.speed_lengths = *speed_lengths;
      o.min_seconds = *min_seconds;
      const ConvertedEvaluation e = evaluate_converted(*m.model, ids, o, terminal_progress("eval"));
      if (*json)
        std::cout << converted_eval_to_json(e).dump(2) << "\n";
      else
        print_table(e);
      return;
    }
    const double loss = m.model->mean_loss(ids, L, terminal_progress("eval"));
    if (*json) {
      std::cout << nlohmann::json{{"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", ids.size()}, {"seq_len", L}}.dump(2)
                << "\n";
    } else {
      std::cout << "tokens      " << ids.size() << "\nseq_len     " << L << "\nloss        " << loss
                << " nats/token\nperplexity  " << std::exp(loss) << "\n";
    }
  });
}

}  // namespace attnscope::cli
