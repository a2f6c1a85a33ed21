// Statistics counters for the forwarding thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace mcdist::linkem {

/// A 64-bit event or byte counter with exactly one writer (the forwarding thread) and any
/// number of readers (the control thread printing progress). The increment is a relaxed
/// load + store rather than fetch_add: with a single writer no update is lost, and on x86
/// it compiles to a plain add without a locked instruction on the per-packet path.
class counter {
 public:
  /// Adds n (events or bytes). Must only be called from the owning thread.
  void add(std::uint64_t n = 1) noexcept {
    m_value.store(m_value.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  /// Sets the value (for gauges such as bytes in use). Owning thread only.
  void set(std::uint64_t v) noexcept { m_value.store(v, std::memory_order_relaxed); }

  /// Current value; safe from any thread (may lag the writer slightly).
  [[nodiscard]] std::uint64_t value() const noexcept {
    return m_value.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> m_value{0};
};

}  // namespace mcdist::linkem
