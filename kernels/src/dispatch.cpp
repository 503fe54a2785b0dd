// The dispatch of include/attnscope/kernels/linear_attention.h: checks, flattening of the leading
// dimensions to N, autograd, and the choice of kernel: CPU (src/cpu_chunked.cpp), CUDA FMA kernels
// (cuda/*.cu) for float32 and float64, the GEMM-based form (src/gemm_chunked.cpp: tensor cores) for
// bfloat16 and float16 on CUDA.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/kernels/linear_attention.h"
#include "src/cpu_chunked.h"
#include "src/gemm_chunked.h"

#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
#include "cuda/launch.h"
#endif
#ifdef ATTNSCOPE_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace attnscope::kernels {
namespace {

constexpr const char* kWhere = "linear attention kernel";

std::string shape(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_dtype_device(const char* what, const at::Tensor& t, const at::Tensor& ref) {
  if (!t.defined()) fail(kWhere, std::string(what) + " is missing");
  if (t.scalar_type() != ref.scalar_type())
    fail(kWhere, std::string(what) + " is " + std::string(c10::toString(t.scalar_type())) + ", q is " +
                     std::string(c10::toString(ref.scalar_type())) + ": pass one dtype");
  if (t.device() != ref.device())
    fail(kWhere, std::string(what) + " is on " + t.device().str() + ", q on " + ref.device().str());
}

// What runs an attention call: the CPU kernel or the CUDA kernels by the device, or the GEMM-based
// form (bfloat16/float16 on CUDA, or asked for: causal_linear_attention_lse_gemm).
enum class Path { Kernel, Gemm };

// attention: the chunked attention (it takes float16 on CUDA, through the GEMM-based form;
// the recurrent step does not). The GEMM-based form takes the four floating dtypes on any device.
void check_dtype_supported(const at::Tensor& q, bool attention, Path path = Path::Kernel) {
  const auto dt = q.scalar_type();
  const bool half = attention && (q.is_cuda() || path == Path::Gemm);
  const bool low = q.is_cuda() || path == Path::Gemm;
  const bool ok = dt == at::kFloat || dt == at::kDouble || (low && dt == at::kBFloat16) || (half && dt == at::kHalf);
  if (!ok)
    fail(kWhere, std::string("dtype ") + c10::toString(dt) + " is not supported on " + q.device().str() +
                     (half ? " (float32, bfloat16, float16, float64)" : low ? " (float32, bfloat16, float64)" : " (float32, float64)"));
  if (q.is_cuda() && !have_cuda_kernels())
    fail(kWhere, "tensors are on " + q.device().str() + " but this build has no CUDA kernels (nvcc was not found)");
}

// The dtype sums are kept in: float for float32 and bfloat16, double for float64.
at::ScalarType accumulator(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
static_assert(cuda::kMaxFeatures == kMaxFeatures && cuda::kMaxHeadDim == kMaxHeadDim,
              "the CUDA launchers' limits (cuda/launch.h) are the API's (linear_attention.h)");

cuda::DType cuda_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBFloat16: return cuda::DType::BFloat16;
    case at::kDouble: return cuda::DType::Float64;
    default: return cuda::DType::Float32;
  }
}

void* stream_of(const at::Tensor& t) {
#ifdef ATTNSCOPE_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  (void)t;
  fail(kWhere, "a CUDA tensor in a build whose LibTorch has no CUDA");
#endif
}

void check_launch(const std::string& err, const char* what) {
  if (!err.empty()) fail(kWhere, std::string("CUDA ") + what + ": " + err);
}

cpu::Forward cuda_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
#ifdef ATTNSCOPE_TORCH_CUDA
  const c10::cuda::CUDAGuard guard(q.device());
#endif
  const int64_t N = q.size(0), L = q.size(1), M = q.size(2), D = v.size(2);
  const auto acc = q.options().dtype(accumulator(q));
  cpu::Forward f{at::empty({N, L, D}, q.options()), at::empty({N, L}, acc), at::empty({N, L}, acc)};
  at::Tensor ws = at::empty({cuda::forward_workspace_elements(N, L, M, D)}, acc);
  check_launch(cuda::forward(cuda_dtype(q), q.data_ptr(), k.data_ptr(), ls.data_ptr(), v.data_ptr(), f.y.data_ptr(),
                             f.den.data_ptr(), f.c.data_ptr(), ws.data_ptr(), N, L, M, D, stream_of(q)),
               "forward");
  return f;
}

cpu::Backward cuda_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                            const cpu::Forward& s, const at::Tensor& gy, const at::Tensor& glse) {
#ifdef ATTNSCOPE_TORCH_CUDA
  const c10::cuda::CUDAGuard guard(q.device());
#endif
  const int64_t N = q.size(0), L = q.size(1), M = q.size(2), D = v.size(2);
  cpu::Backward b{at::empty_like(q), at::empty_like(k), at::empty_like(ls), at::empty_like(v)};
  at::Tensor ws = at::empty({cuda::backward_workspace_elements(N, L, M, D)}, q.options().dtype(accumulator(q)));
  check_launch(cuda::backward(cuda_dtype(q), q.data_ptr(), k.data_ptr(), ls.data_ptr(), v.data_ptr(), s.y.data_ptr(),
                              s.den.data_ptr(), s.c.data_ptr(), gy.data_ptr(), glse.defined() ? glse.data_ptr() : nullptr,
                              b.dq.data_ptr(), b.dk.data_ptr(),
                              b.dls.data_ptr(), b.dv.data_ptr(), ws.data_ptr(), N, L, M, D, stream_of(q)),
               "backward");
  return b;
}
#endif

// bfloat16 and float16 on CUDA: the GEMM-based form (tensor cores); the FMA kernels keep float32/float64.
bool use_gemm(const at::Tensor& q, Path path) {
  return path == Path::Gemm || (q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf));
}

cpu::Forward run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v, Path path) {
  if (use_gemm(q, path)) return gemm::forward(q, k, ls, v);
#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
  if (q.is_cuda()) return cuda_forward(q, k, ls, v);
#endif
  return cpu::forward(q, k, ls, v);
}

cpu::Backward run_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                           const cpu::Forward& s, const at::Tensor& gy, const at::Tensor& glse, Path path) {
  if (use_gemm(q, path)) return gemm::backward(q, k, ls, v, s, gy, glse);
#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
  if (q.is_cuda()) return cuda_backward(q, k, ls, v, s, gy, glse);
#endif
  return cpu::backward(q, k, ls, v, s, gy, glse);
}

// lse_i = c_i + log(den_i), -inf where den_i <= 0, from the forward's den and c (accumulator
// dtype on CUDA), in `dtype`: [N, L].
at::Tensor lse_of_forward(const cpu::Forward& f, at::ScalarType dtype) {
  const at::Tensor positive = f.den > 0;
  const at::Tensor lse = f.c + at::log(at::where(positive, f.den, at::ones_like(f.den)));
  return at::where(positive, lse, at::full({}, -std::numeric_limits<double>::infinity(), lse.options())).to(dtype);
}

// q, k [N, L, M], ls [N, L], v [N, L, D], contiguous -> {y [N, L, D], lse [N, L]}. Either output's
// gradient may be undefined (not used): y's is then taken as 0, lse's as none (the y-only path).
// gemm: run the GEMM-based form whatever the device and dtype (Path::Gemm).
struct ChunkedLinearAttention : torch::autograd::Function<ChunkedLinearAttention> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v, bool gemm) {
    const Path path = gemm ? Path::Gemm : Path::Kernel;
    const cpu::Forward f = run_forward(q, k, ls, v, path);
    ctx->save_for_backward({q, k, ls, v, f.y, f.den, f.c});
    ctx->saved_data["gemm"] = gemm;
    ctx->set_materialize_grads(false);  // an unused lse costs no zero tensor in the backward pass
    return {f.y, lse_of_forward(f, q.scalar_type())};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    if (!grads[0].defined() && !grads[1].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const Path path = ctx->saved_data["gemm"].toBool() ? Path::Gemm : Path::Kernel;
    const at::Tensor gy = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(s[4]);
    const at::Tensor glse = grads[1].defined() ? grads[1].contiguous() : at::Tensor();
    const cpu::Backward b = run_backward(s[0], s[1], s[2], s[3], {s[4], s[5], s[6]}, gy, glse, path);
    return {b.dq, b.dk, b.dls, b.dv, at::Tensor()};
  }
};

void check_attention_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                            const at::Tensor& v, Path path = Path::Kernel) {
  if (!q.defined() || q.dim() < 2) fail(kWhere, "q must be [..., L, M], got " + (q.defined() ? shape(q) : "nothing"));
  check_dtype_device("k", k, q);
  check_dtype_device("k_log_scale", k_log_scale, q);
  check_dtype_device("v", v, q);
  check_dtype_supported(q, /*attention=*/true, path);
  const int64_t L = q.size(-2), M = q.size(-1), D = v.dim() >= 2 ? v.size(-1) : -1;
  auto lead_of = [](const at::Tensor& t) { return t.sizes().slice(0, t.dim() - 2); };
  if (k.sizes() != q.sizes()) fail(kWhere, "k " + shape(k) + " must have q's shape " + shape(q));
  if (v.dim() != q.dim() || lead_of(v) != lead_of(q) || v.size(-2) != L)
    fail(kWhere, "v " + shape(v) + " must be [..., L, D] with q's leading dimensions and L (q " + shape(q) + ")");
  if (k_log_scale.dim() != q.dim() || lead_of(k_log_scale) != lead_of(q) || k_log_scale.size(-2) != L ||
      k_log_scale.size(-1) != 1)
    fail(kWhere, "k_log_scale " + shape(k_log_scale) + " must be [..., L, 1] (q " + shape(q) + ")");
  if (L < 1) fail(kWhere, "L must be at least 1, got q " + shape(q));
  if (q.is_cuda() && (M > kMaxFeatures || D > kMaxHeadDim))
    fail(kWhere, "the CUDA kernels take M <= " + std::to_string(kMaxFeatures) + " features and D <= " +
                     std::to_string(kMaxHeadDim) + " value (head) dimensions, got M = " + std::to_string(M) + ", D = " + std::to_string(D));
}

AttentionWithLse attention_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                               const at::Tensor& v, Path path) {
  check_attention_inputs(q, k, k_log_scale, v, path);
  const int64_t L = q.size(-2), M = q.size(-1), D = v.size(-1);
  std::vector<int64_t> out_shape(v.sizes().begin(), v.sizes().end());
  std::vector<int64_t> lse_shape = out_shape;
  lse_shape.back() = 1;
  const int64_t N = q.numel() / (L * M);
  // No features: every den is 0 (lse = -inf; y as before: zeros).
  if (N == 0 || M == 0)
    return {at::zeros(out_shape, v.options()), at::full(lse_shape, -std::numeric_limits<double>::infinity(), v.options())};
  // No value columns: y is empty, lse still depends on q, k and the scales (read with one zero column).
  const at::Tensor vr = D == 0 ? at::zeros({N, L, 1}, v.options()) : v.reshape({N, L, D}).contiguous();
  const auto out = ChunkedLinearAttention::apply(q.reshape({N, L, M}).contiguous(), k.reshape({N, L, M}).contiguous(),
                                                 k_log_scale.reshape({N, L}).contiguous(), vr, path == Path::Gemm);
  const at::Tensor y = D == 0 ? at::zeros(out_shape, v.options()) : out[0].view(out_shape);
  return {y, out[1].view(lse_shape)};
}

}  // namespace

bool have_cuda_kernels() {
#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

AttentionWithLse causal_linear_attention_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                                             const at::Tensor& v) {
  return attention_lse(q, k, k_log_scale, v, Path::Kernel);
}

AttentionWithLse causal_linear_attention_lse_gemm(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                                                  const at::Tensor& v) {
  return attention_lse(q, k, k_log_scale, v, Path::Gemm);
}

at::Tensor causal_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                                   const at::Tensor& v) {
  check_attention_inputs(q, k, k_log_scale, v);
  const int64_t L = q.size(-2), M = q.size(-1), D = v.size(-1);
  std::vector<int64_t> out_shape(v.sizes().begin(), v.sizes().end());
  const int64_t N = q.numel() / (L * M);
  if (N == 0 || M == 0 || D == 0) return at::zeros(out_shape, v.options());
  // The same function as causal_linear_attention_lse; lse unused (no gradient flows from it).
  const auto out = ChunkedLinearAttention::apply(q.reshape({N, L, M}).contiguous(), k.reshape({N, L, M}).contiguous(),
                                                 k_log_scale.reshape({N, L}).contiguous(), v.reshape({N, L, D}).contiguous(),
                                                 /*gemm=*/false);
  return out[0].view(out_shape);
}

at::Tensor recurrent_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& k_log_scale, const at::Tensor& v, at::Tensor* lse) {
  if (!q.defined() || q.dim() != 2) fail(kWhere, "recurrent q must be [N, M], got " + (q.defined() ? shape(q) : "nothing"));
  check_dtype_device("k", k, q);
  check_dtype_device("k_log_scale", k_log_scale, q);
  check_dtype_device("v", v, q);
  check_dtype_supported(q, /*attention=*/false);
  const int64_t N = q.size(0), M = q.size(1);
  if (k.sizes() != q.sizes()) fail(kWhere, "recurrent k " + shape(k) + " must have q's shape " + shape(q));
  if (k_log_scale.dim() != 1 || k_log_scale.size(0) != N) fail(kWhere, "recurrent k_log_scale " + shape(k_log_scale) + " must be [N]");
  if (v.dim() != 2 || v.size(0) != N) fail(kWhere, "recurrent v " + shape(v) + " must be [N, D]");
  const int64_t D = v.size(1);
  // The state is kept in the accumulator dtype, contiguous, on q's device; empty before the first
  // token: sums 0, c = -inf (so exp(c - anything) = 0).
  const auto acc = q.options().dtype(accumulator(q));
  if (!state.S.defined()) {
    state.S = at::zeros({N, M, D}, acc);
    state.z = at::zeros({N, M}, acc);
    state.c = at::full({N}, -std::numeric_limits<double>::infinity(), acc);
  }
  if (state.S.sizes() != at::IntArrayRef{N, M, D} || state.S.device() != q.device() ||
      state.S.scalar_type() != accumulator(q) || !state.z.defined() || state.z.sizes() != at::IntArrayRef{N, M} ||
      !state.c.defined() || state.c.sizes() != at::IntArrayRef{N})
    fail(kWhere, "recurrent state S " + shape(state.S) + " (" + c10::toString(state.S.scalar_type()) + ", " +
                     state.S.device().str() + ") does not match N, M, D = " + std::to_string(N) + ", " + std::to_string(M) +
                     ", " + std::to_string(D) + " (" + c10::toString(accumulator(q)) + ", " + q.device().str() + ")");
  state.S = state.S.contiguous(), state.z = state.z.to(acc).contiguous(), state.c = state.c.to(acc).contiguous();
#ifdef ATTNSCOPE_HAVE_CUDA_KERNELS
  if (q.is_cuda()) {
#ifdef ATTNSCOPE_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(q.device());
#endif
    at::Tensor y = at::empty({N, D}, q.options());
    if (lse) *lse = at::empty({N}, q.options());
    const at::Tensor qc = q.contiguous(), kc = k.contiguous(), lc = k_log_scale.contiguous(), vc = v.contiguous();
    check_launch(cuda::recurrent_step(cuda_dtype(q), state.S.data_ptr(), state.z.data_ptr(), state.c.data_ptr(),
                                      qc.data_ptr(), kc.data_ptr(), lc.data_ptr(), vc.data_ptr(), y.data_ptr(), lse ? lse->data_ptr() : nullptr, N, M,
                                      D, stream_of(q)),
                 "recurrent step");
    return y;
  }
#endif
  return cpu::recurrent_step(state, q.contiguous(), k.contiguous(), k_log_scale.contiguous(), v.contiguous(), lse);
}

namespace {

// An empty ring (log scales -inf) and empty sums (c = -inf) of N heads, n = 0.
HybridState empty_hybrid_state(int64_t N, int64_t W, int64_t M, int64_t D, const at::TensorOptions& o) {
  const double ninf = -std::numeric_limits<double>::infinity();
  HybridState st;
  st.k = at::zeros({N, W, D}, o), st.v = at::zeros({N, W, D}, o), st.fk = at::zeros({N, W, M}, o);
  st.ls = at::full({N, W}, ninf, o);
  st.sums = {at::zeros({N, M, D}, o), at::zeros({N, M}, o), at::full({N}, ninf, o)};
  return st;
}

// hybrid_step's checks of its inputs and state (N rows, M features); allocates an empty state
// before the first token.
std::pair<int64_t, int64_t> prepare_hybrid(HybridState& st, int64_t W, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& f, const at::Tensor& ls,
                                           const at::Tensor& gamma, const at::Tensor& lambda) {
  if (!q.defined() || q.dim() < 1 || q.size(-1) < 1) fail(kWhere, "hybrid q must be [..., D], got " + (q.defined() ? shape(q) : "nothing"));
  if (W < 1) fail(kWhere, "a hybrid head's window must be at least 1 token, got " + std::to_string(W));
  const int64_t D = q.size(-1), N = q.numel() / D;
  const std::pair<const char*, const at::Tensor*> args[] = {{"k", &k}, {"v", &v}, {"features", &f}, {"log_scales", &ls}, {"gamma", &gamma}};
  for (const auto& [what, t] : args) check_dtype_device(what, *t, q);
  if (lambda.defined()) check_dtype_device("lambda", lambda, q);
  if (q.scalar_type() != at::kFloat && q.scalar_type() != at::kDouble)
    fail(kWhere, std::string("hybrid_step takes float32 or float64, got ") + c10::toString(q.scalar_type()));
  if (k.numel() != q.numel() || v.numel() != q.numel() || k.size(-1) != D || v.size(-1) != D)
    fail(kWhere, "hybrid k " + shape(k) + " and v " + shape(v) + " must have q's rows and width " + shape(q));
  if (f.dim() < 2 || f.size(-2) != 2 || f.numel() != 2 * N * f.size(-1))
    fail(kWhere, "hybrid features " + shape(f) + " must be [..., 2, M] (query, key) for the " + std::to_string(N) + " rows of q");
  const int64_t M = f.size(-1);
  if (ls.numel() != 2 * N) fail(kWhere, "hybrid log_scales " + shape(ls) + " must hold 2 per row (" + std::to_string(N) + " rows)");
  for (const at::Tensor* t : {&gamma, &lambda})
    if (t->defined() && t->numel() != N) fail(kWhere, "hybrid gamma / lambda " + shape(*t) + " must hold one per row [N], N = " + std::to_string(N));
  if (!st.k.defined()) st = empty_hybrid_state(N, W, M, D, q.options());  // the first token
  if (!st.sums.S.defined()) st.sums = empty_hybrid_state(N, W, M, D, q.options()).sums;
  if (st.k.sizes() != at::IntArrayRef{N, W, D} || st.v.sizes() != st.k.sizes() || st.fk.sizes() != at::IntArrayRef{N, W, M} ||
      st.ls.sizes() != at::IntArrayRef{N, W} || st.sums.S.sizes() != at::IntArrayRef{N, M, D} || st.k.scalar_type() != q.scalar_type() ||
      st.sums.S.scalar_type() != q.scalar_type() || st.k.device() != q.device() || st.n < 0)
    fail(kWhere, "hybrid state: ring " + shape(st.k) + ", features " + shape(st.fk) + ", sums " + shape(st.sums.S) +
                     " do not match N, W, M, D = " + std::to_string(N) + ", " + std::to_string(W) + ", " + std::to_string(M) + ", " +
                     std::to_string(D) + " in q's dtype and device");
  return {N, M};
}

}  // namespace

at::Tensor ring_slots(int64_t length, int64_t kept, int64_t W, const at::Device& device) {
  const at::Tensor p = at::arange(length - kept, length, at::kLong);
  return (W > 0 ? p.remainder(W) : p).to(device);
}

HybridState hybrid_state(int64_t W, int64_t L, const at::Tensor& k, const at::Tensor& v, const at::Tensor& fk,
                         const at::Tensor& ls, const RecurrentState& sums) {
  if (W < 1) fail(kWhere, "a hybrid head's window must be at least 1 token, got " + std::to_string(W));
  if (!k.defined() || k.dim() != 3 || !v.defined() || v.sizes() != k.sizes() || !fk.defined() || fk.dim() != 3 ||
      fk.size(0) != k.size(0) || fk.size(1) != k.size(1) || !ls.defined() || ls.sizes() != fk.sizes().slice(0, 2))
    fail(kWhere, "hybrid_state k " + (k.defined() ? shape(k) : "nothing") + ", v, fk, ls must be [N, n, D], [N, n, D], [N, n, M], [N, n]");
  const int64_t N = k.size(0), n = k.size(1), D = k.size(2), M = fk.size(2);
  if (n != std::min(L, W)) fail(kWhere, "hybrid_state holds the last min(length, W) = " + std::to_string(std::min(L, W)) + " tokens, got " + std::to_string(n));
  const auto o = k.options();
  HybridState st = empty_hybrid_state(N, W, M, D, o);
  const at::Tensor slots = ring_slots(L, n, W, k.device());
  st.k.index_copy_(1, slots, k), st.v.index_copy_(1, slots, v.to(o.dtype()));
  st.fk.index_copy_(1, slots, fk.to(o.dtype())), st.ls.index_copy_(1, slots, ls.to(o.dtype()));
  if (sums.S.defined()) st.sums = {sums.S.to(o.dtype()), sums.z.to(o.dtype()), sums.c.to(o.dtype())};
  st.n = L;
  return st;
}

at::Tensor hybrid_step(HybridState& st, int64_t W, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& features, const at::Tensor& log_scales, const at::Tensor& gamma, const at::Tensor& lambda) {
  if (q.defined() && !q.is_cpu()) return hybrid_step_composed(st, W, q, k, v, features, log_scales, gamma, lambda);
  const int64_t N = prepare_hybrid(st, W, q, k, v, features, log_scales, gamma, lambda).first;
  for (at::Tensor* t : {&st.k, &st.v, &st.fk, &st.ls, &st.sums.S, &st.sums.z, &st.sums.c}) *t = t->contiguous();
  at::Tensor y = at::empty({N, q.size(-1)}, q.options());
  cpu::hybrid_step(st, W, q.contiguous(), k.contiguous(), v.contiguous(), features.contiguous(), log_scales.contiguous(),
                   gamma.contiguous(), lambda.defined() ? lambda.contiguous() : lambda, y);
  return y;
}

at::Tensor hybrid_step_composed(HybridState& st, int64_t W, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                const at::Tensor& features, const at::Tensor& log_scales, const at::Tensor& gamma_in,
                                const at::Tensor& lambda_in) {
  const auto [N, M] = prepare_hybrid(st, W, q_in, k_in, v_in, features, log_scales, gamma_in, lambda_in);
  const int64_t D = q_in.size(-1), slot = st.n % W, held = std::min(st.n + 1, W);
  const at::Tensor q = q_in.reshape({N, D}), k = k_in.reshape({N, D}), v = v_in.reshape({N, D}), gamma = gamma_in.reshape({N});
  const at::Tensor f = features.reshape({N, 2, M}), ls = log_scales.reshape({N, 2});
  const at::Tensor fq = f.select(1, 0), fk = f.select(1, 1);
  at::Tensor q_ls = ls.select(1, 0), k_ls = ls.select(1, 1);
  if (lambda_in.defined()) q_ls = q_ls + lambda_in.reshape({N}), k_ls = k_ls - lambda_in.reshape({N});
  const auto o = q.options();
  // 1. The token at n - W leaves the ring into the sums (recurrent_step adds it and reads the query).
  at::Tensor y_l = at::zeros({N, D}, o), lse_l = at::full({N}, -std::numeric_limits<double>::infinity(), o);
  if (st.n >= W) y_l = recurrent_step(st.sums, fq, st.fk.select(1, slot), st.ls.select(1, slot), st.v.select(1, slot), &lse_l);
  // 2. This token takes its slot.
  st.k.select(1, slot).copy_(k), st.v.select(1, slot).copy_(v), st.fk.select(1, slot).copy_(fk), st.ls.select(1, slot).copy_(k_ls);
  lse_l = lse_l + q_ls;
  // 3. Softmax over the held slots; 4. one normalizer over both parts.
  const at::Tensor s = at::bmm(q.unsqueeze(1), st.k.narrow(1, 0, held).transpose(1, 2)).squeeze(1) / std::sqrt(double(D));
  const at::Tensor lse_w = at::logsumexp(s, -1);
  const at::Tensor y_w = at::bmm(at::exp(s - lse_w.unsqueeze(-1)).unsqueeze(1), st.v.narrow(1, 0, held)).squeeze(1);
  const at::Tensor a = lse_l + at::log_sigmoid(-gamma), b = lse_w + at::log_sigmoid(gamma);
  const at::Tensor top = at::maximum(a, b);
  const at::Tensor ea = at::exp(a - top).unsqueeze(-1), eb = at::exp(b - top).unsqueeze(-1);
  const at::Tensor lin = at::where(at::isfinite(a).unsqueeze(-1), y_l, at::zeros_like(y_l));
  ++st.n;
  return (ea * lin + eb * y_w) / (ea + eb);
}

RecurrentState final_state(const at::Tensor& k, const at::Tensor& k_log_scale, const at::Tensor& v) {
  if (!k.defined() || k.dim() != 3) fail(kWhere, "final_state k must be [N, L, M], got " + (k.defined() ? shape(k) : "nothing"));
  check_dtype_device("k_log_scale", k_log_scale, k);
  check_dtype_device("v", v, k);
  if (k_log_scale.dim() != 3 || k_log_scale.size(0) != k.size(0) || k_log_scale.size(1) != k.size(1) || k_log_scale.size(2) != 1)
    fail(kWhere, "final_state k_log_scale " + shape(k_log_scale) + " must be [N, L, 1] (k " + shape(k) + ")");
  if (v.dim() != 3 || v.size(0) != k.size(0) || v.size(1) != k.size(1))
    fail(kWhere, "final_state v " + shape(v) + " must be [N, L, D] (k " + shape(k) + ")");
  // One product: S = K^T diag(exp(ls - c)) V with c the largest key scale, accumulated in the
  // state's dtype (float for bfloat16).
  const auto acc = accumulator(k);
  const at::Tensor ls = k_log_scale.to(acc);
  RecurrentState st;
  st.c = std::get<0>(ls.max(1)).squeeze(-1);                                  // [N]
  const at::Tensor kw = k.to(acc) * at::exp(ls - st.c.view({-1, 1, 1}));       // [N, L, M]
  st.S = at::bmm(kw.transpose(1, 2), v.to(acc));                              // [N, M, D]
  st.z = kw.sum(1);                                                           // [N, M]
  return st;
}

}  // namespace attnscope::kernels
