#include "receiver/core/nak_builder.hpp"

#include "common/ranges.hpp"

namespace mcdist::receiver {

nak_builder::nak_builder(const wire::nak& header, std::uint32_t max_datagrams)
    : m_header(header), m_msg(header), m_max(max_datagrams) {}

void nak_builder::close() {
  m_done.push_back(std::move(m_msg));
  m_msg = m_header;
  m_used = 0;
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
  if (!full() && (m_msg.files_size() > 0 || m_msg.digests_wanted_size() > 0 || always)) close();
}

}  // namespace mcdist::receiver
