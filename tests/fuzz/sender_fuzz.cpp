/// @file
/// libFuzzer target: every control message a receiver can send through the sender session.
///
/// Input: one flags byte, then a script (tests/fuzz/fuzz_script.hpp) run against one
/// sender_session of three files (empty, 5000 bytes, 40000 bytes without a digest yet) in
/// 1000-byte blocks. Flags: bit 0 open group (else closed group {"a", "b"}), bit 1 no eager
/// start, bits 2-3 fallback mode (off, automatic, tcp, sctp), bit 4 unpaced, bit 5 sequenced
/// (channel "obs", session number 1000).
/// Ops (op % 8):
///   0  datagram from receiver address A (payload = the datagram)
///   1  datagram from receiver address B
///   2  advance the clock by payload[0..3) ms (big-endian)
///   3  the digest of file payload[0] % 4 is known (index 3 is out of range on purpose)
///   4  the unicast server saw receiver payload (as an id) connect
///   5  its unicast session failed
///   6  the operator aborts
///   7  the summary is built
/// After every record the session's timers run and its control and data output is drained, as
/// sender_app does (data capped at 512 datagrams a record to bound the time of one input).

#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "sender/core/sender_session.hpp"
#include "tests/fuzz/fuzz_script.hpp"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<spdlog::logger> null_logger() {
  static auto log = [] {
    auto l =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return log;
}

std::vector<manifest_entry> fuzz_files() {
  std::vector<manifest_entry> out(3);
  out[0].path = "empty";
  out[0].digest = sha256_digest{};
  out[1].path = "dir/five";
  out[1].size = 5000;
  out[1].digest = sha256_digest{};
  out[2].path = "dir/forty";
  out[2].size = 40000;
  return out;
}

const endpoint rx_a = *parse_endpoint("10.0.0.2:7000");
const endpoint rx_b = *parse_endpoint("10.0.0.3:7000");

/// Takes everything the session wants sent now; checks that each control datagram parses.
void drain(sender_session& s, time_point now) {
  s.on_timer(now);
  control_send c;
  while (s.pop_control(c)) {
    wire::header h;
    if (wire::parse_header(c.bytes, h)) std::abort();
  }
  fallback_order f;
  while (s.pop_fallback(f)) {
  }
  std::array<data_send, 64> buf;
  for (int i = 0; i < 8; ++i) {
    const std::size_t n = s.next_data(now, buf);
    for (std::size_t k = 0; k < n; ++k) {
      const auto& d = buf[k];
      if (d.file.value >= s.files().size() || d.offset + d.length > s.files()[d.file.value].size) {
        std::abort();
      }
    }
    if (n < buf.size()) break;
  }
  while (s.pop_control(c)) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned flags = data[0];
  sender_config cfg;
  cfg.session = session_id{42};
  cfg.block_size = 1000;
  cfg.rate_bps = (flags & 16) ? 0 : 80'000'000;
  if (!(flags & 1)) cfg.receivers = {"a", "b"};
  cfg.eager_start = !(flags & 2);
  static constexpr fallback_mode modes[] = {fallback_mode::off, fallback_mode::automatic,
                                            fallback_mode::tcp, fallback_mode::sctp};
  cfg.fallback = modes[(flags >> 2) & 3];
  cfg.fallback_min_sample = 20;
  cfg.fallback_after_passes = 2;
  cfg.max_passes = 5;
  if (flags & 32) {  // a sequenced session: REGISTERs' missing_seqs are checked against 1000
    cfg.channel = "obs";
    cfg.channel_seq = 1000;
  }
  time_point now{100s};
  sender_session s(cfg, fuzz_files(), 1, null_logger());
  s.set_unicast_endpoint(transport_kind::tcp, *parse_endpoint("10.0.0.1:9000"));
  s.set_unicast_endpoint(transport_kind::sctp_udp, *parse_endpoint("10.0.0.1:9001"));
  s.start(now);
  drain(s, now);

  fuzz::script_reader script(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size).subspan(1));
  fuzz::record r;
  while (script.next(r)) {
    const auto p = r.payload;
    const std::string text(reinterpret_cast<const char*>(p.data()), p.size());
    switch (r.op % 8) {
      case 0: s.on_datagram(p, rx_a, now); break;
      case 1: s.on_datagram(p, rx_b, now); break;
      case 2: now += std::chrono::milliseconds(fuzz::read_be(p, 0, 3)); break;
      case 3:
        s.on_digest(file_index{static_cast<std::uint32_t>(fuzz::read_be(p, 0, 1) % 4)},
                    sha256_digest{}, now);
        break;
      case 4: s.on_unicast_started(text, now); break;
      case 5: s.on_unicast_failed(text, "fuzz", now); break;
      case 6: s.abort(now, "fuzz"); break;
      case 7: (void)s.report(now); break;
    }
    drain(s, now);
    (void)s.next_deadline(now);
  }
  return 0;
}
