// The merge-by-rank step shared by the byte-level and SentencePiece-style BPE tokenizers: given a
// word as a sequence of token ids, apply the ranked merges until none applies.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace attnscope {

class BpeMerges {
 public:
  struct Merge {
    int32_t rank;    // lower merges first
    int32_t result;  // id of the merged token
  };

  // Records "left right -> result". A pair listed twice keeps its first (best) rank, as HF does.
  void add(int32_t left, int32_t right, int32_t result);
  const Merge* find(int32_t left, int32_t right) const;
  std::size_t size() const { return table_.size(); }

  // Merges `symbols` in place. Like Hugging Face's BPE (word.rs merge_all), the lowest-ranked pair
  // merges first and equal ranks go left to right; with a heap this is O(n log n), which matters
  // for SentencePiece-style tokenizers where a whole text without spaces is one word.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> table_;
  int32_t next_rank_ = 0;
};

}  // namespace attnscope
