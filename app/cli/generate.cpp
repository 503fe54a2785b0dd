// `attnscope generate`: greedy decoding. --steps counts like llama2.c's `run -n`: the output holds
// that many tokens in all, prompt included (BOS not counted), so results compare one to one with
// run.c; --new-tokens counts only what is generated.
#include <iostream>

#include "attnscope/base/error.h"
#include "common.h"

namespace attnscope::cli {

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation: print the prompt and its continuation");
  auto o = std::make_shared<GenerateOptions>();
  o->model.model = default_model();
  add_option_table(cmd, generate_option_table(), o);
  exclusive(cmd, {"--steps", "--new-tokens"});
  cmd->callback([=] {
    if (o->steps == 0 && o->new_tokens == 0) o->steps = GenerateOptions::kDefaultSteps;
    const int steps = int(o->steps), new_tokens = int(o->new_tokens);
    LoadedModel m = load_model_of(o->model);
    const Tokenizer& tok = *m.tokenizer;
    std::vector<int64_t> ids = tok.encode_for_model(o->prompt);
    const bool bos = !ids.empty() && ids.front() == tok.bos_id() && tok.adds_bos();
    const bool unconditioned = ids.empty();
    if (unconditioned) {
      if (tok.eos_id() < 0) fail("--prompt", "empty prompt and the tokenizer has no BOS/EOS token to start from");
      ids.push_back(tok.eos_id());  // GPT-2 style: <|endoftext|> starts an unconditioned sample
    }
    const int counted = int(ids.size()) - (bos ? 1 : 0);
    const int todo = new_tokens > 0 ? new_tokens : std::max(0, steps - counted);
    // llama2.c's models separate stories with BOS; HF models end a text with EOS.
    const int64_t stop = tok.kind() == "llama2c" ? tok.bos_id() : tok.eos_id();
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
