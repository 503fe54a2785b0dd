// The one source of randomness in attnscope: seed derivation, unbiased integer draws and sampling
// without replacement, all on std::mt19937_64, whose output sequence the C++ standard fixes. Nothing
// here uses std::uniform_int_distribution or std::shuffle, whose algorithms are
// implementation-defined: the same seed draws the same windows, samples and features on every
// platform and compiler.
//
// Who draws what:
//   capture windows          shuffle_indices(available, seed), first T, sorted
//   DoF samples of a head    sample_without_replacement(2N, J, derive_seed(seed, layer, head))
//   metric kernel pairs      Rng::below
//   feature-map parameters   LibTorch generators seeded with derive_seed(seed, stream)
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace attnscope {

// SplitMix64's finalizer: a bijection of 64-bit integers that scatters nearby inputs.
uint64_t splitmix64(uint64_t z);

// An independent seed for one use of `seed`, e.g. one layer/head or one named stream:
// splitmix64(splitmix64(seed) ^ stream). Distinct streams give unrelated draws.
uint64_t derive_seed(uint64_t seed, uint64_t stream);
// Per head: stream = layer << 32 | head.
uint64_t derive_seed(uint64_t seed, int layer, int head);

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  // Uniform in [0, n), n >= 1, by rejection: a plain next() % n would favour the low values when
  // 2^64 is not a multiple of n.
  uint64_t below(uint64_t n);

 private:
  std::mt19937_64 engine_;
};

// 0..n-1 in a uniformly random order (Fisher-Yates from the back).
std::vector<int64_t> shuffle_indices(int64_t n, uint64_t seed);

// k distinct indices in [0, n), sorted, uniformly among all k-subsets (partial Fisher-Yates from
// the front). k >= n returns all of them. Throws Error for negative n or k.
std::vector<int64_t> sample_without_replacement(int64_t n, int64_t k, uint64_t seed);

}  // namespace attnscope
