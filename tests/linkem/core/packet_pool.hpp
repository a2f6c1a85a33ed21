// Reference-counted packet buffers from a pool of fixed size classes.
//
// A 700 ms delay line at 400 Mbit/s holds ~35 MB; at line rate the forwarder handles
// ~100 000 datagrams per second. Buffers therefore come from per-class free lists carved
// out of large chunks: no malloc per packet, no fragmentation, and a hard memory cap so
// that an overloaded emulator drops (and counts) instead of exhausting the machine.
// A buffer is shared, not copied, when one datagram goes to several receivers
// (multicast) or is duplicated.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tests/linkem/core/counter.hpp"
#include "tests/linkem/core/packet.hpp"

namespace mcdist::linkem {

class packet_pool;

/// One pooled buffer: a small header followed by `capacity()` bytes of frame data.
/// Lives in pool memory; only reachable through buffer_handle.
class packet_buffer {
 public:
  [[nodiscard]] std::byte* data() noexcept;
  [[nodiscard]] const std::byte* data() const noexcept;
  [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }

  std::size_t length = 0;    ///< frame bytes in use (vnet header + IP)
  packet_info info;          ///< parse_frame result
  std::uint16_t source = 0;  ///< index of the host that sent the frame

 private:
  friend class packet_pool;
  friend class buffer_handle;
  packet_pool* m_pool = nullptr;
  packet_buffer* m_next_free = nullptr;
  std::uint32_t m_refs = 0;
  std::uint32_t m_capacity = 0;
  std::uint8_t m_class = 0;
};

/// Shared ownership of a packet_buffer (intrusive, single-threaded reference count).
/// The last handle returns the buffer to its pool.
class buffer_handle {
 public:
  buffer_handle() noexcept = default;
  buffer_handle(const buffer_handle& other) noexcept : m_buf(other.m_buf) { retain(); }
  buffer_handle(buffer_handle&& other) noexcept : m_buf(std::exchange(other.m_buf, nullptr)) {}
  buffer_handle& operator=(const buffer_handle& other) noexcept {
    if (this != &other) {
      release();
      m_buf = other.m_buf;
      retain();
    }
    return *this;
  }
  buffer_handle& operator=(buffer_handle&& other) noexcept {
    if (this != &other) {
      release();
      m_buf = std::exchange(other.m_buf, nullptr);
    }
    return *this;
  }
  ~buffer_handle() { release(); }

  explicit operator bool() const noexcept { return m_buf != nullptr; }
  packet_buffer* operator->() const noexcept { return m_buf; }
  packet_buffer& operator*() const noexcept { return *m_buf; }
  [[nodiscard]] packet_buffer* get() const noexcept { return m_buf; }
  void reset() noexcept {
    release();
    m_buf = nullptr;
  }

 private:
  friend class packet_pool;
  explicit buffer_handle(packet_buffer* buf) noexcept : m_buf(buf) {}
  void retain() noexcept {
    if (m_buf != nullptr) {
      ++m_buf->m_refs;
    }
  }
  void release() noexcept;

  packet_buffer* m_buf = nullptr;
};

/// Pool of packet buffers in three size classes. Not thread-safe: owned by the
/// forwarding thread. Memory is reserved chunk by chunk up to max_bytes and kept until
/// the pool is destroyed; it must outlive every handle it gave out.
class packet_pool {
 public:
  /// Capacities of the size classes, bytes: one MTU frame, a small GSO frame, and the
  /// largest frame a TUN device can hand over (vnet header + 64 KiB IP datagram).
  static constexpr std::array<std::size_t, 3> k_class_capacity = {2048, 16384,
                                                                  k_vnet_header_size + 65536};
  /// Bytes reserved from the system per chunk (per class).
  static constexpr std::size_t k_chunk_bytes = 1U << 20U;

  /// @param max_bytes cap on reserved memory, bytes (>= one chunk per class)
  explicit packet_pool(std::uint64_t max_bytes);
  ~packet_pool();
  packet_pool(const packet_pool&) = delete;
  packet_pool& operator=(const packet_pool&) = delete;

  /// A buffer of at least min_capacity bytes with length 0, or an empty handle when the
  /// memory cap is reached or min_capacity exceeds the largest class.
  buffer_handle acquire(std::size_t min_capacity);

  /// Bytes reserved from the system (chunks).
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return m_reserved.value(); }
  /// Capacity bytes of buffers currently handed out.
  [[nodiscard]] std::uint64_t in_use_bytes() const noexcept { return m_in_use.value(); }
  /// Highest in_use_bytes seen.
  [[nodiscard]] std::uint64_t peak_in_use_bytes() const noexcept { return m_peak.value(); }
  /// Number of acquire calls refused by the cap.
  [[nodiscard]] std::uint64_t exhausted() const noexcept { return m_exhausted.value(); }

 private:
  friend class buffer_handle;
  void recycle(packet_buffer* buf) noexcept;
  bool grow(std::size_t cls);

  struct chunk_deleter {
    void operator()(std::byte* p) const noexcept;
  };
  std::uint64_t m_max_bytes;
  std::array<packet_buffer*, k_class_capacity.size()> m_free{};
  std::vector<std::unique_ptr<std::byte, chunk_deleter>> m_chunks;
  std::uint64_t m_in_use_raw = 0;
  std::uint64_t m_peak_raw = 0;
  counter m_reserved;
  counter m_in_use;  // mirrors m_in_use_raw for readers on other threads
  counter m_peak;
  counter m_exhausted;
};

inline void buffer_handle::release() noexcept {
  if (m_buf != nullptr && --m_buf->m_refs == 0) {
    m_buf->m_pool->recycle(m_buf);
  }
}

}  // namespace mcdist::linkem
