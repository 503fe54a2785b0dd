// `attnscope bench`: generation / batch speed of softmax against linear attention across contexts,
// and milliseconds per training sample of the distillation losses, on a GPT-2-small-shaped model.
#include "attnscope/bench/speed_bench.h"

#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>

#include <unistd.h>

#include "attnscope/convert/converted_model.h"
#include "attnscope/base/device.h"
#include "attnscope/bench/scale_bench.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"
#include "attnscope/attention/feature_map_tensors.h"
#include "attnscope/attention/head_feature_maps.h"
#include "attnscope/base/memory_meter.h"
#include "attnscope/model/model.h"
#include "attnscope/model/model_config.h"
#include "attnscope/model/pretrain.h"
#include "attnscope/base/random.h"
#include "attnscope/base/table.h"

namespace attnscope {

namespace fs = std::filesystem;
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

MemoryDevice memory_device(const at::Device& d) { return d.is_cuda() ? MemoryDevice::CUDA : MemoryDevice::CPU; }

}  // namespace

ModelConfig gpt2_small_config(int n_ctx, int vocab) { return gpt2_config(12, 12, 768, vocab, n_ctx); }

GenerateBenchMemory generate_bench_memory(const ModelConfig& c, int64_t M, int64_t T, int64_t B, bool batch_forward) {
  const int64_t f = 4, L = c.n_layer, H = c.n_head, Hkv = c.n_kv_head, d = c.head_dim, D = c.d_model, F = c.d_ff,
                V = c.vocab_size;
  const int64_t act = B * T * (6 * D + 2 * F) * f;           // one layer's activations of the prompts
  const int64_t scores = 3 * B * H * std::min<int64_t>(T, 512) * T * f;  // a prefill chunk's scores, probabilities, mask
  const int64_t cache = L * 2 * B * Hkv * (T + std::max<int64_t>(T / 2, 256)) * d * f;
  const int64_t chunked = 3 * B * H * T * (2 * M + 2 * d + 2) * f;  // features, outputs, the chunks' states
  const int64_t state = L * B * H * (M * d + M + 1) * f;
  // The batch-forward columns (batch 1, contexts up to kBatchForwardLongest): one forward, its [T, V]
  // logits and, for softmax, the whole [H, T, T] scores.
  const bool whole = batch_forward && B == 1 && T <= kBatchForwardLongest;
  const int64_t logits = whole ? T * V * f : 0;
  GenerateBenchMemory m;
  m.softmax = std::max(cache + act + scores, whole ? act + 3 * H * T * T * f + logits : 0);
  m.linear = std::max(state + act + chunked, whole ? act + chunked + logits : 0);
  return m;
}

int64_t available_memory_bytes(const std::string& device) {
  if (parse_device(device).is_cuda()) return 0;
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    int64_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

std::vector<ContextSpeed> bench_generate(const Model& original, const Model& converted,
                                         const GenerateBenchOptions& o, const ProgressFn& progress, int64_t available) {
  if (!converted.feature_maps()) fail("bench", "the converted model runs softmax attention");
  if (o.tokens < 2) fail_value("tokens", std::to_string(o.tokens) + " must be >= 2 (the time between tokens is measured)");
  if (o.batches.empty()) fail_value("batch", "none given");
  for (int b : o.batches)
    if (b < 1) fail_value("batch", std::to_string(b) + " must be >= 1 (sequences at once)");
  const int n_ctx = original.config().n_ctx;
  for (int c : o.contexts)
    if (c <= o.tokens || c > n_ctx)
      fail_value("context", std::to_string(c) + " must be in " + std::to_string(o.tokens + 1) + ".." + std::to_string(n_ctx) +
                                " (more than the tokens generated, at most the model's context length)");
  // Every row's memory, before the first measurement.
  int64_t M = 0;
  for (const auto& layer : head_dims(*converted.feature_maps())) M = std::max(M, *std::max_element(layer.begin(), layer.end()));
  auto gb = [](int64_t bytes) { return fmt_number(double(bytes) / 1e9, 1) + " GB"; };
  std::vector<ContextSpeed> out;
  for (int context : o.contexts)
    for (int B : o.batches) {
      ContextSpeed r;
      r.context = context, r.batch = B;
      const GenerateBenchMemory need = generate_bench_memory(original.config(), M, context, B, o.batch);
      if (available > 0 && need.linear > available)
        fail_value("context", std::to_string(context) + " x batch " + std::to_string(B) + ": the converted model needs about " +
                                  gb(need.linear) + " (its prompts' forward and state), " + gb(available) + " are available");
      if (available > 0 && need.softmax > available) r.softmax_skipped_bytes = need.softmax;
      out.push_back(r);
    }
  const MemoryDevice mem = memory_device(original.weights().tok_emb.device());
  Rng rng(o.seed);
  size_t done = 0;
  for (ContextSpeed& r : out) {
    const int context = r.context, B = r.batch;
    if (progress) progress(double(done++) / double(out.size()), "context " + std::to_string(context) + " x " + std::to_string(B));
    // B random prompts of context - tokens tokens; the last `tokens` tokens of each sequence are
    // generated and the time between the first and the last of them is measured.
    std::vector<std::vector<int64_t>> prompts(size_t(B), std::vector<int64_t>(size_t(context - o.tokens)));
    for (auto& prompt : prompts)
      for (auto& id : prompt) id = int64_t(rng.below(uint64_t(original.config().vocab_size)));
    // Memory of the generation itself, once the prompts have been read (a converted model reads them
    // in one batch forward, whose memory the batch columns report): what is still held when the
    // first new token comes (the recurrent state) plus the peak of the steps after it.
    auto generation = [&](const Model& m, double* tokens_per_s, int64_t* peak, bool kv_cache) {
      std::vector<clock_type::time_point> stamps;
      const PeakMemoryMeter counting(mem);  // live_tensor_bytes counts from the first meter on
      std::unique_ptr<PeakMemoryMeter> meter;
      const int64_t live_before = live_tensor_bytes(mem);
      int64_t held = 0;
      auto stamp = [&] {
        stamps.push_back(clock_type::now());
        if (!meter) {
          held = std::max<int64_t>(0, live_tensor_bytes(mem) - live_before);
          meter = std::make_unique<PeakMemoryMeter>(mem);
        }
      };
      if (kv_cache)
        m.generate_greedy_batch(prompts, o.tokens, -1, [&](size_t b, const std::vector<int64_t>&) {
          if (b == 0) stamp();
        });
      else
        m.generate_greedy(prompts[0], o.tokens, -1, [&](const std::vector<int64_t>&) { stamp(); }, false);
      *peak = held + meter->peak_bytes();
      *tokens_per_s = double(B) * double(stamps.size() - 1) / std::chrono::duration<double>(stamps.back() - stamps.front()).count();
    };
    const bool softmax = r.softmax_skipped_bytes == 0;
    if (softmax) generation(original, &r.softmax_generate_tokens_per_s, &r.softmax_generate_peak_bytes, true);
    if (softmax && B == 1 && context <= kBatchForwardLongest) {
      int64_t nocache_peak = 0;
      generation(original, &r.softmax_nocache_generate_tokens_per_s, &nocache_peak, false);
    }
    generation(converted, &r.linear_generate_tokens_per_s, &r.linear_generate_peak_bytes, true);
    if (o.batch && B == 1 && context <= kBatchForwardLongest) {
      at::NoGradGuard no_grad;
      std::vector<int64_t> ids(prompts[0]);
      while (int(ids.size()) < context) ids.push_back(ids[ids.size() % prompts[0].size()]);
      const at::Tensor w = at::tensor(ids).view({1, context}).to(original.weights().tok_emb.device());
      // kBatchForwardRuns forwards of each model, alternating (a busy machine slows both alike); the
      // median's tokens/s, the first's peak.
      std::vector<double> softmax_s, linear_s;
      auto batch = [&](const Model& m, std::vector<double>& secs, int64_t* peak) {
        PeakMemoryMeter meter(mem);
        const auto t0 = clock_type::now();
        wait_for_device(m.forward(w));
        secs.push_back(seconds_since(t0));
        if (secs.size() == 1) *peak = meter.peak_bytes();
      };
      for (int run = 0; run < kBatchForwardRuns; ++run) {
        if (softmax) batch(original, softmax_s, &r.softmax_batch_peak_bytes);
        batch(converted, linear_s, &r.linear_batch_peak_bytes);
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      if (softmax) r.softmax_batch_tokens_per_s = double(context) / median(softmax_s);
      r.linear_batch_tokens_per_s = double(context) / median(linear_s);
    }
  }
  if (progress) progress(1.0, "done");
  return out;
}

std::vector<ContextSpeed> bench_generate(const GenerateBenchOptions& o, const ProgressFn& progress) {
  if (o.contexts.empty()) fail_value("context", "none given");
  const int largest = *std::max_element(o.contexts.begin(), o.contexts.end());
  if (largest > kBenchLongestContext)
    fail_value("context", std::to_string(largest) + " exceeds " + std::to_string(kBenchLongestContext) +
                              ", the benchmark model's longest context");
  if (o.vocab < 2) fail_value("vocabulary size", std::to_string(o.vocab) + " must be >= 2");
  if (o.features < 1) fail_value("feature dimension", std::to_string(o.features) + " must be >= 1");
  const ModelShape shape = parse_model_shape(o.shape);
  const at::Device device = parse_device(o.device);
  ModelConfig c;
  ModelWeights w;
  if (shape == ModelShape::Gpt2Small) {
    c = gpt2_small_config(std::max(largest, 1), o.vocab);
    w = weights_on(init_gpt2_weights(c, o.seed), device);
  } else {
    // bench scale's checkpoint of the shape, read back in float32 (a bf16 checkpoint would convert
    // every layer at every token, for softmax and the converted model alike), then removed.
    c = model_shape_config(shape);
    if (largest > c.n_ctx)
      fail_value("context", std::to_string(largest) + " exceeds the " + o.shape + " shape's context " + std::to_string(c.n_ctx));
    const fs::path dir = fs::temp_directory_path() / ("attnscope_bench_" + o.shape + "_" + std::to_string(::getpid()));
    struct Remove {
      fs::path p;
      ~Remove() {
        std::error_code ec;
        remove_tree(p.string(), ec);
      }
    } remove{dir};
    if (progress) progress(0, "writing the " + o.shape + " checkpoint (random weights)");
    write_shaped_checkpoint(shape, dir.string(), "", o.seed);
    w = weights_on(load_hf_weights(c, WeightStore(dir.string())), device, at::kFloat);
  }
  const Model original(c, w);
  Model converted(c, w);
  FeatureMapSpec spec;
  spec.name = o.feature_map;
  spec.seed = o.seed;
  auto linear = std::make_shared<HeadFeatureMaps>(make_head_feature_maps(
      spec, std::vector<std::vector<int64_t>>(c.n_layer, std::vector<int64_t>(c.n_head, o.features)), c.n_layer,
      c.n_head, c.head_dim, o.window));
  for (auto& layer : linear->maps)
    for (auto& map : layer)
      for (auto& [name, t] : feature_map_tensors(*map)) t.set_data(t.to(device));
  converted.set_feature_maps(linear);
  return bench_generate(original, converted, o, progress, available_memory_bytes(o.device));
}

// ---- training ----
namespace {

// One timed measurement of distill's own training step (distill.h's DistillBench: the same loss,
// backward and AdamW as `attnscope distill`), every head of all layers, on random inputs of the
// shape (speed does not depend on them): layerwise losses learn from random q, k [B, H, L, d] per
// layer (teacher-forced), direct runs the whole random model with the maps in place on random ids.
// Returns the seconds of o.steps steps after one untimed warm-up step.
double train_seconds(const TrainBenchOptions& o, const ModelConfig& c, const at::Device& device, DistillLoss loss) {
  DistillBench b;
  b.options.feature_map = o.feature_map;
  b.options.loss = loss;
  b.options.seed = o.seed;
  b.steps = o.steps;
  const std::vector<int64_t> head_dims(size_t(c.n_head), o.features);
  for (int l = 0; l < c.n_layer; ++l) {
    b.groups.push_back(init_layer_groups(b.options, l, head_dims, c.head_dim));
    for (HeadGroup& g : b.groups.back())
      for (auto& p : g.maps.params) p.second = p.second.to(device);
  }
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  std::unique_ptr<Model> model;
  if (loss == DistillLoss::Direct) {
    model = std::make_unique<Model>(c, weights_on(init_gpt2_weights(c, o.seed), device));
    b.model = model.get();
    b.ids = at::randint(c.vocab_size, {o.batch, o.seq_len}, gen, at::kLong).to(device);
  } else {
    for (int l = 0; l < c.n_layer; ++l) {
      b.q.push_back(at::normal(0.0, 1.0, {o.batch, c.n_head, o.seq_len, c.head_dim}, gen).to(device));
      b.k.push_back(at::normal(0.0, 1.0, {o.batch, c.n_head, o.seq_len, c.head_dim}, gen).to(device));
      if (loss == DistillLoss::Output)
        b.v.push_back(at::normal(0.0, 1.0, {o.batch, c.n_head, o.seq_len, c.head_dim}, gen).to(device));
    }
  }
  return distill_step_seconds(b);
}

}  // namespace

std::vector<TrainSpeed> bench_train(const TrainBenchOptions& o, const ProgressFn& progress) {
  if (o.losses.empty()) fail_value("loss", "none given");
  if (o.seq_len < 2) fail_value("sequence length", std::to_string(o.seq_len) + " must be >= 2");
  if (o.features < 2) fail_value("feature dimension", std::to_string(o.features) + " must be >= 2");
  if (o.batch < 1) fail_value("batch", std::to_string(o.batch) + " must be >= 1");
  if (o.steps < 1) fail_value("steps", std::to_string(o.steps) + " must be >= 1");
  std::vector<DistillLoss> losses;
  for (const auto& loss : o.losses) losses.push_back(parse_distill_loss(loss));  // Error naming the known ones
  const ModelConfig c = gpt2_small_config(std::max(o.seq_len, 1024), 50257);
  const at::Device device = parse_device(o.device);
  std::vector<TrainSpeed> out;
  for (size_t i = 0; i < o.losses.size(); ++i) {
    if (progress) progress(double(i) / double(o.losses.size()), "training step, loss " + o.losses[i]);
    TrainSpeed r;
    r.loss = o.losses[i];
    r.steps = o.steps;
    r.seconds = train_seconds(o, c, device, losses[i]);
    r.ms_per_sample = 1000.0 * r.seconds / (double(o.steps) * o.batch);
    out.push_back(r);
  }
  if (progress) progress(1.0, "done");
  return out;
}

}  // namespace attnscope
