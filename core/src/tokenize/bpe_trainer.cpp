// Trains a GPT-2-style byte-level BPE and writes it as a Hugging Face tokenizer.json.
//
// The classic algorithm: split the text with the GPT-2 regex, count each distinct word once with
// its frequency, start from the 256 byte tokens and repeatedly merge the most frequent adjacent
// pair. Pair counts are updated incrementally: a merge only revisits the words that contain the
// pair (an index pair -> words) and a lazy max-heap holds the counts, so thousands of merges over
// megabytes of text take seconds rather than a full recount per merge.
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "attnscope/tokenize/tokenizer.h"
#include "byte_level.h"
#include "regex_splitter.h"

namespace attnscope {

namespace {

const char* const kEndOfText = "<|endoftext|>";

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t key_left(uint64_t k) { return static_cast<int32_t>(k >> 32); }
int32_t key_right(uint64_t k) { return static_cast<int32_t>(k & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t freq = 0;
  int64_t last_merge = -1;  // the merge that last rewrote this word (skips repeated index entries)
};

class Trainer {
 public:
  explicit Trainer(std::string_view text);
  // Merges until the vocabulary (without the special token) has `target` tokens or no pair is left.
  void run(std::size_t target);
  nlohmann::ordered_json to_json() const;

 private:
  struct Entry {
    int64_t count;
    int32_t left, right;
  };
  // Heap order: higher count first; on equal counts the lexicographically smallest
  // (left, right) pair of token strings, so the result never depends on hash order.
  struct Worse {
    const std::vector<std::string>* tokens;
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.count != b.count) return a.count < b.count;
      const auto& t = *tokens;
      if (t[a.left] != t[b.left]) return t[a.left] > t[b.left];
      return t[a.right] > t[b.right];
    }
  };

  void add_pairs(std::size_t w, int64_t sign, std::unordered_map<uint64_t, int64_t>* delta);
  void merge_pair(int32_t left, int32_t right, int32_t merged, int64_t merge_index);

  std::vector<std::string> tokens_;  // id -> byte-level string
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<Word> words_;
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words_;  // may hold stale entries
  std::priority_queue<Entry, std::vector<Entry>, Worse> heap_{Worse{&tokens_}};
};

Trainer::Trainer(std::string_view text) {
  // The 256 byte tokens, ids in GPT-2's bytes_to_unicode order.
  std::array<int32_t, 256> byte_id{};
  const auto& order = byte_level_order();
  for (int k = 0; k < 256; ++k) {
    byte_id[order[k]] = k;
    tokens_.push_back(byte_to_unicode()[order[k]]);
    ids_[tokens_.back()] = k;
  }

  std::unordered_map<std::string_view, int64_t> counts;
  RegexSplitter splitter(kGpt2SplitPattern, "GPT-2 pre-tokenizer");
  for (std::string_view w : splitter.split(text)) ++counts[w];
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());  // a fixed word order makes the index lists deterministic

  std::unordered_map<uint64_t, int64_t> initial;
  words_.reserve(sorted.size());
  for (const auto& [word, freq] : sorted) {
    Word w;
    w.freq = freq;
    for (char c : word) w.symbols.push_back(byte_id[static_cast<unsigned char>(c)]);
    words_.push_back(std::move(w));
    add_pairs(words_.size() - 1, +1, &initial);
  }
  for (const auto& [key, count] : initial) {
    pair_count_[key] = count;
    heap_.push({count, key_left(key), key_right(key)});
  }
}

// Adds (sign +1) or removes (-1) the pairs of word w to the per-merge count changes, and indexes
// the word under each pair when adding.
void Trainer::add_pairs(std::size_t w, int64_t sign, std::unordered_map<uint64_t, int64_t>* delta) {
  const Word& word = words_[w];
  for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
    const uint64_t k = pair_key(word.symbols[i], word.symbols[i + 1]);
    (*delta)[k] += sign * word.freq;
    if (sign > 0) {
      auto& list = pair_words_[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }
  }
}

void Trainer::merge_pair(int32_t left, int32_t right, int32_t merged, int64_t merge_index) {
  const uint64_t key = pair_key(left, right);
  std::vector<int32_t> affected = std::move(pair_words_[key]);
  pair_words_.erase(key);
  std::unordered_map<uint64_t, int64_t> delta;
  for (int32_t w : affected) {
    Word& word = words_[w];
    if (word.last_merge == merge_index) continue;
    word.last_merge = merge_index;
    std::vector<int32_t>& s = word.symbols;
    bool found = false;
    for (std::size_t i = 0; i + 1 < s.size() && !found; ++i) found = s[i] == left && s[i + 1] == right;
    if (!found) continue;  // a stale index entry: an earlier merge took the pair apart
    add_pairs(w, -1, &delta);
    std::vector<int32_t> out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
        out.push_back(merged);
        ++i;
      } else {
        out.push_back(s[i]);
      }
    }
    s = std::move(out);
    add_pairs(w, +1, &delta);
  }
  // Apply the net changes; a changed count gets a fresh heap entry and the old one goes stale.
  std::vector<uint64_t> changed;
  for (const auto& [k, d] : delta)
    if (d != 0) changed.push_back(k);
  std::sort(changed.begin(), changed.end());  // deterministic push order (heap ties are ordered anyway)
  for (uint64_t k : changed) {
    const int64_t c = (pair_count_[k] += delta[k]);
    if (c > 0) {
      heap_.push({c, key_left(k), key_right(k)});
    } else {
      pair_count_.erase(k);
      pair_words_.erase(k);
    }
  }
}

void Trainer::run(std::size_t target) {
  while (tokens_.size() < target && !heap_.empty()) {
    const Entry top = heap_.top();
    heap_.pop();
    auto it = pair_count_.find(pair_key(top.left, top.right));
    if (it == pair_count_.end() || it->second != top.count) continue;  // stale entry
    const std::string text = tokens_[top.left] + tokens_[top.right];
    // Two merge paths can spell the same string ("a bc" and "ab c"); it stays one token.
    auto [pos, inserted] = ids_.emplace(text, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(text);
    merges_.emplace_back(top.left, top.right);
    merge_pair(top.left, top.right, pos->second, static_cast<int64_t>(merges_.size()));
  }
}

nlohmann::ordered_json Trainer::to_json() const {
  using json = nlohmann::ordered_json;
  const int64_t eot_id = static_cast<int64_t>(tokens_.size());
  json vocab = json::object();
  for (std::size_t id = 0; id < tokens_.size(); ++id) vocab[tokens_[id]] = id;
  vocab[kEndOfText] = eot_id;
  json merges = json::array();
  // Byte-level strings never contain a space (it is "Ġ"), so "left right" is unambiguous.
  for (const auto& [l, r] : merges_) merges.push_back(tokens_[l] + " " + tokens_[r]);

  json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = json::array({json{{"id", eot_id},
                                            {"content", kEndOfText},
                                            {"single_word", false},
                                            {"lstrip", false},
                                            {"rstrip", false},
                                            {"normalized", false},
                                            {"special", true}}});
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", std::move(vocab)},
                   {"merges", std::move(merges)}};
  return root;
}

}  // namespace

void train_bytelevel_bpe(std::string_view text, int64_t vocab_size, const std::string& out_path) {
  constexpr int64_t kSpecialTokens = 1;  // <|endoftext|>
  if (vocab_size < 256 + kSpecialTokens || vocab_size > (1 << 20))
    fail(out_path, "vocab_size " + std::to_string(vocab_size) +
                       " must be between 257 (256 bytes + <|endoftext|>) and 1048576");
  Trainer trainer(text);
  // If the text runs out of pairs first, the vocabulary is smaller and <|endoftext|> comes right
  // after the last merge.
  trainer.run(static_cast<std::size_t>(vocab_size - kSpecialTokens));
  const std::string json_text = trainer.to_json().dump(2) + "\n";

  write_text_file(out_path, json_text);
}

}  // namespace attnscope
