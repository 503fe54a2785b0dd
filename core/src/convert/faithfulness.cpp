// Recall at distance and generation agreement of a converted model against its original
// (faithfulness.h).
#include "attnscope/convert/faithfulness.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "attnscope/base/error.h"
#include "attnscope/base/random.h"
#include "attnscope/model/model.h"

namespace attnscope {

namespace {

constexpr uint64_t kRecallStream = 0x2ECA11;

int window_length(const Model& m, int seq_len) {
  const int n_ctx = m.config().n_ctx;
  const int L = seq_len > 0 ? seq_len : std::min(n_ctx, 4096);
  if (L < 2 || L > n_ctx) fail_value("sequence length", std::to_string(L) + " must be in 2.." + std::to_string(n_ctx));
  return L;
}

// Mean loss of predicting tokens start+1 .. start+n-1 of one window's per-position losses
// (element p - 1 is the loss of the token at position p).
double copy_loss(const std::vector<double>& losses, int start, int n) {
  double s = 0;
  for (int p = start + 1; p < start + n; ++p) s += losses[size_t(p - 1)];
  return s / double(n - 1);
}

}  // namespace

std::vector<int> recall_lags(int seq_len, int segment) {
  std::vector<int> lags;
  const int longest = seq_len - segment - 1;  // the first copy at position 1
  for (int lag = segment; lag < longest; lag *= 2) lags.push_back(lag);
  if (longest >= segment) lags.push_back(longest);
  return lags;
}

std::vector<RecallSequence> recall_sequences(const std::vector<int64_t>& ids, int lag, const RecallOptions& o) {
  const int L = o.seq_len, n = o.segment;
  if (n < 2) fail_value("recall segment", std::to_string(n) + " tokens: at least 2");
  if (lag < n || lag + n + 1 > L)
    fail_value("recall lag", std::to_string(lag) + " does not fit two copies of " + std::to_string(n) + " tokens in " +
                                 std::to_string(L));
  const std::vector<int64_t> vocab = [&] {
    const std::set<int64_t> s(ids.begin(), ids.end());
    return std::vector<int64_t>(s.begin(), s.end());
  }();
  if (vocab.size() < 2) fail_value("text", "has fewer than 2 distinct tokens: no segment to repeat");
  Rng rng(derive_seed(derive_seed(o.seed, kRecallStream), uint64_t(lag)));
  std::vector<RecallSequence> out;
  for (int i = 0; i < o.sequences; ++i) {
    RecallSequence r;
    const uint64_t start = rng.below(ids.size());
    for (int p = 0; p < L; ++p) r.tokens.push_back(ids[(start + uint64_t(p)) % ids.size()]);
    r.second = L - n;
    r.first = r.second - lag;
    for (int j = 0; j < n; ++j) {
      const int64_t t = vocab[rng.below(vocab.size())];
      r.tokens[size_t(r.first + j)] = t;
      r.tokens[size_t(r.second + j)] = t;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::vector<RecallBucket>> recall_at_distance(const Model& original, const std::vector<const Model*>& converted,
                                                          const std::vector<int64_t>& ids, const RecallOptions& options) {
  if (options.sequences < 1) fail_value("recall sequences", std::to_string(options.sequences) + " must be >= 1");
  if (ids.empty()) fail_value("text", "is empty");
  RecallOptions o = options;
  o.seq_len = window_length(original, options.seq_len);
  // Per lag and window, each model's drop: the original's (index 0) read once for every converted model.
  std::vector<const Model*> models{&original};
  models.insert(models.end(), converted.begin(), converted.end());
  const auto mean_se = [](const std::vector<double>& d, double* mean, double* se) {
    double sum = 0, sq = 0;
    for (double x : d) sum += x;
    *mean = sum / double(d.size());
    for (double x : d) sq += (x - *mean) * (x - *mean);
    *se = d.size() > 1 ? std::sqrt(sq / double(d.size() - 1) / double(d.size())) : std::nan("");
  };
  std::vector<std::vector<RecallBucket>> out(converted.size());
  for (int lag : recall_lags(o.seq_len, o.segment)) {
    std::vector<std::vector<double>> drops(models.size());
    for (const RecallSequence& s : recall_sequences(ids, lag, o))
      for (size_t i = 0; i < models.size(); ++i) {
        const std::vector<double> losses = models[i]->window_losses(s.tokens, o.seq_len)[0];
        drops[i].push_back(copy_loss(losses, s.first, o.segment) - copy_loss(losses, s.second, o.segment));
      }
    // Means and their standard errors over the windows.
    RecallBucket b;
    b.lag = lag;
    b.sequences = int(drops[0].size());
    mean_se(drops[0], &b.original_drop, &b.original_se);
    for (size_t i = 0; i < converted.size(); ++i) {
      mean_se(drops[i + 1], &b.converted_drop, &b.converted_se);
      out[i].push_back(b);
    }
  }
  return out;
}

std::vector<RecallBucket> recall_at_distance(const Model& original, const Model& converted,
                                             const std::vector<int64_t>& ids, const RecallOptions& o) {
  return recall_at_distance(original, std::vector<const Model*>{&converted}, ids, o)[0];
}

GenerationOptions generation_options_within(int seq_len) {
  GenerationOptions o;
  o.prompt_tokens = std::min(o.prompt_tokens, seq_len / 2);
  o.new_tokens = std::min(o.new_tokens, seq_len - o.prompt_tokens);
  return o;
}

std::vector<GenerationAgreement> generation_agreement(const Model& original, const std::vector<const Model*>& converted,
                                                      const std::vector<int64_t>& ids, const GenerationOptions& o) {
  if (o.prompts < 1 || o.prompt_tokens < 1 || o.new_tokens < 1)
    fail_value("generation", "prompts, prompt tokens and new tokens must each be >= 1");
  if (o.prompt_tokens + o.new_tokens > original.config().n_ctx)
    fail_value("generation", std::to_string(o.prompt_tokens) + " prompt tokens + " + std::to_string(o.new_tokens) +
                                 " new tokens exceed the context of " + std::to_string(original.config().n_ctx));
  if (int64_t(ids.size()) < o.prompt_tokens)
    fail_value("text", "has " + std::to_string(ids.size()) + " tokens: fewer than one prompt of " + std::to_string(o.prompt_tokens));
  at::NoGradGuard no_grad;
  std::vector<GenerationAgreement> out(converted.size());
  std::vector<int64_t> matches(converted.size(), 0);
  std::vector<double> first(converted.size(), 0), kl(converted.size(), 0);
  for (int i = 0; i < o.prompts && int64_t(i + 1) * o.prompt_tokens <= int64_t(ids.size()); ++i) {
    const std::vector<int64_t> prompt(ids.begin() + int64_t(i) * o.prompt_tokens, ids.begin() + int64_t(i + 1) * o.prompt_tokens);
    const std::vector<int64_t> a = original.generate_greedy(prompt, o.new_tokens);  // once for every converted model
    const size_t P = prompt.size();
    for (size_t m = 0; m < converted.size(); ++m) {
      const std::vector<int64_t> b = converted[m]->generate_greedy(prompt, o.new_tokens);
      int diverged = o.new_tokens;
      for (int t = 0; t < o.new_tokens; ++t) {
        const bool same = a[P + size_t(t)] == b[P + size_t(t)];
        matches[m] += same;
        if (!same && diverged == o.new_tokens) diverged = t;
      }
      first[m] += diverged;
      // Along the converted model's own tokens: both models' next-token distributions at the positions
      // that chose them (P - 1 .. P + new_tokens - 2).
      const at::Tensor seq = at::tensor(b, at::kLong).view({1, -1});
      const at::Tensor lp = at::log_softmax(original.forward(seq)[0].narrow(0, int64_t(P) - 1, o.new_tokens).to(at::kDouble), -1);
      const at::Tensor lq = at::log_softmax(converted[m]->forward(seq)[0].narrow(0, int64_t(P) - 1, o.new_tokens).to(at::kDouble), -1);
      kl[m] += (lp.exp() * (lp - lq)).sum(-1).mean().item<double>();
      ++out[m].prompts;
    }
  }
  for (size_t m = 0; m < converted.size(); ++m) {
    GenerationAgreement& g = out[m];
    g.new_tokens = o.new_tokens;
    g.token_match = double(matches[m]) / double(int64_t(g.prompts) * o.new_tokens);
    g.first_divergence = first[m] / double(g.prompts);
    g.free_running_kl = kl[m] / double(g.prompts);
  }
  return out;
}

GenerationAgreement generation_agreement(const Model& original, const Model& converted, const std::vector<int64_t>& ids,
                                         const GenerationOptions& o) {
  return generation_agreement(original, std::vector<const Model*>{&converted}, ids, o)[0];
}

}  // namespace attnscope
