#pragma once
/// @file
/// The process's descriptor table, grown once at start-up.

#include <cstddef>

namespace mcdist {

/// Grows this process's descriptor table to hold descriptors 0 .. count - 1, so that opening
/// files later never has to grow it. Call it first thing in main(), while the process has a
/// single thread: that is the point of it.
///
/// Linux keeps a process's descriptors in a table that starts with 64 slots and doubles when a
/// descriptor beyond it is opened (fs/file.c, expand_fdtable()). When the table is shared by
/// several threads, the thread that grows it first waits for an RCU grace period
/// (synchronize_rcu()) before the old table can be freed: opening the 65th, the 129th, the
/// 257th... descriptor sleeps for that long, 10-25 ms on this project's test machines. The
/// sender, which keeps up to 256 of its files open, slept there in openat -> expand_files ->
/// synchronize_rcu in the middle of pass 1, and pass 1 of 1000 bulletins at 1 Gbit/s took up
/// to a third longer than its bytes need (docs/benchmarks.md, "Durable small files: the
/// descriptor table and the walk"). Grown while the process has one thread, the old table is
/// freed at once.
///
/// @param count  descriptors wanted; clamped to RLIMIT_NOFILE's soft limit
/// @return the count the table was grown for (after clamping); 0 when nothing was done (a
///         count below 2, or no descriptor could be duplicated: best effort, never fails)
std::size_t reserve_descriptors(std::size_t count) noexcept;

/// Raises RLIMIT_NOFILE's soft limit to its hard limit (the soft limit of 1024 a shell gives
/// is select(2)'s legacy; programs that use no select raise it, as systemd.exec(5) advises).
/// The hub holds every product of its running batches open (a batch takes up to 1000 files)
/// besides its sockets. @return the soft limit now in force (SIZE_MAX: unlimited; 0: unknown)
std::size_t raise_descriptor_limit() noexcept;

}  // namespace mcdist
