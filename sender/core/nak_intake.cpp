#include "sender/core/nak_intake.hpp"

#include "common/error.hpp"
#include "common/ranges.hpp"
#include "mcdist.pb.h"

namespace mcdist::sender {

namespace {

std::error_code read_lacks(const wire::nak& m, const fec::layout* fec, nak_request& out) {
  if (m.fec_lacks_size() == 0) return {};
  if (!fec || m.fec_lacks_size() % 2 != 0) return errc::invalid_field;
  std::uint64_t fb = 0;
  for (int i = 0; i < m.fec_lacks_size(); i += 2) {
    // A gap of 0 after the first pair names the same FEC block again: not ascending.
    if (i > 0 && m.fec_lacks(i) == 0) return errc::invalid_field;
    fb += m.fec_lacks(i);
    if (fb >= fec->fec_blocks()) return errc::invalid_field;
    const auto index = static_cast<std::uint32_t>(fb);
    const std::uint32_t lack = m.fec_lacks(i + 1);
    const std::uint32_t sources = fec->sources(index);
    if (lack == 0 || lack > sources) return errc::invalid_field;
    out.lacks.push_back({index, lack, sources});
    out.lacked_blocks += lack;
    out.lacked_sources += sources;
  }
  return {};
}

}  // namespace

std::error_code read_nak(const wire::nak& m, std::span<const std::uint32_t> file_blocks,
                         const fec::layout* fec, nak_request& out) {
  out.clear();
  if (auto ec = read_lacks(m, fec, out)) return ec;
  for (const auto& fn : m.files()) {
    if (fn.file() >= file_blocks.size()) return errc::invalid_field;
    const std::uint32_t file = fn.file();
    if (auto ec = for_each_range(
            std::span(fn.ranges().data(), static_cast<std::size_t>(fn.ranges_size())),
            file_blocks[file], [&](std::uint32_t first, std::uint32_t count) {
              out.runs.push_back({file, first, count});
              out.named_blocks += count;
            })) {
      return ec;
    }
  }
  return {};
}

}  // namespace mcdist::sender
