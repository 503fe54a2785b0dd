// Process-wide settings every attnscope program applies once at start-up.
#pragma once

namespace attnscope {

// Keeps freed tensor memory in the malloc heap instead of returning it to the kernel after every
// op. Attention scores are large short-lived buffers; with glibc's default thresholds each one is
// a fresh mmap whose pages fault in again, which costs 10x the arithmetic on virtual machines that
// report free pages to the host (measured: stories260K forward at L = 256, 232 ms -> 16 ms).
// These are glibc's settings, for programs built without jemalloc; where jemalloc is the allocator
// (the executables link it when it is installed), its settings are compiled into each program
// (core/src/base/malloc_conf.cpp, cmake/Jemalloc.cmake) and read before main().
//
// Also: LibTorch's CPU ops and attnscope's own parallel loops use every core of the machine
// (std::thread::hardware_concurrency), unless OMP_NUM_THREADS gives the number.
void configure_runtime();

}  // namespace attnscope
