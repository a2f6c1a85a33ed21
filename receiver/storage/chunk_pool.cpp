#include "receiver/storage/chunk_pool.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace mcdist::receiver {

namespace {

/// Chunk entries reserved per chunk up front (a chunk of in-order blocks needs one; random
/// blocks of 1400 bytes need ~190 and the vector grows once, then keeps its capacity).
constexpr std::size_t chunk_entries_reserve = 64;

}  // namespace

chunk_pool::chunk_pool(std::size_t pool_bytes, std::size_t chunk_bytes,
                       std::function<void(chunk*)> submit)
    : m_chunk_bytes(chunk_bytes), m_submit(std::move(submit)) {
  if (chunk_bytes == 0 || chunk_bytes > max_chunk_bytes)
    throw std::invalid_argument("storage: chunk_bytes must be between 1 and 1 GiB");
  if (pool_bytes < chunk_bytes)
    throw std::invalid_argument("storage: buffer_pool_bytes must hold at least one chunk");
  // One reservation, pages touched only when a chunk is first used.
  const std::size_t n_slabs = pool_bytes / chunk_bytes;
  m_memory = std::make_unique_for_overwrite<std::byte[]>(n_slabs * chunk_bytes);
  m_slabs.resize(n_slabs);
  m_free.reserve(n_slabs);
  for (std::size_t i = n_slabs; i-- > 0;) {
    m_slabs[i].data = m_memory.get() + i * chunk_bytes;
    m_free.push_back(&m_slabs[i]);
  }
}

chunk_pool::~chunk_pool() = default;

void chunk_pool::unref_slab_locked(slab* s) {
  if (--s->refs == 0) {
    m_free.push_back(s);
    m_in_flight.fetch_sub(1, std::memory_order_relaxed);
  }
}

chunk* chunk_pool::new_chunk_locked(slab* s) {
  chunk* c = nullptr;
  if (!m_free_chunks.empty()) {
    c = m_free_chunks.back();
    m_free_chunks.pop_back();
  } else {
    m_chunks.push_back(std::make_unique<chunk>());
    c = m_chunks.back().get();
    c->entries.reserve(chunk_entries_reserve);
  }
  c->s = s;
  ++s->refs;
  return c;
}

void chunk_pool::release(chunk* c) {
  slab* s = c->s;
  c->clear();
  std::lock_guard lk(m_mutex);
  unref_slab_locked(s);
  m_free_chunks.push_back(c);
}

void chunk_pool::submit_current() {
  if (m_current == nullptr) return;
  chunk* c = std::exchange(m_current, nullptr);
  if (c->entries.empty()) {
    release(c);
    return;
  }
  m_submit(c);
}

void chunk_pool::leave_slab() {
  submit_current();
  if (m_slab == nullptr) return;
  std::lock_guard lk(m_mutex);
  unref_slab_locked(std::exchange(m_slab, nullptr));
  m_slab_pos = 0;
}

std::size_t chunk_pool::free_bytes() const noexcept {
  const std::uint64_t used = m_in_flight.load(std::memory_order_relaxed);
  const std::uint64_t total = m_slabs.size();
  return used >= total ? 0 : static_cast<std::size_t>(total - used) * m_chunk_bytes;
}

void chunk_pool::append(chunk& c, std::uint64_t handle, std::uint64_t offset,
                        std::span<const std::byte> data) {
  std::memcpy(m_slab->data + m_slab_pos, data.data(), data.size());
  if (!c.entries.empty()) {
    chunk_entry& last = c.entries.back();
    if (last.what == chunk_entry::kind::data && last.handle == handle &&
        last.offset + last.len == offset && last.pos + last.len == m_slab_pos) {
      last.len += static_cast<std::uint32_t>(data.size());
      m_slab_pos += data.size();
      return;
    }
  }
  c.entries.push_back(chunk_entry{chunk_entry::kind::data, handle, offset,
                                  static_cast<std::uint32_t>(m_slab_pos),
                                  static_cast<std::uint32_t>(data.size())});
  m_slab_pos += data.size();
}

bool chunk_pool::add_data(std::uint64_t handle, std::uint64_t offset,
                          std::span<const std::byte> data) {
  if (data.empty()) return true;
  const std::size_t cb = m_chunk_bytes;
  const std::size_t space = m_slab != nullptr ? cb - m_slab_pos : 0;
  // All or nothing: take every slab this block needs before copying any of it.
  slab* spare[8];
  std::size_t n_spare = 0;
  std::vector<slab*> many;
  if (data.size() > space) {
    const std::size_t need = (data.size() - space + cb - 1) / cb;
    std::lock_guard lk(m_mutex);
    if (m_free.size() < need) {
      m_exhausted.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    for (std::size_t i = 0; i < need; ++i) {
      slab* sl = m_free.back();
      m_free.pop_back();
      sl->refs = 1;  // the network thread's own reference while it fills the slab
      if (n_spare < std::size(spare))
        spare[n_spare++] = sl;
      else
        many.push_back(sl);
    }
    m_in_flight.fetch_add(need, std::memory_order_relaxed);
  }
  std::size_t next_spare = 0;
  std::size_t next_many = 0;
  while (!data.empty()) {
    if (m_slab == nullptr || m_slab_pos == cb) {
      leave_slab();
      m_slab = next_spare < n_spare ? spare[next_spare++] : many[next_many++];
      m_slab_pos = 0;
    }
    if (m_current == nullptr) {
      std::lock_guard lk(m_mutex);
      m_current = new_chunk_locked(m_slab);
    }
    const std::size_t n = std::min(data.size(), cb - m_slab_pos);
    append(*m_current, handle, offset, data.first(n));
    offset += n;
    data = data.subspan(n);
  }
  if (m_slab_pos == cb) leave_slab();
  return true;
}

bool chunk_pool::add_finalize(std::uint64_t handle, const sha256_digest& expected) {
  if (m_current == nullptr) return false;
  // Rides behind the file's last bytes in the same chunk: no extra hand-off per small file.
  m_current->entries.push_back(chunk_entry{chunk_entry::kind::finalize, handle, 0,
                                           static_cast<std::uint32_t>(m_current->digests.size()),
                                           0});
  m_current->digests.push_back(expected);
  return true;
}

}  // namespace mcdist::receiver
