/// @file
/// libFuzzer target: the loss probe under usrsctp associations (common/unicast/
/// sctp_loss_probe.hpp) and the SCTP packet reader it uses (sctp_packet.hpp), fed packets in
/// both directions as a peer on the path could forge them.
///
/// Input: a script of events, each `op u8 | advance u8 (ms)` then, for ops 0 (a packet we
/// sent) and 1 (a packet received), `length u16 (big-endian) | packet bytes`; op 2 asks what is
/// due. The clock moves forward by `advance` ms before each event. Invariants checked (abort
/// on violation): every packet due() hands back is one we sent (it parses and carries DATA);
/// asked again at the same moment, nothing more is due (unless the first answer was cut at
/// max_repairs_per_call); no more copies are held than max_packets; the repair count only
/// grows, by what due() returned; the bytes in flight never exceed what the copies hold (an
/// unsigned wrap would) and the delivered count only grows. The flight cap
/// (sctp_flight_cap.hpp) is fed as usrsctp_stack feeds it and must give a cap of at least its
/// floor once it has one.

#include "common/unicast/sctp_flight_cap.hpp"
#include "common/unicast/sctp_loss_probe.hpp"
#include "common/unicast/sctp_packet.hpp"

#include <cstdlib>

using namespace mcdist::unicast;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sctp_loss_probe probe;
  sctp_flight_cap cap;
  auto now = sctp_loss_probe::time_point{} + std::chrono::hours(1);
  std::uint64_t repairs = 0;
  std::size_t at = 0;
  while (at + 2 <= size) {
    const std::uint8_t op = data[at] % 3;
    now += std::chrono::milliseconds(data[at + 1]);
    at += 2;
    if (op == 2) {
      const auto due = probe.due(now);
      for (const auto p : due) {
        sctp_wire::packet_summary s;
        if (!sctp_wire::summarize(p, s) || !s.data) std::abort();
      }
      repairs += due.size();
      if (probe.repairs() != repairs) std::abort();
      if (due.size() < sctp_loss_probe::max_repairs_per_call && !probe.due(now).empty())
        std::abort();
      continue;
    }
    if (at + 2 > size) break;
    const std::size_t length = std::size_t{data[at]} << 8 | data[at + 1];
    at += 2;
    const std::size_t n = std::min(length, size - at);
    const std::span packet(reinterpret_cast<const std::byte*>(data + at), n);
    at += n;
    sctp_wire::packet_summary s;
    sctp_wire::summarize(packet, s);
    if (s.gap_count > s.gaps.size()) std::abort();
    if (op == 0) {
      probe.on_sent(packet, now);
    } else {
      const std::uint64_t delivered = probe.delivered_bytes();
      const std::uint64_t samples = probe.rtt_samples();
      probe.on_received(packet, now);
      if (probe.delivered_bytes() < delivered) std::abort();
      if (probe.rtt_samples() != samples) cap.on_rtt(probe.latest_rtt(), now);
      cap.on_delivered(probe.delivered_bytes() - delivered, (data[at - 1] & 1) != 0, now);
      if (cap.cap() < sctp_flight_cap::min_cap_bytes) std::abort();
    }
    if (probe.held() > sctp_loss_probe::max_packets) std::abort();
    if (probe.in_flight_bytes() > probe.held() * std::size_t{65535}) std::abort();
  }
  return 0;
}
