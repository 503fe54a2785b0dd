// PeakMemoryMeter: a counting wrapper around LibTorch's CPU allocator, and the CUDA caching
// allocator's statistics where the build has CUDA.
#include "attnscope/base/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#ifdef ATTNSCOPE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "attnscope/base/error.h"

// PyTorch 2.3 made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define ATTNSCOPE_ALLOCATE_CONST
#define ATTNSCOPE_ALLOCATOR_COPY_DATA 1
#else
#define ATTNSCOPE_ALLOCATE_CONST const
#endif

namespace attnscope {
namespace {

std::atomic<int64_t> g_cpu_live{0}, g_cpu_peak{0};

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (value > p && !peak.compare_exchange_weak(p, value, std::memory_order_relaxed)) {
  }
}

// Each block carries a header in front of the tensor's bytes with the requested size and the
// original allocator's context and deleter, so freeing needs no lookup table and the DataPtr's
// data equals its context (raw_allocate / raw_deleter keep working). 64 bytes keep the data at
// the alignment LibTorch's CPU allocator gives (c10::gAlignment).
struct alignas(64) Header {
  size_t bytes;
  void* inner_context;
  c10::DeleterFnPtr inner_deleter;
};
static_assert(sizeof(Header) == 64, "the header keeps 64-byte alignment");

void counted_delete(void* data) {
  if (!data) return;
  Header* h = reinterpret_cast<Header*>(static_cast<char*>(data) - sizeof(Header));
  g_cpu_live.fetch_sub(int64_t(h->bytes), std::memory_order_relaxed);
  if (h->inner_deleter) h->inner_deleter(h->inner_context);
}

struct CountingCPUAllocator final : c10::Allocator {
  explicit CountingCPUAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) ATTNSCOPE_ALLOCATE_CONST override {
    c10::DataPtr block = inner_->allocate(n + sizeof(Header));
    char* base = static_cast<char*>(block.get());
    const c10::DeleterFnPtr deleter = block.get_deleter();
    void* context = block.release_context();
    Header* h = reinterpret_cast<Header*>(base);
    h->bytes = n;
    h->inner_context = context;
    h->inner_deleter = deleter;
    raise_peak(g_cpu_peak, g_cpu_live.fetch_add(int64_t(n), std::memory_order_relaxed) + int64_t(n));
    void* data = base + sizeof(Header);
    return {data, data, &counted_delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

#ifdef ATTNSCOPE_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif

 private:
  c10::Allocator* inner_;
};

// Installed once and never removed: tensors it allocated may outlive any meter.
void install_cpu_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingCPUAllocator counting(c10::GetCPUAllocator());
    // Priority above the default allocator's registration, so a later default does not replace it.
    c10::SetCPUAllocator(&counting, /*priority=*/10);
  });
}

int64_t device_live(MemoryDevice d) {
  if (d == MemoryDevice::CPU) return g_cpu_live.load(std::memory_order_relaxed);
#ifdef ATTNSCOPE_TORCH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].current;
#else
  return 0;
#endif
}

int64_t device_peak(MemoryDevice d) {
  if (d == MemoryDevice::CPU) return g_cpu_peak.load(std::memory_order_relaxed);
#ifdef ATTNSCOPE_TORCH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].peak;
#else
  return 0;
#endif
}

// The device's peak restarts at what is live now.
void reset_device_peak(MemoryDevice d) {
  if (d == MemoryDevice::CPU) {
    g_cpu_peak.store(g_cpu_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return;
  }
#ifdef ATTNSCOPE_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
}

}  // namespace

// The open meters: a new one resets the device's peak, so it first hands the peak so far to every
// open meter (which then reports the larger of that and the device's later peak).
struct MeterRegistry {
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<PeakMemoryMeter*>& open() {
    static std::vector<PeakMemoryMeter*> v;
    return v;
  }
};

PeakMemoryMeter::PeakMemoryMeter(MemoryDevice device) : device_(device) {
  if (device == MemoryDevice::CPU) {
    install_cpu_counter();
  } else {
#ifdef ATTNSCOPE_TORCH_CUDA
    if (c10::cuda::device_count() == 0) fail("memory meter", "no CUDA device is available");
#else
    fail("memory meter", "this build of attnscope has no CUDA support");
#endif
  }
  std::lock_guard<std::mutex> lock(MeterRegistry::mutex());
  const int64_t peak = device_peak(device);
  for (PeakMemoryMeter* m : MeterRegistry::open())
    if (m->device_ == device) m->max_seen_ = std::max(m->max_seen_, peak);
  reset_device_peak(device);
  start_live_ = device_live(device);
  max_seen_ = start_live_;
  MeterRegistry::open().push_back(this);
}

PeakMemoryMeter::~PeakMemoryMeter() {
  std::lock_guard<std::mutex> lock(MeterRegistry::mutex());
  auto& v = MeterRegistry::open();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
}

int64_t PeakMemoryMeter::peak_bytes() const {
  std::lock_guard<std::mutex> lock(MeterRegistry::mutex());
  return std::max<int64_t>(0, std::max(max_seen_, device_peak(device_)) - start_live_);
}

int64_t live_tensor_bytes(MemoryDevice device) { return device_live(device); }

}  // namespace attnscope
