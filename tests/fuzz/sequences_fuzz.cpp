/// @file
/// libFuzzer target: a site's channel numbering state (receiver/core/sequence_book.hpp), the
/// text mcdistd reads from TEMP/sequences at start-up, then sessions numbered from the input.
///
/// Input: the text, optionally followed by a NUL and a list of events, 9 bytes each:
/// op (0: session announced, 1: completed, 2: catch-up of [n, n + 7]) and a 64-bit number,
/// big-endian. Invariants (abort on failure): text that parses serializes to text that parses
/// to the same text; a report has at most wire::max_seq_ranges well-formed ranges below its
/// session's number; no stream reports more missing sessions than the window; the book never
/// holds more than max_streams streams.

#include "receiver/core/sequence_book.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

void check_book(const sequence_book& b) {
  if (b.size() > sequence_book::max_streams) std::abort();
  for (const auto& s : b.status()) {
    if (s.missing > sequence_book::window || s.last_completed > s.last_seen) std::abort();
  }
  const std::string text = b.serialize();
  sequence_book again;
  if (again.parse(text) || again.serialize() != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  sequence_book b;
  if (b.parse(text)) {
    if (b.size() != 0) std::abort();  // refused whole
  } else {
    if (b.serialize() != text) std::abort();  // the format has one spelling
  }
  check_book(b);
  if (nul == std::string_view::npos) return 0;
  std::string_view events = input.substr(nul + 1);
  // Two channels and two sources, so streams mix.
  static const std::string channels[] = {"obs", "warnings"};
  static const std::string sources[] = {"name:hub", "key:mcdist-ed25519:AAAA"};
  for (unsigned i = 0; events.size() >= 9; ++i, events.remove_prefix(9)) {
    const auto op = static_cast<unsigned char>(events[0]);
    std::uint64_t n = 0;
    for (std::size_t k = 1; k <= 8; ++k) n = n << 8 | static_cast<unsigned char>(events[k]);
    const std::string& ch = channels[(op >> 2) & 1];
    const std::string& src = sources[(op >> 3) & 1];
    switch (op & 3) {
      case 0: {
        if (n == 0) break;
        const auto rep = b.on_session(ch, src, n);
        if (!wire::valid_seq_ranges(rep.missing, n)) std::abort();
        break;
      }
      case 1: b.on_completed(ch, src, n); break;
      default: {
        const wire::seq_span r{n, n + 7 < n ? n : n + 7};
        b.on_caught_up(ch, src, std::span(&r, 1));
        break;
      }
    }
  }
  check_book(b);
  return 0;
}
