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
  auto texts = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto o = std::make_shared<PretrainOptions>();
  cmd->add_option("-t,--text", *texts, "training text: .txt / .jsonl files or -")->required();
  cmd->add_option("-o,--out", *out, "output model directory (Hugging Face layout)")->required();
  cmd->add_option("--vocab", o->vocab_size, "tokenizer vocabulary size")->capture_default_str();
  cmd->add_option("--layers", o->n_layer, "layers")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--heads", o->n_head, "attention heads")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--d-model", o->d_model, "hidden size")->capture_default_str()->check(CLI::Range(8, 8192));
  cmd->add_option("--context", o->n_ctx, "context length")->capture_default_str()->check(CLI::Range(8, 65536));
  cmd->add_option("--steps", o->steps, "optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--lr", o->lr, "peak learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--eval-every", o->eval_every, "steps between held-out evaluations")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->seed, "seed")->capture_default_str();
  cmd->callback([=] {
    std::string corpus;
    for (const auto& d : read_text_documents(*texts)) corpus += d.text + "\n";
    auto rep = pretrain_gpt2(corpus, *o, *out, terminal_progress("pretrain"),
                             [](const std::string& line) { std::cerr << "\r" << line << "\033[K\n"; });
    std::cout << "held-out loss " << rep.final_heldout_loss << " nats (unigram baseline " << rep.unigram_heldout_loss
              << ") after " << o->steps << " steps, " << int(rep.seconds) << " s -> " << *out << "\n";
  });
}

}  // namespace attnscope::cli
