#pragma once
/// @file
/// The storage path's bounded memory for data in flight to disk (docs/architecture.md "Data flow in
/// one session": blocks are never buffered whole in memory). The pool is one reservation cut into
/// slabs of chunk_bytes; the network thread copies blocks into the current slab and carves
/// consecutive chunks out of it (a submit ends a chunk, not the slab, so a flush per receive batch
/// wastes none of the pool). A chunk is a run of one slab's bytes plus the ordered operations using
/// them (data at a file offset, or a finalize request riding behind a file's last bytes). The
/// writer hands each chunk back with release(); a slab returns to the free list when the
/// network thread has moved on and every chunk cut from it has been released.
///
/// Layout of one slab (chunk_bytes):
///
///     | chunk 1: entries e1 e2 | chunk 2: entries e3 | ... free ... |
///       ^pos of e1             ^pos of e3            ^fill position
///
/// Adjacent data of the same file at consecutive offsets coalesces into one entry, so
/// in-order blocks of 1400 bytes become one pwrite per chunk.
///
/// Threads: add_data, add_finalize, submit_current and leave_slab on the network thread;
/// release on the writer thread; free_bytes and the counters from any thread.

#include "common/sha256.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace mcdist::receiver {

/// One operation of a chunk, in the order the writer must do them.
struct chunk_entry {
  enum class kind : std::uint8_t { data, finalize };
  kind what = kind::data;
  std::uint64_t handle = 0;  ///< the file (file_store's handle of one begin_file)
  std::uint64_t offset = 0;  ///< file offset (data)
  std::uint32_t pos = 0;     ///< data: position in the slab; finalize: index in chunk::digests
  std::uint32_t len = 0;     ///< data bytes
};

/// One chunk_bytes buffer of the pool.
struct slab {
  std::byte* data = nullptr;
  int refs = 0;  ///< chunks in flight + 1 while the network thread fills it; under the pool mutex
};

/// A run of bytes of one slab handed to the writer, with the ordered operations using them.
struct chunk {
  slab* s = nullptr;
  std::vector<chunk_entry> entries;
  std::vector<sha256_digest> digests;  ///< expected digests of finalize entries

  /// The bytes of data entry `e`.
  std::span<const std::byte> bytes(const chunk_entry& e) const { return {s->data + e.pos, e.len}; }
  void clear() {
    s = nullptr;
    entries.clear();
    digests.clear();
  }
};

/// The pool. See the file comment for threads.
class chunk_pool {
 public:
  /// Largest chunk accepted: entry lengths and positions are 32-bit.
  static constexpr std::size_t max_chunk_bytes = 1u << 30;

  /// Reserves pool_bytes / chunk_bytes slabs at once; pages are touched when first used.
  /// @param pool_bytes   bytes of the pool; at least chunk_bytes
  /// @param chunk_bytes  bytes of one slab, 1 .. max_chunk_bytes
  /// @param submit       receives every non-empty chunk the network thread ends (the store
  ///                     queues it for the writer, which must release() it)
  /// @throws std::invalid_argument on sizes out of range (operator-facing message)
  chunk_pool(std::size_t pool_bytes, std::size_t chunk_bytes, std::function<void(chunk*)> submit);
  ~chunk_pool();
  chunk_pool(const chunk_pool&) = delete;
  chunk_pool& operator=(const chunk_pool&) = delete;

  // --- network thread ---

  /// Copies `data` for bytes [offset, offset + size) of file `handle` into the current chunk,
  /// taking every slab it needs before copying any byte (all or nothing).
  /// @return false when the pool has too few free slabs (counted in exhausted())
  bool add_data(std::uint64_t handle, std::uint64_t offset, std::span<const std::byte> data);
  /// Appends a finalize request for `handle` to the current chunk, behind the file's bytes.
  /// @return false when no chunk is being filled (the caller queues the request itself)
  bool add_finalize(std::uint64_t handle, const sha256_digest& expected);
  /// Ends the current chunk and submits it (an empty one goes straight back).
  void submit_current();
  /// Ends the current chunk and gives up the current slab (shutdown).
  void leave_slab();

  // --- writer thread ---

  /// The writer is done with `c`: drops its slab reference and recycles the descriptor.
  void release(chunk* c);

  // --- any thread ---

  /// Bytes of the pool not holding data now.
  std::size_t free_bytes() const noexcept;
  /// Slabs taken: the one being filled plus those with chunks in flight.
  std::uint64_t chunks_in_flight() const noexcept {
    return m_in_flight.load(std::memory_order_relaxed);
  }
  /// add_data calls refused for want of a slab.
  std::uint64_t exhausted() const noexcept { return m_exhausted.load(std::memory_order_relaxed); }
  std::size_t chunk_bytes() const noexcept { return m_chunk_bytes; }
  std::size_t slab_count() const noexcept { return m_slabs.size(); }

 private:
  /// Pool mutex held: a chunk descriptor on `s`.
  chunk* new_chunk_locked(slab* s);
  /// Pool mutex held: drops one reference of `s`.
  void unref_slab_locked(slab* s);
  void append(chunk& c, std::uint64_t handle, std::uint64_t offset,
              std::span<const std::byte> data);

  const std::size_t m_chunk_bytes;
  const std::function<void(chunk*)> m_submit;
  std::atomic<std::uint64_t> m_in_flight{0};
  std::atomic<std::uint64_t> m_exhausted{0};

  std::unique_ptr<std::byte[]> m_memory;
  std::vector<slab> m_slabs;
  std::mutex m_mutex;                            ///< guards the free lists and slab refs
  std::vector<slab*> m_free;                     ///< LIFO, so the hottest buffers are reused first
  std::vector<std::unique_ptr<chunk>> m_chunks;  ///< every chunk descriptor ever made
  std::vector<chunk*> m_free_chunks;             ///< descriptors to reuse

  // network thread
  slab* m_slab = nullptr;      ///< slab being filled
  std::size_t m_slab_pos = 0;  ///< bytes of m_slab used
  chunk* m_current = nullptr;  ///< chunk being filled, on m_slab
};

}  // namespace mcdist::receiver
