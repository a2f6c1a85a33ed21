/// @file
/// libFuzzer target: a site's replay cache (receiver/core/replay_guard.hpp), the text mcdistd
/// reads from TEMP/replay at start-up, then new signed sessions from the input.
///
/// Input: the text, optionally followed by a NUL and a list of sessions, 13 bytes each: a
/// 32-bit session id, a 64-bit stamp offset in ms from the fuzz clock (signed), one byte
/// choosing the sender key. Invariants (abort on failure): text that decodes encodes to text
/// that decodes to the same entries and floor; a damaged text leaves the cache empty; an
/// admitted session is refused as a replay when admitted again; every admitted stamp is within
/// [now - max_age, now + max_skew] and above the floor; the cache never holds more than
/// max_entries entries.

#include "receiver/core/replay_guard.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

constexpr std::uint64_t now_ms = 1'796'169'600'000;

replay_guard::limits small_limits() {
  replay_guard::limits l;
  l.max_entries = 64;  // so eviction and the floor are reached
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  replay_guard g(small_limits());
  if (!replay_guard::decode(text, now_ms, g).empty()) {
    if (g.size() != 0 || g.floor_ms() != 0) std::abort();  // refused whole
  } else {
    const std::string again = g.encode();
    replay_guard back(small_limits());
    if (!replay_guard::decode(again, now_ms, back).empty() || back.entries() != g.entries() ||
        back.floor_ms() != g.floor_ms()) {
      std::abort();
    }
  }
  if (g.size() > small_limits().max_entries) std::abort();
  if (nul == std::string_view::npos) return 0;
  static const std::string keys[] = {"mcdist-ed25519:AAAA", "mcdist-ed25519:BBBB"};
  std::string_view events = input.substr(nul + 1);
  const auto& lim = g.config();
  for (; events.size() >= 13; events.remove_prefix(13)) {
    std::uint32_t id = 0;
    std::uint64_t off = 0;
    for (std::size_t k = 0; k < 4; ++k) id = id << 8 | static_cast<unsigned char>(events[k]);
    for (std::size_t k = 4; k < 12; ++k) off = off << 8 | static_cast<unsigned char>(events[k]);
    const replay_guard::entry e{now_ms + off, session_id{id}, keys[events[12] & 1]};
    const auto verdict = g.admit(e, now_ms);
    if (verdict == errc::ok) {
      const auto age = static_cast<std::uint64_t>(lim.max_age.count());
      const auto skew = static_cast<std::uint64_t>(lim.max_skew.count());
      if (e.stamp_ms == 0 || e.stamp_ms + age < now_ms || e.stamp_ms > now_ms + skew ||
          e.stamp_ms <= g.floor_ms()) {
        std::abort();
      }
      if (g.admit(e, now_ms) != errc::replayed) std::abort();
    }
    if (g.size() > lim.max_entries) std::abort();
  }
  return 0;
}
