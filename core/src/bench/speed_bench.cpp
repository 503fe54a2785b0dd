// `attnscope bench`: generation / batch speed of softmax against linear attention across contexts,
// and milliseconds per training sample of the distillation losses, on a GPT-2-small-shaped model.
#include "attnscope/speed_bench.h"

#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include "attnscope/converted_model.h"
#include "attnscope/distill.h"
#include "attnscope/error.h"
#include "attnscope/feature_map_tensors.h"
#include "attnscope/memory_meter.h"
#include "attnscope/model.h"
#include "attnscope/model_config.h"
#include "attnscope/pretrain.h"
#include "attnscope/random.h"

namespace attnscope {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

MemoryDevice memory_device(const at::Device& d) { return d.is_cuda() ? MemoryDevice::CUDA : MemoryDevice::CPU; }

ModelWeights weights_on(const ModelWeights& w, const at::Device& device) {
  auto to = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  ModelWeights out;
  out.tok_emb = to(w.tok_emb);
  out.pos_emb = to(w.pos_emb);
  for (const LayerWeights& l : w.layers) {
    LayerWeights m;
    for (auto [dst, src] : std::vector<std::pair<at::Tensor*, const at::Tensor*>>{
             {&m.ln1_w, &l.ln1_w}, {&m.ln1_b, &l.ln1_b}, {&m.wq, &l.wq},       {&m.wk, &l.wk},
             {&m.wv, &l.wv},       {&m.wo, &l.wo},       {&m.bq, &l.bq},       {&m.bk, &l.bk},
             {&m.bv, &l.bv},       {&m.bo, &l.bo},       {&m.ln2_w, &l.ln2_w}, {&m.ln2_b, &l.ln2_b},
             {&m.w_up, &l.w_up},   {&m.b_up, &l.b_up},   {&m.w_gate, &l.w_gate}, {&m.w_down, &l.w_down},
             {&m.b_down, &l.b_down}})
      *dst = to(*src);
    out.layers.push_back(std::move(m));
  }
  out.lnf_w = to(w.lnf_w);
  out.lnf_b = to(w.lnf_b);
  out.lm_head = w.lm_head.is_same(w.tok_emb) ? out.tok_emb : to(w.lm_head);  // keep tied weights tied
  return out;
}

// Makes the device's queued work finish, so a clock read after it times the work (CUDA runs
// asynchronously; reading one value back waits for everything queued before it).
void sync(const at::Tensor& t) {
  if (t.is_cuda()) (void)t.reshape({-1})[0].item<float>();
}

}  // namespace

ModelConfig gpt2_small_config(int n_ctx, int vocab) { return gpt2_config(12, 12, 768, vocab, n_ctx); }

std::string check_device(const std::string& device) {
  if (device == "cpu") return device;
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    if (!at::hasCUDA())
      fail_value("device", "'" + device + "': this attnscope was built against a LibTorch without CUDA, or no GPU is visible; use cpu");
    try {
      (void)at::Device(device);
    } catch (const std::exception&) {
      fail_value("device", "'" + device + "' is not a device name (cpu, cuda or cuda:N)");
    }
    return device;
  }
  fail_value("device", "'" + device + "' is not one of cpu, cuda, cuda:N");
}

std::vector<ContextSpeed> bench_generate(const Model& original, const Model& converted,
                                         const GenerateBenchOptions& o, const ProgressFn& progress) {
  if (!converted.linear_attention()) fail("bench", "the converted model runs softmax attention");
  if (o.tokens < 2) fail_value("tokens", std::to_string(o.tokens) + " must be >= 2 (the time between tokens is measured)");
  const int n_ctx = original.config().n_ctx;
  for (int c : o.contexts)
    if (c <= o.tokens || c > n_ctx)
      fail_value("context", std::to_string(c) + " must be in " + std::to_string(o.tokens + 1) + ".." + std::to_string(n_ctx) +
                                " (more than --tokens, at most the model's context length)");
  const MemoryDevice mem = memory_device(original.weights().tok_emb.device());
  Rng rng(o.seed);
  std::vector<ContextSpeed> out;
  size_t done = 0;
  const size_t total = o.contexts.size();
  for (int context : o.contexts) {
    if (progress) progress(double(done++) / double(total), "context " + std::to_string(context));
    ContextSpeed r;
    r.context = context;
    // A random prompt of context - tokens tokens; the last `tokens` tokens of the sequence are
    // generated and the time between the first and the last of them is measured.
    std::vector<int64_t> prompt(size_t(context - o.tokens));
    for (auto& id : prompt) id = int64_t(rng.below(uint64_t(original.config().vocab_size)));
    auto generation = [&](const Model& m, double* tokens_per_s, int64_t* peak) {
      std::vector<clock_type::time_point> stamps;
      PeakMemoryMeter meter(mem);
      m.generate_greedy(prompt, o.tokens, -1, [&](const std::vector<int64_t>&) { stamps.push_back(clock_type::now()); });
      *peak = meter.peak_bytes();
      *tokens_per_s = double(stamps.size() - 1) / std::chrono::duration<double>(stamps.back() - stamps.front()).count();
    };
    generation(original, &r.softmax_generate_tokens_per_s, &r.softmax_generate_peak_bytes);
    generation(converted, &r.linear_generate_tokens_per_s, &r.linear_generate_peak_bytes);
    if (o.batch) {
      at::NoGradGuard no_grad;
      std::vector<int64_t> ids(prompt);
      while (int(ids.size()) < context) ids.push_back(ids[ids.size() % prompt.size()]);
      const at::Tensor w = at::tensor(ids).view({1, context}).to(original.weights().tok_emb.device());
      auto batch = [&](const Model& m, double* tokens_per_s, int64_t* peak) {
        PeakMemoryMeter meter(mem);
        const auto t0 = clock_type::now();
        sync(m.forward(w));
        *tokens_per_s = double(context) / seconds_since(t0);
        *peak = meter.peak_bytes();
      };
      batch(original, &r.softmax_batch_tokens_per_s, &r.softmax_batch_peak_bytes);
      batch(converted, &r.linear_batch_tokens_per_s, &r.linear_batch_peak_bytes);
    }
    out.push_back(r);
  }
  if (progress) progress(1.0, "done");
  return out;
}

std::vector<ContextSpeed> bench_generate(const GenerateBenchOptions& o, const ProgressFn& progress) {
  if (o.contexts.empty()) fail_value("contexts", "none given");
  const int largest = *std::max_element(o.contexts.begin(), o.contexts.end());
  if (largest > 4096) fail_value("context", std::to_string(largest) + " exceeds 4096, the benchmark model's context length");
  if (o.vocab < 2) fail_value("vocabulary size", std::to_string(o.vocab) + " must be >= 2");
  if (o.features < 1) fail_value("features", std::to_string(o.features) + " must be >= 1");
  const at::Device device(check_device(o.device));
  const ModelConfig c = gpt2_small_config(std::max(largest, 1), o.vocab);
  const ModelWeights w = weights_on(init_gpt2_weights(c, o.seed), device);
  const Model original(c, w);
  Model converted(c, w);
  FeatureMapSpec spec;
  spec.name = o.feature_map;
  spec.seed = o.seed;
  auto linear = std::make_shared<LinearAttention>(make_linear_attention(
      spec, std::vector<std::vector<int64_t>>(c.n_layer, std::vector<int64_t>(c.n_head, o.features)), c.n_layer,
      c.n_head, c.head_dim));
  for (auto& layer : linear->maps)
    for (auto& map : layer)
      for (auto& [name, t] : feature_map_tensors(*map)) t.set_data(t.to(device));
  converted.set_linear_attention(linear);
  return bench_generate(original, converted, o, progress);
}

// ---- training ----
namespace {

struct TrainSetup {
  const TrainBenchOptions& options;
  const ModelConfig& shape;
  at::Device device;
};

// One training step on options.batch samples; returns the summed loss (read back, so the device's
// work has finished when it returns).
using TrainStep = std::function<double()>;

// Layerwise distillation (teacher-forced): every layer's maps, all heads batched, learn from q, k of
// the layer (random here) with distill's layer_loss, then one AdamW step. Layers run one after
// another (distill runs them concurrently on CPU; on 2 cores the work is the same).
TrainStep layerwise_step(const TrainSetup& s, const std::string& loss) {
  const TrainBenchOptions& o = s.options;
  const ModelConfig& c = s.shape;
  DistillOptions d;
  d.feature_map = o.feature_map;
  d.features = o.features;
  d.loss = loss;
  d.seed = o.seed;
  struct Layer {
    LayerMaps maps;
    at::Tensor q, k;
  };
  auto layers = std::make_shared<std::vector<Layer>>();
  std::vector<at::Tensor> params;
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  for (int l = 0; l < c.n_layer; ++l) {
    Layer layer{init_layer_maps(d, l, c.n_head, c.head_dim, o.features), {}, {}};
    for (auto& [name, t] : layer.maps.params) {
      t = t.to(s.device).requires_grad_(true);
      params.push_back(t);
    }
    layer.q = at::normal(0.0, 1.0, {o.batch, c.n_head, o.seq_len, c.head_dim}, gen).to(s.device);
    layer.k = at::normal(0.0, 1.0, {o.batch, c.n_head, o.seq_len, c.head_dim}, gen).to(s.device);
    layers->push_back(std::move(layer));
  }
  at::Tensor pairs;
  if (loss == "l2") {  // distill's l2 draws d.l2_pairs pairs (i, j <= i) per mini-batch
    Rng rng(o.seed);
    std::vector<int64_t> p;
    for (int64_t n = 0; n < d.l2_pairs; ++n) {
      const int64_t i = int64_t(rng.below(uint64_t(o.seq_len)));
      p.push_back(i);
      p.push_back(int64_t(rng.below(uint64_t(i + 1))));
    }
    pairs = at::tensor(p).view({-1, 2}).to(s.device);
  }
  auto adam = std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(d.lr).weight_decay(0.0));
  return [=] {
    adam->zero_grad();
    double total = 0;
    for (const Layer& layer : *layers) {
      const at::Tensor l = layer_loss(layer.maps, layer.q, layer.k, loss, pairs);
      l.backward();
      total += l.item<double>();
    }
    adam->step();
    return total;
  };
}

// The table of training benchmarks: loss name -> how to build its step. A new loss is one line.
struct TrainBench {
  const char* loss;
  TrainStep (*make)(const TrainSetup&, const std::string& loss);
};
const std::vector<TrainBench>& train_benches() {
  static const std::vector<TrainBench> table = {
      {"l2", layerwise_step},
      {"softmax", layerwise_step},
      {"kl", layerwise_step},
  };
  return table;
}

}  // namespace

std::vector<std::string> train_bench_losses() {
  std::vector<std::string> names;
  for (const auto& b : train_benches()) names.push_back(b.loss);
  return names;
}

std::vector<TrainSpeed> bench_train(const TrainBenchOptions& o, const ProgressFn& progress) {
  if (o.losses.empty()) fail_value("loss", "none given");
  if (o.seq_len < 2) fail_value("sequence length", std::to_string(o.seq_len) + " must be >= 2");
  if (o.features < 2) fail_value("features", std::to_string(o.features) + " must be >= 2");
  if (o.batch < 1) fail_value("batch", std::to_string(o.batch) + " must be >= 1");
  if (o.steps < 1) fail_value("steps", std::to_string(o.steps) + " must be >= 1");
  std::vector<const TrainBench*> chosen;
  for (const auto& loss : o.losses) {
    const auto& table = train_benches();
    auto it = std::find_if(table.begin(), table.end(), [&](const TrainBench& b) { return loss == b.loss; });
    if (it == table.end()) {
      std::string known;
      for (const auto& n : train_bench_losses()) known += (known.empty() ? "" : ", ") + n;
      fail_value("loss", "'" + loss + "' is not one of " + known);
    }
    chosen.push_back(&*it);
  }
  const TrainSetup setup{o, gpt2_small_config(std::max(o.seq_len, 1024), 50257), at::Device(check_device(o.device))};
  std::vector<TrainSpeed> out;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (progress) progress(double(i) / double(chosen.size()), std::string("training step, loss ") + chosen[i]->loss);
    const TrainStep step = chosen[i]->make(setup, chosen[i]->loss);
    step();  // warm-up: first-call allocations, autograd graph set-up
    const auto t0 = clock_type::now();
    for (int s = 0; s < o.steps; ++s) step();
    TrainSpeed r;
    r.loss = chosen[i]->loss;
    r.steps = o.steps;
    r.seconds = seconds_since(t0);
    r.ms_per_sample = 1000.0 * r.seconds / (double(o.steps) * o.batch);
    out.push_back(r);
  }
  if (progress) progress(1.0, "done");
  return out;
}

}  // namespace attnscope
