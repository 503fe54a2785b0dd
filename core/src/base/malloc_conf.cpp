// jemalloc's settings for every attnscope program: the `attnscope` executable (CLI and workbench),
// the test and benchmark programs. Compiled into each executable that links jemalloc
// (attnscope_use_jemalloc in cmake/Jemalloc.cmake), never into a library: jemalloc reads this global
// from the executable before main(). MALLOC_CONF in the environment is read after it and overrides
// it option by option (`MALLOC_CONF=muzzy_decay_ms:0 attnscope ...`).
//
// Why: LibTorch frees and reallocates buffers of many MB every training step (attention scores,
// logits, activations). By default jemalloc 5.3 gives every freed extent of 8 MiB or more back to
// the kernel at once (MADV_DONTNEED: eagerly in its "oversize" arena, and in arena 0 through the
// forced purge of coalesced large extents), so the next step faults the same pages in again:
// `attnscope distill` on 512-token windows of stories260K spent 16 of its 24 s in the kernel
// (10 million page faults; docs/PERFORMANCE.md, "Allocator").
//
// - oversize_threshold:0 turns the oversize arena off (jemalloc's documented way: a value outside
//   the large size classes), so large blocks are cached like any other.
// - muzzy_decay_ms:-1 never purges muzzy pages; jemalloc also skips its forced purge of large extents
//   while either decay is -1. Dirty pages still decay after dirty_decay_ms (10 s by default) into
//   muzzy pages, which it frees lazily (MADV_FREE): they stay mapped and cost nothing to reuse, and
//   the kernel takes them back when it needs memory, so an idle workbench does not pin its peak.
//
// Debian's libjemalloc2 has no symbol prefix: the name is `malloc_conf` (nm -D libjemalloc.so.2).
// The test Runtime.JemallocReadsTheProgramsSettings checks that it takes effect.
// The type is jemalloc's own declaration (jemalloc.h: `extern const char *malloc_conf`).
extern "C" {
__attribute__((used, visibility("default"))) const char* malloc_conf = "oversize_threshold:0,muzzy_decay_ms:-1";
}
