#include "attnscope/base/runtime.h"

#include <malloc.h>

namespace attnscope {

void configure_runtime() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 32 << 20);       // glibc's maximum: blocks below 32 MB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);        // and are not trimmed back to the kernel eagerly
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace attnscope
