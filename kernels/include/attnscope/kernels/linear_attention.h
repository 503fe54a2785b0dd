// Causal linear attention kernels (SPEC section 5): one dispatch API, CPU or CUDA by the tensors'
// device. Every linear-attention computation of attnscope (attention outputs, training, converted
// models, generation) goes through these functions.
//
// For queries i and keys j <= i, with features carried as values and a per-key log scale
// (phi(k_j) = exp(ls_j) k_j; the query's own scale cancels and is not passed):
//
//   w_ij = (q_i . k_j) exp(ls_j - c_i),      c_i = max_{j <= i} ls_j
//   y_i  = sum_{j<=i} w_ij v_j / den_i,      den_i = sum_{j<=i} w_ij
//
// Every factor exp(ls_j - c_i) is <= 1, so nothing overflows however large the scales are; y is
// independent of the choice of c_i. A row with den_i = 0 (no weight: ReLU-type maps, or all of its
// keys more than ~87 (float32) / ~700 (float64) below c_i) is 0/0: y_i = NaN, and no gradient flows
// from it (its gradient into q, k, ls, v is 0, not NaN). Kernel values are used raw: signed maps
// (random Fourier features) can give den_i <= 0 and meaningless rows; linear_map (core) reports them.
//
// Chunked form, chunk C = kChunk: per chunk t the state A_t = sum_{j in t} exp(ls_j - m_t) k_j [v_j, 1]^T
// (m_t the chunk's largest key scale), an exclusive prefix over chunks P_t (rescaled to the
// running max, as online softmax does), and per query the intra-chunk causal block plus q_i^T P_t.
// Time O(L C (M + D) + L M D), memory O(L (M + D) + (L / C) M D). The backward pass recomputes the
// states and runs the mirror-image suffix over chunks for the key and value gradients.
//
// The log normalizer lse_i = c_i + log(den_i) (causal_linear_attention_lse) comes from the saved
// den and c; its gradient h_i enters the backward pass in one place: dlse_i/dw_ij = 1/den_i, so
// the normalizer column of the row's gradient g'_i (launch.h) gains h_i / den_i where den_i > 0.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnscope::kernels {

constexpr int64_t kChunk = 64;      // queries per chunk
// The CUDA kernels' limits (the CPU kernels take any M and D): M, the feature dimension, and D,
// the value (head) dimension. Past them the dispatch throws an Error naming both.
constexpr int64_t kMaxFeatures = 512;  // M
constexpr int64_t kMaxHeadDim = 256;   // D

// q, k [..., L, M] feature values, k_log_scale [..., L, 1], v [..., L, D] (same leading dims,
// same floating dtype: float32 or float64 on the CPU, float32, bfloat16, float16 or float64 on CUDA
// (bfloat16 and float16 through the GEMM-based form, causal_linear_attention_lse_gemm); same
// device) -> y [..., L, D] in that dtype. Differentiable in q, k, k_log_scale and v (autograd).
// Throws attnscope::Error naming the argument for bad shapes, dtypes or devices. Inputs are not
// checked for NaN here (core checks its inputs once, not per head).
at::Tensor causal_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                                   const at::Tensor& v);

// Causal linear attention and each row's log normalizer lse_i = c_i + log(den_i) (c_i, den_i as
// above; -inf where den_i <= 0), [..., L, 1] in y's dtype: what a caller needs to combine this
// attention with another over other keys in one normalizer (core's hybrid heads). Differentiable
// in q, k, k_log_scale and v through both y and lse (rows with den_i <= 0: no gradient from lse).
struct AttentionWithLse {
  at::Tensor y;    // [..., L, D]
  at::Tensor lse;  // [..., L, 1]
};
AttentionWithLse causal_linear_attention_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale, const at::Tensor& v);

// The chunked form as batched GEMMs over [N T_c, C, X] chunk tensors and a log-domain scan over
// chunks, every step a LibTorch operation (src/gemm_chunked.h): what causal_linear_attention(_lse)
// runs for bfloat16 and float16 on CUDA (cuBLAS, tensor cores; products accumulated and summed in
// float32). Here on any device in float32, float64, bfloat16 or float16, so that tests and benchmarks
// reach it on the CPU: same checks (but the dtypes), outputs, conventions and autograd as
// causal_linear_attention_lse.
AttentionWithLse causal_linear_attention_lse_gemm(const at::Tensor& q, const at::Tensor& k, const at::Tensor& k_log_scale,
                                                  const at::Tensor& v);

// The recurrent form: the sums over the keys seen so far, relative to c = their largest log scale.
// Empty (undefined tensors) before the first token.
struct RecurrentState {
  at::Tensor S;  // [N, M, D]  sum_j exp(ls_j - c) k_j v_j^T
  at::Tensor z;  // [N, M]     sum_j exp(ls_j - c) k_j
  at::Tensor c;  // [N]        max_j ls_j
};

// One token for N independent heads/sequences: adds key k [N, M] (log scale [N]) and value v [N, D]
// to the state, then reads query q [N, M]: y [N, D] (NaN where den = 0, as above). Not differentiable.
// With lse given, *lse is set to [N] in y's dtype: c + log(q . z) after this token's key is added
// (the row's lse of causal_linear_attention_lse), -inf where q . z <= 0.
at::Tensor recurrent_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& k_log_scale, const at::Tensor& v, at::Tensor* lse = nullptr);

// The state after a whole sequence, as recurrent_step would leave it after its L tokens (so a
// prompt can be read in the chunked form and generation continue token by token): q is not needed.
// k [N, L, M], k_log_scale [N, L, 1], v [N, L, D].
RecurrentState final_state(const at::Tensor& k, const at::Tensor& k_log_scale, const at::Tensor& v);

// A hybrid head's generation state (core's hybrid heads, SPEC 5: softmax over the last W keys
// beside linear attention over the older ones, one normalizer): `sums` over the keys older than the
// window, and a ring of the last W tokens, position p in slot p % W: keys and values [N, W, D],
// key features [N, W, M] and their log scales [N, W]; n = the tokens read so far. Empty (undefined
// tensors, n = 0) before the first token; a prefill may set it with its last tokens in their slots.
struct HybridState {
  RecurrentState sums;
  at::Tensor k, v, fk, ls;
  int64_t n = 0;
};

// The ring layout of the last `kept` of `length` positions (a hybrid head's window, a sliding-window
// model's key-value cache): position p in slot p % W, int64 [kept] on `device`; W = 0 (no ring):
// slot p.
at::Tensor ring_slots(int64_t length, int64_t kept, int64_t W, const at::Device& device);

// The state hybrid_step leaves after a prompt of `length` tokens, made from the prompt's last
// n = min(length, W) tokens (keys k and values v [N, n, D], key features fk [N, n, M], their log
// scales ls [N, n], less Lambda_j where decayed) and `sums` over the earlier keys (final_state of
// them; empty when there are none): a prompt read in the batch form continues token by token.
HybridState hybrid_state(int64_t window, int64_t length, const at::Tensor& k, const at::Tensor& v, const at::Tensor& fk,
                         const at::Tensor& ls, const RecurrentState& sums = {});

// One token (position n = state.n) of N hybrid heads with window W. Per head (row): q, k, v
// [..., D] (N = numel / D rows), this token's query and key features `features` [..., 2, M] (the
// query's, then the key's) and their log scales `log_scales` [..., 2] or [..., 2, 1], balance gamma
// and, with decay, lambda = the decay's Lambda_n (numel N each; lambda undefined without decay).
// The ring's token at n - W (if any) leaves it into the sums; this token's key, value and key
// features take its slot, the key with log scale ls_k - lambda; the query reads the ring with
// softmax weights (q . k_j / sqrt(D): lse_w, y_w) and the sums through its features (y_l, lse_l =
// c + log(fq . z) + ls_q + lambda), and the two parts share one normalizer with g = sigmoid(gamma):
//   y = (e^a y_l + e^b y_w) / (e^a + e^b),  a = lse_l + log(1 - g),  b = lse_w + log g
// (y_l read as 0 where a = -inf: no older key yet). y [N, D]; the state advances to n + 1. All
// tensors one floating dtype (float32 or float64) on one device: a loop per head on the CPU (no
// call per input: generation's hot path), hybrid_step_composed elsewhere. Not differentiable.
// Error naming the argument for bad shapes, dtypes, devices or a state that does not fit them.
at::Tensor hybrid_step(HybridState& state, int64_t window, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& features, const at::Tensor& log_scales, const at::Tensor& gamma,
                       const at::Tensor& lambda = {});
// The same step as recurrent_step and LibTorch operations, on any device (what hybrid_step runs off
// the CPU; here so that tests reach it on the CPU): same checks, state, conventions and result.
at::Tensor hybrid_step_composed(HybridState& state, int64_t window, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const at::Tensor& features, const at::Tensor& log_scales,
                                const at::Tensor& gamma, const at::Tensor& lambda = {});

// Whether this build has the CUDA kernels (nvcc was found); the CUDA tensors of a CUDA LibTorch
// need them.
bool have_cuda_kernels();

}  // namespace attnscope::kernels
