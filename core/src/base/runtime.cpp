#include "attnscope/base/runtime.h"

#include <ATen/Parallel.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace attnscope {

void configure_runtime() {
  // Debian's LibTorch 1.13 starts with one intra-op thread on the 2-core VMs we run on
  // (at::get_num_threads() = 1 with OMP_NUM_THREADS unset): every core unless OMP_NUM_THREADS says.
  if (!std::getenv("OMP_NUM_THREADS")) at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 32 << 20);       // glibc's maximum: blocks below 32 MB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);        // and are not trimmed back to the kernel eagerly
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace attnscope
