// `attnscope bench attention` (attention_bench.h): the kernel against the forms it replaces and
// the softmax attention it competes with, each timed and metered on the same random inputs.
#include "attnscope/bench/attention_bench.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "attnscope/base/device.h"
#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "attnscope/base/memory_meter.h"

namespace attnscope {
namespace {

// The chunked form as core computed it before kernels/ (LibTorch expressions, one chunk after the
// other: per chunk a dozen ATen operations over all heads), kept verbatim as the baseline.
at::Tensor chunked_aten(const at::Tensor& fq, const at::Tensor& fk, const at::Tensor& lk, const at::Tensor& vv) {
  constexpr int64_t kChunk = 64;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t L = fq.size(-2);
  std::vector<int64_t> lead(fq.sizes().begin(), fq.sizes().end() - 2);
  std::vector<int64_t> s_shape = lead, z_shape = lead, c_shape = lead;
  s_shape.insert(s_shape.end(), {fq.size(-1), vv.size(-1)});
  z_shape.insert(z_shape.end(), {fq.size(-1), 1});
  c_shape.insert(c_shape.end(), {1, 1});
  at::Tensor S = at::zeros(s_shape, fq.options()), z = at::zeros(z_shape, fq.options());
  at::Tensor c = at::full(c_shape, -inf, fq.options());
  std::vector<at::Tensor> chunks;
  for (int64_t start = 0; start < L; start += kChunk) {
    const int64_t len = std::min(kChunk, L - start);
    const at::Tensor qc = fq.narrow(-2, start, len), kc = fk.narrow(-2, start, len), vc = vv.narrow(-2, start, len);
    const at::Tensor lc = lk.narrow(-2, start, len);
    const at::Tensor ci = at::maximum(c, std::get<0>(at::cummax(lc, -2)));
    const at::Tensor mask = at::ones({len, len}, fq.options().dtype(at::kBool)).tril();
    const at::Tensor key_scale = at::exp((lc.transpose(-2, -1) - ci).masked_fill(mask.logical_not(), -inf));
    const at::Tensor w = at::matmul(qc, kc.transpose(-2, -1)) * key_scale;
    const at::Tensor carried = at::exp(c - ci);
    const at::Tensor num = at::matmul(w, vc) + carried * at::matmul(qc, S);
    const at::Tensor den = w.sum(-1, /*keepdim=*/true) + carried * at::matmul(qc, z);
    const at::Tensor none = den == 0;
    chunks.push_back(at::where(none, at::full({}, std::nan(""), den.options()), num / at::where(none, at::ones_like(den), den)));
    const at::Tensor c_new = ci.narrow(-2, len - 1, 1);
    const at::Tensor kc_scaled = kc * at::exp(lc - c_new);
    const at::Tensor rescale = at::exp(c - c_new);
    S = S * rescale + at::matmul(kc_scaled.transpose(-2, -1), vc);
    z = z * rescale + kc_scaled.sum(-2).unsqueeze(-1);
    c = c_new;
  }
  return at::cat(chunks, -2);
}

// The cumsum form: every prefix state S_i = sum_{j<=i} phi(k_j) v_j^T materialized, [..., L, M, d].
// The key scales are taken relative to the sequence's largest (exact unless they spread past exp's
// range, which the benchmark's inputs do not).
at::Tensor cumsum_form(const at::Tensor& fq, const at::Tensor& fk, const at::Tensor& lk, const at::Tensor& vv) {
  const at::Tensor kw = fk * at::exp(lk - std::get<0>(lk.max(-2, /*keepdim=*/true)));
  const at::Tensor S = (kw.unsqueeze(-1) * vv.unsqueeze(-2)).cumsum(-3);  // [..., L, M, d]
  const at::Tensor z = kw.cumsum(-2);                                      // [..., L, M]
  return (fq.unsqueeze(-1) * S).sum(-2) / (fq * z).sum(-1, /*keepdim=*/true);
}

// Full causal softmax on purpose: the benchmark times attention forms on random inputs of a shape,
// not a model, so no model's sliding window applies (a window would only make softmax cheaper).
at::Tensor softmax_form(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);  // flash
#endif
  const int64_t L = q.size(-2);
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const at::Tensor mask = at::full({L, L}, -std::numeric_limits<float>::infinity(), q.options()).triu(1);
  return at::matmul(at::softmax(scores + mask, -1), v);
}

// Whether softmax_form runs the fused kernel (no L x L map).
bool fused_softmax(const at::Device& d) { return d.is_cuda() && TORCH_VERSION_MAJOR >= 2; }

// Tensor bytes a form needs beyond its inputs, roughly, for the skip rule.
int64_t estimated_bytes(AttentionForm f, const AttentionBenchOptions& o, const at::Device& d, int64_t L, int64_t elem) {
  const int64_t n = o.batch * o.heads;
  switch (f) {
    case AttentionForm::Cumsum: return n * L * o.features * o.head_dim * elem * (o.backward ? 3 : 2);
    case AttentionForm::Softmax:
      return fused_softmax(d) ? n * L * o.head_dim * elem * 4 : n * L * L * elem * (o.backward ? 4 : 3);
    default: return n * L * 64 * elem * 4;
  }
}

}  // namespace

const char* attention_form_name(AttentionForm f) {
  switch (f) {
    case AttentionForm::Kernel: return "kernel";
    case AttentionForm::ChunkedAten: return "chunked-aten";
    case AttentionForm::Cumsum: return "cumsum";
    case AttentionForm::Softmax: return "softmax";
  }
  return "?";
}

at::Tensor attention_form_output(AttentionForm form, const at::Tensor& q, const at::Tensor& k, const at::Tensor& fq,
                                 const at::Tensor& fk, const at::Tensor& lk, const at::Tensor& v) {
  switch (form) {
    case AttentionForm::Kernel: return kernels::causal_linear_attention(fq, fk, lk, v);
    case AttentionForm::ChunkedAten: return chunked_aten(fq, fk, lk, v);
    case AttentionForm::Cumsum: return cumsum_form(fq, fk, lk, v);
    case AttentionForm::Softmax: return softmax_form(q, k, v);
  }
  return {};
}

std::vector<AttentionSpeed> bench_attention(const AttentionBenchOptions& o, const ProgressFn& progress) {
  const at::Device device = parse_device(o.device);
  at::ScalarType dtype;
  if (o.dtype == "float32") dtype = at::kFloat;
  else if (o.dtype == "float64") dtype = at::kDouble;
  else if (o.dtype == "bfloat16") dtype = at::kBFloat16;
  else fail_value("benchmark dtype", "'" + o.dtype + "' is not one of float32, float64, bfloat16");
  if (dtype == at::kBFloat16 && !device.is_cuda()) fail_value("benchmark dtype", "bfloat16 runs on CUDA only (the CPU kernels take float32 and float64)");
  for (int64_t L : o.lengths)
    if (L < 1) fail_value("length", std::to_string(L) + " must be >= 1");
  if (o.batch < 1 || o.heads < 1 || o.head_dim < 1 || o.features < 1 || o.repeats < 1)
    fail_value("shape", "batch, heads, head dimension, features and repeats must all be >= 1");
  const MemoryDevice mem = device.is_cuda() ? MemoryDevice::CUDA : MemoryDevice::CPU;
  const int64_t elem = int64_t(c10::elementSize(dtype));
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const auto opts = at::TensorOptions().dtype(at::kFloat);

  std::vector<AttentionSpeed> out;
  size_t done = 0;
  for (int64_t L : o.lengths) {
    if (progress) progress(double(done++) / double(o.lengths.size()), "L = " + std::to_string(L));
    const std::vector<int64_t> lead{o.batch, o.heads, L};
    auto make = [&](int64_t last, double scale) {
      return (at::randn({o.batch, o.heads, L, last}, gen, opts) * scale).to(device, dtype).requires_grad_(o.backward);
    };
    // PRF-like feature values in (0, 1] with log scales of a few units, raw q and k for softmax.
    const at::Tensor fq = at::exp(-make(o.features, 1.0).detach().abs()).requires_grad_(o.backward);
    const at::Tensor fk = at::exp(-make(o.features, 1.0).detach().abs()).requires_grad_(o.backward);
    const at::Tensor lk = make(1, 2.0), v = make(o.head_dim, 1.0);
    const at::Tensor q = make(o.head_dim, 1.0), k = make(o.head_dim, 1.0);

    AttentionSpeed row;
    row.length = L;
    at::Tensor reference;
    for (AttentionForm f : {AttentionForm::Kernel, AttentionForm::ChunkedAten, AttentionForm::Cumsum, AttentionForm::Softmax}) {
      AttentionTiming t;
      t.form = f;
      if (estimated_bytes(f, o, device, L, elem) > o.memory_limit_bytes) {
        row.forms.push_back(t);
        continue;
      }
      auto run = [&]() {
        at::Tensor y = attention_form_output(f, q, k, fq, fk, lk, v);
        if (o.backward) y.backward(at::ones_like(y));
        wait_for_device(y);
        return y;
      };
      std::unique_ptr<at::NoGradGuard> no_grad;
      if (!o.backward) no_grad = std::make_unique<at::NoGradGuard>();
      at::Tensor y;
      {
        PeakMemoryMeter meter(mem);
        y = run();  // warm-up, and the memory of one run
        t.peak_bytes = meter.peak_bytes();
      }
      t.ms = std::numeric_limits<double>::infinity();
      for (int r = 0; r < o.repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        y = run();
        t.ms = std::min(t.ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      t.ran = true;
      if (f == AttentionForm::Kernel) reference = y.detach().to(at::kDouble);
      else if (f != AttentionForm::Softmax)
        t.max_rel_diff = ((y.detach().to(at::kDouble) - reference).abs().max() / reference.abs().max()).item<double>();
      row.forms.push_back(t);
    }
    out.push_back(row);
  }
  if (progress) progress(1.0, "done");
  return out;
}

}  // namespace attnscope
