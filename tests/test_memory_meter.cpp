// PeakMemoryMeter against closed forms: tensors of known sizes allocated inside a meter give a peak
// of exactly their bytes (the counting allocator counts requested bytes, no rounding), and meters
// nest and follow one another without disturbing each other.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "attnscope/base/error.h"
#include "attnscope/base/memory_meter.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_memory_meter {

using namespace attnscope;

namespace {

at::Tensor floats(int64_t n) { return at::empty({n}, at::kFloat); }  // 4 n bytes

TEST(MemoryMeter, PeakIsTheLargestSetOfLiveTensors) {
  PeakMemoryMeter meter;
  EXPECT_EQ(meter.peak_bytes(), 0);
  {
    at::Tensor a = floats(1000);  // 4000 live
    at::Tensor b = floats(250);   // 5000 live: the peak
  }
  at::Tensor c = floats(1200);  // 4800 live, below the peak
  EXPECT_EQ(meter.peak_bytes(), 5000);
  at::Tensor d = floats(100);  // 5200: a new peak
  EXPECT_EQ(meter.peak_bytes(), 5200);
}

TEST(MemoryMeter, LiveBytesFollowAllocationAndRelease) {
  PeakMemoryMeter meter;  // installs the counter
  const int64_t before = live_tensor_bytes();
  {
    at::Tensor a = at::empty({3, 7}, at::kDouble);
    EXPECT_EQ(live_tensor_bytes() - before, 3 * 7 * 8);
  }
  EXPECT_EQ(live_tensor_bytes(), before);
}

TEST(MemoryMeter, ReportsGrowthAboveWhatWasLiveAtItsStart) {
  PeakMemoryMeter install;
  at::Tensor held = floats(10000);  // live before the meter: not its growth
  PeakMemoryMeter meter;
  at::Tensor a = floats(10);
  EXPECT_EQ(meter.peak_bytes(), 40);
  held.reset();  // freeing older tensors lowers live bytes below the start: growth stays >= 0
  EXPECT_EQ(meter.peak_bytes(), 40);
}

TEST(MemoryMeter, InnerMeterDoesNotHideTheOuterPeak) {
  PeakMemoryMeter outer;
  {
    at::Tensor big = floats(5000);  // 20000: the outer peak, gone before the inner meter starts
  }
  {
    PeakMemoryMeter inner;  // resets the counter's peak; the outer meter must keep its 20000
    at::Tensor a = floats(100);
    EXPECT_EQ(inner.peak_bytes(), 400);
  }
  EXPECT_EQ(outer.peak_bytes(), 20000);
  {
    PeakMemoryMeter inner;
    at::Tensor a = floats(1000);
    at::Tensor held = floats(6000);  // 28000 above the outer start: a new outer peak
    EXPECT_EQ(inner.peak_bytes(), 28000);
  }
  EXPECT_EQ(outer.peak_bytes(), 28000);
}

TEST(MemoryMeter, SequentialMetersMeasureTheirOwnScope) {
  int64_t first = 0, second = 0;
  {
    PeakMemoryMeter m;
    at::Tensor a = floats(2048);
    first = m.peak_bytes();
  }
  {
    PeakMemoryMeter m;  // the first meter's 8192 is not carried over
    at::Tensor a = floats(16);
    second = m.peak_bytes();
  }
  EXPECT_EQ(first, 8192);
  EXPECT_EQ(second, 64);
}

TEST(MemoryMeter, CountsOperatorOutputsAndOtherThreads) {
  PeakMemoryMeter meter;
  const at::Tensor x = at::ones({64, 32}, at::kFloat), y = at::ones({32, 16}, at::kFloat);
  const int64_t inputs = (64 * 32 + 32 * 16) * 4;
  at::Tensor z = at::matmul(x, y);  // [64, 16] output
  EXPECT_GE(meter.peak_bytes(), inputs + 64 * 16 * 4);
  std::thread t([] { at::Tensor w = at::empty({100000}, at::kByte); });
  t.join();
  EXPECT_GE(meter.peak_bytes(), 100000);
}

TEST(MemoryMeter, TensorsStillWorkThroughTheCountingAllocator) {
  PeakMemoryMeter meter;
  at::Tensor a = at::arange(1000, at::kDouble);
  at::Tensor b = a.clone();
  b.resize_({4000});  // reallocates through the allocator and copies
  EXPECT_EQ(b.narrow(0, 0, 1000).sum().item<double>(), 999.0 * 1000 / 2);
  EXPECT_EQ(uintptr_t(a.data_ptr()) % 64, 0u);  // LibTorch's alignment is kept
}

TEST(MemoryMeter, CudaWithoutCudaIsAClearError) {
  if (at::hasCUDA()) GTEST_SKIP() << "this build has CUDA";
  try {
    PeakMemoryMeter m(MemoryDevice::CUDA);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace test_memory_meter
