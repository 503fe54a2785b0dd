// The inputs of the CUDA kernel checker's cases (cuda_kernel_check.cpp), shared with the CPU test
// of its reference (tests/test_cuda_check_reference.cpp): random positive features and the
// extremes of the kernels' exponent handling. Plain C++, header-only.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "reference.h"

namespace attnscope::kernels::check {

enum class Inputs {
  Random,       // q, k = exp(N(0, 0.5^2)) (positive features, as PRF maps give), ls ~ N(0, 1), v ~ N(0, 1)
  Huge,         // ls ~ N(0, 1000^2): exp(ls) alone overflows any dtype
  MinusInf,     // the first 70 key log scales and every 5th one -inf: rows 0..70 have c = -inf, den = 0
  Ramp,         // ls_j = 3 j: every key outweighs the ones before it (the prefix rescales at each chunk)
  NoWeight,     // every 7th query all zero: den = 0, y NaN, no gradient from those rows
  NegativeDen,  // q < 0 < k: den < 0 everywhere, y defined, lse = -inf, the lse gradient ignored
};

inline const char* inputs_name(Inputs kind) {
  switch (kind) {
    case Inputs::Random: return "random";
    case Inputs::Huge: return "huge-ls";
    case Inputs::MinusInf: return "-inf-ls";
    case Inputs::Ramp: return "ramp-ls";
    case Inputs::NoWeight: return "no-weight-rows";
    case Inputs::NegativeDen: return "negative-den";
  }
  return "?";
}

inline Problem make_problem(int64_t N, int64_t L, int64_t M, int64_t D, Inputs kind, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Problem p;
  p.N = N, p.L = L, p.M = M, p.D = D;
  p.q.resize(size_t(N * L * M));
  p.k.resize(size_t(N * L * M));
  p.ls.resize(size_t(N * L));
  p.v.resize(size_t(N * L * D));
  for (double& x : p.q) x = std::exp(0.5 * normal(gen));
  for (double& x : p.k) x = std::exp(0.5 * normal(gen));
  for (double& x : p.v) x = normal(gen);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i) {
      double& l = p.ls[n * L + i];
      l = normal(gen);
      if (kind == Inputs::Huge) l *= 1000.0;
      if (kind == Inputs::MinusInf && (i < 70 || i % 5 == 0)) l = -INFINITY;
      if (kind == Inputs::Ramp) l = 3.0 * double(i);
      if (kind == Inputs::NoWeight && i % 7 == 3)
        for (int64_t m = 0; m < M; ++m) p.q[(n * L + i) * M + m] = 0.0;
    }
  if (kind == Inputs::NegativeDen)
    for (double& x : p.q) x = -x;
  return p;
}

// Random values ~ N(0, 1) (upstream gradients).
inline std::vector<double> random_values(size_t count, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> x(count);
  for (double& e : x) e = normal(gen);
  return x;
}

}  // namespace attnscope::kernels::check
