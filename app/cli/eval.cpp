// `attnscope eval`: mean next-token loss and perplexity of a model on a text.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/error.h"
#include "attnscope/text_source.h"
#include "common.h"

namespace attnscope::cli {

void register_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Mean next-token loss (nats) and perplexity on a text");
  auto args = std::make_shared<ModelArgs>();
  auto texts = std::make_shared<std::vector<std::string>>();
  auto seq_len = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  args->add_to(cmd);
  cmd->add_option("-t,--text", *texts, ".txt or .jsonl files, or - for standard input")->required();
  cmd->add_option("-L,--seq-len", *seq_len, "window length in tokens (default: the context length)");
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([=] {
    auto docs = read_text_documents(*texts);
    LoadedModel m = args->load();
    std::vector<int64_t> ids;
    for (const auto& d : docs) {
      auto t = m.tokenizer->encode_for_model(d.text);
      ids.insert(ids.end(), t.begin(), t.end());
      if (m.tokenizer->eos_id() >= 0 && !m.tokenizer->adds_bos()) ids.push_back(m.tokenizer->eos_id());
    }
    const int L = *seq_len > 0 ? *seq_len : m.model->config().n_ctx;
    if (L > m.model->config().n_ctx)
      fail("--seq-len", std::to_string(L) + " exceeds the context length " + std::to_string(m.model->config().n_ctx));
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
