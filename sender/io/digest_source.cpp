#include "sender/io/digest_source.hpp"

#include "common/wire.hpp"

#include <algorithm>
#include <cstring>

namespace mcdist::sender {

digest_source::digest_source(session_id session, std::uint32_t block_size, block_reader& reader,
                             parity_source* parity, auth::sender_keys& keys)
    : m_session(session), m_block_size(block_size), m_stride(wire::data_header_size + block_size),
      m_reader(reader), m_parity(parity), m_keys(keys) {}

std::error_code digest_source::read_sources(const digest_window_send& w, window& out,
                                            std::string& why) {
  const auto& ds = w.datagrams;
  std::size_t run = 0;  // the first datagram of the current run
  m_iov.clear();
  const auto read_run = [&]() -> std::error_code {
    if (m_iov.empty()) return {};
    auto ec = m_reader.read_into(ds[run].file.value, ds[run].offset, m_iov, why);
    m_iov.clear();
    return ec;
  };
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto& d = ds[i];
    if (d.parity) {
      if (auto ec = read_run()) return ec;
      continue;
    }
    const bool continues = !m_iov.empty() && d.file == ds[i - 1].file &&
                           d.offset == ds[i - 1].offset + ds[i - 1].length;
    if (!continues) {
      if (auto ec = read_run()) return ec;
      run = i;
    }
    m_iov.push_back({out.bytes.data() + i * m_stride + wire::data_header_size, d.length});
  }
  return read_run();
}

std::error_code digest_source::build(const digest_window_send& w, std::string& why) {
  const auto& ds = w.datagrams;
  window out;
  out.first_seq = w.first_seq;
  out.count = static_cast<std::uint32_t>(ds.size());
  out.bytes.resize(ds.size() * m_stride);
  if (auto ec = read_sources(w, out, why)) return ec;
  m_digests.clear();
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto& d = ds[i];
    std::byte* p = out.bytes.data() + i * m_stride;
    if (d.parity) {
      wire::write_parity_header({p, wire::data_header_size},
                                {m_session, d.seq, d.fec_block, d.parity_index});
      if (!m_parity) {
        why = "parity block planned in a session without FEC";
        return errc::invalid_field;
      }
      if (auto ec = m_parity->parity(d.fec_block, d.parity_index,
                                     {p + wire::data_header_size, d.length}, why)) {
        return ec;
      }
    } else {
      wire::write_data_header({p, wire::data_header_size}, {m_session, d.seq, d.file, d.block});
    }
    wire::set_version({p, wire::header_size}, wire::digest_version);
    m_digests.push_back(block_digests::digest_of({p, wire::data_header_size + d.length}));
  }
  // The window's chunks, one tree, one signature.
  const auto count = static_cast<std::uint16_t>(ds.size());
  out.chunks.resize(block_digests::chunks_in(count));
  m_slots.clear();
  for (std::size_t c = 0; c < out.chunks.size(); ++c) {
    const std::size_t offset = c * block_digests::digests_per_chunk;
    auto& buf = out.chunks[c];
    buf.resize(block_digests::chunk_body_bytes(count, offset) + auth::max_trailer_bytes);
    const std::size_t n = block_digests::write_chunk(
        buf, m_session, w.first_seq, count, static_cast<std::uint16_t>(offset),
        std::span(m_digests).subspan(offset, block_digests::digests_at(count, offset)));
    m_slots.push_back({std::span<std::byte>(buf), n});
  }
  m_keys.seal_block_digests(m_slots);
  for (std::size_t c = 0; c < out.chunks.size(); ++c) out.chunks[c].resize(m_slots[c].len);
  m_windows.push_back(std::move(out));
  while (m_windows.size() > windows_kept) m_windows.pop_front();
  return {};
}

std::span<const std::vector<std::byte>> digest_source::chunks(std::uint32_t first_seq) const {
  for (const auto& w : m_windows) {
    if (w.first_seq == first_seq) return w.chunks;
  }
  return {};
}

std::span<const std::byte> digest_source::datagram(std::uint32_t seq, std::uint32_t length) const {
  for (const auto& w : m_windows) {
    const std::uint32_t i = seq - w.first_seq;  // serial distance
    if (i < w.count)
      return {w.bytes.data() + std::size_t{i} * m_stride, wire::data_header_size + length};
  }
  return {};
}

}  // namespace mcdist::sender
