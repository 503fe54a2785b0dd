// The distillation job (distill.h): the checks that come before any file is written, the
// layerwise training loop over layers (each a list of head groups; layers across ranks through
// distributed.h), and the entry points for a new run and a resumed one. Direct training is
// distill_direct.cpp; the pieces both share are train_state.h.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/distributed.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/model/model.h"
#include "attnscope/run/adamw.h"
#include "distill/train_state.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

// Runs f(layer) for every layer. Layers are independent: on the CPU one task each (ATen ops inside
// run single-threaded there); on CUDA one after another on the one stream, as the GPU is already
// parallel within a layer and concurrent host threads would only contend for the same stream.
template <class F>
void for_each_layer(const at::Device& device, int S, const F& f) {
  if (device.is_cuda()) {
    for (int64_t s = 0; s < S; ++s) f(s);
    return;
  }
  at::parallel_for(0, S, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) f(s);
  });
}

// Distributed runs (distributed.h): every rank trains the layers it owns (layer s: rank s % world)
// and these two put the owners' results on every rank, where rank 0 writes them. With one rank
// they do nothing.

// Sums `fields` of every layer over the ranks, each contributing only its own layers (0 for the
// rest, so the owner's value arrives exactly), with `stop` riding along: true when any rank asked
// to stop, so that a cancel on one rank stops all of them at the same step.
bool share_layer_values(DistGroup& dist, std::vector<LayerState>& layers,
                        const std::vector<double LayerState::*>& fields, bool stop = false) {
  if (dist.world() == 1) return stop;
  std::vector<double> v;
  for (size_t s = 0; s < layers.size(); ++s)
    for (const auto f : fields) v.push_back(dist.owns(int(s)) ? layers[s].*f : 0.0);
  v.push_back(stop ? 1.0 : 0.0);
  dist.all_reduce_sum(v);
  size_t i = 0;
  for (auto& st : layers)
    for (const auto f : fields) st.*f = v[i++];
  return v.back() > 0;
}

// Every layer's maps and AdamW moments (every group's) from its owner.
void share_layer_tensors(DistGroup& dist, std::vector<LayerState>& layers) {
  if (dist.world() == 1) return;
  for (size_t s = 0; s < layers.size(); ++s) {
    std::vector<at::Tensor> t;
    for (GroupState& g : layers[s].groups) {
      for (auto& p : g.group.maps.params) t.push_back(p.second);
      t.insert(t.end(), g.exp_avg.begin(), g.exp_avg.end());
      t.insert(t.end(), g.exp_avg_sq.begin(), g.exp_avg_sq.end());
    }
    dist.broadcast(t, int(s) % dist.world());
  }
}

// One training step of a layer on mini-batch q, k [B, H, L, d]: every group's loss, backward and
// AdamW; st.last_loss is the head-weighted mean of the groups' losses.
void train_layer_step(const Optimizer& opt, DistillLoss loss, LayerState& st, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, const at::Tensor& x, const at::Tensor& resid, const at::Tensor& pairs,
                      int64_t step /* 0-based */) {
  if (loss == DistillLoss::Block) {  // one loss over every head of the layer: its groups step together
    const at::Tensor l = layer_block_loss(st, q, k, v, x, resid);
    l.backward();
    st.last_loss = l.item<double>();
    for (GroupState& g : st.groups) {
      g.last_loss = st.last_loss;
      adamw_step(opt, g, step + 1);
    }
    if (step == 0) st.first_loss = st.last_loss;
    return;
  }
  std::vector<double> losses;
  for (GroupState& g : st.groups) {
    const at::Tensor gv = v.defined() ? group_heads(st, g, v) : at::Tensor();
    const at::Tensor l = layer_loss(g.group.maps, group_heads(st, g, q), group_heads(st, g, k), loss, pairs, gv, x);
    l.backward();
    g.last_loss = l.item<double>();
    losses.push_back(g.last_loss);
    adamw_step(opt, g, step + 1);
  }
  st.last_loss = head_weighted(st, losses);
  if (step == 0) st.first_loss = st.last_loss;
}

// The residual stream entering each layer of `model` on windows ids [T, L], float32 [T, L, D] per
// layer on `device`, a few windows at a time (the block loss's inputs).
std::vector<at::Tensor> residual_streams(const Model& model, const at::Tensor& ids, const at::Device& device) {
  at::NoGradGuard no_grad;
  const int64_t T = ids.size(0);
  std::vector<std::vector<at::Tensor>> parts(size_t(model.config().n_layer));
  CaptureHook hook;
  hook.on_layer = [&](const AttentionActivations& a) { parts[size_t(a.layer)].push_back(a.resid.to(at::kFloat)); };
  for (int64_t t0 = 0; t0 < T; t0 += 8) model.hidden_states(ids.narrow(0, t0, std::min<int64_t>(8, T - t0)).to(device), &hook);
  std::vector<at::Tensor> out;
  for (auto& p : parts) out.push_back(at::cat(p).contiguous());
  return out;
}

// The capture's windows: a seeded held-out share, or all of them when a validation capture is given.
struct Windows {
  std::vector<int64_t> train, val;
  std::unique_ptr<CaptureStore> val_capture;
  bool has_val() const { return val_capture || !val.empty(); }
};

Windows windows_of(const DistillOptions& o, const CaptureStore& cap) {
  Windows w;
  if (o.val_capture.empty()) {
    std::tie(w.train, w.val) = split_windows(o.seed, o.val_share, cap.num_seqs(), o.capture);
    return w;
  }
  for (int64_t t = 0; t < cap.num_seqs(); ++t) w.train.push_back(t);
  w.val_capture = std::make_unique<CaptureStore>(o.val_capture);
  const CaptureStore& v = *w.val_capture;
  if (v.num_layers() != cap.num_layers() || v.num_heads() != cap.num_heads() || v.head_dim() != cap.head_dim())
    fail(o.val_capture, "is a capture of another model shape than " + o.capture);
  if (v.model_path() != cap.model_path())
    fail(o.val_capture, "is a capture of " + v.model_path() + ", the training capture of " + cap.model_path());
  return w;
}

// Every check that reads a file, before the run directory is touched: the capture, its q and k
// (shapes, finite values), the validation capture, the dims; the layer inputs for gated decays.
void check_capture(const CaptureStore& cap, const std::string& where, bool values, bool inputs) {
  for (int s = 0; s < cap.num_layers(); ++s) {
    if (inputs) cap.layer_inputs(s);  // Error naming the store when it has none
    for (const char* name : {"q", "k", "v"}) {
      if (!values && std::string(name) == "v") continue;
      const at::Tensor t = cap.layer_tensor(s, name);
      if (t.dim() != 4 || t.size(1) != cap.num_heads() || t.size(3) != cap.head_dim() ||
          t.size(2) != cap.seq_len() || t.size(0) != cap.num_seqs())
        fail(where, std::string("layer ") + std::to_string(s) + " " + name + " does not have the shape [T, heads, L, head dim]");
      if (!at::isfinite(t).all().item<bool>())
        fail(where, std::string("layer ") + std::to_string(s) + " " + name + " holds NaN or infinity");
    }
  }
}

DistillResult train_layers(DistillJob job, const std::string& run_dir, const ProgressFn& progress, bool resume,
                           DistGroup& dist) {
  const auto t_start = std::chrono::steady_clock::now();
  const DistillOptions& o = job.options;
  const CaptureStore cap(o.capture);
  check_window_fits(o.window, cap.seq_len());
  const int S = cap.num_layers();
  job.dims = resume ? job.dims_for(S, cap.num_heads())
                    : distill_dims(o, S, cap.num_heads(), &cap, &job.types);
  if (o.loss == DistillLoss::Block && !job.types.empty())
    fail_value("loss", "block with softmax heads kept exact (" + o.allocation + ") is not supported yet: use output or kl");
  check_training_memory(job.dims, cap.head_dim(), cap.num_seqs(), o.batch, cap.seq_len());
  if (job.decays.empty()) job.decays = head_decays_for(o.decay, o.window, job.types, &cap, S, int(cap.num_heads()));
  check_head_decays_of(job, S, int(cap.num_heads()));
  const bool block = o.loss == DistillLoss::Block;
  const bool values = o.loss == DistillLoss::Output || block, inputs = job.has_gates();
  check_capture(cap, o.capture, values, inputs);
  Windows win = windows_of(o, cap);
  if (win.val_capture) check_capture(*win.val_capture, o.val_capture, values, inputs);
  if (win.val_capture && win.val_capture->sliding_window() != cap.sliding_window())
    fail(o.val_capture, "the validation capture's sliding window (" + std::to_string(win.val_capture->sliding_window()) +
                            ") is not the training capture's (" + std::to_string(cap.sliding_window()) + "): not the same model");
  const at::Device device = torch_device(o.device);
  // The block loss runs each layer's own MLP and projections: the capture's model, on the job's
  // device, and the residual stream entering each layer on the capture's windows (computed here,
  // before the run directory is touched).
  LoadedModel lm;
  std::vector<at::Tensor> resid, val_resid;
  if (block) {
    lm = load_model(cap.model_path(), "", compute_dtype_of(o.compute, o.device));
    check_capture_of(cap, lm.model->config(), o.capture, cap.model_path());
    if (!device.is_cpu()) *lm.model = Model(lm.model->config(), weights_on(lm.model->weights(), device));
    resid = residual_streams(*lm.model, cap.ids(), device);
    if (win.val_capture) val_resid = residual_streams(*lm.model, win.val_capture->ids(), device);
  }

  RunDir run(run_dir, !resume, /*writes=*/dist.rank() == 0);
  run.mark_running();
  if (!resume) {
    job.model = cap.model_path();
    job.world_size = dist.world();
    job.trained_length = cap.seq_len();
    job.command = distill_command(o, run_dir);
    run.write_job(distill_job_json(job));
    run.log("distill " + o.feature_map + " loss " + distill_loss_name(o.loss) + " on " + o.capture + ", " +
            std::to_string(o.steps) + " steps");
  }

  std::vector<LayerState> layers(static_cast<size_t>(S));
  const at::Tensor train_t = at::tensor(win.train, at::kLong);
  const int64_t val_len = win.val_capture ? win.val_capture->seq_len() : cap.seq_len();
  const at::Tensor val_pairs = o.loss == DistillLoss::L2 ? step_pairs(o.seed, o.l2_pairs, val_len, -1).to(device)
                                                         : at::Tensor();
  for (int s = 0; s < S; ++s) {
    LayerState& st = layers[size_t(s)];
    st.has_val = win.has_val();
    if (dist.owns(s)) {  // a rank holds only its own layers' windows
      // Only the output loss reads v, only gated decays x.
      const at::Tensor q = cap.layer_tensor(s, "q"), k = cap.layer_tensor(s, "k");
      const at::Tensor v = values ? cap.layer_tensor(s, "v") : at::Tensor();
      const at::Tensor x = inputs ? cap.layer_inputs(s) : at::Tensor();
      st.q = q.index_select(0, train_t).contiguous().to(device);
      st.k = k.index_select(0, train_t).contiguous().to(device);
      if (values) st.v = v.index_select(0, train_t).contiguous().to(device);
      if (inputs) st.x = x.index_select(0, train_t).contiguous().to(device);
      if (block) st.resid = resid[size_t(s)].index_select(0, train_t.to(device)).contiguous();
      if (win.val_capture) {
        st.val_q = win.val_capture->layer_tensor(s, "q").to(device);
        st.val_k = win.val_capture->layer_tensor(s, "k").to(device);
        if (values) st.val_v = win.val_capture->layer_tensor(s, "v").to(device);
        if (inputs) st.val_x = win.val_capture->layer_inputs(s).to(device);
        if (block) st.val_resid = val_resid[size_t(s)];
      } else if (!win.val.empty()) {
        const at::Tensor idx = at::tensor(win.val, at::kLong);
        st.val_q = q.index_select(0, idx).contiguous().to(device);
        st.val_k = k.index_select(0, idx).contiguous().to(device);
        if (values) st.val_v = v.index_select(0, idx).contiguous().to(device);
        if (inputs) st.val_x = x.index_select(0, idx).contiguous().to(device);
        if (block) st.val_resid = resid[size_t(s)].index_select(0, idx.to(device)).contiguous();
      }
    }
    // A decayed head's start (a resumed run's comes from its checkpoint; another rank's layer from its owner).
    init_layer_state(o, s, job.dims[size_t(s)], cap.head_dim(), cap.d_model(), cap.sliding_window(), st,
                     !resume && dist.owns(s) ? initial_decay_delta(job.decays[size_t(s)], o.decay_init, &cap, s) : at::Tensor(),
                     job.types.empty() ? std::vector<HeadType>() : job.types[size_t(s)], job.decays[size_t(s)]);
    if (block) st.block_model = lm.model.get(), st.layer = s;
    to_device(st, device);
    if (st.val_q.defined()) st.initial_val_kl = validate(st, o.loss, val_pairs).second;
  }
  share_layer_values(dist, layers, {&LayerState::initial_val_kl});

  double elapsed_before = 0;  // training time of the killed run up to its checkpoint
  const int64_t start_step = start_training(run, resume, o.seed, o.steps, layers, elapsed_before);
  if (resume) run.log("resumed on " + std::string(device_name(o.device)));

  const Optimizer opt = optimizer_of(o);
  const int64_t L = cap.seq_len();
  const auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  const auto validate_layers = [&] {
    for (auto& st : layers)
      if (st.val_q.defined()) std::tie(st.val_loss, st.val_kl) = validate(st, o.loss, val_pairs);
    share_layer_values(dist, layers, {&LayerState::val_loss, &LayerState::val_kl});
  };
  const auto validation_lines = [&](int64_t step) {
    if (!win.has_val()) return;
    validate_layers();
    std::vector<std::string> lines;
    for (int s = 0; s < S; ++s) {
      const LayerState& st = layers[size_t(s)];
      lines.push_back(json{{"step", step}, {"layer", s}, {"val_loss", st.val_loss}, {"val_kl", st.val_kl}}.dump());
    }
    run.append_metrics(lines);
  };

  for (int64_t step = start_step; step < o.steps; ++step) {
    const at::Tensor batch = step_batch(o.seed, o.batch, int64_t(win.train.size()), step).to(device);
    const at::Tensor pairs = o.loss == DistillLoss::L2 ? step_pairs(o.seed, o.l2_pairs, L, step).to(device) : at::Tensor();
    for_each_layer(device, S, [&](int64_t s) {
      if (!dist.owns(int(s))) return;
      LayerState& st = layers[size_t(s)];
      const auto rows = [&](const at::Tensor& t) { return t.defined() ? t.index_select(0, batch) : at::Tensor(); };
      train_layer_step(opt, o.loss, st, rows(st.q), rows(st.k), rows(st.v), rows(st.x), rows(st.resid), pairs, step);
    });
    if (share_layer_values(dist, layers, {&LayerState::last_loss, &LayerState::first_loss})) throw Cancelled();
    const double elapsed_s = elapsed();
    std::vector<std::string> lines;
    for (int s = 0; s < S; ++s) {
      const LayerState& st = layers[size_t(s)];
      lines.push_back(json{{"step", step + 1}, {"layer", s}, {"loss", st.last_loss},
                           {"lr", scheduled_lr(o.schedule, o.lr, step, o.steps)}, {"elapsed_s", elapsed_s}}.dump());
      if (!std::isfinite(st.last_loss))
        fail_value("learning rate", "is too high for this run: layer " + std::to_string(s) + "'s loss is not finite at step " +
                                        std::to_string(step + 1) + " (lower it)");
    }
    run.append_metrics(lines);
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.checkpoint_every == 0 || last) {
      validation_lines(step + 1);
      share_layer_tensors(dist, layers);
      save_checkpoint(run, o.seed, layers, step + 1, elapsed());
    }
    // Cancellation lands here: after a complete step, its checkpoint (if due) already written.
    try {
      report_progress(progress, double(step + 1) / double(o.steps),
                      "step " + std::to_string(step + 1) + "/" + std::to_string(o.steps) + " loss " +
                          num_str(layers[0].last_loss));
    } catch (const Cancelled&) {
      // The other ranks are in the next step's sharing of losses: this one tells them to stop.
      share_layer_values(dist, layers, {&LayerState::last_loss, &LayerState::first_loss}, /*stop=*/true);
      throw;
    }
  }
  share_layer_tensors(dist, layers);
  if (win.has_val()) validate_layers();

  // Final outputs: the maps under SPEC 7's names, then the report, last.
  DistillResult r;
  r.steps = o.steps;
  r.initial_val_loss = r.val_loss = std::nan("");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  json extra;
  extra["seconds"] = r.seconds;
  extra["seconds_per_step"] = r.seconds / double(std::max<int64_t>(1, o.steps - start_step));
  write_outputs(run, o, layers, extra, r);
  run.clear_running();
  dist.barrier();  // every rank returns once rank 0's files are complete
  return r;
}

// The files a job names, as absolute paths: job.json then works from any directory.
std::string absolute(const std::string& path) {
  if (path.empty() || path == "-") return path;
  return fs::absolute(path).lexically_normal().string();
}

DistillResult run(DistillJob job, const std::string& run_dir, const ProgressFn& progress, bool resume) {
  const DistEnv env = dist_env_from_environment();
  if (job.options.loss == DistillLoss::Direct) {
    if (env.world > 1)
      fail_value("loss", "direct trains the whole model in one process; run it as one process (ranks shard the layers "
                         "of layerwise losses only)");
    return distill_direct(std::move(job), run_dir, progress, resume);
  }
  if (env.world == 1) {
    DistGroup one(env, job.options.device);
    return train_layers(std::move(job), run_dir, progress, resume, one);
  }
  // Which rank failed: the others fail too (their collectives lose it), each saying its own rank.
  const std::string rank = "rank " + std::to_string(env.rank) + ": ";
  try {
    DistGroup ranks(env, job.options.device);
    return train_layers(std::move(job), run_dir, progress, resume, ranks);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    throw Error(rank + e.what(), e.quantity());
  } catch (const std::exception& e) {
    throw Error(rank + e.what());
  }
}

}  // namespace

DistillResult distill(const DistillOptions& options, const std::string& run_dir, const ProgressFn& progress) {
  DistillJob job;
  job.options = options;
  DistillOptions& o = job.options;
  for (std::string* p : {&o.capture, &o.val_capture, &o.text, &o.allocation}) *p = absolute(*p);
  if (!o.model.empty() && fs::exists(o.model)) o.model = absolute(o.model);
  check_distill_options(o);
  // Validated before any work: a run directory holds one run.
  std::error_code ec;
  if (fs::exists(run_dir) && (!fs::is_directory(run_dir) || !fs::is_empty(run_dir, ec)))
    fail(run_dir, "is not empty: a new run needs a new (or empty) run directory; resume the run that is there, or "
                  "choose another");
  return run(std::move(job), absolute(run_dir), progress, /*resume=*/false);
}

DistillResult resume_distill(const std::string& run_dir, const ProgressFn& progress, std::optional<Device> device) {
  if (fs::is_regular_file(fs::path(run_dir) / "report.json"))
    fail(run_dir, "has finished (report.json is written): there is nothing to resume");
  DistillJob job = read_distill_job(run_dir);
  if (device) job.options.device = *device;
  try {
    check_distill_options(job.options, /*dims_given=*/true);
  } catch (const Error& e) {
    throw Error(job.file + ": " + e.what(), e.quantity());
  }
  return run(std::move(job), run_dir, progress, /*resume=*/true);
}

double distill_step_seconds(DistillBench& b) {
  const DistillOptions& o = b.options;
  if (o.loss == DistillLoss::Direct) return direct_step_seconds(b);
  if (o.loss == DistillLoss::Block) fail_value("loss", "block is not benchmarked (it runs each layer's MLP from the model)");
  const int S = int(b.groups.size());
  if (int(b.q.size()) != S || int(b.k.size()) != S) fail("distill bench", "q and k must hold one tensor per layer");
  std::vector<LayerState> layers = bench_layers(b.groups);
  const Optimizer opt = optimizer_of(o);
  const at::Tensor pairs = o.loss == DistillLoss::L2 ? step_pairs(o.seed, o.l2_pairs, b.q[0].size(2), 0).to(b.q[0].device())
                                                     : at::Tensor();
  const auto one_step = [&](int64_t step) {
    for_each_layer(b.q[0].device(), S, [&](int64_t s) {
      train_layer_step(opt, o.loss, layers[size_t(s)], b.q[size_t(s)], b.k[size_t(s)],
                       b.v.empty() ? at::Tensor() : b.v[size_t(s)], b.x.empty() ? at::Tensor() : b.x[size_t(s)], at::Tensor(),
                       pairs, step);
    });
  };
  const at::Tensor& some_param = layers[0].groups[0].group.maps.params[0].second;
  one_step(0);  // warm-up
  wait_for_device(some_param);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= b.steps; ++i) one_step(i);
  wait_for_device(some_param);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace attnscope
