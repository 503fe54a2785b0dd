// Peak memory of tensors over a scope of code: how many bytes a forward pass or a generation needed
// on top of what was already allocated (eval's softmax_peak_bytes / linear_peak_bytes).
//
// CPU: LibTorch's CPU allocator keeps no statistics, so the first meter installs a counting wrapper
// around it (c10::SetCPUAllocator) that forwards every allocation to the original allocator and
// counts the requested bytes of live tensors and their running maximum (atomics). Bytes are what
// tensors asked for, not what malloc rounds them up to; memory that libraries allocate outside
// LibTorch's allocator (BLAS scratch, oneDNN) is not seen. Tensors allocated before the first meter
// are not counted, which does not matter because a meter reports growth above its start.
// CUDA (builds against a CUDA LibTorch): the caching allocator's allocated-bytes statistics of the
// current device.
//
// Meters nest: an inner meter does not disturb an outer one's peak. The counts are process-wide,
// so allocations of other threads during a meter's scope count too (LibTorch's intra-op threads
// included, which is what is wanted).
#pragma once
#include <cstdint>

namespace attnscope {

enum class MemoryDevice { CPU, CUDA };

class PeakMemoryMeter {
 public:
  // Starts measuring. CUDA without a CUDA build or device: Error.
  explicit PeakMemoryMeter(MemoryDevice device = MemoryDevice::CPU);
  ~PeakMemoryMeter();
  PeakMemoryMeter(const PeakMemoryMeter&) = delete;
  PeakMemoryMeter& operator=(const PeakMemoryMeter&) = delete;

  // The largest number of live tensor bytes since the meter started, minus the bytes live when it
  // started (>= 0): the extra memory the code in scope needed at its worst moment so far.
  int64_t peak_bytes() const;

 private:
  MemoryDevice device_;
  int64_t start_live_ = 0;
  int64_t max_seen_ = 0;  // the device's peak before an inner meter reset it (absolute bytes)
  friend struct MeterRegistry;
};

// Bytes of live tensors that the meter's counting sees right now (absolute; CPU counts only
// tensors allocated since the first meter was created).
int64_t live_tensor_bytes(MemoryDevice device = MemoryDevice::CPU);

}  // namespace attnscope
