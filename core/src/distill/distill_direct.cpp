// Direct training (distill.h, paper 000's `direct`): the whole model runs with linear attention in
// place, every head its trainable map (LayerMaps::trainable_head_map, so the autograd graph of
// Model::forward reaches the stacked parameters), on seeded mini-batches of windows of a text; only
// the maps learn, from the next-token cross-entropy (the model's weights have no gradient). The
// run directory, checkpoints, resume and cancel are the layerwise job's (distill_parts.h).
//
// Held out: a seeded share of the windows gives the validation loss and perplexity. Each layer's
// attention KL against softmax (report.json's per-layer "val_kl", as layerwise) is measured on the
// q, k of up to 4 held-out windows through the original softmax model: the model is frozen, so
// these are fixed, and the KL is layer_kl's, the layerwise runs' measure.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "attnscope/model/compute_dtype.h"
#include "attnscope/base/device.h"
#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/io/text_source.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/model/model.h"
#include "attnscope/run/adamw.h"
#include "distill/train_state.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

constexpr int64_t kKlWindows = 4;  // held-out windows for the per-layer attention KL

// The text's token ids as `attnscope eval` reads a text (documents joined, EOS between them where
// the tokenizer has one and adds no BOS). Error naming the file when it is missing or has no text.
std::vector<int64_t> text_ids(const std::string& file, const LoadedModel& m) {
  if (!fs::is_regular_file(file)) fail(file, "cannot be read (the training text of direct distillation)");
  if (fs::file_size(file) == 0) fail(file, "is empty: direct training needs text");
  return encode_documents(*m.tokenizer, read_text_documents({file}));
}

// Mean next-token loss over windows [T, L], a few at a time (equal lengths: the mean of means).
double mean_window_loss(const Model& model, const at::Tensor& windows) {
  at::NoGradGuard no_grad;
  const int64_t T = windows.size(0);
  double sum = 0;
  for (int64_t t0 = 0; t0 < T; t0 += 4) {
    const int64_t n = std::min<int64_t>(4, T - t0);
    sum += direct_loss(model, windows.narrow(0, t0, n)).item<double>() * double(n);
  }
  return sum / double(T);
}

// One direct step: the loss of the mini-batch, its gradient in every map, AdamW on every group.
double direct_step(const Optimizer& opt, const Model& model, std::vector<LayerState>& layers, const at::Tensor& ids,
                   int64_t step /* 0-based */) {
  const at::Tensor loss = direct_loss(model, ids);
  loss.backward();
  for (LayerState& st : layers)
    for (GroupState& g : st.groups) adamw_step(opt, g, step + 1);
  return loss.item<double>();
}

std::vector<std::vector<HeadGroup>> groups_of(const std::vector<LayerState>& layers) {
  std::vector<std::vector<HeadGroup>> out;
  for (const LayerState& st : layers) {
    out.emplace_back();
    for (const GroupState& g : st.groups) out.back().push_back(g.group);
  }
  return out;
}

}  // namespace

DistillResult distill_direct(DistillJob job, const std::string& run_dir, const ProgressFn& progress, bool resume) {
  const auto t_start = std::chrono::steady_clock::now();
  DistillOptions& o = job.options;
  std::unique_ptr<CaptureStore> cap;
  if (!o.capture.empty()) cap = std::make_unique<CaptureStore>(o.capture);
  const std::string model_spec = !o.model.empty() ? o.model : cap ? cap->model_path() : "";
  if (model_spec.empty()) fail_value("model", "is missing: direct training needs the model, or a capture of it");
  LoadedModel lm = load_model(model_spec, "", compute_dtype_of(o.compute, o.device));
  Model& model = *lm.model;
  const ModelConfig& c = model.config();
  if (cap) check_capture_of(*cap, c, o.capture, model_spec);
  if (resume) {
    job.dims = job.dims_for(c.n_layer, c.n_head);
  } else {
    job.dims = distill_dims(o, c.n_layer, c.n_head, cap.get(), &job.types);
    if (o.seq_len == 0) o.seq_len = cap ? std::min<int64_t>(cap->seq_len(), c.n_ctx) : std::min<int64_t>(128, c.n_ctx);
  }
  if (job.decays.empty()) job.decays = head_decays_for(o.decay, o.window, job.types, cap.get(), c.n_layer, c.n_head);
  check_head_decays_of(job, c.n_layer, c.n_head);
  if (o.seq_len > c.n_ctx)
    fail_value("sequence length", std::to_string(o.seq_len) + " exceeds the model's context length " + std::to_string(c.n_ctx));
  check_window_fits(o.window, o.seq_len);
  // The frozen model runs on the job's device: its weights are copied there (no copy on the CPU).
  const at::Device device = torch_device(o.device);

  // Windows of the text: seeded held-out share, as the layerwise capture windows.
  const std::vector<int64_t> ids = text_ids(o.text, lm);
  const int64_t L = o.seq_len, T = int64_t(ids.size()) / L;
  if (T < 2)
    throw Error(o.text + ": has " + std::to_string(ids.size()) + " tokens: too few for two windows of " + std::to_string(L) +
                    " (one to train on, one held out); give a longer text or a shorter sequence length", "sequence length");
  const auto [train_idx, val_idx] = split_windows(o.seed, o.val_share, T, o.text);
  if (!device.is_cpu()) model = Model(c, weights_on(model.weights(), device));
  const at::Tensor windows = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + T * L), at::kLong).view({T, L});
  const at::Tensor train_w = windows.index_select(0, at::tensor(train_idx, at::kLong)).to(device);
  const at::Tensor val_w = val_idx.empty() ? at::Tensor() : windows.index_select(0, at::tensor(val_idx, at::kLong)).to(device);

  RunDir run(run_dir, !resume);
  run.mark_running();
  if (!resume) {
    job.model = lm.path;
    job.trained_length = o.seq_len;
    o.model = lm.path;  // job.json and its command name the model itself, not only the capture's
    job.command = distill_command(o, run_dir);
    run.write_job(distill_job_json(job));
    run.log("distill " + o.feature_map + " loss direct on " + o.text + " (" + std::to_string(train_idx.size()) +
            " windows of " + std::to_string(L) + " tokens, " + std::to_string(val_idx.size()) + " held out), " +
            std::to_string(o.steps) + " steps");
  }

  const int S = c.n_layer;
  std::vector<LayerState> layers(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    init_layer_state(o, s, job.dims[size_t(s)], c.head_dim, c.d_model, c.sliding_window, layers[size_t(s)],
                     resume ? at::Tensor() : initial_decay_delta(job.decays[size_t(s)], o.decay_init, cap.get(), s),
                     job.types.empty() ? std::vector<HeadType>() : job.types[size_t(s)], job.decays[size_t(s)]);
    to_device(layers[size_t(s)], device);
  }
  // The softmax model's q, k on held-out windows (it is frozen: they never change).
  if (val_w.defined()) {
    at::NoGradGuard no_grad;
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) {
      layers[size_t(a.layer)].val_q = a.q.detach().contiguous();
      layers[size_t(a.layer)].val_k = a.k.detach().contiguous();
      if (job.has_gates()) layers[size_t(a.layer)].val_x = a.x.detach().contiguous();
    };
    model.forward(val_w.narrow(0, 0, std::min<int64_t>(kKlWindows, val_w.size(0))), &hook);
    for (LayerState& st : layers) st.initial_val_kl = validate(st, o.loss, at::Tensor()).second;
  }
  model.set_feature_maps(group_feature_maps(groups_of(layers), false, layer_types(layers)));
  const double initial_val_loss = val_w.defined() ? mean_window_loss(model, val_w) : std::nan("");

  double elapsed_before = 0;
  const int64_t start_step = start_training(run, resume, o.seed, o.steps, layers, elapsed_before);
  const Optimizer opt = optimizer_of(o);
  const auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };

  for (int64_t step = start_step; step < o.steps; ++step) {
    const at::Tensor batch = step_batch(o.seed, o.batch, train_w.size(0), step).to(device);
    const double loss = direct_step(opt, model, layers, train_w.index_select(0, batch), step);
    if (!std::isfinite(loss))
      fail_value("learning rate", "is too high for this run: the loss is not finite at step " + std::to_string(step + 1) + " (lower it)");
    for (LayerState& st : layers) {
      st.last_loss = loss;
      if (step == 0) st.first_loss = loss;
    }
    run.append_metric(json{{"step", step + 1}, {"loss", loss}, {"lr", scheduled_lr(o.schedule, o.lr, step, o.steps)}, {"elapsed_s", elapsed()}}.dump());
    const bool last = step + 1 == o.steps;
    if (((step + 1) % o.checkpoint_every == 0 || last) && val_w.defined()) {
      const double vl = mean_window_loss(model, val_w);
      std::vector<std::string> lines = {
          json{{"step", step + 1}, {"val_loss", vl}, {"val_perplexity", std::exp(vl)}}.dump()};
      for (int s = 0; s < S; ++s)
        lines.push_back(json{{"step", step + 1}, {"layer", s}, {"val_kl", validate(layers[size_t(s)], o.loss, at::Tensor()).second}}.dump());
      run.append_metrics(lines);
    }
    if ((step + 1) % o.checkpoint_every == 0 || last) save_checkpoint(run, o.seed, layers, step + 1, elapsed());
    // Cancellation lands here: after a complete step, its checkpoint (if due) already written.
    report_progress(progress, double(step + 1) / double(o.steps),
                    "step " + std::to_string(step + 1) + "/" + std::to_string(o.steps) + " loss " + num_str(loss));
  }

  DistillResult r;
  r.steps = o.steps;
  r.initial_val_loss = initial_val_loss;
  r.val_loss = val_w.defined() ? mean_window_loss(model, val_w) : std::nan("");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  json extra;
  extra["text"] = o.text;
  extra["seq_len"] = L;
  extra["train_windows"] = train_idx.size();
  extra["val_windows"] = val_idx.size();
  if (val_w.defined()) {
    extra["initial_val_loss"] = r.initial_val_loss;
    extra["initial_val_perplexity"] = std::exp(r.initial_val_loss);
    extra["val_loss"] = r.val_loss;
    extra["val_perplexity"] = std::exp(r.val_loss);
  } else {
    extra["val_loss"] = nullptr;
    extra["val_perplexity"] = nullptr;
  }
  extra["seconds"] = r.seconds;
  extra["seconds_per_step"] = r.seconds / double(std::max<int64_t>(1, o.steps - start_step));
  for (LayerState& st : layers) {
    st.has_val = st.val_q.defined();
    if (st.has_val) st.val_kl = validate(st, o.loss, at::Tensor()).second;
  }
  write_outputs(run, o, layers, extra, r);
  run.clear_running();
  return r;
}

double direct_step_seconds(DistillBench& b) {
  if (!b.model) fail("distill bench", "loss direct needs a model");
  if (!b.ids.defined() || b.ids.dim() != 2) fail("distill bench", "loss direct needs ids [B, L]");
  std::vector<LayerState> layers = bench_layers(b.groups);
  Model model(b.model->config(), b.model->weights());  // shares the weights; gets the maps
  model.set_feature_maps(group_feature_maps(b.groups));
  const at::Tensor& some_param = layers[0].groups[0].group.maps.params[0].second;
  const Optimizer opt = optimizer_of(b.options);
  direct_step(opt, model, layers, b.ids, 0);  // warm-up
  wait_for_device(some_param);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= b.steps; ++i) direct_step(opt, model, layers, b.ids, i);
  wait_for_device(some_param);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace attnscope
