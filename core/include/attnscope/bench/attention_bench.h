// `attnscope bench attention`: causal linear attention through kernels/ side by side with what it
// replaces and what it competes with, on random inputs of one shape: the previous chunked form
// built from LibTorch expressions (core's code before kernels/ existed), the cumsum form (prefix
// states [L, M, d] materialized, the textbook O(L M d) expression) and softmax attention
// (materialized L x L on the CPU; PyTorch's fused scaled_dot_product_attention on CUDA with
// LibTorch >= 2). Time and peak memory (memory_meter.h) per form; forward or forward + backward.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"
#include "attnscope/base/progress.h"

namespace attnscope {

struct AttentionBenchOptions {
  std::vector<int64_t> lengths{1024, 2048, 4096, 8192, 16384};
  int64_t batch = 1, heads = 1;
  int64_t head_dim = 64;  // d, of q, k and v
  int64_t features = 64;  // M
  std::string dtype = "float32";  // float32, float64, bfloat16 (CUDA)
  std::string device = "cpu";
  bool backward = false;  // time forward + backward (gradients of every input)
  int repeats = 3;        // timed runs per form and length (the best is kept), after one warm-up
  // Forms whose memory would pass this many bytes are skipped (reported as not run): the cumsum
  // form's [L, M, d] states and softmax's L x L map grow fastest.
  int64_t memory_limit_bytes = int64_t(8) << 30;
  uint64_t seed = 0;
};

// Every option of `attnscope bench attention` (bench_options.cpp).
const OptionTable<AttentionBenchOptions>& attention_bench_option_table();

// The forms, in the order of the table.
enum class AttentionForm { Kernel, ChunkedAten, Cumsum, Softmax };
const char* attention_form_name(AttentionForm f);  // "kernel", "chunked-aten", "cumsum", "softmax"

struct AttentionTiming {
  AttentionForm form = AttentionForm::Kernel;
  bool ran = false;       // false: skipped (memory_limit_bytes)
  double ms = 0;          // best of the repeats
  int64_t peak_bytes = 0; // extra tensor bytes at the peak of one run
  double max_rel_diff = 0;  // of the output against the kernel's (linear forms only; 0 for the kernel)
};

struct AttentionSpeed {
  int64_t length = 0;
  std::vector<AttentionTiming> forms;  // every AttentionForm, in order
};

// One run of a form: softmax reads q, k, v [..., L, d]; the linear forms read feature values fq, fk
// [..., L, M], key log scales lk [..., L, 1] and v. (Google Benchmark's bench_attention_output
// times the same forms.)
at::Tensor attention_form_output(AttentionForm form, const at::Tensor& q, const at::Tensor& k, const at::Tensor& fq,
                                 const at::Tensor& fk, const at::Tensor& lk, const at::Tensor& v);

// Throws Error for bad options (lengths < 1, unknown dtype or device, bfloat16 on the CPU).
std::vector<AttentionSpeed> bench_attention(const AttentionBenchOptions& options, const ProgressFn& progress = nullptr);

}  // namespace attnscope
