#pragma once
/// @file
/// A debug check that an object stays on one thread, its io_context's (docs/architecture.md
/// "Layers": "one io_context, one network thread, per program; assert it instead of sprinkling
/// strands"). The model is libtorrent's `single_threaded` with
/// `TORRENT_ASSERT(is_single_thread())`: the first check binds the object to the calling thread,
/// and every later check must come from that thread. The daemons, the sender and the unicast
/// servers and clients check it where their handlers enter (receive completions, timers, callbacks
/// from the core and the store).
///
/// MCDIST_ASSERT_SINGLE_THREAD aborts with the file and line when a check fails, in builds
/// with MCDIST_THREAD_CHECKS set: debug builds (no NDEBUG) and the ASan+UBSan and fuzz builds
/// (CMakeLists.txt); elsewhere it compiles to nothing. The class itself works in every build.
/// A failed check is a bug of ours (a handler run on a worker thread, a call from another
/// thread without a post), never a consequence of input.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#if !defined(MCDIST_THREAD_CHECKS) && !defined(NDEBUG)
#define MCDIST_THREAD_CHECKS 1
#endif

namespace mcdist {

/// The thread an object belongs to: unbound until the first is_single_thread(). Cheap: one
/// relaxed atomic load and a comparison of thread ids per check.
class single_thread {
 public:
  single_thread() = default;
  /// A copy is a new object, unbound: it belongs to the first thread that checks it.
  single_thread(const single_thread&) noexcept {}
  single_thread& operator=(const single_thread&) noexcept { return *this; }

  /// True when called from the owning thread; the first call makes the caller the owner.
  bool is_single_thread() const noexcept {
    const auto me = std::this_thread::get_id();
    auto owner = m_owner.load(std::memory_order_relaxed);
    if (owner == me) return true;
    if (owner != std::thread::id{}) return false;
    // Unbound: bind to the caller, unless another thread won the race.
    return m_owner.compare_exchange_strong(owner, me, std::memory_order_relaxed) || owner == me;
  }

  /// Unbinds: the next thread to check becomes the owner (an object built on one thread and
  /// then handed to another thread's io_context before that runs).
  void release() noexcept { m_owner.store(std::thread::id{}, std::memory_order_relaxed); }

 private:
  mutable std::atomic<std::thread::id> m_owner{};
};

/// Prints where a thread check failed and aborts.
[[noreturn]] inline void single_thread_violation(const char* what, const char* file,
                                                 int line) noexcept {
  std::fprintf(stderr, "%s:%d: %s: used from a thread other than its io_context's\n", file, line,
               what);
  std::abort();
}

}  // namespace mcdist

#if MCDIST_THREAD_CHECKS
/// Aborts unless called on the thread `checker` (a mcdist::single_thread) belongs to.
#define MCDIST_ASSERT_SINGLE_THREAD(checker)           \
  ((checker).is_single_thread() ? static_cast<void>(0) \
                                : ::mcdist::single_thread_violation(#checker, __FILE__, __LINE__))
#else
#define MCDIST_ASSERT_SINGLE_THREAD(checker) static_cast<void>(0)
#endif
