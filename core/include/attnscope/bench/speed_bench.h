// `attnscope bench`: speed of softmax against linear attention and of feature-map training on a
// GPT-2-small-shaped model with random weights (12 layers, 12 heads, head dimension 64, D 768),
// built in memory: speed does not depend on the weights. Paper 000 Tables 4 and 5 are the anchors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

class Model;
struct ModelConfig;

// GPT-2 small's shape with a context of n_ctx positions and `vocab` tokens.
ModelConfig gpt2_small_config(int n_ctx = 4096, int vocab = 50257);


// ---- generation and batch speed at growing contexts ----
constexpr int kBenchLongestContext = 32768;  // bench_generate's model is built with the largest context asked
// The whole-window columns (a batch forward of the context; softmax without a cache, which runs one
// per token) form [H, T, T] scores: measured at batch 1 up to this context only.
constexpr int kBatchForwardLongest = 4096;
// Forwards of each model per batch-forward column (alternating): the column is their median.
constexpr int kBatchForwardRuns = 3;

struct GenerateBenchOptions {
  // The model: gpt2-small (built in memory, vocabulary `vocab`) or a rotary Llama shape of bench
  // scale (model_shape_names(): written as bench scale writes it, random weights in its published
  // dtype, into a temporary directory, and read back in float32; its own vocabulary).
  std::string shape = "gpt2-small";
  std::vector<int> contexts{256, 512, 1024, 2048, 4096};
  std::vector<int> batches{1};           // sequences generated at once (prompts of one length); each
                                         // context is measured at each batch size
  int tokens = 3;                        // new tokens timed per context (>= 2): the last ones of a
                                         // sequence of `context` tokens, from a random prompt
  std::string feature_map = "learned-prf";  // the converted model's map (untrained, seed 0)
  int64_t features = 64;                 // M per head
  int64_t window = 0;                    // > 0: hybrid heads (a softmax window of W keys beside the map)
  bool batch = true;                     // also one batch forward of `context` tokens
  int vocab = 50257;
  std::string device = "cpu";
  uint64_t seed = 0;
};

// Every option of `attnscope bench generate` (bench_options.cpp).
const OptionTable<GenerateBenchOptions>& generate_bench_option_table();

struct ContextSpeed {
  int context = 0;
  int batch = 1;  // sequences at once: tokens/s count the tokens of all of them
  // Generation: new tokens per second once the sequence is `context` long. Softmax keeps a
  // key-value cache (Model::generate_greedy, as every runtime does: the baseline); the no-cache
  // figure re-runs the whole window per token (labelled, for comparison with older tables); linear
  // attention steps its recurrent state (constant work per token).
  double softmax_generate_tokens_per_s = 0, linear_generate_tokens_per_s = 0;
  double softmax_nocache_generate_tokens_per_s = 0;
  // A forward of `context` tokens, the median of kBatchForwardRuns (0 when not measured).
  double softmax_batch_tokens_per_s = 0, linear_batch_tokens_per_s = 0;
  // Extra tensor bytes at the peak (memory_meter.h) of the generation and of the batch forward.
  // Generation counts from the first new token on, the prompt read: what is held then (linear:
  // the recurrent state of every head) plus the peak of the steps after it. (A converted model
  // reads the prompt in one batch forward, Model::generate_greedy; the batch columns show what
  // a forward of the whole context costs.)
  int64_t softmax_generate_peak_bytes = 0, linear_generate_peak_bytes = 0;  // softmax: with the cache
  int64_t softmax_batch_peak_bytes = 0, linear_batch_peak_bytes = 0;
  // > 0: softmax was not run at this context and batch: what generate_bench_memory estimates it
  // needs is more than the memory available (its columns are 0).
  int64_t softmax_skipped_bytes = 0;
};

// What one context and batch size of bench_generate needs beyond the weights, estimated before it
// runs, in bytes (float32 activations): softmax reads the prompts in chunks of 512 tokens (scores
// [B, H, 512, T]) and keeps a key-value cache (2 n_layer n_kv_head d values per token and sequence, made
// for T + max(T/2, 256) tokens); the converted model reads them in the chunked form and keeps a
// state per head; the batch-forward columns (batch 1, up to kBatchForwardLongest) form [T, V] logits
// and, for softmax, [H, T, T] scores.
struct GenerateBenchMemory {
  int64_t softmax = 0, linear = 0;
};
GenerateBenchMemory generate_bench_memory(const ModelConfig& c, int64_t features, int64_t context, int64_t batch,
                                          bool batch_forward);
// The memory left for tensors on `device` (bytes): MemAvailable of /proc/meminfo on the CPU; 0 where
// unknown (CUDA here), and then nothing is refused.
int64_t available_memory_bytes(const std::string& device);

// Each context must be in tokens+1 .. kBenchLongestContext (the model is built with n_ctx = the
// largest context), each batch size >= 1. Before the first measurement, every row's memory is
// estimated (generate_bench_memory): a row the converted model cannot fit is refused (Error with the
// estimate), a row softmax cannot fit is reported without softmax (softmax_skipped_bytes). Throws
// Error for bad options.
std::vector<ContextSpeed> bench_generate(const GenerateBenchOptions& options, const ProgressFn& progress = nullptr);

// The same measurement on given models (original: softmax; converted: the same weights with linear
// attention), contexts within their n_ctx. `eval`-independent; bench_generate calls it. `available`:
// the memory budget of the estimates (0: none).
std::vector<ContextSpeed> bench_generate(const Model& original, const Model& converted,
                                         const GenerateBenchOptions& options, const ProgressFn& progress = nullptr,
                                         int64_t available = 0);

// ---- training: milliseconds per sample ----
struct TrainBenchOptions {
  std::vector<std::string> losses{"l2", "softmax"};  // distill_loss_names(): every loss distill trains
  int seq_len = 1024;        // tokens per sample
  int64_t features = 64;     // M per head, every layer
  std::string feature_map = "learned-prf";
  int batch = 1;             // samples (windows) per step
  int steps = 3;             // timed steps, after one untimed warm-up step
  std::string device = "cpu";
  uint64_t seed = 0;
};

// Every option of `attnscope bench train` (bench_options.cpp).
const OptionTable<TrainBenchOptions>& train_bench_option_table();

struct TrainSpeed {
  std::string loss;
  double ms_per_sample = 0;  // one step over all 12 layers (every head), divided by the batch
  double seconds = 0;        // the timed steps together
  int steps = 0;
};

std::vector<TrainSpeed> bench_train(const TrainBenchOptions& options, const ProgressFn& progress = nullptr);

}  // namespace attnscope
