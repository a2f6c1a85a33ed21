#include "receiver/core/nak_builder.hpp"

#include "common/ranges.hpp"

namespace mcdist::receiver {

nak_builder::nak_builder(const wire::nak& header, std::uint32_t max_datagrams)
    : m_header(header), m_msg(header), m_max(max_datagrams) {}

void nak_builder::close() {
  m_done.push_back(std::move(m_msg));
  m_msg = m_header;
  m_used = 0;
  m_last_fec = 0;
}

bool nak_builder::add_fec_lack(std::uint32_t fec_block, std::uint32_t lack) {
  // Two varints of at most 5 bytes each, plus the packed field's tag and length once.
  constexpr std::size_t pair_cost = 10;
  constexpr std::size_t field_overhead = 6;
  const std::size_t cost = pair_cost + (m_msg.fec_lacks_size() == 0 ? field_overhead : 0);
  if (m_used + cost > range_budget) {
    close();
    if (full()) return false;
    return add_fec_lack(fec_block, lack);
  }
  const bool first = m_msg.fec_lacks_size() == 0;
  m_msg.add_fec_lacks(first ? fec_block : fec_block - m_last_fec);
  m_msg.add_fec_lacks(lack);
  m_last_fec = fec_block;
  m_used += cost;
  return true;
}

bool nak_builder::add_missing(std::uint32_t file, const block_map& received, std::uint32_t& from,
                              std::uint32_t end) {
  wire::file_nak* fn = nullptr;
  std::vector<std::uint32_t> pairs;
  range_encoder enc(pairs);
  // The runs of the open file_nak go into the message when it closes: fn's ranges.
  auto seal = [&] {
    for (const auto v : pairs) fn->add_ranges(v);
    pairs.clear();
    enc = range_encoder(pairs);
    fn = nullptr;
  };
  std::uint32_t& b = from;
  while (b < end) {
    const std::uint32_t first = received.find_clear(b);
    if (first >= end) break;
    std::uint32_t last = received.find_set(first);
    if (last > end) last = end;
    const std::size_t cost = enc.cost(first, last - first) + (fn ? 0 : file_overhead);
    if (m_used + cost > range_budget) {
      if (fn) seal();
      close();
      if (full()) return false;
      continue;  // the same run, in a new datagram
    }
    if (!fn) {
      fn = m_msg.add_files();
      fn->set_file(file);
      m_used += file_overhead;  // ranges restart at block 0 in each file_nak (a fresh encoder)
    }
    m_used += enc.cost(first, last - first);
    enc.add(first, last - first);
    b = last;
  }
  if (fn) seal();
  return true;
}

void nak_builder::finish(bool always) {
  if (!full() && (m_msg.files_size() > 0 || m_msg.fec_lacks_size() > 0 ||
                  m_msg.digests_wanted_size() > 0 || always)) {
    close();
  }
}

}  // namespace mcdist::receiver
