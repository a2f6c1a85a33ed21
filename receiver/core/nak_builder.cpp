#include "receiver/core/nak_builder.hpp"

#include "common/ranges.hpp"

#include <algorithm>

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

template <class Next, class Taken>
bool nak_builder::add_runs(std::uint32_t file, Next&& next, Taken&& taken) {
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
  std::uint32_t first = 0, count = 0;
  while (next(first, count)) {
    const std::size_t cost = enc.cost(first, count) + (fn ? 0 : file_overhead);
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
    m_used += enc.cost(first, count);
    enc.add(first, count);
    taken(first, count);
  }
  if (fn) seal();
  return true;
}

bool nak_builder::add_missing(std::uint32_t file, const block_map& received, std::uint32_t& from,
                              std::uint32_t end) {
  std::uint32_t& b = from;
  return add_runs(
      file,
      [&](std::uint32_t& first, std::uint32_t& count) {
        first = received.find_clear(b);
        if (first >= end) return false;
        const std::uint32_t last = std::min(received.find_set(first), end);
        count = last - first;
        return true;
      },
      [&](std::uint32_t first, std::uint32_t count) { b = first + count; });
}

bool nak_builder::add_blocks(std::uint32_t file, std::span<const std::uint32_t> blocks,
                             std::size_t& done) {
  return add_runs(
      file,
      [&](std::uint32_t& first, std::uint32_t& count) {
        if (done >= blocks.size()) return false;
        first = blocks[done];
        count = 1;
        while (done + count < blocks.size() && blocks[done + count] == first + count) ++count;
        return true;
      },
      [&](std::uint32_t, std::uint32_t count) { done += count; });
}

void nak_builder::finish(bool always) {
  if (!full() && (m_msg.files_size() > 0 || m_msg.fec_lacks_size() > 0 ||
                  m_msg.digests_wanted_size() > 0 || always)) {
    close();
  }
}

}  // namespace mcdist::receiver
