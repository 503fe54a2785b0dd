// The option table of `attnscope compare` (compare.h).
#include "attnscope/attention/map_family.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/pipeline/compare.h"

namespace attnscope {

const OptionTable<CompareOptions>& compare_option_table() {
  using C = CompareOptions;
  static const OptionTable<C> rows = {
      described(bind(opt::model, &C::model), "model directory, HF cache name or llama2.c .bin (default: the bundled model)"),
      compute_dtype_option<C>(),
      described(bind(opt::texts, &C::texts), ".txt or .jsonl files; the tail (--heldout-share) is held out"),
      described(bind(opt::budget, &C::budget, 0), "cost C: the mean feature dimension per layer"),
      bind(opt::lambda, &C::lambda, parse_lambda, lambda_arg),
      bind(opt::feature_map, &C::feature_map, trainable_map_names()),
      described(bind(opt::loss, &C::loss, parse_distill_loss, distill_loss_name, distill_loss_names()),
                "distillation loss: kl | softmax | l2 | output"),
      described(bind(opt::steps, &C::steps), "distillation steps per strategy"),
      bind(opt::features_from, &C::features_from, std::vector<std::string>{"capture"}),
      described(bind(opt::heldout_share, &C::heldout_share), "share of the text held out for evaluation"),
      described(bind(opt::seq_len, &C::seq_len, 0), "window length (default: the context length, at most 256)"),
      described(bind(opt::num_seqs, &C::num_seqs), "capture windows"),
      bind(opt::dof_samples, &C::dof_samples),
      described(bind(opt::closeness_windows, &C::closeness_windows), "held-out windows for attention KL"),
      bind(opt::min_seconds, &C::min_seconds),
      described(bind(opt::seed, &C::seed), "capture, maps and mini-batches"),
  };
  return rows;
}

}  // namespace attnscope
