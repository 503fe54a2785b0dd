#include "attnscope/analysis/head_analysis.h"

#include <ATen/ATen.h>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attention/attention.h"
#include "base/random.h"

namespace attnscope {

namespace {

// One feature map per head, seeded by (seed, layer, head) so every head gets its own draw and the
// result does not depend on which heads are analysed.
std::unique_ptr<FeatureMap> head_feature_map(const AnalysisOptions& opt, int64_t d, int layer, int head,
                                             const at::Tensor& q, const at::Tensor& k) {
  FeatureMapSpec spec;
  spec.name = opt.feature_map;
  spec.d = d;
  spec.features = opt.features;
  spec.seed = derive_seed(opt.seed, layer, head);
  if (spec.name == "learned-prf") {
    // Ridge-leverage initialization needs the head's own vectors: up to 2048 of its q and k.
    at::Tensor x = at::cat({q.reshape({-1, d}), k.reshape({-1, d})}, 0).to(at::kDouble);
    if (x.size(0) > 2048) x = x.index({at::linspace(0, x.size(0) - 1, 2048).to(at::kLong)});
    spec.init = "leverage";
    spec.data = x;
  }
  return make_feature_map(spec);
}

// The hybrid's window: 0 (the map alone) or a number of keys.
void check_window(const AnalysisOptions& opt) {
  if (opt.window < 0)
    fail_value("window", std::to_string(opt.window) + " must be 0 (plain linear attention) or a number of keys");
}

// The map the analysis measures against softmax: the feature map's linear map, or with a window the
// hybrid of the two (balance 1/2, gamma 0).
at::Tensor measured_map(const AnalysisOptions& opt, const Features& pq, const Features& pk, const at::Tensor& q,
                        const at::Tensor& k, const LinearMap& lm) {
  return opt.window > 0 ? hybrid_map(pq, pk, q, k, {opt.window, at::zeros({}, at::kDouble)}) : lm.map;
}

at::Tensor select_seqs(const at::Tensor& t, int max_seqs) {
  return max_seqs > 0 && max_seqs < t.size(0) ? t.narrow(0, 0, max_seqs) : t;
}

}  // namespace

std::vector<HeadAnalysis> analyze_capture(const CaptureStore& store, const AnalysisOptions& opt,
                                          const ProgressFn& progress) {
  check_window(opt);
  at::InferenceMode guard;
  std::vector<HeadAnalysis> out;
  const int S = store.num_layers(), H = store.num_heads();
  const int64_t d = store.head_dim();
  for (int s = 0; s < S; ++s) {
    // [T, H, L, d] -> per head [T, L, d], in float64 so large logits cannot overflow.
    const at::Tensor Q = select_seqs(store.layer_tensor(s, "q"), opt.max_seqs).to(at::kDouble);
    const at::Tensor K = select_seqs(store.layer_tensor(s, "k"), opt.max_seqs).to(at::kDouble);
    const at::Tensor V = select_seqs(store.layer_tensor(s, "v"), opt.max_seqs).to(at::kDouble);
    for (int h = 0; h < H; ++h) {
      const at::Tensor q = Q.select(1, h), k = K.select(1, h), v = V.select(1, h);
      HeadAnalysis a;
      a.layer = s, a.head = h;
      const at::Tensor A = softmax_map(q, k);
      HeadMetricsInput in;
      in.map = A, in.q = q, in.k = k, in.seed = opt.seed;
      a.softmax = compute_head_metrics(in);
      if (!opt.feature_map.empty()) {
        // Scaled features: phi itself under- or overflows at the norms real heads reach.
        auto phi = head_feature_map(opt, d, s, h, q, k);
        const Features pq = phi->scaled_query_features(q), pk = phi->scaled_key_features(k);
        const LinearMap lm = linear_map(pq, pk);
        HeadMetricsInput li;
        li.map = measured_map(opt, pq, pk, q, k, lm);
        li.reference = A, li.q = q, li.k = k, li.v = v;
        li.phi_q = pq, li.phi_k = pk, li.seed = opt.seed;
        a.linear = compute_head_metrics(li);
        // linear_map measured the raw row sums in the log domain; phi's own sums can overflow.
        a.linear->nonpositive_row_fraction = lm.nonpositive_row_fraction;
      }
      if (opt.mixer_state > 0) {
        MixerFitOptions mo;
        mo.state_size = opt.mixer_state;
        mo.iterations = opt.mixer_iterations;
        a.mixers = mixer_distances(A.select(0, 0), mo);
      }
      out.push_back(std::move(a));
      if (progress)
        progress(double(s * H + h + 1) / (S * H), "layer " + std::to_string(s) + " head " + std::to_string(h));
    }
  }
  return out;
}

HeadMaps head_maps(const CaptureStore& store, int layer, int head, int seq, const AnalysisOptions& opt) {
  check_window(opt);
  at::InferenceMode guard;
  if (head < 0 || head >= store.num_heads())
    fail(store.dir(), "head " + std::to_string(head) + " out of range 0.." + std::to_string(store.num_heads() - 1));
  if (seq < 0 || seq >= store.num_seqs())
    fail(store.dir(), "sequence " + std::to_string(seq) + " out of range 0.." + std::to_string(store.num_seqs() - 1));
  const at::Tensor Q = store.layer_tensor(layer, "q"), K = store.layer_tensor(layer, "k");
  const at::Tensor q = Q[seq][head].to(at::kDouble), k = K[seq][head].to(at::kDouble);
  HeadMaps m;
  m.softmax = softmax_map(q, k);
  if (!opt.feature_map.empty()) {
    auto phi = head_feature_map(opt, store.head_dim(), layer, head, Q.select(1, head), K.select(1, head));
    const Features pq = phi->scaled_query_features(q), pk = phi->scaled_key_features(k);
    const LinearMap lm = linear_map(pq, pk);
    m.linear = measured_map(opt, pq, pk, q, k, lm);
    m.nonpositive_row_fraction = lm.nonpositive_row_fraction;
  }
  const at::Tensor ids = store.ids()[seq].contiguous();
  m.ids.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  return m;
}

}  // namespace attnscope
