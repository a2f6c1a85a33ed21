// libFuzzer target: arbitrary bytes as TUN frames into the parsers and the forwarder.
// Checks that no input crashes, reads out of bounds (ASan) or breaks the counters'
// conservation law. Built only with Clang (-fsanitize=fuzzer); run e.g.
//   ./linkem_frame_fuzz -max_total_time=60
//
// Input layout: byte 0 selects the sending host (mod 3), byte 1 a run split, the rest is
// the frame (virtio_net_hdr + IPv4).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/linkem/core/forwarder.hpp"
#include "tests/linkem/core/igmp.hpp"
#include "tests/linkem/core/packet.hpp"

namespace {

using namespace mcdist::linkem;

struct null_sink final : packet_sink {
  bool write_frame(std::size_t, std::span<const std::span<const std::byte>> parts) override {
    std::size_t n = 0;
    for (const auto& p : parts) {
      n += p.size();
    }
    return n > 0;
  }
};

forwarder& shared_forwarder() {
  static null_sink sink;
  static forwarder fwd = [] {
    forwarder_config c;
    c.network = 0x0A4D0000;
    c.netmask = 0xFFFFFF00;
    c.addresses = {0x0A4D0001, 0x0A4D0002, 0x0A4D0003};
    c.up.assign(3, link_params{});
    c.down.assign(3, link_params{});
    c.down[1].loss_rate = 0.3;
    c.down[2].rate_bps = 1e9;
    c.down[2].reorder_rate = 0.2;
    c.down[2].duplicate_rate = 0.1;
    c.max_buffer_bytes = 64U << 20U;
    return forwarder(c, sink);
  }();
  return fwd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > 65536) {
    return 0;
  }
  const std::size_t host = data[0] % 3;
  const std::uint8_t split = data[1];
  std::vector<std::byte> frame(size - 2);
  std::memcpy(frame.data(), data + 2, frame.size());

  // Parsers directly.
  packet_info info;
  std::vector<std::byte> copy = frame;
  if (parse_frame(copy, info) == parse_result::ok && info.is_gso()) {
    const auto first = static_cast<std::uint16_t>(split % info.segments);
    const auto count = static_cast<std::uint16_t>(1 + (split / 7U) % (info.segments - first));
    std::array<std::byte, k_max_run_header> hdr{};
    const std::size_t n = build_run_headers(info, copy, first, count, hdr);
    if (n > hdr.size() ||
        run_payload_offset(info, first) + run_payload_len(info, first, count) > copy.size()) {
      std::abort();
    }
  }
  if (frame.size() > k_vnet_header_size + 20) {
    std::vector<membership_change> changes;
    (void)parse_igmp(std::span<const std::byte>(frame).subspan(k_vnet_header_size + 20), changes);
  }

  // The forwarder, with virtual time advancing 1 ms per input.
  static std::int64_t now_ns = 0;
  now_ns += 1'000'000;
  forwarder& fwd = shared_forwarder();
  buffer_handle buf = fwd.acquire_read_buffer();
  if (!buf || frame.size() > buf->capacity()) {
    return 0;
  }
  std::memcpy(buf->data(), frame.data(), frame.size());
  buf->length = frame.size();
  fwd.on_frame(host, buf, std::chrono::nanoseconds(now_ns));
  fwd.run_due(std::chrono::nanoseconds(now_ns));
  for (std::size_t h = 0; h < fwd.host_count(); ++h) {
    for (const auto d : {direction::up, direction::down}) {
      const auto& c = fwd.counters(h, d);
      if (c.get(link_counter::packets_in) + c.get(link_counter::duplicated) !=
          c.get(link_counter::delivered) + c.get(link_counter::dropped_loss) +
              c.get(link_counter::dropped_queue) + c.get(link_counter::dropped_other) +
              fwd.in_flight(h, d)) {
        std::abort();
      }
    }
  }
  return 0;
}
