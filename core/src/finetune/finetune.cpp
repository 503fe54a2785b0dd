// Stage 2: low-rank adapters and the feature maps on the next-token loss (finetune.h).
//
// Determinism: the mini-batch of step t is drawn from derive_seed(seed, stream, t) alone and the
// adapters' A from derive_seed(seed, layer, projection), so a resumed run draws what the
// uninterrupted one would have.
#include "attnscope/finetune/finetune.h"

#include "attnscope/model/compute_dtype.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/attention/map_family.h"
#include "attnscope/base/error.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/run/checkpoint.h"
#include "attnscope/formats/job_file.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/model/model.h"
#include "attnscope/base/random.h"
#include "attnscope/formats/converted_json.h"
#include "attnscope/run/adamw.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

using json = nlohmann::ordered_json;
constexpr uint64_t kBatchStream = 0xF17E1;
constexpr uint64_t kSplitStream = 0xF17E2;

using FO = FinetuneOptions;

// Every option of `attnscope finetune`: the catalogue's definitions bound to FinetuneOptions.
const OptionTable<FO>& finetune_table() {
  static const OptionTable<FO> rows = {
      described(bind(opt::model, &FO::model), "the converted model to finetune (attnscope convert's output)"),
      compute_dtype_option<FO>(),
      described(bind(opt::texts, &FO::texts), "training text (.txt or .jsonl), repeatable; a share of its windows is held out"),
      bind(opt::rank, &FO::rank),
      bind(opt::steps, &FO::steps),
      described(bind(opt::lr, &FO::lr), "learning rate of the adapters"),
      bind(opt::map_lr, &FO::map_lr),
      bind(opt::kl_weight, &FO::kl_weight),
      described(bind(opt::seq_len, &FO::seq_len, 0), "tokens per window (default: the maps' trained length, else min(context, 512))"),
      described(bind(opt::batch, &FO::batch), "windows per step"),
      bind(opt::val_share, &FO::val_share),
      described(bind(opt::seed, &FO::seed), "seed of the adapters, the split and the mini-batches"),
      bind(opt::checkpoint_every, &FO::checkpoint_every),
  };
  return rows;
}

// The adapters of one projection: W' = W + B A.
struct Adapter {
  at::Tensor w0;  // the converted model's weight [out, in] (no gradient)
  at::Tensor a, b;
  at::Tensor ma, va, mb, vb;  // AdamW moments
};

// One trainable tensor of a head's map, with its AdamW moments.
struct MapParam {
  std::string name;  // "maps.{s}.{h}.{param}"
  at::Tensor p, m, v;
};

struct State {
  std::vector<std::array<Adapter, 4>> adapters;  // [layer][q, k, v, o]
  std::vector<MapParam> maps;
};

constexpr const char* kProjections[4] = {"q", "k", "v", "o"};

at::Tensor& projection(LayerWeights& w, int i) {
  switch (i) {
    case 0: return w.wq;
    case 1: return w.wk;
    case 2: return w.wv;
    default: return w.wo;
  }
}

State init_state(Model& model, int64_t rank, uint64_t seed, bool train_maps) {
  State st;
  ModelWeights& w = model.mutable_weights();
  for (size_t s = 0; s < w.layers.size(); ++s) {
    std::array<Adapter, 4> layer;
    for (int i = 0; i < 4; ++i) {
      Adapter& ad = layer[size_t(i)];
      ad.w0 = projection(w.layers[s], i).detach().to(at::kFloat).clone();
      const int64_t out = ad.w0.size(0), in = ad.w0.size(1);
      at::Generator gen = at::detail::createCPUGenerator(derive_seed(seed, int(s), i));
      ad.a = (at::randn({rank, in}, gen) / std::sqrt(double(in))).requires_grad_(true);
      ad.b = at::zeros({out, rank}).requires_grad_(true);
      ad.ma = at::zeros_like(ad.a), ad.va = at::zeros_like(ad.a);
      ad.mb = at::zeros_like(ad.b), ad.vb = at::zeros_like(ad.b);
    }
    st.adapters.push_back(std::move(layer));
  }
  if (train_maps) {
    const auto trainable = trainable_map_names();
    const HeadFeatureMaps& maps = *model.feature_maps();
    for (size_t s = 0; s < maps.maps.size(); ++s)
      for (size_t h = 0; h < maps.maps[s].size(); ++h) {
        if (!maps.maps[s][h]) continue;  // a softmax head: no map (its adapters train with the rest)
        FeatureMap& fm = *maps.maps[s][h];
        if (std::find(trainable.begin(), trainable.end(), fm.name()) == trainable.end()) continue;
        for (auto& [name, t] : fm.named_parameters()) {
          t.requires_grad_(true);
          st.maps.push_back({"maps." + std::to_string(s) + "." + std::to_string(h) + "." + name, t,
                             at::zeros_like(t), at::zeros_like(t)});
        }
      }
    // Hybrid heads: each layer's balances gamma [H] train with the maps.
    for (size_t s = 0; s < maps.gamma.size(); ++s) {
      const at::Tensor& g = maps.gamma[s];
      g.requires_grad_(true);
      st.maps.push_back({"maps." + std::to_string(s) + ".gamma", g, at::zeros_like(g), at::zeros_like(g)});
    }
    // Decayed heads: each layer's decays too, delta [H] (fixed) or the gates' w [H, D] and b [H].
    for (auto [field, name] : {std::pair{&HeadFeatureMaps::decay_delta, ".decay_delta"},
                               {&HeadFeatureMaps::decay_w, ".decay_w"}, {&HeadFeatureMaps::decay_b, ".decay_b"}})
      for (size_t s = 0; s < (maps.*field).size(); ++s) {
        const at::Tensor& d = (maps.*field)[s];
        d.requires_grad_(true);
        st.maps.push_back({"maps." + std::to_string(s) + name, d, at::zeros_like(d), at::zeros_like(d)});
      }
  }
  return st;
}

// W = W0 + B A in the model (with the autograd graph to A and B when training).
void apply_adapters(Model& model, const State& st) {
  ModelWeights& w = model.mutable_weights();
  for (size_t s = 0; s < st.adapters.size(); ++s)
    for (int i = 0; i < 4; ++i) {
      const Adapter& ad = st.adapters[s][size_t(i)];
      projection(w.layers[s], i) = ad.w0 + at::matmul(ad.b, ad.a);
    }
}

// Mean over tokens of CE + kl_weight * KL(original || converted); `ce` gets the cross-entropy.
at::Tensor batch_loss(const Model& model, const Model& original, const at::Tensor& ids, double kl_weight, double* ce) {
  const int64_t L = ids.size(1);
  const at::Tensor logits = model.forward(ids).narrow(1, 0, L - 1);
  const at::Tensor targets = ids.narrow(1, 1, L - 1).reshape({-1});
  const at::Tensor logp = at::log_softmax(logits.reshape({-1, logits.size(-1)}), -1);
  const at::Tensor nll = at::nll_loss(logp, targets);
  *ce = nll.item<double>();
  if (kl_weight == 0) return nll;
  at::Tensor ref;
  {
    at::NoGradGuard no_grad;
    const at::Tensor o = original.forward(ids).narrow(1, 0, L - 1);
    ref = at::log_softmax(o.reshape({-1, o.size(-1)}), -1);
  }
  const at::Tensor kl = (ref.exp() * (ref - logp)).sum(-1).mean();
  return nll + kl_weight * kl;
}

double mean_ce(const Model& model, const at::Tensor& windows) {
  at::NoGradGuard no_grad;
  double sum = 0;
  for (int64_t t0 = 0; t0 < windows.size(0); t0 += 4) {
    const at::Tensor w = windows.narrow(0, t0, std::min<int64_t>(4, windows.size(0) - t0));
    const int64_t L = w.size(1);
    const at::Tensor logits = model.forward(w).narrow(1, 0, L - 1);
    sum += at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), w.narrow(1, 1, L - 1).reshape({-1})).item<double>() *
           double(w.size(0));
  }
  return sum / double(windows.size(0));
}

// The adapters and the maps with their AdamW moments, under their checkpoint names.
std::vector<TrainedTensor> trained_tensors(State& st) {
  std::vector<TrainedTensor> out;
  for (size_t s = 0; s < st.adapters.size(); ++s)
    for (int i = 0; i < 4; ++i) {
      Adapter& ad = st.adapters[s][size_t(i)];
      const std::string p = "lora." + std::to_string(s) + "." + kProjections[i] + ".";
      out.push_back({p + "A", &ad.a, &ad.ma, &ad.va});
      out.push_back({p + "B", &ad.b, &ad.mb, &ad.vb});
    }
  for (MapParam& m : st.maps) out.push_back({m.name, &m.p, &m.m, &m.v});
  return out;
}

std::string finetune_job_json(FinetuneOptions o, const std::string& command, int64_t seq_len) {
  o.seq_len = seq_len;  // resolved
  nlohmann::ordered_json resolved;
  resolved["python_module"] = o.python_module;
  resolved["optimizer"] = adamw_json();
  resolved["optimizer"]["weight_decay"] = 0;
  return job_json("finetune", command, finetune_table(), o, resolved);
}

FinetuneOptions finetune_job_of(const std::string& run_dir) {
  FinetuneOptions o;
  const nlohmann::json j = read_job_json(run_dir, "finetune", finetune_table(), o);
  if (!j.contains("python_module") || !j["python_module"].is_string())
    fail(job_file(run_dir), "'python_module' must be a string");
  o.python_module = j["python_module"].get<std::string>();
  try {
    check_finetune_options(o);
  } catch (const Error& e) {
    throw Error(job_file(run_dir) + ": " + e.what(), e.quantity());
  }
  return o;
}

// The text's windows of o.seq_len tokens, shuffled by the seed and split: (train, held out).
std::pair<at::Tensor, at::Tensor> finetune_windows(const Tokenizer& tokenizer, const FinetuneOptions& o) {
  const std::vector<int64_t> ids = encode_documents(tokenizer, read_text_documents(o.texts));
  const int64_t L = o.seq_len, T = int64_t(ids.size()) / L;
  if (T < 2)
    throw Error("text: " + std::to_string(ids.size()) + " tokens make fewer than two windows of " + std::to_string(L) +
                    " (one to train on, one held out); give a longer text or a shorter sequence length",
                "sequence length");
  const auto order = shuffle_indices(T, derive_seed(o.seed, kSplitStream));
  const int64_t n_val = std::min<int64_t>(T - 1, std::max<int64_t>(1, int64_t(std::llround(o.val_share * double(T)))));
  const at::Tensor windows = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + T * L), at::kLong).view({T, L});
  const at::Tensor val = windows.index_select(0, at::tensor(std::vector<int64_t>(order.begin(), order.begin() + n_val), at::kLong));
  const at::Tensor train = windows.index_select(0, at::tensor(std::vector<int64_t>(order.begin() + n_val, order.end()), at::kLong));

  return {train, val};
}

// One optimizer step of the adapters (and the maps, when they train) on a mini-batch: the loss.
double train_step(Model& model, const Model& original, State& st, const FinetuneOptions& o, const at::Tensor& train,
                  int64_t step, double* ce) {
  const auto pick = sample_without_replacement(train.size(0), std::min(o.batch, train.size(0)),
                                               derive_seed(derive_seed(o.seed, kBatchStream), uint64_t(step)));
  apply_adapters(model, st);
  const at::Tensor loss = batch_loss(model, original, train.index_select(0, at::tensor(pick, at::kLong)), o.kl_weight, ce);
  loss.backward();
  const double lr = scheduled_lr(LrSchedule::Cosine, o.lr, step, o.steps);
  const double map_lr = scheduled_lr(LrSchedule::Cosine, o.map_lr, step, o.steps);
  for (auto& layer : st.adapters)
    for (Adapter& ad : layer) {
      if (ad.a.grad().defined()) adamw_update(ad.a, ad.a.grad(), ad.ma, ad.va, lr, 0.0, step + 1), ad.a.mutable_grad().zero_();
      if (ad.b.grad().defined()) adamw_update(ad.b, ad.b.grad(), ad.mb, ad.vb, lr, 0.0, step + 1), ad.b.mutable_grad().zero_();
    }
  for (MapParam& m : st.maps)
    if (m.p.grad().defined()) adamw_update(m.p, m.p.grad(), m.m, m.v, map_lr, 0.0, step + 1), m.p.mutable_grad().zero_();
  const double l = loss.item<double>();
  if (!std::isfinite(l))
    fail_value("learning rate", "is too high for this run: the loss is not finite at step " + std::to_string(step + 1) + " (lower it)");
  return l;
}

// The merged weights W0 + B A, detached.
void merge_adapters(Model& model, const State& st) {
  at::NoGradGuard no_grad;
  apply_adapters(model, st);
  for (auto& layer : model.mutable_weights().layers)
    for (int i = 0; i < 4; ++i) projection(layer, i) = projection(layer, i).detach();
}

FinetuneResult run(FinetuneOptions o, const std::string& run_dir, const ProgressFn& progress, bool resume) {
  const auto t_start = std::chrono::steady_clock::now();
  // Every check before the run directory is touched.
  if (!is_converted_model(o.model))
    fail(o.model, "is not a converted model (no \"attnscope\" object in its config.json): finetune takes "
                  "attnscope convert's output");
  LoadedModel lm = load_model(o.model, "", compute_dtype_of(o.compute, Device::Cpu));
  Model& model = *lm.model;
  const ModelConfig& c = model.config();
  const HeadFeatureMaps* maps = model.feature_maps();
  if (o.seq_len == 0) o.seq_len = maps->trained_length > 0 ? std::min<int64_t>(maps->trained_length, c.n_ctx) : std::min(c.n_ctx, 512);
  if (o.seq_len < 2 || o.seq_len > c.n_ctx)
    fail_value("sequence length", std::to_string(o.seq_len) + " is outside 2.." + std::to_string(c.n_ctx) + " (the context length)");
  if (o.rank > std::min<int64_t>(c.d_model, int64_t(c.n_head) * c.head_dim))
    fail_value("rank", std::to_string(o.rank) + " exceeds the model width " + std::to_string(c.d_model));
  const auto [train, val] = finetune_windows(*lm.tokenizer, o);
  const int64_t L = o.seq_len;
  RunDir rd(run_dir, !resume);
  rd.mark_running();
  if (!resume) {
    rd.write_job(finetune_job_json(o, finetune_command(o, run_dir), L));
    rd.log("finetune " + o.model + ": rank " + std::to_string(o.rank) + ", " + std::to_string(o.steps) + " steps on " +
           std::to_string(train.size(0)) + " windows of " + std::to_string(L) + " tokens (" + std::to_string(val.size(0)) +
           " held out)");
  }
  const Model original(c, model.weights());  // the same weights with softmax attention (the adapters are not in them)
  State st = init_state(model, o.rank, o.seed, o.map_lr > 0);
  FinetuneResult r;
  r.seq_len = L;
  {
    at::NoGradGuard no_grad;
    r.original_val_loss = mean_ce(original, val);
    r.initial_val_loss = mean_ce(model, val);
  }
  const Checkpoint from = start_from_checkpoint(rd, resume, trained_tensors(st), o.seed, o.steps);
  const double elapsed_before = from.elapsed_s;
  const int64_t start = from.step;
  const auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  for (int64_t step = start; step < o.steps; ++step) {
    double ce = 0;
    const double l = train_step(model, original, st, o, train, step, &ce);
    const double lr = scheduled_lr(LrSchedule::Cosine, o.lr, step, o.steps);
    rd.append_metric(json{{"step", step + 1}, {"loss", l}, {"ce", ce}, {"lr", lr}, {"elapsed_s", elapsed()}}.dump());
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.checkpoint_every == 0 || last) {
      apply_adapters(model, st);
      const double vl = mean_ce(model, val);
      rd.append_metric(json{{"step", step + 1}, {"val_loss", vl}, {"val_perplexity", std::exp(vl)}}.dump());
      write_checkpoint(rd, trained_tensors(st), o.seed, step + 1, elapsed());
    }
    report_progress(progress, double(step + 1) / double(o.steps),
                    "step " + std::to_string(step + 1) + "/" + std::to_string(o.steps) + " loss " + short_number(l));
  }

  // Merged weights and the trained maps, written as an ordinary converted model.
  merge_adapters(model, st);
  for (MapParam& m : st.maps) m.p.requires_grad_(false);
  r.val_loss = mean_ce(model, val);
  const std::string cfg_file = (fs::path(o.model) / "config.json").string();
  const nlohmann::json cfg = convert::read_config(o.model);
  const ConvertedHeader hdr = convert::parse_header(cfg, cfg_file, c.n_layer, c.n_head);
  const nlohmann::json& a = cfg["attnscope"];
  ConvertOptions co;
  co.map = hdr.map;
  co.dims = hdr.dims;
  co.strategy = a.value("strategy", std::string("fix"));
  co.lambda = a.contains("lambda") && a["lambda"].is_number() ? a["lambda"].get<double>() : 0.0;
  co.budget = a.contains("budget") && a["budget"].is_number_integer() ? a["budget"].get<int64_t>() : 0;
  co.loss = a.contains("loss") && a["loss"].is_string() ? a["loss"].get<std::string>() : "";
  co.steps = a.contains("steps") && a["steps"].is_number_integer() ? a["steps"].get<int64_t>() : 0;
  co.trained_length = std::max<int64_t>(hdr.trained_length, L);
  co.job_json = a.contains("job") && !a["job"].is_null() ? a["job"].dump() : "";
  co.python_module = o.python_module;
  co.maps = std::shared_ptr<const HeadFeatureMaps>(lm.model->feature_maps(), [](const HeadFeatureMaps*) {});
  co.weights = std::make_shared<ModelWeights>(model.weights());
  co.finetune_rank = o.rank;
  co.finetune_steps = o.steps;
  r.model_dir = (fs::path(run_dir) / "model").string();
  convert_model(lm, co, r.model_dir);
  r.steps = o.steps;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  json rep;
  rep["model"] = r.model_dir;
  rep["seq_len"] = L;
  rep["original_val_loss"] = r.original_val_loss;
  rep["initial_val_loss"] = r.initial_val_loss;
  rep["val_loss"] = r.val_loss;
  rep["original_val_perplexity"] = std::exp(r.original_val_loss);
  rep["initial_val_perplexity"] = std::exp(r.initial_val_loss);
  rep["val_perplexity"] = std::exp(r.val_loss);
  rep["seconds"] = r.seconds;
  rd.write_report(rep.dump(2) + "\n");
  rd.log("finished: held-out perplexity " + short_number(std::exp(r.initial_val_loss)) + " -> " + short_number(std::exp(r.val_loss)) +
         " (original " + short_number(std::exp(r.original_val_loss)) + ")");
  rd.clear_running();
  return r;
}

}  // namespace

FinetuneOptions read_finetune_job(const std::string& run_dir) { return finetune_job_of(run_dir); }

const OptionTable<FinetuneOptions>& finetune_option_table() { return finetune_table(); }

std::string finetune_command(const FinetuneOptions& o, const std::string& run_dir) {
  return command_for("finetune", finetune_table(), o, {"--out", run_dir});
}

void check_finetune_options(const FinetuneOptions& o) {
  check_options(finetune_table(), o);  // each option by its own definition
  if (o.model.empty()) fail_value("model", "is missing: give the converted model to finetune");
  if (o.texts.empty()) fail_value("text", "is missing: finetune trains on a text");
}

ModelWeights finetune_softmax(const LoadedModel& original, const FinetuneOptions& o, const ProgressFn& progress) {
  check_finetune_options(o);
  const ModelConfig& c = original.model->config();
  if (o.seq_len < 2 || o.seq_len > c.n_ctx)
    fail_value("sequence length", std::to_string(o.seq_len) + " is outside 2.." + std::to_string(c.n_ctx) + " (the context length)");
  const at::Tensor train = finetune_windows(*original.tokenizer, o).first;
  Model model(c, original.model->weights());
  const Model reference(c, original.model->weights());
  State st = init_state(model, o.rank, o.seed, false);
  for (int64_t step = 0; step < o.steps; ++step) {
    double ce = 0;
    train_step(model, reference, st, o, train, step, &ce);
    report_progress(progress, double(step + 1) / double(o.steps), "step " + std::to_string(step + 1) + "/" + std::to_string(o.steps));
  }
  merge_adapters(model, st);
  return model.weights();
}

FinetuneResult finetune(const FinetuneOptions& options, const std::string& run_dir, const ProgressFn& progress) {
  FinetuneOptions o = options;
  const auto absolute = [](const std::string& p) { return p == "-" ? p : fs::absolute(p).lexically_normal().string(); };
  o.model = absolute(o.model);
  for (std::string& t : o.texts) t = absolute(t);
  check_finetune_options(o);
  std::error_code ec;
  if (fs::exists(run_dir) && (!fs::is_directory(run_dir) || !fs::is_empty(run_dir, ec)))
    fail(run_dir, "is not empty: a new run needs a new (or empty) run directory; resume the run that is there, or "
                  "choose another");
  if (o.python_module.empty() || !fs::is_regular_file(o.python_module))
    fail(o.python_module.empty() ? "attnscope_linear.py" : o.python_module, "the PyTorch module to ship is missing");
  return run(o, fs::absolute(run_dir).lexically_normal().string(), progress, false);
}

FinetuneResult resume_finetune(const std::string& run_dir, const ProgressFn& progress) {
  if (fs::is_regular_file(fs::path(run_dir) / "report.json"))
    fail(run_dir, "has finished (report.json is written): there is nothing to resume");
  return run(finetune_job_of(run_dir), run_dir, progress, true);
}

}  // namespace attnscope
