#include "common/block_digests.hpp"

#include "common/byte_order.hpp"
#include "common/sha256.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::block_digests {

digest digest_of(std::span<const std::byte> datagram) noexcept {
  const auto full = sha256(datagram);
  digest d{};
  std::memcpy(d.data(), full.data(), d.size());
  return d;
}

std::size_t chunk_wire_bytes(std::size_t count, std::size_t offset) noexcept {
  if (offset >= count) return 0;
  const auto path = announce_tree::path_length(offset / digests_per_chunk, chunks_in(count));
  if (!path) return 0;
  return chunk_body_bytes(count, offset) + trailer_fixed_bytes + *path * announce_tree::hash_bytes;
}

namespace {
bool fields_valid(std::size_t count, std::size_t offset) noexcept {
  return count > 0 && count <= max_window && offset < count && offset % digests_per_chunk == 0;
}
}  // namespace

std::size_t write_chunk(std::span<std::byte> out, session_id session, std::uint32_t first_seq,
                        std::uint16_t count, std::uint16_t offset,
                        std::span<const digest> digests) {
  if (!fields_valid(count, offset) || digests.size() != digests_at(count, offset)) return 0;
  const std::size_t n = chunk_body_bytes(count, offset);
  if (out.size() < n) return 0;
  wire::write_header(out, wire::msg_type::block_digests, session, wire::digest_version);
  store_be32(out.data() + 8, first_seq);
  store_be16(out.data() + 12, count);
  store_be16(out.data() + 14, offset);
  std::byte* p = out.data() + chunk_header_bytes;
  for (const auto& d : digests) {
    std::memcpy(p, d.data(), d.size());
    p += d.size();
  }
  return n;
}

std::error_code parse_chunk(std::span<const std::byte> body, chunk& out) noexcept {
  if (body.size() < chunk_header_bytes) return errc::truncated;
  if (std::to_integer<std::uint8_t>(body[2]) != wire::digest_version) return errc::bad_version;
  if (static_cast<wire::msg_type>(std::to_integer<std::uint8_t>(body[3])) !=
      wire::msg_type::block_digests) {
    return errc::unknown_type;
  }
  const std::uint16_t count = load_be16(body.data() + 12);
  const std::uint16_t offset = load_be16(body.data() + 14);
  if (!fields_valid(count, offset)) return errc::invalid_field;
  const std::size_t want = chunk_body_bytes(count, offset);
  if (body.size() < want) return errc::truncated;
  if (body.size() > want) return errc::oversized;
  out.session = session_id{load_be32(body.data() + 4)};
  out.first_seq = load_be32(body.data() + 8);
  out.count = count;
  out.offset = offset;
  out.digests = body.subspan(chunk_header_bytes);
  return {};
}

bool table::add(const chunk& c) {
  if (!fields_valid(c.count, c.offset) ||
      c.digests.size() != digests_at(c.count, c.offset) * digest_bytes) {
    return false;
  }
  auto same = std::find_if(m_windows.begin(), m_windows.end(), [&](const window& w) {
    return w.first_seq == c.first_seq && w.count == c.count;
  });
  if (same == m_windows.end()) {
    // A held window that overlaps the new one without being it cannot both be the sender's
    // (its sequence numbers are given once): the newer word wins.
    std::erase_if(m_windows, [&](const window& w) {
      const std::uint32_t into_new = w.first_seq - c.first_seq;  // serial distances
      const std::uint32_t into_old = c.first_seq - w.first_seq;
      return into_new < c.count || into_old < w.count;
    });
    if (m_windows.size() >= windows_held) {
      auto oldest = m_windows.begin();
      for (auto it = m_windows.begin(); it != m_windows.end(); ++it) {
        if (seq_after(oldest->first_seq, it->first_seq)) oldest = it;
      }
      if (seq_after(oldest->first_seq, c.first_seq)) return false;  // older than all: a replay
      m_windows.erase(oldest);
    }
    window w;
    w.first_seq = c.first_seq;
    w.count = c.count;
    w.digests.assign(std::size_t{c.count} * digest_bytes, 0);
    w.present = block_map(c.count);
    m_windows.push_back(std::move(w));
    same = m_windows.end() - 1;
  }
  const std::size_t n = c.digests.size() / digest_bytes;
  std::memcpy(same->digests.data() + std::size_t{c.offset} * digest_bytes, c.digests.data(),
              n * digest_bytes);
  same->present.set_range(c.offset, static_cast<std::uint32_t>(n));
  return true;
}

verdict table::check(std::uint32_t seq, const digest& d) const noexcept {
  for (const auto& w : m_windows) {
    const std::uint32_t i = seq - w.first_seq;  // serial distance
    if (i >= w.count) continue;
    if (!w.present.test(i)) return verdict::absent;
    return std::memcmp(w.digests.data() + std::size_t{i} * digest_bytes, d.data(), digest_bytes) ==
                   0
               ? verdict::match
               : verdict::mismatch;
  }
  return verdict::absent;
}

std::size_t table::memory_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& w : m_windows) n += w.digests.size() + (std::size_t{w.count} + 63) / 64 * 8;
  return n;
}

}  // namespace mcdist::block_digests
