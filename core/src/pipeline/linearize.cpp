// The linearize pipeline (linearize.h): capture -> stage 1 (distill) -> convert -> stage 2
// (finetune) -> held-out evaluation and the report, each stage skipped when a resumed run finds it
// done and resumed when it was cut short.
#include "attnscope/pipeline/linearize.h"
#include "attnscope/analysis/structured_mixers.h"

#include "attnscope/model/compute_dtype.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation.h"
#include "attnscope/base/error.h"
#include "attnscope/base/json_file.h"
#include "attnscope/base/names.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/base/table.h"
#include "attnscope/base/text_file.h"
#include "attnscope/capture/capture.h"
#include "attnscope/convert/convert_job.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/convert/faithfulness.h"

#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/formats/dims_json.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/io/text_source.h"
#include "attnscope/attention/head.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/model/model.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {
constexpr Named<ExactHeadsBy> kExactHeadsBy[] = {{ExactHeadsBy::Kl, "kl"}, {ExactHeadsBy::Dof, "dof"}};
}  // namespace

ExactHeadsBy parse_exact_heads_by(const std::string& name) { return parse_name(kExactHeadsBy, name, "exact heads by"); }
const char* exact_heads_by_name(ExactHeadsBy by) { return name_of(kExactHeadsBy, by); }
std::vector<std::string> exact_heads_by_names() { return names_of(kExactHeadsBy); }

namespace {

using LO = LinearizeOptions;

// A row of distill's or finetune's table, by its flag.
template <class O>
const Option<O>& row_of(const OptionTable<O>& table, const char* flag) {
  const Option<O>* r = find_option(table, flag);
  if (!r) fail("linearize", std::string("no option ") + flag);  // a programming error: the tables are static
  return *r;
}

Option<LO> stage1_row(const char* flag) { return nest(&LO::stage1, row_of(distill_option_table(), flag), "stage1."); }
Option<LO> stage2_row(const char* flag) { return nest(&LO::stage2, row_of(finetune_option_table(), flag), "stage2."); }

// Every option of `attnscope linearize`: its own, and stage 1's and stage 2's rows (their
// definitions, ranges and checks) where it sets them.
const OptionTable<LO>& table() {
  static const OptionTable<LO> rows = {
      described(bind(opt::model, &LO::model), "the model to convert (Hugging Face directory, cached name, or llama2.c .bin)"),
      compute_dtype_option<LO>(),
      described(bind(opt::texts, &LO::texts), "text files (.txt, .jsonl), repeatable: the tail (--heldout-share) is held out for evaluation"),
      bind(opt::heldout_share, &LO::heldout_share),
      described(bind(opt::seq_len, &LO::seq_len, 0),
                "tokens per window for training and evaluation (default: the context length, at most 4096)"),
      bind(opt::max_windows, &LO::max_windows),
      bind(opt::no_speed, &LO::speed, false),
      stage1_row("--feature-map"),
      then(described(stage1_row("--features"), "one M for every head (instead of a strategy)"),
           +[](LO& o) { o.stage1.strategy.reset(); }),
      // Linearize's window defaults to 64, so 0 (plain linear heads) is a value to write back, not
      // distill's "not given": without it job.json's command and a resumed run took window 64.
      nest(&LO::stage1, bind(opt::window, &DistillOptions::window), "stage1."),
      stage1_row("--decay"),
      stage1_row("--decay-init"),
      then(described(stage1_row("--allocation"), "an allocation file (instead of a strategy)"),
           +[](LO& o) { o.stage1.strategy.reset(); }),
      described(stage1_row("--strategy"), "Algorithm 1 on the capture's DoF: fix | dof | dof-clip | per-head"),
      stage1_row("--budget"),
      stage1_row("--lambda"),
      stage1_row("--state-budget"),
      stage1_row("--state-share"),
      omitted_at_default(bind(opt::exact_heads_by, &LO::exact_heads_by, parse_exact_heads_by, exact_heads_by_name, exact_heads_by_names())),
      described(stage1_row("--loss"), "stage-1 loss: output | kl | softmax | l2"),
      described(stage1_row("--steps"), "stage-1 steps"),
      described(stage1_row("--lr"), "stage-1 learning rate"),
      described(stage1_row("--batch"), "windows per step (both stages)"),
      bind_at(opt::finetune_steps, +[](LO& o) -> int64_t& { return o.stage2.steps; }),
      described(stage2_row("--rank"), "stage 2: rank of the adapters on q, k, v, o"),
      renamed(stage2_row("--lr"), opt::finetune_lr),
      described(stage2_row("--kl-weight"), "stage 2: weight of the KL from the original's next-token distribution"),
      described(stage1_row("--seed"), "seed of the capture, the maps, the adapters and the mini-batches"),
  };
  return rows;
}

// The stage-1 job: exactly what OUT/stage1 runs.
DistillOptions stage1_options(const LO& o, const std::string& out, int64_t head_dim) {
  DistillOptions d = o.stage1;
  d.capture = (fs::path(out) / "capture").string();
  if (d.strategy && d.budget == 0) d.budget = default_budget(d.feature_map, head_dim);
  d.checkpoint_every = std::max<int64_t>(1, d.steps / 5);
  // Heads kept softmax by stage 1's KL: stage 1 trains every head, the types come after it.
  if (o.exact_heads_by == ExactHeadsBy::Kl) d.state_budget = 0, d.state_share = 0;
  return d;
}

// Types by stage 1's KL (--exact-heads-by kl): the stage-1 maps' attention KL per head, teacher-forced
// on windows of the training text (converted_eval.h's closeness), ranks the heads for the state
// budget (keep_exact_under); the heads kept softmax lose their maps. `kl` gets the measure.
std::shared_ptr<HeadFeatureMaps> keep_exact_by_kl(const LO& o, const LoadedModel& m, const HeadFeatureMaps& maps,
                                                  const std::vector<int64_t>& train_ids, int64_t L,
                                                  std::vector<std::vector<double>>& kl) {
  const ModelConfig& c = m.model->config();
  Model probe(c, m.model->weights());
  probe.set_feature_maps(std::shared_ptr<const HeadFeatureMaps>(&maps, [](const HeadFeatureMaps*) {}));
  ConvertedEvalOptions eo;
  eo.seq_len = int(L);
  eo.closeness_windows = 8;
  eo.speed = false;
  eo.faithfulness = false;
  eo.losses = false;  // the per-head KL only
  const ConvertedEvaluation ev = evaluate_converted(probe, train_ids, eo);
  kl.clear();
  for (const LayerCloseness& l : ev.layers) {
    kl.push_back(l.head_kl);
    for (double& v : kl.back())
      if (std::isnan(v)) v = std::numeric_limits<double>::infinity();  // no defined row: its map loses everything
  }
  const std::vector<std::vector<int64_t>> dims = head_dims(maps);
  const StateBudget b{o.stage1.state_budget, o.stage1.state_share, L, o.stage1.window, c.n_kv_head, 4};
  auto out = std::make_shared<HeadFeatureMaps>(maps);
  out->types = keep_exact_under(b, kl, dims, c.head_dim);
  for (size_t s = 0; s < out->maps.size(); ++s)
    for (size_t h = 0; h < out->maps[s].size(); ++h)
      if (out->types[s][h] == HeadType::Softmax) out->maps[s][h] = nullptr;
      else if (maps.mixed()) out->types[s][h] = maps.types[s][h];  // --decay mixer's hybrid or linear
  return out;
}

// The stage-2 job: exactly what OUT/stage2 runs.
FinetuneOptions stage2_options(const LO& o, const std::string& out, int64_t L) {
  FinetuneOptions f = o.stage2;
  f.model = (fs::path(out) / "converted").string();
  f.texts = {(fs::path(out) / "texts" / "train.txt").string()};
  f.map_lr = f.lr;
  f.compute = o.compute;
  f.seq_len = L;
  f.batch = o.stage1.batch;
  f.seed = o.stage1.seed;
  f.checkpoint_every = std::max<int64_t>(1, f.steps / 4);
  f.python_module = o.python_module;
  return f;
}

double mean_of(const std::vector<std::vector<double>>& windows) {
  double s = 0;
  int64_t n = 0;
  for (const auto& w : windows)
    for (double l : w) s += l, ++n;
  return s / double(n);
}

// Mean loss per position bucket (converted_eval.h's buckets) of token losses.
std::vector<double> bucket_means(const std::vector<std::vector<double>>& windows, int n_buckets) {
  std::vector<double> sum(size_t(n_buckets), 0), n(size_t(n_buckets), 0);
  for (const auto& w : windows)
    for (size_t i = 0; i < w.size(); ++i) {
      const size_t b = size_t(position_bucket(int(i) + 1));
      if (b < sum.size()) sum[b] += w[i], n[b] += 1;
    }
  for (size_t b = 0; b < sum.size(); ++b) sum[b] = n[b] > 0 ? sum[b] / n[b] : std::nan("");
  return sum;
}

std::string ppl(double loss) { return fmt_number(std::exp(loss), 2); }

// The run's phases: each logged as it begins and ends (with its wall time) and reported to
// `progress`, so that a long run on a large model is never silent; the report lists them.
class Phases {
 public:
  Phases(RunDir& rd, const ProgressFn& progress) : rd_(rd), progress_(progress) {}
  ~Phases() = default;
  // Ends the phase running (if any) and begins `name` at `fraction` of the whole run.
  void begin(const std::string& name, double fraction) {
    end();
    name_ = name;
    t0_ = std::chrono::steady_clock::now();
    rd_.log(name + ": started");
    report_progress(progress_, fraction, name);
  }
  void end() {
    if (name_.empty()) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    done_.emplace_back(name_, s);
    rd_.log(name_ + ": " + fmt_number(s, 1) + " s");
    name_.clear();
  }
  // Progress within the running phase, between `a` and `b` of the whole run.
  ProgressFn sub(double a, double b) const { return sub_progress(progress_, a, b); }
  const std::vector<std::pair<std::string, double>>& done() const { return done_; }

 private:
  RunDir& rd_;
  const ProgressFn& progress_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<std::pair<std::string, double>> done_;
};

std::string job_text(const LO& o, const std::string& out) {
  return job_json("linearize", linearize_command(o, out), table(), o, {{"python_module", o.python_module}});
}

LO read_job_file(const std::string& out) {
  LO o;
  o.stage1.strategy.reset();  // as recorded: a strategy only when the job had one
  const nlohmann::json j = read_job_json(out, "linearize", table(), o);
  if (!j.contains("python_module") || !j["python_module"].is_string()) fail(job_file(out), "'python_module' must be a string");
  o.python_module = j["python_module"].get<std::string>();
  return o;
}

LinearizeResult run(LO o, const std::string& out, const ProgressFn& progress, bool resume) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be checked before the first file.
  check_linearize_options(o);
  LoadedModel m = load_model(o.model, "", compute_dtype_of(o.compute, Device::Cpu));
  const ModelConfig& c = m.model->config();
  const int64_t L = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(c.n_ctx, 4096);
  if (L < 8 || L > c.n_ctx)
    fail_value("sequence length", std::to_string(L) + " is outside 8.." + std::to_string(c.n_ctx) + " (the context length)");
  check_window_fits(o.stage1.window, L);
  const auto [train_text, heldout_text] = split_text(read_text_documents(o.texts), o.heldout_share);
  const std::vector<int64_t> train_ids = encode_documents(*m.tokenizer, {{"train", train_text}});
  const std::vector<int64_t> heldout = encode_documents(*m.tokenizer, {{"heldout", heldout_text}});
  const int64_t windows = int64_t(train_ids.size()) / L;
  if (windows < 4)
    throw Error("text: its training share is " + std::to_string(train_ids.size()) + " tokens, fewer than four windows of " +
                    std::to_string(L) + "; give more text or a shorter sequence length",
                "sequence length");
  if (int64_t(heldout.size()) < L + 1)
    throw Error("text: the held-out share is " + std::to_string(heldout.size()) + " tokens, less than one window of " +
                    std::to_string(L) + "; give more text, a larger held-out share or a shorter sequence length",
                "held-out share");
  const DistillOptions d1 = stage1_options(o, out, c.head_dim);
  {  // the state budget's rules too, where stage 1 leaves it to linearize (--exact-heads-by kl)
    DistillOptions with_budget = d1;
    with_budget.state_budget = o.stage1.state_budget, with_budget.state_share = o.stage1.state_share;
    check_distill_options(with_budget);
  }
  if (o.stage2.steps > 0) check_finetune_options(stage2_options(o, out, L));
  if (o.python_module.empty() || !fs::is_regular_file(o.python_module))
    fail(o.python_module.empty() ? "attnscope_linear.py" : o.python_module, "the PyTorch module to ship is missing");

  RunDir rd(out, !resume);
  rd.mark_running();
  const fs::path dir(out);
  if (!resume) {
    rd.write_job(job_text(o, out));
    fs::create_directories(dir / "texts");
    write_text_file((dir / "texts" / "train.txt").string(), train_text);
    write_text_file((dir / "texts" / "heldout.txt").string(), heldout_text);
    rd.log("linearize " + o.model + " at " + std::to_string(L) + " tokens: " + std::to_string(train_ids.size()) +
           " training tokens, " + std::to_string(heldout.size()) + " held out");
  } else {
    rd.log("resumed");
  }
  Phases phases(rd, progress);
  const auto stage = [&](double a, double b) { return phases.sub(a, b); };

  // 1. Capture at the length the model will be used at.
  if (!fs::exists(dir / "capture")) {
    phases.begin("capture", 0);
    CaptureOptions co;
    co.seq_len = int(L);
    co.num_seqs = int(std::min(o.max_windows, windows - 1));
    co.seed = o.stage1.seed;
    capture_to_dir(m, {{(dir / "texts" / "train.txt").string(), train_text}}, co, (dir / "capture").string(), stage(0, 0.05));
    rd.log("captured " + std::to_string(co.num_seqs) + " windows");
  }
  // 2. Stage 1.
  const std::string s1 = (dir / "stage1").string();
  if (!fs::exists(dir / "stage1" / "report.json")) {
    phases.begin("stage 1 (distill)", 0.05);
    if (fs::exists(dir / "stage1" / "job.json")) resume_distill(s1, stage(0.05, 0.55));
    else distill(d1, s1, stage(0.05, 0.55));
    rd.log("stage 1 finished");
  }
  // 3. The stage-1 converted model (the original's weights referenced; a llama2.c model's copied).
  const std::string conv = (dir / "converted").string();
  if (!fs::exists(conv)) {
    phases.begin("convert", 0.55);
    ConvertOptions co = distill_run_convert_options(s1, c);
    co.copy_weights = c.arch == Arch::Llama2C;
    co.python_module = o.python_module;
    if (o.exact_heads_by == ExactHeadsBy::Kl && (o.stage1.state_budget > 0 || o.stage1.state_share > 0)) {
      phases.begin("the heads kept softmax: stage 1's attention KL per head", 0.55);
      std::vector<std::vector<double>> kl;
      co.maps = keep_exact_by_kl(o, m, *co.maps, train_ids, L, kl);
      nlohmann::ordered_json j = {{"by", "kl"}, {"head_kl", kl}, {"head_types", head_types_json(co.maps->types)}};
      write_text_file((dir / "exact_heads.json").string(), j.dump(2) + "\n");
      rd.log("heads kept softmax by stage 1's KL: exact_heads.json");
    }
    convert_model(m, co, conv);
  }
  // 4. Stage 2.
  std::string final_model = conv;
  if (o.stage2.steps > 0) {
    const std::string s2 = (dir / "stage2").string();
    if (!fs::exists(dir / "stage2" / "report.json")) {
      phases.begin("stage 2 (finetune)", 0.55);
      if (fs::exists(dir / "stage2" / "job.json")) resume_finetune(s2, stage(0.55, 0.85));
      else finetune(stage2_options(o, out, L), s2, stage(0.55, 0.85));
      rd.log("stage 2 finished");
    }
    final_model = s2 + "/model";
  }

  // The final model's stable name: OUT/model, a link to stage2/model (or to converted without stage
  // 2), made once that model is whole; `attnscope eval --model OUT` takes it too.
  {
    const fs::path link = dir / "model";
    std::error_code ec;
    fs::remove(link, ec);
    fs::create_directory_symlink(o.stage2.steps > 0 ? "stage2/model" : "converted", link);
    final_model = link.string();
  }

  // 5. Held-out evaluation: the original, the same maps untrained, stage 1, the final model.
  phases.begin("loading the models to evaluate", 0.85);
  const at::ScalarType compute = compute_dtype_of(o.compute, Device::Cpu);
  LoadedModel stage1 = load_model(conv, "", compute), fin = load_model(final_model, "", compute);
  const HeadFeatureMaps& trained = *stage1.model->feature_maps();
  const std::vector<std::vector<int64_t>> dims = head_dims(trained);  // 0 for softmax heads
  FeatureMapSpec spec;
  spec.name = o.stage1.feature_map;
  spec.seed = o.stage1.seed;
  Model untrained(c, m.model->weights());
  auto fresh = std::make_shared<HeadFeatureMaps>(
      make_head_feature_maps(spec, dims, c.n_layer, c.n_head, c.head_dim, o.stage1.window, trained.types));
  // Decayed heads start where distill started them, each with the decay it trained with (one kind,
  // or each its own): fitted to the capture, or without decay (a gate's b where a fixed decay's
  // delta would be, its w = 0).
  if (trained.decayed()) {
    const CaptureStore cap((dir / "capture").string());
    add_initial_decays(*fresh, head_decays_of(trained), o.stage1.decay_init, &cap, c.n_layer, c.n_head, c.d_model);
  }
  untrained.set_feature_maps(fresh);
  // The anchor: the original with softmax attention, finetuned exactly as stage 2 finetunes the
  // converted model (same text, windows, adapters, steps, seed).
  std::unique_ptr<Model> adapted;
  if (o.stage2.steps > 0) {
    phases.begin("the anchor: the original finetuned the same way (softmax)", 0.86);
    adapted = std::make_unique<Model>(c, finetune_softmax(m, stage2_options(o, out, L), stage(0.86, 0.9)));
  }
  LinearizeResult r;
  std::vector<int64_t> lengths;
  for (int64_t l : {L / 4, L / 2, L})
    if (l >= 8 && (lengths.empty() || l > lengths.back())) lengths.push_back(l);
  const int n_buckets = position_bucket(int(L) - 1) + 1;
  std::vector<double> orig_pos, s1_pos, fin_pos, adapted_pos(size_t(n_buckets), std::nan(""));
  phases.begin("held-out perplexity at " + std::to_string(lengths.size()) + " lengths", 0.9);
  for (size_t li = 0; li < lengths.size(); ++li) {
    const int64_t l = lengths[li];
    report_progress(progress, 0.9 + 0.04 * double(li) / double(lengths.size()), "held-out perplexity at " + std::to_string(l) + " tokens");
    LengthResult lr;
    lr.seq_len = l;
    const auto orig = m.model->window_losses(heldout, int(l)), s1w = stage1.model->window_losses(heldout, int(l));
    const auto finw = fin.model->window_losses(heldout, int(l));
    lr.original_loss = mean_of(orig);
    lr.untrained_loss = mean_of(untrained.window_losses(heldout, int(l)));
    lr.stage1_loss = mean_of(s1w);
    lr.final_loss = mean_of(finw);
    if (l == L) orig_pos = bucket_means(orig, n_buckets), s1_pos = bucket_means(s1w, n_buckets), fin_pos = bucket_means(finw, n_buckets);
    if (adapted) {
      const auto aw = adapted->window_losses(heldout, int(l));
      lr.adapted_loss = mean_of(aw);
      if (l == L) adapted_pos = bucket_means(aw, n_buckets);
    }
    r.lengths.push_back(lr);
  }
  ConvertedEvalOptions eo;
  eo.seq_len = int(L);
  eo.closeness_windows = 2;
  eo.speed = false;
  eo.faithfulness = false;  // measured below against the original itself
  phases.begin("stage 1's attention KL per layer", 0.94);
  const ConvertedEvaluation close = evaluate_converted(*stage1.model, heldout, eo);  // teacher-forced, original weights
  ConvertedEvaluation speed;
  if (o.speed) {
    phases.begin("speed at " + std::to_string(L) + " tokens", 0.96);
    eo.speed = true;
    eo.closeness_windows = 1;
    eo.speed_lengths = {int(L)};
    eo.min_seconds = 0;  // each timing twice: bounded on any model
    speed = evaluate_converted(*fin.model, heldout, eo, stage(0.96, 0.995));
  }
  // What perplexity hides: the original's in-context recall the final model keeps by distance, and
  // how faithfully it generates (faithfulness.h), against the original itself; the anchor (softmax,
  // finetuned the same way) beside it, for what stage 2's adaptation alone changes.
  phases.begin("recall at distance and generation agreement", 0.995);
  RecallOptions ro;
  ro.seq_len = int(L);
  ro.seed = o.stage1.seed;
  // The final model, then the anchor: the original's windows and continuations are read once for both.
  std::vector<const Model*> compared{fin.model.get()};
  if (adapted) compared.push_back(adapted.get());
  const auto recalls = recall_at_distance(*m.model, compared, heldout, ro);
  const std::vector<RecallBucket>& recall = recalls[0];
  const std::vector<RecallBucket> anchor_recall = adapted ? recalls[1] : std::vector<RecallBucket>();
  const GenerationOptions go = generation_options_within(int(L));
  const auto gens = generation_agreement(*m.model, compared, heldout, go);
  const GenerationAgreement& gen = gens[0];
  const std::optional<GenerationAgreement> anchor_gen = adapted ? std::optional<GenerationAgreement>(gens[1]) : std::nullopt;
  phases.end();

  // 6. The report.
  const LengthResult& at_L = r.lengths.back();
  const double gap = std::exp(at_L.final_loss - at_L.original_loss) - 1.0;
  std::string md = "# linearize: " + fs::path(o.model).filename().string() + "\n\n";
  md += "At " + std::to_string(L) + " tokens on the held-out text (" + std::to_string(heldout.size()) +
        " tokens, never trained on), the converted model's perplexity is **" + ppl(at_L.final_loss) + "** against the original's " +
        ppl(at_L.original_loss) + ": " + fmt_number(100 * gap, 1) + "% " + (gap >= 0 ? "above" : "below") + " it (" +
        o.stage1.feature_map + (o.stage1.window > 0 ? " beside a softmax window of " + std::to_string(o.stage1.window) + " tokens" : std::string()) +
        ", " + (o.stage1.strategy ? std::string(alloc_strategy_name(*o.stage1.strategy)) + " at budget " + std::to_string(d1.budget)
                                            : std::string("fixed dimensions")) +
        ", stage 1 " + distill_loss_name(o.stage1.loss) + " x " + std::to_string(o.stage1.steps) + " steps" +
        (o.stage2.steps > 0 ? ", stage 2 rank " + std::to_string(o.stage2.rank) + " x " + std::to_string(o.stage2.steps) + " steps" : "") +
        "). The final model is `" + final_model + "`.\n\n";
  if (trained.decayed()) {  // how many heads forget, and how (one kind, or each its own: mixer)
    int counts[3] = {0, 0, 0};
    for (const auto& layer : head_decays_of(trained))
      for (Decay d : layer) ++counts[int(d)];
    md += std::string("Decayed heads (decay ") + decay_name(o.stage1.decay) + ", started at " +
          decay_init_name(o.stage1.decay_init) + "): " + std::to_string(counts[int(Decay::Gated)]) + " gated, " +
          std::to_string(counts[int(Decay::Fixed)]) + " fixed, " + std::to_string(counts[int(Decay::None)]) +
          " without decay (softmax heads counted there).\n\n";
  }
  const bool mixer_windows = trained.mixed() && o.stage1.decay == Decay::Mixer && o.stage1.window > 0;
  if (mixer_windows) {
    int64_t hybrid = 0, linear = 0;
    for (const auto& layer : trained.types)
      for (HeadType t : layer) hybrid += t == HeadType::Hybrid, linear += t == HeadType::Linear;
    md += "Windows (decay mixer): " + std::to_string(hybrid) + " heads hybrid with the last " + std::to_string(o.stage1.window) +
          " keys exact, " + std::to_string(linear) + " linear: a head keeps the window where, on the capture, it takes at least " +
          fmt_number(kWindowGain, 2) + " off the mixer distance of its decayed student (`attnscope metrics --mixer-state " +
          std::to_string(kStudentMixerState) + " --window " + std::to_string(o.stage1.window) + "`).\n\n";
  }
  if (trained.mixed() && softmax_head_count(trained.types) > 0) {
    const int64_t kept = softmax_head_count(trained.types);
    md += "Head types: " + std::to_string(kept) + " of " + std::to_string(int64_t(c.n_layer) * c.n_head) +
          " heads kept softmax (exact, their key-value cache), the rest " +
          (mixer_windows ? std::string("hybrid or linear as the line above says")
                         : std::string(head_type_name(map_head_type(o.stage1.window)))) +
          (o.exact_heads_by == ExactHeadsBy::Kl ? std::string(": the heads whose stage-1 maps lose most (attention KL per head on the training text, exact_heads.json)")
                                                : ": the heads with the largest DoF at lambda " + fmt_lambda(d1.lambda)) +
          ", as many as the state budget (" +
          (o.stage1.state_budget > 0 ? std::to_string(o.stage1.state_budget) + " bytes" : fmt_number(o.stage1.state_share, 3) + " of the original's key-value cache") +
          " at " + std::to_string(L) + " tokens) holds. The layer table marks them `softmax`.\n\n";
  }
  if (adapted) {
    const double cost = std::exp(at_L.final_loss - at_L.adapted_loss) - 1.0;
    md += "Stage 2 also adapts the model to the text. The original finetuned the same way with softmax attention (same "
          "text, adapters, steps and seed) reaches " + ppl(at_L.adapted_loss) + ": against it, the conversion costs **" +
          fmt_number(100 * cost, 1) + "%** perplexity" + (cost < 0 ? " (the converted model is better)" : "") +
          ". Compare conversions by this figure, not by the distance to the unadapted original.\n\n";
  }
  Table lt;
  lt.header = {"tokens", "original", "original finetuned", "untrained map", "stage 1", "final", "final / original",
               "final / original finetuned"};
  for (const auto& x : r.lengths)
    lt.add_row({std::to_string(x.seq_len), ppl(x.original_loss), adapted ? ppl(x.adapted_loss) : "-", ppl(x.untrained_loss),
                ppl(x.stage1_loss), ppl(x.final_loss), fmt_number(std::exp(x.final_loss - x.original_loss), 3),
                adapted ? fmt_number(std::exp(x.final_loss - x.adapted_loss), 3) : "-"});
  md += "## Held-out perplexity by length\n\n" + to_markdown(lt) + "\n";
  Table pt;
  pt.header = {"positions", "original", "original finetuned", "stage 1", "final"};
  for (int b = 0; b < n_buckets; ++b) {
    const int first = b == 0 ? 0 : 64 << (b - 1), last = std::min<int>(int(L) - 1, (64 << b) - 1);
    pt.add_row({std::to_string(std::max(first, 1)) + "-" + std::to_string(last), ppl(orig_pos[size_t(b)]),
                adapted ? ppl(adapted_pos[size_t(b)]) : "-", ppl(s1_pos[size_t(b)]), ppl(fin_pos[size_t(b)])});
  }
  md += "## Where it loses: perplexity by position at " + std::to_string(L) + " tokens\n\n" + to_markdown(pt) + "\n";
  Table kt;
  kt.header = {"layer", "M per head", "attention KL", "output rel. error"};
  for (const auto& l : close.layers) {
    std::string ms;
    for (int64_t mm : dims[size_t(l.layer)]) ms += (ms.empty() ? "" : " ") + (mm > 0 ? std::to_string(mm) : std::string("softmax"));
    kt.add_row({std::to_string(l.layer), ms, fmt_number(l.attention_kl, 4), fmt_number(l.output_rel_error, 4)});
  }
  md += "## Stage 1, layer by layer (teacher-forced, held-out windows)\n\n" + to_markdown(kt) + "\n";
  Table st;
  st.header = {"mode", "tokens", "softmax tok/s (generate: KV cache)", "linear tok/s", "softmax peak MB", "linear peak MB"};
  for (const auto& s : speed.speed)
    st.add_row({s.generate ? "generate" : "batch", std::to_string(s.seq_len), fmt_number(s.softmax_tokens_per_s, 1),
                fmt_number(s.linear_tokens_per_s, 1), fmt_number(double(s.softmax_peak_bytes) / 1e6, 2),
                fmt_number(double(s.linear_peak_bytes) / 1e6, 2)});
  md += "## Speed\n\n" + (o.speed ? to_markdown(st) : std::string("Not measured (--no-speed).\n")) + "\n";
  // What generation keeps per sequence at L tokens (head.h's head_cost), float32: the converted
  // model's maps' states (and windows' rings) against the original's key-value cache.
  const int64_t converted_bytes = 4 * state_values(*fin.model->feature_maps(), c.head_dim, L),
                original_bytes = 4 * kv_cache_values(c.n_layer, c.n_kv_head, c.head_dim, L);
  Table sb;
  sb.header = {"model", "state per sequence at " + std::to_string(L) + " tokens (float32)", "of the original's"};
  sb.add_row({"original (key-value cache)", std::to_string(original_bytes) + " bytes", "1"});
  sb.add_row({"converted", std::to_string(converted_bytes) + " bytes", fmt_number(double(converted_bytes) / double(original_bytes), 4)});
  md += "## State per sequence\n\n" + to_markdown(sb) + "\n";
  Table rt;
  rt.header = {"lag (tokens)", "original's drop (nats)", "final's drop", "final keeps", "original finetuned keeps"};
  const auto pm = [](double x, double se) { return fmt_number(x, 3) + " ± " + fmt_number(se, 3); };
  bool any_unmeasurable = false;
  for (size_t i = 0; i < recall.size(); ++i) {
    const bool ok = recall[i].measurable();
    any_unmeasurable |= !ok;
    rt.add_row({std::to_string(recall[i].lag), pm(recall[i].original_drop, recall[i].original_se),
                pm(recall[i].converted_drop, recall[i].converted_se), ok ? fmt_number(recall[i].kept(), 3) : "-",
                ok && adapted ? fmt_number(anchor_recall[i].kept(), 3) : "-"});
  }
  md += "## Recall at distance\n\nA random " + std::to_string(ro.segment) + "-token segment written twice into a held-out "
        "window, the second copy ending it: each model's drop is its loss on the first copy minus its loss on the second "
        "(how much seeing the segment once helps), " + std::to_string(ro.sequences) + " windows per lag; \"keeps\" is the "
        "drop as a share of the original's, shown where the original copies at all (its drop above twice its standard "
        "error)." + (any_unmeasurable ? " Where it does not, there is no recall to keep and the share would be noise." : "") +
        "\n\n" + to_markdown(rt) + "\n";
  Table gt;
  gt.header = {"model", "greedy tokens equal to the original's", "first different token (mean)", "free-running KL (nats/token)"};
  const auto gen_row = [&](const std::string& name, const GenerationAgreement& g) {
    gt.add_row({name, fmt_number(g.token_match, 3), fmt_number(g.first_divergence, 1) + " of " + std::to_string(g.new_tokens),
                fmt_number(g.free_running_kl, 4)});
  };
  gen_row("final", gen);
  if (anchor_gen) gen_row("original finetuned", *anchor_gen);
  md += "## Generation against the original\n\n" + std::to_string(gen.prompts) + " held-out prompts of " +
        std::to_string(go.prompt_tokens) + " tokens, " + std::to_string(go.new_tokens) + " greedy tokens each (the original "
        "with its key-value cache, the converted model with its state); the KL is the original's next-token distribution "
        "against the model's along the model's own continuation.\n\n" + to_markdown(gt) + "\n";
  Table ph;
  ph.header = {"phase", "seconds"};
  for (const auto& [name, secs] : phases.done()) ph.add_row({name, fmt_number(secs, 1)});
  md += "## Where the time went (this process)\n\n" + to_markdown(ph) + "\n";
  md += "Reproduce: `" + linearize_command(o, out) + "`\n";
  nlohmann::ordered_json j;
  j["seq_len"] = L;
  j["final_model"] = final_model;
  j["heldout_tokens"] = heldout.size();
  j["heldout_share"] = o.heldout_share;
  j["state_bytes"] = {{"seq_len", L}, {"original", original_bytes}, {"converted", converted_bytes}};
  j["lengths"] = nlohmann::ordered_json::array();
  for (const auto& x : r.lengths)
    j["lengths"].push_back({{"seq_len", x.seq_len}, {"original_loss", x.original_loss}, {"untrained_loss", x.untrained_loss},
                            {"stage1_loss", x.stage1_loss}, {"final_loss", x.final_loss},
                            {"adapted_loss", adapted ? nlohmann::ordered_json(x.adapted_loss) : nlohmann::ordered_json()},
                            {"original_perplexity", std::exp(x.original_loss)}, {"final_perplexity", std::exp(x.final_loss)}});
  j["positions"] = nlohmann::ordered_json::array();
  for (int b = 0; b < n_buckets; ++b)
    j["positions"].push_back({{"bucket", b}, {"original_loss", orig_pos[size_t(b)]},
                              {"adapted_loss", adapted ? nlohmann::ordered_json(adapted_pos[size_t(b)]) : nlohmann::ordered_json()},
                              {"stage1_loss", s1_pos[size_t(b)]},
                              {"final_loss", fin_pos[size_t(b)]}});
  j["layers"] = nlohmann::ordered_json::array();
  for (const auto& l : close.layers)
    j["layers"].push_back({{"layer", l.layer}, {"dims", dims[size_t(l.layer)]}, {"attention_kl", l.attention_kl},
                           {"output_rel_error", l.output_rel_error}});
  j["speed"] = nlohmann::ordered_json::array();
  for (const auto& s : speed.speed)
    j["speed"].push_back({{"mode", s.generate ? "generate" : "batch"}, {"seq_len", s.seq_len},
                          {"softmax_tokens_per_s", s.softmax_tokens_per_s}, {"linear_tokens_per_s", s.linear_tokens_per_s}});
  j["recall"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < recall.size(); ++i)
    j["recall"].push_back({{"lag", recall[i].lag}, {"sequences", recall[i].sequences}, {"original_drop", recall[i].original_drop},
                           {"original_se", recall[i].original_se}, {"measurable", recall[i].measurable()},
                           {"final_drop", recall[i].converted_drop}, {"final_se", recall[i].converted_se}, {"final_kept", recall[i].kept()},
                           {"adapted_kept", adapted ? nlohmann::ordered_json(anchor_recall[i].kept()) : nlohmann::ordered_json()}});
  const auto gen_json = [](const GenerationAgreement& g) {
    return nlohmann::ordered_json{{"prompts", g.prompts}, {"new_tokens", g.new_tokens}, {"token_match", g.token_match},
                                  {"first_divergence", g.first_divergence}, {"free_running_kl", g.free_running_kl}};
  };
  j["generation"] = {{"final", gen_json(gen)}, {"adapted", anchor_gen ? gen_json(*anchor_gen) : nlohmann::ordered_json()}};
  j["phases"] = nlohmann::ordered_json::array();
  for (const auto& [name, secs] : phases.done()) j["phases"].push_back({{"phase", name}, {"seconds", secs}});
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  j["seconds"] = r.seconds;
  write_text_file((dir / "linearize.json").string(), j.dump(2) + "\n");
  write_text_file((dir / "linearize.md").string(), md);
  rd.write_report(j.dump(2) + "\n");
  rd.log("finished: perplexity " + ppl(at_L.final_loss) + " against " + ppl(at_L.original_loss));
  rd.clear_running();
  report_progress(progress, 1.0, "done");
  r.final_model = final_model;
  r.report = (dir / "linearize.md").string();
  return r;
}

}  // namespace

const OptionTable<LinearizeOptions>& linearize_option_table() { return table(); }

std::string linearize_command(const LinearizeOptions& o, const std::string& out_dir) {
  return command_for("linearize", table(), o, {"--out", out_dir});
}

DistillOptions linearize_stage1_defaults() {
  DistillOptions d;
  d.window = 64;  // LoLCATs' 64
  d.strategy = AllocStrategy::Dof;
  d.loss = DistillLoss::Output;
  d.lr = 0.01;
  return d;
}

void check_linearize_options(const LinearizeOptions& o) {
  check_options(table(), o);  // each option by its definition: stage 1's and stage 2's rows are theirs
  if (o.model.empty()) fail_value("model", "is missing");
  if (o.texts.empty()) fail_value("text", "is missing: linearize trains and evaluates on a text");
  if (o.stage1.loss == DistillLoss::Direct) fail_value("loss", "direct is not a stage-1 loss (stage 2 trains the whole model)");
}

LinearizeResult linearize(const LinearizeOptions& options, const std::string& out_dir, const ProgressFn& progress) {
  LinearizeOptions o = options;
  const auto absolute = [](const std::string& p) { return p == "-" ? p : fs::absolute(p).lexically_normal().string(); };
  if (fs::exists(o.model)) o.model = absolute(o.model);
  for (std::string& t : o.texts) t = absolute(t);
  if (!o.stage1.allocation.empty()) o.stage1.allocation = absolute(o.stage1.allocation);
  std::error_code ec;
  if (fs::exists(out_dir) && (!fs::is_directory(out_dir) || !fs::is_empty(out_dir, ec)))
    fail(out_dir, "is not empty: a new run needs a new (or empty) directory; resume the run that is there, or choose another");
  return run(o, absolute(out_dir), progress, false);
}

LinearizeResult resume_linearize(const std::string& out_dir, const ProgressFn& progress) {
  if (fs::is_regular_file(fs::path(out_dir) / "report.json"))
    fail(out_dir, "has finished (report.json is written): there is nothing to resume");
  return run(read_job_file(out_dir), fs::absolute(out_dir).lexically_normal().string(), progress, true);
}

bool is_linearize_run(const std::string& dir) {
  try {
    return job_kind(dir) == "linearize";
  } catch (const Error&) {
    return false;  // a job.json that does not read is not a linearize run's (its reader says why)
  }
}

LinearizeOptions read_linearize_job(const std::string& out_dir) { return read_job_file(out_dir); }

std::optional<LinearizeReport> read_linearize_report(const std::string& out_dir) {
  const std::string path = (fs::path(out_dir) / "linearize.json").string();
  if (!fs::exists(path)) return std::nullopt;
  const nlohmann::json j = read_json_file(path);
  const JsonReader r{path};
  LinearizeReport rep;
  r.at(j, "seq_len", "seq_len");
  r.integer(j, "seq_len", "seq_len", 1, opt::kMaxTokens, "a positive integer", rep.seq_len);
  r.at(j, "heldout_tokens", "heldout_tokens");
  r.integer(j, "heldout_tokens", "heldout_tokens", 0, INT64_MAX, "a non-negative integer", rep.heldout_tokens);
  r.number(j, "heldout_share", "heldout_share", rep.heldout_share);
  r.at(j, "final_model", "final_model");
  r.string(j, "final_model", "final_model", rep.final_model);
  const auto& lengths = r.at(j, "lengths", "lengths");
  if (!lengths.is_array() || lengths.empty()) r.bad("lengths", "must be a list of lengths (it has none)");
  for (const auto& x : lengths) {
    LengthResult l;
    r.at(x, "seq_len", "lengths.seq_len");
    r.integer(x, "seq_len", "lengths.seq_len", 1, opt::kMaxTokens, "a positive integer", l.seq_len);
    // A loss is a number; adapted_loss is null in a run without stage 2.
    for (const auto& [key, dst, nullable] : {std::tuple<const char*, double*, bool>{"original_loss", &l.original_loss, false},
                                             {"untrained_loss", &l.untrained_loss, false},
                                             {"stage1_loss", &l.stage1_loss, false},
                                             {"final_loss", &l.final_loss, false},
                                             {"adapted_loss", &l.adapted_loss, true}}) {
      r.at(x, key, std::string("lengths.") + key);
      r.number(x, key, std::string("lengths.") + key, *dst, nullable);
    }
    rep.lengths.push_back(l);
  }
  for (const auto& l : r.at(j, "layers", "layers")) {
    double kl = 0;
    r.at(l, "attention_kl", "layers.attention_kl");
    r.number(l, "attention_kl", "layers.attention_kl", kl);
    rep.layer_kl.push_back(kl);
  }
  if (const auto* recall = r.find(j, "recall"))
    for (const auto& x : *recall) {
      LinearizeReport::Recall row;
      r.integer(x, "lag", "recall.lag", 1, opt::kMaxTokens, "a positive integer", row.lag);
      r.number(x, "final_kept", "recall.final_kept", row.final_kept);
      r.number(x, "adapted_kept", "recall.adapted_kept", row.adapted_kept, true);
      if (const auto* m = r.find(x, "measurable")) {
        if (!m->is_boolean()) r.bad("recall.measurable", "must be true or false");
        row.measurable = m->get<bool>();
      }
      rep.recall.push_back(row);
    }
  if (const auto* gen = r.object(j, "generation", "generation"))
    for (auto [key, dst] : {std::pair{"final", &rep.final_generation}, {"adapted", &rep.adapted_generation}}) {
      const auto* g = r.find(*gen, key);
      if (!g || g->is_null()) continue;
      LinearizeReport::Generation x;
      const std::string at = std::string("generation.") + key;
      r.number(*g, "token_match", at + ".token_match", x.token_match);
      r.number(*g, "first_divergence", at + ".first_divergence", x.first_divergence);
      r.number(*g, "free_running_kl", at + ".free_running_kl", x.free_running_kl);
      r.integer(*g, "new_tokens", at + ".new_tokens", 1, opt::kMaxTokens, "a positive integer", x.new_tokens);
      *dst = x;
    }
  r.number(j, "seconds", "seconds", rep.seconds);
  if (const auto* phases = r.find(j, "phases"))
    for (const auto& p : *phases) {
      std::string name;
      double secs = 0;
      r.string(p, "phase", "phases.phase", name);
      r.number(p, "seconds", "phases.seconds", secs);
      rep.phases.emplace_back(name, secs);
    }
  return rep;
}

}  // namespace attnscope
