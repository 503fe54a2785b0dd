// `attnscope generate`: greedy decoding. --steps counts like llama2.c's `run -n`: the output holds
// that many tokens in all, prompt included (BOS not counted), so results compare one to one with
// run.c; --new-tokens counts only what is generated. --prompts FILE: one prompt per line, decoded as
// one batch (Model::generate_greedy_batch), each continuation printed when all are done.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "common.h"

namespace attnscope::cli {

namespace {

// The BOS the tokenizer puts before a prompt's tokens, which --steps does not count (run.c): 1 or 0.
int leading_bos(const Tokenizer& tok, const std::vector<int64_t>& ids) {
  return !ids.empty() && ids.front() == tok.bos_id() && tok.adds_bos() ? 1 : 0;
}
// Where generation stops: llama2.c's models separate stories with BOS; HF models end a text with EOS.
int64_t stop_token(const Tokenizer& tok) { return tok.kind() == "llama2c" ? tok.bos_id() : tok.eos_id(); }

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation: print the prompt and its continuation");
  auto o = std::make_shared<GenerateOptions>();
  o->model.model = default_model();
  add_option_table(cmd, generate_option_table(), o);
  exclusive(cmd, {"--steps", "--new-tokens"});
  exclusive(cmd, {"--prompt", "--prompts"});
  cmd->callback([=] {
    if (o->steps == 0 && o->new_tokens == 0) o->steps = GenerateOptions::kDefaultSteps;
    const int steps = int(o->steps), new_tokens = int(o->new_tokens);
    if (!o->prompts.empty()) {  // one batch, read before the model is loaded
      std::vector<std::string> lines;
      {
        std::ifstream in(o->prompts);
        if (!in) fail(o->prompts, "cannot be read (--prompts)");
        for (std::string line; std::getline(in, line);)
          if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
      }
      if (lines.empty()) fail(o->prompts, "has no prompt (one per line)");
      LoadedModel m = load_model_of(o->model);
      const Tokenizer& tok = *m.tokenizer;
      std::vector<std::vector<int64_t>> ids;
      int todo = new_tokens;
      for (const std::string& line : lines) {
        ids.push_back(tok.encode_for_model(line));
        if (ids.back().empty()) fail(o->prompts, "line " + std::to_string(ids.size()) + " encodes to no token");
        if (new_tokens == 0) todo = std::max(todo, steps - (int(ids.back().size()) - leading_bos(tok, ids.back())));
      }
      const auto out = m.model->generate_greedy_batch(ids, std::max(todo, 0), stop_token(tok));
      for (size_t b = 0; b < out.size(); ++b) {
        // --steps counts the output of each prompt: a shorter prompt's sequence is cut there.
        size_t keep = out[b].size();
        if (new_tokens == 0)
          keep = std::min(keep, size_t(std::max<int64_t>(int64_t(ids[b].size()), steps + leading_bos(tok, ids[b]))));
        std::cout << tok.decode(std::vector<int64_t>(out[b].begin(), out[b].begin() + int64_t(keep))) << "\n";
        if (b + 1 < out.size()) std::cout << "\n";
      }
      return;
    }
    LoadedModel m = load_model_of(o->model);
    const Tokenizer& tok = *m.tokenizer;
    std::vector<int64_t> ids = tok.encode_for_model(o->prompt);
    const int bos = leading_bos(tok, ids);  // before an unconditioned prompt's EOS below
    const bool unconditioned = ids.empty();
    if (unconditioned) {
      if (tok.eos_id() < 0) fail("--prompt", "empty prompt and the tokenizer has no BOS/EOS token to start from");
      ids.push_back(tok.eos_id());  // GPT-2 style: <|endoftext|> starts an unconditioned sample
    }
    const int counted = int(ids.size()) - bos;
    const int todo = new_tokens > 0 ? new_tokens : std::max(0, steps - counted);
    const int64_t stop = stop_token(tok);
    // Stream: print what each new token adds to the decoded text (decoding the whole sequence
    // keeps multi-byte characters and the tokenizer's spacing rules right).
    const size_t skip = unconditioned ? 1 : 0;
    auto text_of = [&](const std::vector<int64_t>& seq) {
      return tok.decode(std::vector<int64_t>(seq.begin() + skip, seq.end()));
    };
    std::string shown = text_of(ids);
    std::cout << shown << std::flush;
    const auto out = m.model->generate_greedy(ids, todo, stop, [&](const std::vector<int64_t>& seq) {
      const std::string now = text_of(seq);
      if (now.size() > shown.size() && now.compare(0, shown.size(), shown) == 0) {
        std::cout << now.substr(shown.size()) << std::flush;
        shown = now;
      }
    });
    const std::string final_text = text_of(out);
    if (final_text.compare(0, shown.size(), shown) == 0) std::cout << final_text.substr(shown.size());
    std::cout << "\n";
  });
}

}  // namespace attnscope::cli
