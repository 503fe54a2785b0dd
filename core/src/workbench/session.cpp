#include "attnscope/workbench/session.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/json_file.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/base/names.h"
#include "attnscope/base/text_file.h"

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace attnscope {

namespace {

constexpr const char* kSessionFormat = "attnscope.session";
constexpr int kSessionVersion = 1;

constexpr Named<View> kViews[] = {
    {View::Heads, "heads"}, {View::Metrics, "metrics"}, {View::Dof, "dof"}, {View::Jobs, "jobs"}, {View::Training, "training"}};

constexpr Named<GridMetric> kGridMetrics[] = {
    {GridMetric::SoftmaxEntropy, "softmax entropy"},
    {GridMetric::SoftmaxNormalizedEntropy, "softmax normalized entropy"},
    {GridMetric::SoftmaxDecay, "fitted decay 1 - a"},
    {GridMetric::LinearEntropy, "linear entropy"},
    {GridMetric::LinearMonotonicity, "linear monotonicity"},
    {GridMetric::LinearDiscordant, "linear discordant pairs"},
    {GridMetric::Kl, "KL"},
    {GridMetric::Dof, "DoF"}};

// ---- saving: paths relative to the session file's directory ----

// `p` as seen from `base`. relative() resolves symlinks and "..", so a folder reached through a
// link still yields the short path; it is empty only when no relative path exists.
std::string relative_to(const std::string& p, const fs::path& base) {
  if (p.empty()) return p;
  std::error_code ec;
  const fs::path r = fs::relative(fs::absolute(p), base, ec);
  return ec || r.empty() ? fs::absolute(p).string() : r.string();
}

// The model and tokenizer may be Hugging Face cache names ("org/name"), not paths: only what
// exists on disk is made relative.
std::string relative_if_exists(const std::string& p, const fs::path& base) {
  std::error_code ec;
  return !p.empty() && fs::exists(p, ec) ? relative_to(p, base) : p;
}

// ---- loading: every value checked, errors naming the file and the key ----

// The session file's reader: the one typed JSON reader (json_file.h) and its paths.
struct Reader : JsonReader {
  fs::path base;  // the session file's directory, absolute

  Reader(std::string f, fs::path b) : JsonReader{std::move(f)}, base(std::move(b)) {}

  const ordered_json* object(const ordered_json& obj, const char* key) const { return JsonReader::object(obj, key, key); }

  // A stored path back to an absolute one, from the session file's directory.
  std::string path(const std::string& p) const {
    if (p.empty()) return p;
    return fs::weakly_canonical(base / p).string();
  }

  // The model and tokenizer: a path that exists beside the session resolves; "../x" or "./x" is a
  // path too even when it has gone (the workbench then names where it looked); anything else
  // missing is a Hugging Face cache name and stays as written.
  std::string model_path(const std::string& p) const {
    if (p.empty() || fs::path(p).is_absolute()) return p;
    std::error_code ec;
    if (fs::exists(base / p, ec) || p.rfind("./", 0) == 0 || p.rfind("../", 0) == 0) return path(p);
    return p;
  }
};

}  // namespace

View parse_view(const std::string& name) { return parse_name(kViews, name, "view"); }
const char* view_name(View view) { return name_of(kViews, view); }
std::vector<std::string> view_names() { return names_of(kViews); }

GridMetric parse_grid_metric(const std::string& name) { return parse_name(kGridMetrics, name, "grid metric"); }
const char* grid_metric_name(GridMetric metric) { return name_of(kGridMetrics, metric); }
std::vector<std::string> grid_metric_names() { return names_of(kGridMetrics); }

namespace {

// A row of linearize's (or distill's) table, for the form, under the session's key.
template <class O>
Option<TrainSettings> form_row(const OptionTable<O>& table, const char* flag, const char* key, O TrainSettings::*member) {
  const Option<O>* row = find_option(table, flag);
  if (!row) fail("train_option_table", std::string("no option ") + flag);
  Option<TrainSettings> r = nest(member, *row);
  r.key = key;
  return r;
}

LinearizeOptions TrainSettings::*const kLin = &TrainSettings::linearize;

}  // namespace

const OptionTable<TrainSettings>& train_option_table() {
  static const OptionTable<TrainSettings> rows = [] {
    const auto& lin = linearize_option_table();
    // The session's keys: one word each, as the form names them.
    const std::pair<const char*, const char*> lin_rows[] = {
        {"--feature-map", "feature_map"}, {"--window", "window"},   {"--decay", "decay"},
        {"--decay-init", "decay_init"},   {"--features", "features"},
        {"--loss", "loss"},               {"--steps", "steps"},     {"--lr", "lr"},
        {"--batch", "batch"},             {"--seq-len", "seq_len"}, {"--finetune-steps", "finetune_steps"},
        {"--rank", "rank"},               {"--finetune-lr", "finetune_lr"}, {"--kl-weight", "kl_weight"},
        {"--seed", "seed"}};
    OptionTable<TrainSettings> t;
    for (const auto& [flag, key] : lin_rows) t.push_back(form_row(lin, flag, key, kLin));
    // Stage 1's own rows (Distill only), through linearize's stage 1.
    const auto& dist = distill_option_table();
    const std::pair<const char*, const char*> stage1_rows[] = {
        {"--lr-alpha", "lr_alpha"}, {"--schedule", "schedule"}, {"--checkpoint-every", "checkpoint_every"}, {"--device", "device"}};
    for (const auto& [flag, key] : stage1_rows) {
      Option<LinearizeOptions> r = nest(&LinearizeOptions::stage1, *find_option(dist, flag));
      Option<TrainSettings> f = nest(kLin, r);
      f.key = key;
      t.push_back(f);
    }
    return t;
  }();
  return rows;
}

DistillOptions distill_options_of(const TrainSettings& t) {
  DistillOptions o = t.linearize.stage1;
  o.strategy.reset();
  o.allocation.clear();
  if (t.from_allocation) o.features = 0;
  return o;
}

LinearizeOptions linearize_options_of(const TrainSettings& t, AllocStrategy strategy, int64_t budget, double lambda,
                                      int64_t head_dim, double state_share) {
  LinearizeOptions o = t.linearize;
  DistillOptions& d = o.stage1;
  d.allocation.clear();
  if (!t.from_allocation) {
    d.strategy.reset();
    return o;
  }
  d.features = 0;
  d.strategy = strategy;
  d.budget = budget == default_budget(d.feature_map, head_dim) ? 0 : budget;
  d.lambda = lambda;
  d.state_share = state_share;
  return o;
}

namespace {

// The session as JSON, paths relative to `base` (the file's directory).
ordered_json session_json(const Session& s, const fs::path& base) {
  ordered_json j;
  j["format"] = kSessionFormat;
  j["version"] = kSessionVersion;
  j["model"] = relative_if_exists(s.model, base);
  j["tokenizer"] = relative_if_exists(s.tokenizer, base);
  ordered_json texts = ordered_json::array();
  for (const auto& t : s.texts) texts.push_back(relative_to(t, base));
  j["texts"] = texts;
  j["text"] = s.text;
  j["capture"] = {{"dir", relative_to(s.capture_dir, base)},
                  {"seq_len", s.capture.seq_len},
                  {"num_seqs", s.capture.num_seqs},
                  {"seed", s.capture.seed},
                  {"pre_rope", s.capture.pre_rope}};
  j["spectra"] = relative_to(s.spectra, base);
  j["dof"] = {{"samples", s.dof.samples}, {"normalize", dof_normalize_name(s.dof.normalize)}, {"seed", s.dof.seed}};
  j["analysis"] = {{"feature_map", s.analysis.feature_map},
                   {"features", s.analysis.features},
                   {"window", s.analysis.window},
                   {"seed", s.analysis.seed},
                   {"mixer_state", s.analysis.mixer_state}};
  j["lambda"] = s.lambda;
  j["budget"] = s.budget;
  j["strategy"] = alloc_strategy_name(s.strategy);
  j["multiple"] = s.multiple;
  if (s.state_share > 0) j["state_share"] = s.state_share;
  j["selection"] = {{"layer", s.layer}, {"head", s.head}, {"seq", s.seq}};
  j["colour_scale"] = colour_scale_name(s.colour_scale);
  j["metric"] = grid_metric_name(s.metric);
  j["view"] = view_name(s.view);
  ordered_json train = {{"run", relative_to(s.run_dir, base)}, {"dimensions", s.train.from_allocation ? "allocation" : "fixed"}};
  const ordered_json form = options_json(train_option_table(), s.train);
  for (auto it = form.begin(); it != form.end(); ++it) train[it.key()] = it.value();
  j["train"] = train;
  return j;
}

// The session in `text`, read from `file` (named in errors; paths are relative to its directory).
Session parse_session(const std::string& text, const std::string& file) {
  const ordered_json j = parse_json_text(text, file);
  if (!j.is_object()) fail(file, "not an attnscope session (not a JSON object)");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kSessionFormat)
    fail(file, std::string("not an attnscope session ('format' is not \"") + kSessionFormat + "\")");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != kSessionVersion)
    fail(file, "session version " + (version == j.end() ? std::string("(missing)") : version->dump()) +
                   " is not supported (this build reads " + std::to_string(kSessionVersion) + ")");

  Reader r{file, fs::absolute(file).parent_path()};
  Session s;
  // Absent keys keep their defaults: a hand-written session or one of an earlier build reads.
  r.string(j, "model", "model", s.model);
  s.model = r.model_path(s.model);
  r.string(j, "tokenizer", "tokenizer", s.tokenizer);
  s.tokenizer = r.model_path(s.tokenizer);
  if (const ordered_json* t = r.find(j, "texts")) {
    if (!t->is_array()) r.bad("texts", "must be an array of file names");
    for (const auto& e : *t) {
      if (!e.is_string()) r.bad("texts", "must be an array of file names");
      if (e.get<std::string>().empty()) r.bad("texts", "has an empty file name");
      s.texts.push_back(r.path(e.get<std::string>()));
    }
  }
  r.string(j, "text", "text", s.text);

  if (const ordered_json* c = r.object(j, "capture")) {
    r.string(*c, "dir", "capture.dir", s.capture_dir);
    s.capture_dir = r.path(s.capture_dir);
    // The same ranges as `attnscope capture` accepts (L >= 2 keys, T >= 1 window).
    r.integer(*c, "seq_len", "capture.seq_len", 2, 1 << 20, "an integer in 2..1048576", s.capture.seq_len);
    r.integer(*c, "num_seqs", "capture.num_seqs", 1, 1 << 20, "an integer in 1..1048576", s.capture.num_seqs);
    r.seed(*c, "seed", "capture.seed", s.capture.seed);
    r.boolean(*c, "pre_rope", "capture.pre_rope", s.capture.pre_rope);
  }
  r.string(j, "spectra", "spectra", s.spectra);
  s.spectra = r.path(s.spectra);

  if (const ordered_json* d = r.object(j, "dof")) {
    r.integer(*d, "samples", "dof.samples", 1, INT64_MAX, "a positive integer", s.dof.samples);
    std::string normalize = dof_normalize_name(s.dof.normalize);
    r.string(*d, "normalize", "dof.normalize", normalize);
    try {
      s.dof.normalize = parse_dof_normalize(normalize);
    } catch (const Error& e) {
      r.bad("dof.normalize", std::string("is not valid: ") + e.what());
    }
    r.seed(*d, "seed", "dof.seed", s.dof.seed);
  }
  if (const ordered_json* a = r.object(j, "analysis")) {
    r.string(*a, "feature_map", "analysis.feature_map", s.analysis.feature_map);
    if (!s.analysis.feature_map.empty()) {
      const auto names = feature_map_names();
      if (std::find(names.begin(), names.end(), s.analysis.feature_map) == names.end())
        r.bad("analysis.feature_map", "'" + s.analysis.feature_map + "' is not a feature map");
    }
    r.integer(*a, "features", "analysis.features", 0, INT64_MAX, "a non-negative integer", s.analysis.features);
    // The hybrid's window in keys, as `attnscope maps --window` takes it (0: the map alone).
    r.integer(*a, "window", "analysis.window", 0, 1 << 20, "an integer in 0..1048576", s.analysis.window);
    r.seed(*a, "seed", "analysis.seed", s.analysis.seed);
    r.integer(*a, "mixer_state", "analysis.mixer_state", 0, INT64_MAX, "a non-negative integer", s.analysis.mixer_state);
  }

  if (const ordered_json* v = r.find(j, "lambda")) {
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()))
      r.bad("lambda", "must be a positive finite number");
    s.lambda = v->get<double>();
  }
  r.integer(j, "budget", "budget", 1, INT64_MAX, "a positive integer", s.budget);
  if (r.find(j, "strategy")) {
    std::string name;
    r.string(j, "strategy", "strategy", name);
    try {
      s.strategy = parse_alloc_strategy(name);
    } catch (const Error& e) {
      r.bad("strategy", std::string("is not valid: ") + e.what());
    }
  }
  r.integer(j, "multiple", "multiple", 1, INT64_MAX, "a positive integer", s.multiple);
  if (r.find(j, "state_share")) {
    r.number(j, "state_share", "state_share", s.state_share);
    if (!(s.state_share >= 0 && s.state_share <= 1)) r.bad("state_share", "must be a share in 0..1 (0: off)");
  }

  if (const ordered_json* sel = r.object(j, "selection")) {
    // Only the sign is checked here: the capture they index may not exist yet.
    r.integer(*sel, "layer", "selection.layer", 0, INT_MAX, "a non-negative integer", s.layer);
    r.integer(*sel, "head", "selection.head", 0, INT_MAX, "a non-negative integer", s.head);
    r.integer(*sel, "seq", "selection.seq", 0, INT_MAX, "a non-negative integer", s.seq);
  }
  r.name(j, "colour_scale", "colour_scale", parse_colour_scale, colour_scale_name, s.colour_scale);
  r.name(j, "metric", "metric", parse_grid_metric, grid_metric_name, s.metric);
  r.name(j, "view", "view", parse_view, view_name, s.view);

  if (const ordered_json* t = r.object(j, "train")) {
    r.string(*t, "run", "train.run", s.run_dir);
    s.run_dir = r.path(s.run_dir);
    std::string dims = s.train.from_allocation ? "allocation" : "fixed";
    r.string(*t, "dimensions", "train.dimensions", dims);
    if (dims != "allocation" && dims != "fixed") r.bad("train.dimensions", "'" + dims + "' is not allocation or fixed");
    s.train.from_allocation = dims == "allocation";
    read_options_json(train_option_table(), *t, s.train, file, "train.");
  }
  return s;
}

}  // namespace

void save_session(const std::string& path, const Session& s) {
  write_text_file(path, session_json(s, fs::absolute(path).parent_path()).dump(2) + "\n");
}

Session load_session(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open the session file");
  return parse_session(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), file);
}

std::string session_choices_text(const Session& s) {
  Session choices = s;
  choices.model = choices.tokenizer = choices.text = choices.capture_dir = choices.spectra = choices.run_dir = "";
  choices.texts.clear();
  return session_json(choices, fs::current_path()).dump() + "\n";
}

void read_session_choices(const std::string& text, const std::string& where, Session& s) {
  const Session c = parse_session(text, where);
  s.capture.seq_len = c.capture.seq_len, s.capture.num_seqs = c.capture.num_seqs, s.capture.seed = c.capture.seed;
  s.capture.pre_rope = c.capture.pre_rope;
  s.dof = c.dof;
  s.analysis = c.analysis;
  s.lambda = c.lambda, s.budget = c.budget, s.strategy = c.strategy, s.multiple = c.multiple, s.state_share = c.state_share;
  s.colour_scale = c.colour_scale;
  s.metric = c.metric;
  s.train = c.train;
}

ReportOptions report_options_of(const Session& s, const std::vector<std::string>& texts) {
  ReportOptions o;
  o.model = s.model;
  o.tokenizer = s.tokenizer;
  o.texts = texts;
  o.capture = s.capture;  // the report stores f32 after RoPE: its table has no --store-dtype or --pre-rope
  o.dof = s.dof;
  o.lambda = s.lambda;
  o.dof.lambda = s.lambda;
  o.budget = s.budget;
  o.multiple = s.multiple;
  o.analysis = s.analysis;
  ReportOptions back = through_command_line(report_option_table(), o);
  // As the CLI reads that command line: without --num-seqs (at its default) T is a most.
  back.capture.fewer_windows_ok = back.capture.num_seqs == CaptureOptions{}.num_seqs;
  return back;
}

}  // namespace attnscope
