// The head analysis' option tables (analysis_options.h).
#include "attnscope/analysis/analysis_options.h"

#include "attnscope/attention/feature_map.h"
#include "attnscope/base/option_defs.h"

namespace attnscope {

void check_analysis_feature_map(const std::string& name) {
  if (name.empty()) return;  // softmax only
  option_detail::check_choice(opt::feature_map, name, feature_map_names());
}

namespace {
bool analysis_has_map(const AnalysisOptions& o) { return !o.feature_map.empty(); }
bool analysis_has_mixers(const AnalysisOptions& o) { return o.mixer_state > 0; }
bool analysis_has_map_or_mixers(const AnalysisOptions& o) { return analysis_has_map(o) || analysis_has_mixers(o); }
}  // namespace

const OptionTable<AnalysisOptions>& analysis_option_table() {
  using A = AnalysisOptions;
  static const OptionTable<A> rows = [] {
    Option<A> map = described(bind_checked(opt::feature_map, &A::feature_map, check_analysis_feature_map),
                              "also measure this feature map's linear attention (e.g. prf, hedgehog, elu; \"\": softmax only)");
    map.choices = feature_map_names();
    return OptionTable<A>{
        map,
        only_when(described(bind(with_range(opt::features, whole_range(0, opt::kMaxFeatures)), &A::features, 0),
                            "feature dimension M of the feature map (0: its natural size, where it has one)"),
                  analysis_has_map),
        only_when(described(bind(opt::window, &A::window, 0),
                            "hybrid heads: each query attends its last W keys with softmax weights and older keys through "
                            "the feature map, one normalizer, balance 1/2 (0 = the feature map alone); with "
                            "--mixer-state, also the mixers' window class (the last W keys exact, SSD beyond)"),
                  analysis_has_map_or_mixers),
        only_when(omitted_at_default(described(bind(opt::decay, &A::decay, parse_decay, decay_name, decay_names()),
                            "decayed heads: none | fixed (each head's map times a^(i-j), a fitted to the head's "
                            "softmax by lag: where training's --decay-init fit starts) | gated (untrained, a gate "
                            "is that fixed decay: w = 0)")),
                  analysis_has_map),
        described(bind(opt::seed, &A::seed), "seed for the feature map and sampled pairs"),
        bind(opt::max_seqs, &A::max_seqs, 0),
        omitted_at_default(bind(opt::sample_rows, &A::sample_rows)),
        bind(opt::mixer_state, &A::mixer_state, 0),
        only_when(omitted_at_default(bind(opt::mixer_tokens, &A::mixer_tokens)), analysis_has_mixers),
    };
  }();
  return rows;
}

void check_analysis_options(const AnalysisOptions& o) {
  if (!o.feature_map.empty() && o.features == 0 && !feature_map_has_fixed_size(o.feature_map))
    fail_value(opt::features.quantity, "is missing: feature map " + o.feature_map + " needs one (e.g. 64)");
  if (o.window > 0 && o.feature_map.empty() && o.mixer_state == 0)
    fail_value(opt::window.quantity, std::to_string(o.window) + " needs a feature map (" + long_flag(opt::feature_map.flags) +
                                         "): a hybrid head mixes softmax with a feature map's linear attention; or " +
                                         long_flag(opt::mixer_state.flags) + " for the mixers' window class");
}

const OptionTable<MetricsCommand>& metrics_command_option_table() {
  static const OptionTable<MetricsCommand> rows = [] {
    OptionTable<MetricsCommand> t = {described(bind(opt::capture, &MetricsCommand::capture), "capture directory")};
    nest_rows(t, &MetricsCommand::analysis, analysis_option_table());
    return t;
  }();
  return rows;
}

const OptionTable<MapsCommand>& maps_command_option_table() {
  static const OptionTable<MapsCommand> rows = [] {
    using M = MapsCommand;
    OptionTable<M> t = {
        described(bind(opt::capture, &M::capture), "capture directory"),
        bind(opt::layer, &M::layer),
        bind(opt::head, &M::head),
        bind(opt::seq, &M::seq),
    };
    for (const Option<AnalysisOptions>& row : analysis_option_table())
      if (row.flag() != "--mixer-state" && row.flag() != "--mixer-tokens") t.push_back(nest(&M::analysis, row));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
