// The float64 host reference of the CUDA kernel checker (kernels/check/reference.h: one (query,
// key) pair at a time, from launch.h's definitions) against the CPU kernel (kernels/src/cpu_chunked,
// through the public dispatch, float64 CPU tensors): forward y and lse, the gradients of
// sum(gy y) + sum(h lse), and the final recurrent state, on random inputs and on the extremes the
// checker feeds the CUDA kernels (huge and -inf key log scales, a rising ramp, rows with no weight,
// negative normalizers). Two independent computations agreeing is what lets the checker, which
// runs only on a GPU machine, trust its reference.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "../kernels/check/inputs.h"
#include "attnscope/kernels/linear_attention.h"

namespace test_cuda_check_reference {

namespace K = attnscope::kernels;
namespace C = attnscope::kernels::check;

at::Tensor tensor(const std::vector<double>& x, std::vector<int64_t> shape) {
  return at::from_blob(const_cast<double*>(x.data()), shape, at::kDouble).clone();
}

// max |got - want| over the larger of max |want| and `scale` (the reference's bound on the terms'
// sizes: reference.h), both over the entries where want is finite; infinite where got is not
// NaN/inf exactly where want is.
double error(const at::Tensor& got, const std::vector<double>& want_values, double scale = 0) {
  const at::Tensor want = tensor(want_values, {int64_t(want_values.size())}), g = got.reshape({-1}).to(at::kDouble);
  const at::Tensor fin = at::isfinite(want);
  if (!at::equal(at::isnan(g), at::isnan(want)) || !at::equal(at::isfinite(g), fin) ||
      !at::equal(g.masked_select(at::isinf(want)), want.masked_select(at::isinf(want))))
    return INFINITY;
  if (!fin.any().item<bool>()) return 0;
  const at::Tensor w = want.masked_select(fin), d = g.masked_select(fin);
  scale = std::max(scale, w.abs().max().item<double>());
  return (d - w).abs().max().item<double>() / std::max(scale, 1e-300);
}

// One problem through both: forward y and lse, then the gradients (with and without h).
// leading_finite: MinusInf's first 70 keys finite but every fifth from the sixth on, so the first
// key is finite and no row has c_i = -inf (see CpuKernelTakesLeadingMinusInfKeys).
void compare(int64_t N, int64_t L, int64_t M, int64_t D, C::Inputs kind, uint64_t seed, bool leading_finite = false) {
  C::Problem p = C::make_problem(N, L, M, D, kind, seed);
  if (leading_finite)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < 70; ++i)
        if (i % 5 != 0 || i == 0) p.ls[size_t(n * L + i)] = -0.5;
  const std::string where = std::string(C::inputs_name(kind)) + " N" + std::to_string(N) + " L" + std::to_string(L) +
                            " M" + std::to_string(M) + " D" + std::to_string(D);
  const C::ForwardReference f = C::reference_forward(p, 2);
  const std::vector<double> gy = C::random_values(size_t(N * L * D), seed + 1), h = C::random_values(size_t(N * L), seed + 2);
  for (bool with_h : {false, true}) {
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor q = leaf(tensor(p.q, {N, L, M})), k = leaf(tensor(p.k, {N, L, M})),
                     ls = leaf(tensor(p.ls, {N, L, 1})), v = leaf(tensor(p.v, {N, L, D}));
    const K::AttentionWithLse a = K::causal_linear_attention_lse(q, k, ls, v);
    if (!with_h) {
      EXPECT_LT(error(a.y, f.y, f.y_scale), 1e-12) << "y, " << where;
      EXPECT_LT(error(a.lse, f.lse), 1e-13) << "lse, " << where;
    }
    // Rows with den = 0 (y NaN) or den <= 0 (lse -inf) pass no gradient in either computation.
    const at::Tensor y0 = at::where(at::isnan(a.y), at::zeros_like(a.y), a.y);
    const at::Tensor lse0 = at::where(at::isinf(a.lse), at::zeros_like(a.lse), a.lse);
    at::Tensor loss = (y0 * tensor(gy, {N, L, D})).sum();
    if (with_h) loss = loss + (lse0 * tensor(h, {N, L, 1})).sum();
    loss.backward();
    const C::BackwardReference b = C::reference_backward(p, f, gy, with_h ? &h : nullptr, 2);
    const std::string what = where + (with_h ? ", gradient of y and lse" : ", gradient of y");
    EXPECT_LT(error(q.grad(), b.dq, b.dq_scale), 1e-11) << "dq, " << what;
    EXPECT_LT(error(k.grad(), b.dk, b.dk_scale), 1e-11) << "dk, " << what;
    EXPECT_LT(error(ls.grad(), b.dls, b.dls_scale), 1e-11) << "dls, " << what;
    EXPECT_LT(error(v.grad(), b.dv, b.dv_scale), 1e-11) << "dv, " << what;
  }
  // The recurrent state after the whole sequence.
  const K::RecurrentState st = K::final_state(tensor(p.k, {N, L, M}), tensor(p.ls, {N, L, 1}), tensor(p.v, {N, L, D}));
  const C::StateReference s = C::reference_state(p);
  EXPECT_LT(error(st.S, s.S, s.S_scale), 1e-12) << "S, " << where;
  EXPECT_LT(error(st.z, s.z, s.z_scale), 1e-12) << "z, " << where;
  EXPECT_EQ(error(st.c, s.c), 0.0) << "c, " << where;
}

TEST(CudaCheckReference, EqualsTheCpuKernelOnRandomInputs) {
  // Across chunk boundaries (L = 1, 63, 64, 65, 200) and odd sizes.
  compare(1, 1, 3, 2, C::Inputs::Random, 1);
  compare(2, 63, 5, 4, C::Inputs::Random, 2);
  compare(1, 64, 8, 1, C::Inputs::Random, 3);
  compare(3, 65, 1, 7, C::Inputs::Random, 4);
  compare(2, 200, 17, 9, C::Inputs::Random, 5);
}

TEST(CudaCheckReference, EqualsTheCpuKernelAtTheExtremes) {
  for (C::Inputs kind : {C::Inputs::Huge, C::Inputs::Ramp, C::Inputs::NoWeight, C::Inputs::NegativeDen})
    compare(2, 150, 6, 5, kind, 10 + uint64_t(kind));
  // -inf key log scales (every fifth key) after a finite first key: the running max is finite.
  compare(2, 150, 6, 5, C::Inputs::MinusInf, 20, /*leading_finite=*/true);
}

// Keys of log scale -inf before the first finite one (rows with c_i = -inf; here the whole first
// chunk): launch.h has exp(-inf) = 0, never -inf - -inf, so those rows are undefined (y NaN, lse
// -inf, no gradient) and the rows after them as usual; the CUDA kernels guard it (exp_diff), the
// checker holds them to it, and the CPU kernel does so since its exp_below.
TEST(CudaCheckReference, CpuKernelTakesLeadingMinusInfKeys) {
  compare(2, 150, 6, 5, C::Inputs::MinusInf, 20);
}

TEST(CudaCheckReference, RowsWithoutWeightAreNaNAndTakeNoGradient) {
  // The reference's own account of launch.h's undefined rows, which the checker holds the CUDA
  // kernels to: NaN output and -inf lse where den = 0, and zero gradients into those queries.
  const C::Problem p = C::make_problem(1, 100, 4, 3, C::Inputs::MinusInf, 7);
  const C::ForwardReference f = C::reference_forward(p, 1);
  const std::vector<double> gy = C::random_values(100 * 3, 8), h = C::random_values(100, 9);
  const C::BackwardReference b = C::reference_backward(p, f, gy, &h, 1);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(f.den[size_t(i)] == 0, i <= 70) << i;  // keys 0..70 are -inf
    EXPECT_EQ(std::isnan(f.y[size_t(i * 3)]), i <= 70) << i;
    EXPECT_EQ(f.lse[size_t(i)] == -INFINITY, i <= 70) << i;
    if (i <= 70 || i % 5 == 0) {  // a query without weight, or a key of weight 0
      EXPECT_EQ(b.dls[size_t(i)], 0.0) << i;
      for (int64_t m = 0; m < 4; ++m) EXPECT_EQ(b.dk[size_t(i * 4 + m)], 0.0) << i;
    }
    if (i <= 70) {
      for (int64_t m = 0; m < 4; ++m) EXPECT_EQ(b.dq[size_t(i * 4 + m)], 0.0) << i;
    }
  }
}

}  // namespace test_cuda_check_reference
