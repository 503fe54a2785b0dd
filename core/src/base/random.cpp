#include "attnscope/base/random.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "attnscope/base/error.h"

namespace attnscope {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t derive_seed(uint64_t seed, uint64_t stream) { return splitmix64(splitmix64(seed) ^ stream); }

uint64_t derive_seed(uint64_t seed, int layer, int head) {
  return derive_seed(seed, uint64_t(uint32_t(layer)) << 32 | uint32_t(head));
}

uint64_t Rng::below(uint64_t n) {
  if (n == 0) fail("random", "cannot draw from an empty range");
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: draws under it would bias the remainder
  for (;;) {
    const uint64_t r = engine_();
    if (r >= threshold) return r % n;
  }
}

std::vector<int64_t> shuffle_indices(int64_t n, uint64_t seed) {
  if (n < 0) fail("random", "cannot shuffle " + std::to_string(n) + " indices");
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), int64_t(0));
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(idx[i], idx[rng.below(uint64_t(i + 1))]);
  return idx;
}

std::vector<int64_t> sample_without_replacement(int64_t n, int64_t k, uint64_t seed) {
  if (n < 0) fail("random", "cannot sample from " + std::to_string(n) + " items");
  if (k < 0) fail("random", "cannot sample " + std::to_string(k) + " items");
  std::vector<int64_t> pool(n);
  std::iota(pool.begin(), pool.end(), int64_t(0));
  if (k >= n) return pool;
  Rng rng(seed);
  for (int64_t i = 0; i < k; ++i) std::swap(pool[i], pool[i + int64_t(rng.below(uint64_t(n - i)))]);
  pool.resize(k);
  std::sort(pool.begin(), pool.end());
  return pool;
}

}  // namespace attnscope
