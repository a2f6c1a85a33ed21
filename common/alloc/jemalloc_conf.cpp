// The options jemalloc reads at its first allocation, before main (jemalloc(3), "TUNING": the
// global `malloc_conf`, then /etc/malloc.conf, then the MALLOC_CONF environment variable, each
// overriding the one before; so a site can still set its own).
//
// thp:always: jemalloc advises MADV_HUGEPAGE on the extents it maps, so a heap that grows with a
// large manifest or a site's file table takes one fault per 2 MiB, not one per 4 KiB; on a
// kernel whose transparent huge pages are "never" the advice does nothing. metadata_thp:always
// does the same for jemalloc's own bookkeeping. What it saves and what it costs in memory:
// docs/design-notes.md "Memory allocator".

extern "C" {
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): jemalloc's interface
const char* malloc_conf = "thp:always,metadata_thp:always";
}
