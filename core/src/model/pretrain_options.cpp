// The option table of `attnscope pretrain` (pretrain.h).
#include "attnscope/base/option_defs.h"
#include "attnscope/model/pretrain.h"

namespace attnscope {

const OptionTable<PretrainCommand>& pretrain_option_table() {
  using PC = PretrainCommand;
  using P = PretrainOptions;
  static const OptionTable<PC> rows = [] {
    OptionTable<PC> t = {described(bind(opt::texts, &PC::texts), "training text: .txt / .jsonl files or -")};
    const OptionTable<P> pretrain = {
        described(bind(opt::vocab, &P::vocab_size), "tokenizer vocabulary size (at least 300)"),
        bind(opt::layers, &P::n_layer),
        bind(opt::heads, &P::n_head),
        bind(opt::d_model, &P::d_model),
        bind(opt::context, &P::n_ctx),
        described(bind(opt::steps, &P::steps), "optimizer steps"),
        described(bind(opt::batch, &P::batch), "sequences per step"),
        described(bind(opt::lr, &P::lr), "peak learning rate"),
        bind(opt::eval_every, &P::eval_every),
        described(bind(opt::seed, &P::seed), "seed"),
    };
    nest_rows(t, &PC::pretrain, pretrain);
    return t;
  }();
  return rows;
}

}  // namespace attnscope
