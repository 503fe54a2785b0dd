// What teacher-forced perplexity hides (issue 28): how much of the original's in-context recall a
// converted model keeps at each distance, and how faithfully it generates. Both compare two models
// on held-out text: the original (softmax attention) and the converted one.
//
// Recall at distance: a window of held-out text with a random segment of `segment` tokens (drawn
// from the text's own tokens, in random order, so only copying predicts it) written at position
// p1 and again at p2 = p1 + lag, the second copy ending the window. A model's drop is its mean loss
// on the first copy's tokens 1..segment-1 minus that on the second copy's (nats per token): how much
// seeing the segment once helps it predict the segment again. The converted model keeps
// converted_drop / original_drop of the original's recall at that lag.
//
// Generation: greedy continuations of `new_tokens` tokens from prompts of held-out text, each model
// decoding as it runs (the original with its key-value cache, the converted one with its state):
// the share of positions where the converted model's token equals the original's, the first
// position where they differ (new_tokens when never), and the KL(original || converted) of the
// next-token distributions along the converted model's own continuation (free-running, not
// teacher-forced on the original's tokens).
#pragma once
#include <cstdint>
#include <vector>

namespace attnscope {

class Model;

struct RecallOptions {
  int seq_len = 0;     // the window (0: the models' context, at most 4096)
  int segment = 16;    // tokens in the repeated segment
  int sequences = 12;  // windows per lag
  uint64_t seed = 0;
};

// The lags measured in a window of seq_len tokens: segment, 2 segment, 4 segment, ... while the
// first copy starts at position 1 or later, and the longest lag that fits (seq_len - segment - 1).
std::vector<int> recall_lags(int seq_len, int segment);

// One window of the test: its tokens and where the two copies start (second = first + lag).
struct RecallSequence {
  std::vector<int64_t> tokens;
  int first = 0, second = 0;
};
// The windows of one lag: filler from `ids` at seeded offsets (wrapping around a short text), a
// seeded segment of ids' tokens written at first and second. Error for a lag that does not fit.
std::vector<RecallSequence> recall_sequences(const std::vector<int64_t>& ids, int lag, const RecallOptions& o);

struct RecallBucket {
  int lag = 0;
  int sequences = 0;
  double original_drop = 0, converted_drop = 0;  // nats per token, means over the windows' copies
  double original_se = 0, converted_se = 0;      // their standard errors over the windows (NaN for one)
  double kept() const { return converted_drop / original_drop; }
  // Whether the original copies at this lag at all: its drop above twice its standard error. A model
  // that does not (small models, short segments) leaves kept() a ratio of noise.
  bool measurable() const { return original_drop > 2 * original_se; }
};
// Every lag of recall_lags. Error for a text with fewer than 2 distinct tokens or a bad option.
std::vector<RecallBucket> recall_at_distance(const Model& original, const Model& converted,
                                             const std::vector<int64_t>& ids, const RecallOptions& o);
// Several converted models against one original, whose windows are read once: out[i] is converted[i]'s.
std::vector<std::vector<RecallBucket>> recall_at_distance(const Model& original, const std::vector<const Model*>& converted,
                                                          const std::vector<int64_t>& ids, const RecallOptions& o);

struct GenerationOptions {
  int prompts = 8;
  int prompt_tokens = 32;
  int new_tokens = 64;
};
struct GenerationAgreement {
  int prompts = 0, new_tokens = 0;
  double token_match = 0;       // share of generated positions where the two models chose the same token
  double first_divergence = 0;  // mean index (0-based) of the first differing token; new_tokens when none
  double free_running_kl = 0;   // mean KL(original || converted) in nats along the converted continuation
};
// Prompts are consecutive, non-overlapping pieces of ids (Error when ids has fewer than
// prompt_tokens, or prompt_tokens + new_tokens exceeds the models' context).
GenerationAgreement generation_agreement(const Model& original, const Model& converted,
                                         const std::vector<int64_t>& ids, const GenerationOptions& o);
// Several converted models against one original, whose continuations are generated once.
std::vector<GenerationAgreement> generation_agreement(const Model& original, const std::vector<const Model*>& converted,
                                                      const std::vector<int64_t>& ids, const GenerationOptions& o);
// The default options fitted to a window of seq_len tokens: prompts of at most half of it, and at
// most the rest of it generated.
GenerationOptions generation_options_within(int seq_len);

}  // namespace attnscope
