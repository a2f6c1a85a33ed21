#include "tests/linkem/core/packet_pool.hpp"

#include <algorithm>
#include <cassert>
#include <new>

namespace mcdist::linkem {
namespace {

/// Buffers are cache-line aligned so that frame data never shares a line with the next
/// buffer's header.
constexpr std::size_t k_align = 64;

constexpr std::size_t header_size() {
  return (sizeof(packet_buffer) + k_align - 1) / k_align * k_align;
}

constexpr std::size_t stride(std::size_t capacity) {
  return (header_size() + capacity + k_align - 1) / k_align * k_align;
}

}  // namespace

std::byte* packet_buffer::data() noexcept {
  return reinterpret_cast<std::byte*>(this) + header_size();
}
const std::byte* packet_buffer::data() const noexcept {
  return reinterpret_cast<const std::byte*>(this) + header_size();
}

void packet_pool::chunk_deleter::operator()(std::byte* p) const noexcept {
  ::operator delete (p, std::align_val_t{k_align});
}

packet_pool::packet_pool(std::uint64_t max_bytes) : m_max_bytes(max_bytes) {}

packet_pool::~packet_pool() {
  // Every handle must be gone: the buffers live in the chunks freed here.
  assert(m_in_use_raw == 0);
  for (auto* head : m_free) {
    for (auto* b = head; b != nullptr;) {
      auto* next = b->m_next_free;
      b->~packet_buffer();
      b = next;
    }
  }
}

bool packet_pool::grow(std::size_t cls) {
  const std::size_t s = stride(k_class_capacity[cls]);
  const std::size_t count = std::max<std::size_t>(1, k_chunk_bytes / s);
  const std::size_t bytes = count * s;
  if (m_reserved.value() + bytes > m_max_bytes) {
    return false;
  }
  auto* raw = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{k_align}));
  m_chunks.emplace_back(raw);
  for (std::size_t i = 0; i < count; ++i) {
    auto* b = new (raw + i * s) packet_buffer();
    b->m_pool = this;
    b->m_capacity = static_cast<std::uint32_t>(k_class_capacity[cls]);
    b->m_class = static_cast<std::uint8_t>(cls);
    b->m_next_free = m_free[cls];
    m_free[cls] = b;
  }
  m_reserved.add(bytes);
  return true;
}

buffer_handle packet_pool::acquire(std::size_t min_capacity) {
  std::size_t cls = 0;
  while (cls < k_class_capacity.size() && k_class_capacity[cls] < min_capacity) {
    ++cls;
  }
  if (cls == k_class_capacity.size()) {
    m_exhausted.add();
    return {};
  }
  if (m_free[cls] == nullptr && !grow(cls)) {
    m_exhausted.add();
    return {};
  }
  packet_buffer* b = m_free[cls];
  m_free[cls] = b->m_next_free;
  b->m_next_free = nullptr;
  b->m_refs = 1;
  b->length = 0;
  b->info = packet_info{};
  b->source = 0;
  m_in_use_raw += b->m_capacity;
  m_in_use.set(m_in_use_raw);
  if (m_in_use_raw > m_peak_raw) {
    m_peak_raw = m_in_use_raw;
    m_peak.set(m_peak_raw);
  }
  return buffer_handle(b);
}

void packet_pool::recycle(packet_buffer* buf) noexcept {
  m_in_use_raw -= buf->m_capacity;
  m_in_use.set(m_in_use_raw);
  buf->m_next_free = m_free[buf->m_class];
  m_free[buf->m_class] = buf;
}

}  // namespace mcdist::linkem
