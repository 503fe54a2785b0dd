// A head of a converted model (SPEC 5 and 7): its type, and the rule by which query i weighs key
// j <= i, written once. A hybrid head (window W >= 1, balance g = sigmoid(gamma)) gives
//   w_ij = g exp(q_i.k_j / sqrt d)             when i - j < W  (the last W keys: softmax's weights)
//   w_ij = (1 - g) max(phi(q_i).phi(k_j), 0)   when i - j >= W (the feature map: older keys)
// normalized by sum_j w_ij; a linear head (W = 0) the map's weights alone; a softmax head softmax's
// alone. Everything is carried in the log domain: log w_ij from its parts, or each part's outputs
// with the log of its weights' sum (its log normalizer) when the parts are computed apart.
// hybrid_map (the materialized map), hybrid_attention_output and the recurrent form (their
// streamed outputs), the analysis' rows and training's loss all read the rule here.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/attention/features.h"

namespace attnscope {

// SPEC 7's head types: softmax (exact, no map), hybrid (a window beside a map), linear (a map).
enum class HeadType { Softmax, Hybrid, Linear };

// The type of a head with a map and window W: hybrid when W > 0, else linear.
HeadType map_head_type(int64_t window);
// The types' names, one table: softmax | hybrid | linear (SPEC 7's "head_types").
HeadType parse_head_type(const std::string& name);  // else Error (quantity "head type")
const char* head_type_name(HeadType type);
std::vector<std::string> head_type_names();
// How many heads of a types table [S][H] are softmax heads (kept exact).
int64_t softmax_head_count(const std::vector<std::vector<HeadType>>& types);

// What a head keeps per sequence and computes per token at context T in the recurrent form (a count
// of values: times the bytes of the state's dtype), for the cost of a converted model (issue 28):
//   softmax  the keys and values of every position: T (d_k + d_v); per token 2 T (d_k + d_v) FLOPs
//            (the scores and the weighted sum). Under grouped-query attention a key-value head is
//            shared by its query heads: count it once per key-value head.
//   linear   S [M, d_v] and z [M]: M d_v + M; per token 2 d_k M (the map's projection) + 4 M d_v + 2 M
//            (S and z updated, q.S and q.z read), and M d_v + M more with decay (S and z scaled).
//   hybrid   the linear part and a ring of the last W keys and values: + W (d_k + d_v); + 2 W (d_k +
//            d_v) FLOPs (the window's softmax). The ring is kept per query head, as the model keeps it.
// The map's own cost is taken as one projection (2 d_k M); maps with more (untied, Fourier pairs)
// cost a few d_k M more.
struct HeadCost {
  int64_t state_values = 0;
  int64_t flops_per_token = 0;
};
HeadCost head_cost(HeadType type, int64_t d_k, int64_t d_v, int64_t T, int64_t M = 0, int64_t W = 0, bool decayed = false);

// A head's settings: the window W >= 0 (0: a linear head); a hybrid head's map must give kernel
// values >= 0 (map_family(map).nonnegative_kernel: its linear part is summed, not clamped pair by
// pair). `map` "" (no map: the softmax side alone) checks the window only. Error with quantity
// "window" otherwise.
void check_head(const std::string& map, int64_t window);

// The log weights of rows of a head, materialized: log w_ij [..., R, C] up to a constant per row
// (the rule above divided by g, so that a row whose keys are all in the window is softmax's row
// exactly), -inf on keys j > i. The terms, each [..., R, C] or broadcasting to it:
struct HeadLogTerms {
  at::Tensor scores;      // q_i.k_j / sqrt d: the window part (hybrid heads only)
  at::Tensor log_linear;  // log max(phi(q_i).phi(k_j), 0), the features' log scales included
  at::Tensor lag;         // i - j (key_lag, tensor_checks.h)
  int64_t window = 0;     // W; 0: a linear head (scores and gamma are not read)
  at::Tensor gamma;       // the balance before the sigmoid, one per head: [] or [H] for [..., H, R, C]
};
at::Tensor head_log_weights(const HeadLogTerms& terms);

// A part of a hybrid head's output, computed apart from the other: y [..., L, d_v] over the part's
// keys and lse [..., L, 1], the log of the sum of its weights (-inf where it has none; y may then
// be NaN).
struct HeadPart {
  at::Tensor y, lse;
};

// The hybrid head's output from its parts streamed apart: the window part (softmax's weights over
// the last W keys: lse of the scores) and the linear part (the map's over the older keys: lse of
// phi(q_i).phi(k_j), the query's log scale included), weighed g and 1 - g under one normalizer:
// (e^a y_lin + e^b y_win) / (e^a + e^b), a = lse_lin + log(1 - g), b = lse_win + log g, shifted by
// max(a, b). The window part's lse must be finite (key i is in its own window). gamma as in
// HeadLogTerms.
at::Tensor combine_head_parts(const HeadPart& window, const HeadPart& linear, const at::Tensor& gamma);

// Decayed heads (SPEC 5; paper 003's SSD and RetNet mixers): the map's weight of key j for query
// i is multiplied by exp(Lambda_i - Lambda_j), Lambda_i = sum_{t <= i} log a_t, a_t in (0, 1].
// No new kernel: the decay is a log scale, -Lambda_j on each key's features and +Lambda_i on each
// query's. In a linear head the query's scale cancels (the row's Lambda_i drops out of the
// normalization); in a hybrid head it weighs the decayed linear part against the window part, as
// the rule says (the window's keys are not decayed). So linear_map, linear_attention_output,
// hybrid_map, hybrid_attention_output and the recurrent form run decayed heads unchanged on
// decayed_features. a = 1 (log a = 0) is the head without decay exactly.

// The decay a head's linear part carries, one name table: none | fixed (a = sigmoid(delta), one
// delta per head: RetNet's retention decay) | gated (a_t = sigmoid(w.x_t + b) from the layer's
// input x_t, w [d_model] and b per head: Mamba-2's scalar gate) | mixer, which is a choice and not
// a head's decay: training's and convert's --decay mixer give each head the student its
// structured-mixer distances point at (best_decay_student, the metrics view's mixer panel), so one
// model mixes none, fixed and gated heads. A model's heads are none, fixed or gated: its files
// never say mixer (parse_head_decay).
enum class Decay { None, Fixed, Gated, Mixer };
Decay parse_decay(const std::string& name);  // else Error (quantity "decay")
// A head's decay as a model's file names it: parse_decay without mixer (Error, quantity "decay").
Decay parse_head_decay(const std::string& name);
const char* decay_name(Decay decay);
std::vector<std::string> decay_names();

// How training starts a decayed head, one name table: fit (the decay fitted to the head's captured
// attention by lag, fit_decay_by_lag in analysis/structured_mixers.h) | none (delta =
// kUndecayedDelta).
enum class DecayInit { Fit, None };
DecayInit parse_decay_init(const std::string& name);  // else Error (quantity "decay initialization")
const char* decay_init_name(DecayInit init);
std::vector<std::string> decay_init_names();

// The delta of a head that starts without decay: a = sigmoid(10) = 1 - 4.5e-5, a weight of 0.9 at a
// lag of 2,300 tokens.
constexpr double kUndecayedDelta = 10.0;
// delta = log a - log(1 - a) of log a <= 0, capped at kUndecayedDelta (a = 1 has no finite delta).
double delta_of_log_decay(double log_a);

// Lambda [..., L]: the cumulative sum of log a [..., L] (each <= 0) over positions, accumulated in
// float64 (at L = 16K a float32 running sum drifts by more than the decay it carries), returned in
// log_a's dtype. Error (quantity "decay") for a log a > 0 or NaN.
at::Tensor decay_log_cumsum(const at::Tensor& log_a);

// A fixed decay per head (RetNet): log a = log sigmoid(delta) at every position; delta [...] (one
// per head) -> Lambda [..., L] = (i + 1) log sigmoid(delta), exact at any length.
at::Tensor fixed_decay_lambda(const at::Tensor& delta, int64_t length);

// A gated decay (Mamba-2/SSD's scalar gate): log a_t = log sigmoid(w_h.x_t + b_h) from the layer's
// input x [B, L, D] (the normed hidden state the projections read), w [H, D], b [H] -> Lambda
// [B, H, L] (decay_log_cumsum of it: float64 running sum, log_a's dtype back), differentiable in
// x, w and b. w = 0 is a fixed decay with delta = b.
at::Tensor gated_decay_lambda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// The features of a decayed head: queries' log scales + Lambda_i, keys' - Lambda_j. phi_q, phi_k
// [..., L, M]; lambda [..., L].
struct DecayedFeatures {
  Features q, k;
};
DecayedFeatures decayed_features(const Features& phi_q, const Features& phi_k, const at::Tensor& lambda);

}  // namespace attnscope
