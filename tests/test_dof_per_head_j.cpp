// J per head (DofSettings::max_samples): heads unconverged at J are computed again at 2J, 4J, ...
// up to the cap; Table 1 says when an allocation rests on unconverged DoF.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/capture/capture.h"
#include "attnscope/model/model.h"
#include "attnscope/base/random.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_dof_per_head_j {

using namespace attnscope;

namespace {

const std::string& tiny_capture() {
  static const std::string dir = test::tiny_gpt2_capture("dof_per_head_j", 48, 4, 5);
  return dir;
}

}  // namespace

// Every head ends converged, at the cap, or with every vector; a head that went past the first J
// was unconverged one step before (recomputed here with head_spectrum at that J); no doubling
// without room above J.
TEST(DofPerHeadJ, DoublesUnconvergedHeadsUpToTheCap) {
  const CaptureStore st(tiny_capture());
  DofSettings s;
  s.samples = 8;
  s.max_samples = 96;  // 8, 16, 32, 64, then min(128, 96)
  s.exact_limit = 1 << 20;
  const int64_t available = 2 * st.num_seqs() * st.seq_len();
  int doubled = 0, capped = 0;
  for (int layer = 0; layer < st.num_layers(); ++layer) {
    const auto heads = layer_spectra(st, layer, s);
    const at::Tensor q = st.layer_tensor(layer, "q"), k = st.layer_tensor(layer, "k");
    for (int h = 0; h < st.num_heads(); ++h) {
      const HeadSpectrum& sp = heads[h];
      const DofConvergence c = dof_convergence(sp, s.lambda);
      const std::vector<int64_t> steps = {8, 16, 32, 64, 96};
      ASSERT_NE(std::find(steps.begin(), steps.end(), sp.samples), steps.end()) << sp.samples;
      EXPECT_TRUE(c.converged || sp.samples == s.max_samples || sp.samples == available) << layer << "," << h;
      capped += !c.converged;
      if (sp.samples > s.samples) {
        ++doubled;
        DofSettings before = s;
        before.samples = sp.samples == 96 ? 64 : sp.samples / 2;
        const HeadSpectrum prev = head_spectrum(q.select(1, h).reshape({-1, st.head_dim()}), k.select(1, h).reshape({-1, st.head_dim()}),
                                                before, derive_seed(s.seed, layer, h));
        EXPECT_TRUE(dof_convergence(prev, s.lambda).unconverged()) << layer << "," << h;
        // The spectrum kept is the one head_spectrum gives at the final J.
        DofSettings last = s;
        last.samples = sp.samples;
        const HeadSpectrum again = head_spectrum(q.select(1, h).reshape({-1, st.head_dim()}), k.select(1, h).reshape({-1, st.head_dim()}),
                                                 last, derive_seed(s.seed, layer, h));
        EXPECT_EQ(again.eigenvalues, sp.eigenvalues);
      }
    }
  }
  // At J = 8 these heads do not all converge: the doubling was exercised.
  EXPECT_GT(doubled, 0);

  // No room above J: every head keeps J, converged or not.
  s.max_samples = s.samples;
  for (const HeadSpectrum& sp : layer_spectra(st, 0, s)) EXPECT_EQ(sp.samples, 8);
  s.max_samples = -1;
  EXPECT_THROW(layer_spectra(st, 0, s), Error);
  (void)capped;
}

// Table 1's caption names the layers (and heads) whose DoF is unconverged and the largest J they
// ended with; with every head converged, or no convergence given, it says nothing of it.
TEST(DofPerHeadJ, Table1SaysWhenTheAllocationRestsOnUnconvergedDof) {
  AllocOptions o;
  o.budget = 16;
  const Allocation a = allocate({{3.0, 5.0}, {7.0, 2.0}, {4.0, 4.0}}, o);
  std::vector<std::vector<DofConvergence>> conv(3, std::vector<DofConvergence>(2));
  for (auto& row : conv)
    for (DofConvergence& c : row) c.checked = true, c.converged = true, c.samples = 1024;
  const std::string plain = allocation_table("m", {a}).caption;
  EXPECT_EQ(allocation_table("m", {a}, conv).caption, plain);
  conv[1][0].converged = false, conv[1][0].samples = 4096;
  conv[2][1].converged = false, conv[2][1].samples = 2048;
  const std::string flagged = allocation_table("m", {a}, conv).caption;
  EXPECT_NE(flagged.find("Rests on unconverged DoF: layers 1 (heads 0); 2 (heads 1)"), std::string::npos) << flagged;
  EXPECT_NE(flagged.find("at most 4096"), std::string::npos) << flagged;
}

}  // namespace test_dof_per_head_j
