#include "attnscope/analysis/head_analysis.h"

#include <ATen/ATen.h>

#include "attnscope/base/error.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/attention/attention.h"
#include "attnscope/attention/head.h"
#include "attnscope/base/random.h"
#include "attnscope/base/tensor_checks.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <limits>
#include <numeric>
#include <tuple>

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
  if (map_family(spec.name).id == MapId::LearnedPrf) {
    // Ridge-leverage initialization needs the head's own vectors: up to 2048 of its q and k.
    at::Tensor x = at::cat({q.reshape({-1, d}), k.reshape({-1, d})}, 0).to(at::kDouble);
    if (x.size(0) > 2048) x = x.index({at::linspace(0, x.size(0) - 1, 2048).to(at::kLong)});
    spec.init = "leverage";
    spec.data = x;
  }
  return make_feature_map(spec);
}

// The hybrid's window: 0 (the map alone) or a number of keys, beside a map whose kernel values are >= 0.
void check_window(const AnalysisOptions& opt) { check_head(opt.feature_map, opt.window); }

// The map the analysis measures against softmax: the feature map's linear map, or with a window the
// hybrid of the two (balance 1/2, gamma 0).
at::Tensor measured_map(const AnalysisOptions& opt, const Features& pq, const Features& pk, const at::Tensor& q,
                        const at::Tensor& k, const LinearMap& lm) {
  return opt.window > 0 ? hybrid_map(pq, pk, q, k, {opt.window, at::zeros({}, at::kDouble)}) : lm.map;
}

at::Tensor select_seqs(const at::Tensor& t, int max_seqs) {
  return max_seqs > 0 && max_seqs < t.size(0) ? t.narrow(0, 0, max_seqs) : t;
}

constexpr double kAnalysisInf = std::numeric_limits<double>::infinity();

// The rows at positions pos [R] of the maps of one head (q, k [T, L, d], features [T, L, M]), each
// row exactly as attention.h's full maps (softmax_map, linear_map, hybrid_map) give it. The
// softmax scores with the model's window (`window`, softmax_map's), -inf on keys it hides.
at::Tensor row_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& pos, int64_t window) {
  const at::Tensor s = at::matmul(q.index_select(-2, pos), k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  return s.masked_fill(visible_keys(pos, k.size(-2), window).logical_not(), -kAnalysisInf);
}

struct LinearRows {
  at::Tensor map;       // [T, R, L]; NaN on the keys of an undefined row (linear_map)
  at::Tensor raw_sums;  // [T, R], a positive multiple of each row's raw sum (its sign is what counts)
};

LinearRows linear_rows(const Features& pq, const Features& pk, const at::Tensor& pos) {
  const int64_t L = pk.values.size(-2);
  const at::Tensor mask = visible_keys(pos, L);
  const at::Tensor dot = at::matmul(pq.values.index_select(-2, pos), pk.values.transpose(-2, -1)).masked_fill(mask.logical_not(), 0);
  if (!at::isfinite(dot).all().item<bool>())
    fail("analyze_capture", "phi_q.phi_k overflows; pass scaled features (FeatureMap::scaled_query_features)");
  // As linear_map: each row relative to its largest log magnitude, so nothing under- or overflows.
  const at::Tensor a = pk.log_scale.transpose(-2, -1) + at::log(dot.abs());
  const at::Tensor a_max = std::get<0>(a.max(-1, /*keepdim=*/true));
  const at::Tensor t = at::sign(dot) * at::exp(a - at::where(at::isinf(a_max), at::zeros_like(a_max), a_max));
  const at::Tensor w = t.clamp_min(0);
  const at::Tensor sum = w.sum(-1, /*keepdim=*/true);
  const at::Tensor undefined = sum <= 0;
  LinearRows out;
  out.raw_sums = t.sum(-1);
  out.map = at::where(undefined.logical_and(mask), at::full({}, std::nan(""), w.options()),
                      w / at::where(undefined, at::ones_like(sum), sum));
  return out;
}

// hybrid_map's rows with balance 1/2 (gamma 0).
at::Tensor hybrid_rows(const Features& pq, const Features& pk, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& pos, int64_t window) {
  const int64_t L = k.size(-2);
  const at::Tensor scores = at::matmul(q.index_select(-2, pos), k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const at::Tensor dot = at::matmul(pq.values.index_select(-2, pos), pk.values.transpose(-2, -1));
  const at::Tensor log_lin = at::log(dot.clamp_min(0)) + pq.log_scale.index_select(-2, pos) + pk.log_scale.transpose(-2, -1);
  return at::softmax(head_log_weights({scores, log_lin, key_lag(pos, at::arange(L, at::kLong)), window, at::zeros({}, at::kDouble)}), -1);
}

}  // namespace

std::string SoftmaxSideCache::key(const CaptureStore& store, const AnalysisOptions& opt) {
  return store.dir() + "|" + std::to_string(opt.seed) + "|" + std::to_string(opt.max_seqs) + "|" +
         std::to_string(opt.sample_rows) + "|" + std::to_string(opt.mixer_state) + "|" + std::to_string(opt.mixer_iterations) + "|" + std::to_string(opt.mixer_tokens) + "|" +
         std::to_string(opt.mixer_state > 0 ? opt.window : 0);  // the mixers' window class
}

std::optional<HeadAnalysis> SoftmaxSideCache::find(const std::string& key, int layer, int head) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (key != key_) return std::nullopt;
  auto it = heads_.find({layer, head});
  if (it == heads_.end()) return std::nullopt;
  return it->second;
}

void SoftmaxSideCache::store(const std::string& key, const HeadAnalysis& head) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (key != key_) heads_.clear(), key_ = key;
  HeadAnalysis a = head;
  a.linear.reset();
  heads_[{head.layer, head.head}] = std::move(a);
}

size_t SoftmaxSideCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heads_.size();
}

at::Tensor softmax_row_entropies(const at::Tensor& q, const at::Tensor& k, int64_t window) {
  if (q.dim() == 2) return softmax_row_entropies(q.unsqueeze(0), k.unsqueeze(0), window).squeeze(0);
  const int64_t T = q.size(0), L = q.size(-2);
  const at::Tensor mask = causal_mask(L, at::kCPU, window);
  at::Tensor out = at::empty({T, L}, at::kDouble);
  for (int64_t t = 0; t < T; ++t) {
    // Masked keys: score -inf for the logsumexp, 0 in the weighted sum (their weight is 0).
    const at::Tensor s = at::matmul(q[t], k[t].transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
    const at::Tensor sm = s.masked_fill(mask.logical_not(), -kAnalysisInf);
    const at::Tensor lse = at::logsumexp(sm, -1, /*keepdim=*/true);
    const at::Tensor a = at::exp(sm - lse);
    out[t].copy_(lse.squeeze(-1) - (a * s.masked_fill(mask.logical_not(), 0)).sum(-1));
  }
  return out;
}

namespace {

// The rows one head's metrics read: R sampled positions (the census first), or all L of them.
struct SampledRows {
  at::Tensor pos;  // [R] long
  int64_t census = 0;
  bool sampled = false;
};
SampledRows sampled_rows(const AnalysisOptions& opt, int64_t L, int s, int h) {
  SampledRows r;
  r.sampled = opt.sample_rows > 0 && opt.sample_rows < L;
  if (!r.sampled) {
    r.pos = at::arange(L, at::kLong);
    return r;
  }
  // The first R / 4 positions in full, the rest a uniform sample of the later ones.
  r.census = opt.sample_rows / 4;
  std::vector<int64_t> p(r.census);
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i : sample_without_replacement(L - r.census, opt.sample_rows - r.census,
                                              derive_seed(derive_seed(opt.seed, s, h), AnalysisOptions::kRowSampleStream)))
    p.push_back(r.census + i);
  r.pos = at::tensor(p, at::kLong);
  return r;
}

// log a of the decay fitted to a head's softmax rows A [T, R, L] at positions pos [R] (its windows'
// rows the metrics read): fit_decay_by_lag of their mean lag. HeadAnalysis::decay_length's, and the
// decay an untrained decayed head is drawn with.
double fitted_log_decay(const at::Tensor& A, const at::Tensor& pos) {
  return fit_decay_by_lag(attention_mean_lag(A, pos).mean(0), pos).item<double>();
}

// An untrained decayed head (opt.decay fixed): the features with Lambda_i = (i + 1) log a. The
// features as they are without decay.
std::pair<Features, Features> decayed_for_analysis(const AnalysisOptions& opt, const Features& fq, const Features& fk,
                                                   double log_a, int64_t L) {
  if (opt.decay == Decay::None) return {fq, fk};
  const DecayedFeatures f = decayed_features(fq, fk, at::arange(1, L + 1, fq.log_scale.options()) * log_a);
  return {f.q, f.k};
}

}  // namespace

MixerDistances head_mixer_distances(const at::Tensor& q, const at::Tensor& k, int64_t W, const AnalysisOptions& opt) {
  MixerFitOptions mo;
  mo.state_size = opt.mixer_state;
  mo.iterations = opt.mixer_iterations;
  mo.window = opt.window;
  const int64_t L = q.size(-2);
  const int64_t P = opt.mixer_tokens > 0 && opt.mixer_tokens < L ? opt.mixer_tokens : L;
  // In float64, as the analysis reads every head, so large logits cannot overflow.
  return mixer_distances(softmax_map(q.select(0, 0).narrow(0, 0, P).to(at::kDouble), k.select(0, 0).narrow(0, 0, P).to(at::kDouble), W), mo);
}

namespace {

// One head of layer s: q, k, v [T, L, d] float64; W the captured model's softmax window (0: none).
// `step` is called before the linear side and at the end (the cancellation points).
HeadAnalysis analyze_head(const AnalysisOptions& opt, int64_t W, int s, int h, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, const std::string& key, SoftmaxSideCache* cache,
                          const std::function<void(double, const std::string&)>& step) {
  const int64_t L = q.size(-2), d = q.size(-1);
  const std::string where = "layer " + std::to_string(s) + " head " + std::to_string(h);
  const SampledRows rows = sampled_rows(opt, L, s, h);
  const at::Tensor& pos = rows.pos;
  const at::Tensor positions = rows.sampled ? pos : at::Tensor();
  // Softmax rows: needed for the softmax side and as the linear side's reference.
  const at::Tensor A = at::softmax(row_scores(q, k, pos, W), -1);
  const double log_a = fitted_log_decay(A, pos);
  HeadAnalysis a;
  a.layer = s, a.head = h;
  if (auto hit = cache ? cache->find(key, s, h) : std::nullopt) {
    a = std::move(*hit);
  } else {
    HeadMetricsInput in;
    in.map = A, in.q = q, in.k = k, in.seed = opt.seed, in.positions = positions, in.census = rows.census;
    in.window = W;
    a.softmax = compute_head_metrics(in);
    a.decay_length = decay_length(log_a);
    if (rows.sampled) {
      // The entropies are cheap for every row: exact, whatever the sample.
      const at::Tensor ent = softmax_row_entropies(q, k, W);
      a.softmax.entropy = ent.mean().item<double>();
      at::Tensor keys = at::arange(2, L + 1, at::kDouble);  // of rows 1 .. L - 1
      if (W > 0) keys = keys.clamp_max(double(W));
      if (L >= 2 && W != 1)
        a.softmax.normalized_entropy = (ent.narrow(-1, 1, L - 1) / at::log(keys)).mean().item<double>();
      a.softmax.standard_error.erase("entropy");
      a.softmax.standard_error.erase("normalized_entropy");
    }
    if (opt.mixer_state > 0) a.mixers = head_mixer_distances(q, k, W, opt);
    if (cache) cache->store(key, a);
  }
  if (!opt.feature_map.empty()) {
    step(0.5, where + " (" + opt.feature_map + ")");
    // Scaled features: phi itself under- or overflows at the norms real heads reach.
    auto phi = head_feature_map(opt, d, s, h, q, k);
    const Features pq = phi->scaled_query_features(q), pk = phi->scaled_key_features(k);
    Features fq(pq.values.to(at::kDouble), pq.log_scale.to(at::kDouble)), fk(pk.values.to(at::kDouble), pk.log_scale.to(at::kDouble));
    std::tie(fq, fk) = decayed_for_analysis(opt, fq, fk, log_a, L);
    const LinearRows lr = linear_rows(fq, fk, pos);
    HeadMetricsInput li;
    li.map = opt.window > 0 ? hybrid_rows(fq, fk, q, k, pos, opt.window) : lr.map;
    li.reference = A, li.q = q, li.k = k, li.v = v, li.positions = positions, li.census = rows.census;
    li.phi_q = pq, li.phi_k = pk, li.seed = opt.seed;
    // The signs of the linear part's raw row sums (also with a window: linear_map's count).
    li.raw_row_sums = lr.raw_sums;
    a.linear = compute_head_metrics(li);
  }
  step(opt.feature_map.empty() ? 1.0 : 0.5, where);
  return a;
}

}  // namespace

std::vector<HeadAnalysis> analyze_capture(const CaptureStore& store, const AnalysisOptions& opt,
                                          const ProgressFn& progress, SoftmaxSideCache* cache) {
  check_window(opt);
  if (opt.mixer_tokens < 0) fail_value("mixer_tokens", std::to_string(opt.mixer_tokens) + " must be 0 (the whole window) or a number of tokens");
  if (opt.sample_rows < 0) fail_value("sample_rows", std::to_string(opt.sample_rows) + " must be 0 (every row) or a number of query positions");
  at::InferenceMode guard;
  const int S = store.num_layers(), H = store.num_heads();
  std::vector<HeadAnalysis> out(size_t(S) * size_t(H));
  const std::string key = SoftmaxSideCache::key(store, opt);
  // The captured model's softmax window (Mistral): the softmax side is of the map it ran. The
  // linear side's map is not windowed (a converted head reads every key; a hybrid has its own
  // window, opt.window), but it is measured against this windowed softmax.
  const int64_t W = store.sliding_window();
  // Progress in heads done (a head's softmax and linear sides count a half each), reported in
  // order from whichever thread finishes a step; each report is a cancellation point. Once a head
  // has thrown (an error, or Cancelled from a report), `stopped` ends the other threads at their
  // next step or head; a report that throws sets it under the lock, so no later report is made.
  std::mutex progress_mutex;
  double done = 0;
  std::atomic<bool> stopped{false};
  const auto step = [&](double heads, const std::string& where) {
    std::lock_guard<std::mutex> lock(progress_mutex);
    if (stopped) throw Cancelled();
    done += heads;
    try {
      if (progress) progress(done / (double(S) * H), where);
    } catch (...) {
      stopped = true;
      throw;
    }
  };
  for (int s = 0; s < S; ++s) {
    // [T, H, L, d] -> per head [T, L, d], in float64 so large logits cannot overflow.
    const at::Tensor Q = select_seqs(store.layer_tensor(s, "q"), opt.max_seqs).to(at::kDouble);
    const at::Tensor K = select_seqs(store.layer_tensor(s, "k"), opt.max_seqs).to(at::kDouble);
    const at::Tensor V = select_seqs(store.layer_tensor(s, "v"), opt.max_seqs).to(at::kDouble);
    // The heads of a layer run in parallel, one per thread, each taking the next head as it
    // finishes (their times differ); the operations inside a head then run on its thread alone.
    // Every head's result depends only on (seed, layer, head), not on the thread count.
    std::atomic<int> next{0};
    const int64_t workers = std::min<int64_t>(H, std::max(1, at::get_num_threads()));
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      at::InferenceMode worker_guard;  // thread-local: each worker sets its own
      for (int h = next++; h < H && !stopped; h = next++) {
        try {
          const at::Tensor q = Q.select(1, h).contiguous(), k = K.select(1, h).contiguous(), v = V.select(1, h).contiguous();
          out[size_t(s) * H + h] = analyze_head(opt, W, s, h, q, k, v, key, cache, step);
        } catch (...) {
          stopped = true;
          throw;
        }
      }
    });
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
  m.softmax = softmax_map(q, k, store.sliding_window());
  if (!opt.feature_map.empty()) {
    auto phi = head_feature_map(opt, store.head_dim(), layer, head, Q.select(1, head), K.select(1, head));
    Features pq = phi->scaled_query_features(q), pk = phi->scaled_key_features(k);
    if (opt.decay != Decay::None) {  // the decay the metrics fit: the same windows and rows
      const at::Tensor qs = select_seqs(Q.select(1, head), opt.max_seqs).to(at::kDouble),
                       ks = select_seqs(K.select(1, head), opt.max_seqs).to(at::kDouble);
      const at::Tensor pos = sampled_rows(opt, q.size(0), layer, head).pos;
      const double log_a = fitted_log_decay(at::softmax(row_scores(qs, ks, pos, store.sliding_window()), -1), pos);
      std::tie(pq, pk) = decayed_for_analysis(opt, pq, pk, log_a, q.size(0));
    }
    const LinearMap lm = linear_map(pq, pk);
    m.linear = measured_map(opt, pq, pk, q, k, lm);
    m.nonpositive_row_fraction = lm.nonpositive_row_fraction;
  }
  const at::Tensor ids = store.ids()[seq].contiguous();
  m.ids.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  return m;
}

}  // namespace attnscope
