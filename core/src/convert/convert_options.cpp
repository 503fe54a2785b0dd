// The option tables of convert and eval (convert_options.h).
#include "attnscope/convert/convert_options.h"

#include "attnscope/analysis/analysis_options.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/base/option_defs.h"

namespace attnscope {

namespace {

using ConvertRow = Option<ConvertCommand>;

bool convert_without_job(const ConvertCommand& c) { return c.job.empty(); }
bool convert_with_decay(const ConvertCommand& c) { return c.job.empty() && c.decay != Decay::None; }

// A row of the map's spec (FeatureMapSpec), reached through the command's ConvertOptions; written
// back only without a job.
ConvertRow map_row(const Option<FeatureMapSpec>& row) {
  return only_when(nest(&ConvertCommand::convert, nest(&ConvertOptions::map, row)), convert_without_job);
}

}  // namespace

const OptionTable<ConvertCommand>& convert_command_option_table() {
  using C = ConvertCommand;
  using F = FeatureMapSpec;
  static const OptionTable<C> rows = [] {
    OptionTable<C> t;
    nest_rows(t, &C::model, model_option_table());
    t.push_back(bind(opt::job, &C::job));
    Option<F> map = described(bind_checked(opt::feature_map, &F::name, check_analysis_feature_map),
                              "untrained map of every head (prf, elu, hedgehog, learned-prf, ...)");
    map.choices = feature_map_names();
    t.push_back(map_row(map));
    t.push_back(only_when(described(bind(opt::features, &C::features, 0), "feature dimension M of every head"),
                          convert_without_job));
    t.push_back(described(bind(opt::allocation, &C::allocation), "per-layer dimensions from `attnscope allocate --json`"));
    t.push_back(only_when(nest(&C::convert, described(bind(opt::window, &ConvertOptions::window, 0),
                                                      "untrained hybrid heads: softmax over the last W keys beside the "
                                                      "map, balance 1/2 (0: plain linear attention)")),
                          convert_without_job));
    t.push_back(only_when(omitted_at_default(bind(opt::decay, &C::decay, parse_decay, decay_name, decay_names())),
                          convert_without_job));
    t.push_back(only_when(bind(opt::decay_init, &C::decay_init, parse_decay_init, decay_init_name, decay_init_names()),
                          convert_with_decay));
    t.push_back(only_when(described(bind(opt::capture, &C::capture), "--decay-init fit: a capture of the model (attnscope capture)"),
                          convert_with_decay));
    t.push_back(map_row(described(bind(opt::seed, &F::seed),
                                  "seed of the maps' random draws (head (s, h) uses derive_seed(seed, s, h))")));
    t.push_back(map_row(described(bind(opt::init, &F::init), "initialization (family default when empty)")));
    t.push_back(map_row(omitted_at_default(
        described(bind(opt::activation, &F::activation, std::vector<std::string>{"exp", "softmax", "softmax-joint"}),
                  "hedgehog: exp | softmax | softmax-joint"))));
    t.push_back(map_row(described(bind(opt::untied, &F::tied, false), "hedgehog, t2r: separate query and key maps")));
    t.push_back(map_row(omitted_at_default(bind(opt::temperature, &F::temperature))));
    t.push_back(omitted_at_default(bind(opt::weights, &C::weights, std::vector<std::string>{"copy", "reference"})));
    return t;
  }();
  return rows;
}

const OptionTable<EvalOptions>& eval_option_table() {
  using E = EvalOptions;
  using CE = ConvertedEvalOptions;
  static const OptionTable<E> rows = [] {
    OptionTable<E> t;
    nest_rows(t, &E::model, model_option_table());
    t.push_back(described(bind(opt::texts, &E::texts), ".txt or .jsonl files, or - for standard input"));
    t.push_back(described(bind_list(opt::seq_len, &E::seq_lens),
                          "window lengths in tokens, e.g. 128,512 (default: the context length); each is evaluated"));
    t.push_back(bind(opt::original_model, &E::original));
    t.push_back(nest(&E::converted, bind(opt::closeness_windows, &CE::closeness_windows)));
    t.push_back(nest(&E::converted, bind_list(opt::speed_lengths, &CE::speed_lengths)));
    t.push_back(nest(&E::converted, described(bind(opt::min_seconds, &CE::min_seconds),
                                              "converted models: each timing runs at least this long")));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
