// `attnscope pretrain`: train a small GPT-2 (tokenizer included) on plain text. This is how the
// bundled model under resources/models/ was made (see its README for the exact command).
#include <iostream>

#include "attnscope/base/error.h"
#include "attnscope/model/pretrain.h"
#include "attnscope/io/text_source.h"
#include "common.h"

namespace attnscope::cli {

void register_pretrain(CLI::App& app) {
  auto* cmd = app.add_subcommand("pretrain", "Train a small GPT-2 model and its byte-level BPE tokenizer on text");
  auto c = std::make_shared<PretrainCommand>();
  auto output = std::make_shared<OutputOptions>();
  add_option_table(cmd, pretrain_option_table(), c);
  require(cmd, "--text");
  add_out_option(cmd, output, "output model directory (Hugging Face layout)", true);
  cmd->callback([=] {
    const PretrainOptions* o = &c->pretrain;
    const std::string* out = &output->out;
    std::string corpus;
    for (const auto& d : read_text_documents(c->texts)) corpus += d.text + "\n";
    auto rep = pretrain_gpt2(corpus, *o, *out, terminal_progress("pretrain"),
                             [](const std::string& line) { std::cerr << "\r" << line << "\033[K\n"; });
    std::cout << "held-out loss " << rep.final_heldout_loss << " nats (unigram baseline " << rep.unigram_heldout_loss
              << ") after " << o->steps << " steps, " << int(rep.seconds) << " s -> " << *out << "\n";
  });
}

}  // namespace attnscope::cli
