// evaluate_converted: loss, per-layer closeness and speed of a converted model against the same
// weights with softmax attention.
#include "attnscope/convert/converted_eval.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "attnscope/convert/converted_model.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/head_metrics.h"
#include "attnscope/attention/attention.h"
#include "attnscope/base/memory_meter.h"
#include "attnscope/model/model.h"

namespace attnscope {
namespace {

// Tokens per second of `run`, which handles `tokens` tokens per call. Repeats until min_seconds
// have passed (at least twice) so short calls are not timed by the clock's resolution.
template <class F>
double tokens_per_second(F&& run, int64_t tokens, double min_seconds, bool warm_up) {
  using clock = std::chrono::steady_clock;
  if (warm_up) run();  // first-call allocations and thread-pool start-up are not the steady rate
  int reps = 0;
  const auto start = clock::now();
  double elapsed = 0;
  do {
    run();
    ++reps;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (reps < 2 || elapsed < min_seconds);
  return double(tokens) * reps / elapsed;
}

// Extra bytes of tensors that one call of `run` needs at its peak, on the device the weights are on.
template <class F>
int64_t peak_bytes_of(F&& run, MemoryDevice device) {
  PeakMemoryMeter meter(device);
  run();
  return meter.peak_bytes();
}

// The text's tokens repeated (or cut) to exactly L, so every speed measurement runs real tokens.
at::Tensor window_of(const std::vector<int64_t>& ids, int L) {
  std::vector<int64_t> w(L);
  for (int i = 0; i < L; ++i) w[i] = ids[i % ids.size()];
  return at::tensor(w).view({1, L});
}

}  // namespace

int position_bucket(int p) {
  if (p < 64) return 0;
  int b = 0;
  while ((64 << (b + 1)) <= p) ++b;
  return b + 1;
}

std::vector<int> default_speed_lengths(int n_ctx) {
  const int top = std::min(n_ctx, 4096);  // paper 000's longest context; longer ones take minutes on CPU
  std::vector<int> out;
  for (int L = 64; L < top; L *= 2) out.push_back(L);
  out.push_back(top);
  return out;
}

ConvertedEvaluation evaluate_converted(const Model& converted, const std::vector<int64_t>& ids,
                                       const ConvertedEvalOptions& options, const ProgressFn& progress) {
  const HeadFeatureMaps* linear = converted.feature_maps();
  if (!linear) fail("eval", "the model is not a converted model (it runs softmax attention)");
  const ModelConfig& c = converted.config();
  if (ids.size() < 2) fail("eval", "the text has fewer than 2 tokens");
  const int L = options.seq_len > 0 ? options.seq_len : c.n_ctx;
  if (L < 2 || L > c.n_ctx)
    fail_value("sequence length", std::to_string(L) + " must be in 2.." + std::to_string(c.n_ctx));
  if (options.closeness_windows < 1) fail_value("closeness windows", std::to_string(options.closeness_windows) + " must be >= 1");
  const std::vector<int> lengths = options.speed_lengths.empty() ? default_speed_lengths(c.n_ctx) : options.speed_lengths;
  for (int s : lengths)
    if (s < 2 || s > c.n_ctx)
      fail_value("speed length", std::to_string(s) + " must be in 2.." + std::to_string(c.n_ctx));

  // The original: the same weight tensors (shared, not copied) with softmax attention.
  const Model original(c, converted.weights());
  auto report = [&](double f, const std::string& what) {
    if (progress) progress(f, what);
  };

  ConvertedEvaluation r;
  r.compute_dtype = compute_dtype_name(converted.weights().compute);
  r.seq_len = L;
  r.tokens = int64_t(ids.size());
  r.trained_length = linear->trained_length;
  const int n_buckets = position_bucket(L - 1) + 1;
  r.positions.resize(size_t(n_buckets));
  for (int b = 0; b < n_buckets; ++b) {
    r.positions[size_t(b)].first = b == 0 ? 0 : 64 << (b - 1);
    r.positions[size_t(b)].last = std::min(L - 1, (64 << b) - 1);
  }
  // Losses token by token (Model::mean_loss's windows), then their means overall and per bucket.
  const auto losses = [&](const Model& m, double PositionBucket::*field) {
    double total = 0;
    int64_t count = 0;
    std::vector<double> sum(size_t(n_buckets), 0.0);
    std::vector<int64_t> n(size_t(n_buckets), 0);
    for (const auto& w : m.window_losses(ids, L))
      for (size_t i = 0; i < w.size(); ++i) {
        const size_t b = size_t(position_bucket(int(i) + 1));
        sum[b] += w[i], ++n[b], total += w[i], ++count;
      }
    for (int b = 0; b < n_buckets; ++b) {
      r.positions[size_t(b)].*field = n[size_t(b)] ? sum[size_t(b)] / double(n[size_t(b)]) : std::nan("");
      r.positions[size_t(b)].tokens = n[size_t(b)];
    }
    return total / double(count);
  };
  if (options.losses) {
    report(0.0, "original loss");
    r.original_loss = losses(original, &PositionBucket::original_loss);
    report(0.15, "converted loss");
    r.converted_loss = losses(converted, &PositionBucket::converted_loss);
  } else {
    r.original_loss = r.converted_loss = std::nan("");
  }

  // Closeness, teacher-forced: the original model's q, k, v and softmax output of every layer, and
  // each head's linear map of those same q, k (the converted model's own activations would drift
  // with the errors of earlier layers, mixing layers up).
  report(0.3, "attention KL");
  at::NoGradGuard no_grad;
  std::vector<std::pair<size_t, size_t>> windows;  // [start, length)
  for (size_t s = 0; s + L <= ids.size() && int(windows.size()) < options.closeness_windows; s += L)
    windows.push_back({s, size_t(L)});
  if (windows.empty()) windows.push_back({0, ids.size()});  // a text shorter than one window
  r.closeness_windows = int(windows.size());
  std::vector<double> kl_sum(c.n_layer, 0), kl_rows(c.n_layer, 0), err_num(c.n_layer, 0), err_den(c.n_layer, 0);
  std::vector<std::vector<double>> head_kl_sum(size_t(c.n_layer), std::vector<double>(size_t(c.n_head), 0.0)), head_rows = head_kl_sum;
  std::vector<double> pos_kl(size_t(n_buckets), 0.0), pos_rows(size_t(n_buckets), 0.0);
  for (const auto& [start, n] : windows) {
    const at::Tensor w =
        at::tensor(std::vector<int64_t>(ids.begin() + start, ids.begin() + start + n)).view({1, int64_t(n)});
    CaptureHook hook;
    hook.want_probs = true;
    hook.on_layer = [&](const AttentionActivations& a) {
      const int s = a.layer;
      const at::Tensor q = a.q.select(0, 0), k = a.k.select(0, 0), v = a.v.select(0, 0);  // [H, L, d]
      std::vector<at::Tensor> maps, outs;
      for (int64_t h = 0; h < q.size(0); ++h) {
        if (linear->type(s, h) == HeadType::Softmax) {  // kept exact: the original's own map and output
          maps.push_back(a.probs.select(0, 0).select(0, h));
          outs.push_back(a.out.select(0, 0).select(0, h));
          continue;
        }
        const auto& phi = linear->maps[s][h];
        const Features fq = phi->scaled_query_features(q.select(0, h));
        const Features fk = phi->scaled_key_features(k.select(0, h));
        if (linear->type(s, h) == HeadType::Hybrid) {  // hybrid heads: the map and output they run (SPEC 5)
          const HybridHeads hy{linear->window, linear->gamma[size_t(s)][h]};
          maps.push_back(hybrid_map(fq, fk, q.select(0, h), k.select(0, h), hy));
          outs.push_back(hybrid_attention_output(fq, fk, q.select(0, h), k.select(0, h), v.select(0, h), hy));
        } else {
          maps.push_back(linear_map(fq, fk).map);
          outs.push_back(linear_attention_output(fq, fk, v.select(0, h)));
        }
      }
      HeadMetricsInput in;
      in.map = at::stack(maps, 0);
      // The original's own probabilities: within its sliding window (Mistral) when it has one. The
      // converted heads' maps read every key (hybrids: their own window), as the converted model runs.
      in.reference = a.probs.select(0, 0);
      {  // KL of every row (float64), by position and by head: undefined rows (NaN in Ahat) left
         // out; Ahat read at compute_head_metrics' floor where it underflows to 0 under A > 0.
        const at::Tensor A = in.reference.to(at::kDouble), Ah = in.map.to(at::kDouble);  // [H, L, L]
        const at::Tensor row_kl = (at::special_xlogy(A, A) - at::special_xlogy(A, Ah.clamp_min(1e-300))).sum(-1);  // [H, L]
        const at::Tensor defined = Ah.isnan().any(-1).logical_not();
        const at::Tensor kl_by_pos = at::where(defined, row_kl, at::zeros_like(row_kl)).sum(0).contiguous();
        const at::Tensor rows_by_pos = defined.to(at::kDouble).sum(0).contiguous();
        const at::Tensor kl_by_head = at::where(defined, row_kl, at::zeros_like(row_kl)).sum(1).contiguous();
        const at::Tensor rows_by_head = defined.to(at::kDouble).sum(1).contiguous();
        for (int64_t h = 0; h < kl_by_head.size(0); ++h) {
          head_kl_sum[size_t(s)][size_t(h)] += kl_by_head[h].item<double>();
          head_rows[size_t(s)][size_t(h)] += rows_by_head[h].item<double>();
        }
        const double* kp = kl_by_pos.data_ptr<double>();
        const double* rp = rows_by_pos.data_ptr<double>();
        for (int64_t i = 0; i < kl_by_pos.size(0); ++i) {
          pos_kl[size_t(position_bucket(int(i)))] += kp[i];
          pos_rows[size_t(position_bucket(int(i)))] += rp[i];
        }
      }
      const HeadMetrics m = compute_head_metrics(in);
      const double rows = double(in.map.size(0) * in.map.size(1) - m.undefined_rows);
      if (rows > 0) {
        kl_sum[s] += *m.kl * rows;
        kl_rows[s] += rows;
      }
      const at::Tensor y = a.out.select(0, 0).to(at::kDouble);
      err_num[s] += (at::stack(outs, 0).to(at::kDouble) - y).pow(2).sum().item<double>();
      err_den[s] += y.pow(2).sum().item<double>();
    };
    original.forward(w, &hook);
  }
  for (int s = 0; s < c.n_layer; ++s) {
    r.layers.push_back({s, kl_rows[s] > 0 ? kl_sum[s] / kl_rows[s] : std::nan(""),
                        err_den[s] > 0 ? std::sqrt(err_num[s] / err_den[s]) : std::nan(""), {}});
    for (int h = 0; h < c.n_head; ++h)
      r.layers.back().head_kl.push_back(head_rows[size_t(s)][size_t(h)] > 0 ? head_kl_sum[size_t(s)][size_t(h)] / head_rows[size_t(s)][size_t(h)]
                                                                           : std::nan(""));
  }
  for (int b = 0; b < n_buckets; ++b)
    r.positions[size_t(b)].attention_kl = pos_rows[size_t(b)] > 0 ? pos_kl[size_t(b)] / pos_rows[size_t(b)] : std::nan("");
  if (options.faithfulness) {
    const Model& reference = options.original ? *options.original : original;
    report(0.35, "recall at distance");
    RecallOptions ro;
    ro.seq_len = L;
    r.recall = recall_at_distance(reference, converted, ids, ro);
    report(0.38, "generation agreement");
    const GenerationOptions go = generation_options_within(L);
    if (int64_t(ids.size()) >= go.prompt_tokens) r.generation = generation_agreement(reference, converted, ids, go);
  }
  if (!options.speed) {
    report(1.0, "done");
    return r;
  }

  // Speed: batch forward at each length, then greedy generation of a sequence of that length from
  // one token (the converted model decodes with its recurrent form, the original re-runs softmax).
  const MemoryDevice device = converted.weights().tok_emb.is_cuda() ? MemoryDevice::CUDA : MemoryDevice::CPU;
  const size_t steps = lengths.size() * 2;
  size_t done = 0;
  for (bool generate : {false, true}) {
    for (int len : lengths) {
      report(0.4 + 0.6 * double(done++) / steps, std::string(generate ? "generate" : "batch") + " speed at " + std::to_string(len));
      SpeedEntry e;
      e.seq_len = len;
      e.generate = generate;
      if (!generate) {
        const at::Tensor w = window_of(ids, len);
        e.softmax_tokens_per_s = tokens_per_second([&] { original.forward(w); }, len, options.min_seconds, true);
        e.linear_tokens_per_s = tokens_per_second([&] { converted.forward(w); }, len, options.min_seconds, true);
        e.softmax_peak_bytes = peak_bytes_of([&] { original.forward(w); }, device);
        e.linear_peak_bytes = peak_bytes_of([&] { converted.forward(w); }, device);
      } else {
        const std::vector<int64_t> prompt{ids[0]};
        e.softmax_tokens_per_s = tokens_per_second([&] { original.generate_greedy(prompt, len - 1); }, len - 1,
                                                   options.min_seconds, false);
        e.linear_tokens_per_s = tokens_per_second([&] { converted.generate_greedy(prompt, len - 1); }, len - 1,
                                                  options.min_seconds, false);
        e.softmax_peak_bytes = peak_bytes_of([&] { original.generate_greedy(prompt, len - 1); }, device);
        e.linear_peak_bytes = peak_bytes_of([&] { converted.generate_greedy(prompt, len - 1); }, device);
      }
      r.speed.push_back(e);
    }
  }
  report(1.0, "done");
  return r;
}

}  // namespace attnscope
