#include "tests/linkem/core/forwarder.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "tests/linkem/core/rng.hpp"
#include "tests/linkem/core/units.hpp"

namespace mcdist::linkem {
namespace {

/// Frames up to this size are copied out of the read buffer into a smaller pool buffer;
/// larger ones (GSO super-packets) keep the 64 KiB read buffer, which they fill well.
constexpr std::size_t k_copy_threshold = packet_pool::k_class_capacity[1];

constexpr std::uint32_t k_limited_broadcast = 0xFFFFFFFFU;

}  // namespace

std::string_view global_counter_name(global_counter c) noexcept {
  switch (c) {
    case global_counter::frames_read: return "frames_read";
    case global_counter::frames_written: return "frames_written";
    case global_counter::not_ipv4: return "not_ipv4";
    case global_counter::malformed: return "malformed";
    case global_counter::unsupported_gso: return "unsupported_gso";
    case global_counter::unknown_destination: return "unknown_destination";
    case global_counter::no_members: return "no_members";
    case global_counter::igmp_messages: return "igmp_messages";
    case global_counter::igmp_joins: return "igmp_joins";
    case global_counter::igmp_leaves: return "igmp_leaves";
    case global_counter::write_errors: return "write_errors";
    case global_counter::buffer_exhausted: return "buffer_exhausted";
    case global_counter::releases: return "releases";
    case global_counter::lateness_total_us: return "lateness_total_us";
    case global_counter::lateness_max_us: return "lateness_max_us";
    case global_counter::count_: break;
  }
  return "?";
}

std::optional<std::int64_t> forwarder::direction_state::front_due() const noexcept {
  std::optional<std::int64_t> due;
  if (!fifo.empty()) {
    due = fifo.front().due_ns;
  }
  if (!late.empty() && (!due || late.front().due_ns < *due)) {
    due = late.front().due_ns;
  }
  return due;
}

forwarder::forwarder(const forwarder_config& config, packet_sink& sink)
    : m_pool(config.max_buffer_bytes), m_sink(sink), m_network(config.network),
      m_netmask(config.netmask), m_flood_multicast(config.flood_multicast) {
  const std::size_t n = config.addresses.size();
  if (n == 0 || n > k_max_hosts) {
    throw config_error("host count must be between 1 and " + std::to_string(k_max_hosts));
  }
  if (config.up.size() != n || config.down.size() != n) {
    throw config_error("forwarder: one up and one down link per host required");
  }
  m_hosts.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    config.up[i].validate();
    config.down[i].validate();
    // Stream ids 2i and 2i+1: every direction has its own seed, so one link's loss
    // pattern does not depend on the traffic of another.
    m_hosts.push_back(std::make_unique<host_state>(config.up[i], derive_seed(config.seed, 2 * i),
                                                   config.down[i],
                                                   derive_seed(config.seed, 2 * i + 1)));
    if (!m_host_by_address.emplace(config.addresses[i], static_cast<std::uint16_t>(i)).second) {
      throw config_error("two hosts share an address");
    }
  }
}

buffer_handle forwarder::acquire_read_buffer() {
  return m_pool.acquire(packet_pool::k_class_capacity.back());
}

void forwarder::count_exhausted(std::size_t host) {
  count(global_counter::frames_read);
  drop_exhausted(host, 1);
}

void forwarder::drop_exhausted(std::size_t host, std::uint16_t datagrams) {
  count(global_counter::buffer_exhausted, datagrams);
  auto& up = m_hosts[host]->up.link.counters();
  up.add(link_counter::packets_in, datagrams);
  up.add(link_counter::dropped_other, datagrams);
}

const link_counters& forwarder::counters(std::size_t host, direction dir) const noexcept {
  const auto& h = *m_hosts[host];
  return dir == direction::up ? h.up.link.counters() : h.down.link.counters();
}

std::size_t forwarder::in_flight(std::size_t host, direction dir) const noexcept {
  const auto& h = *m_hosts[host];
  return dir == direction::up ? h.up.size() : h.down.size();
}

std::optional<std::size_t> forwarder::host_of(std::uint32_t addr) const noexcept {
  const auto it = m_host_by_address.find(addr);
  if (it == m_host_by_address.end()) {
    return std::nullopt;
  }
  return it->second;
}

void forwarder::snoop_igmp(std::size_t host, const packet_buffer& frame) {
  count(global_counter::igmp_messages);
  const std::span<const std::byte> igmp(
      frame.data() + k_vnet_header_size + frame.info.ip_header_len,
      frame.info.ip_length - frame.info.ip_header_len);
  m_igmp_scratch.clear();
  if (parse_igmp(igmp, m_igmp_scratch) == igmp_result::malformed) {
    count(global_counter::malformed);
    return;
  }
  for (const auto& change : m_igmp_scratch) {
    count(change.join ? global_counter::igmp_joins : global_counter::igmp_leaves);
    m_members.apply(host, change);
  }
}

void forwarder::enqueue(direction_state& d, const buffer_handle& buf, std::uint16_t segment,
                        std::uint32_t wire_bytes, std::int64_t now_ns) {
  const admission a = d.link.admit(std::chrono::nanoseconds(now_ns), wire_bytes);
  if (a.result != admission::verdict::deliver) {
    return;
  }
  auto& r = a.reordered ? d.late : d.fifo;
  r.push_back({buf, a.due.count(), segment});
  if (a.duplicate) {
    r.push_back({buf, a.due.count(), segment});
  }
}

void forwarder::on_frame(std::size_t host, buffer_handle& frame, std::chrono::nanoseconds now) {
  count(global_counter::frames_read);
  packet_info info;
  switch (parse_frame(std::span<std::byte>(frame->data(), frame->length), info)) {
    case parse_result::ok: break;
    case parse_result::not_ipv4: count(global_counter::not_ipv4); return;
    case parse_result::malformed: count(global_counter::malformed); return;
    case parse_result::unsupported_gso: count(global_counter::unsupported_gso); return;
  }
  frame->info = info;
  frame->source = static_cast<std::uint16_t>(host);

  // IGMP is consumed at the host's port, before the link impairments, so that joins are
  // not lost to the emulated loss (the kernel repeats reports only a couple of times).
  if (info.protocol == k_proto_igmp && !info.is_gso()) {
    snoop_igmp(host, *frame);
    return;
  }

  buffer_handle buf;
  if (frame->length <= k_copy_threshold) {
    buf = m_pool.acquire(frame->length);
    if (!buf) {
      drop_exhausted(host, info.segments);
      return;
    }
    std::memcpy(buf->data(), frame->data(), frame->length);
    buf->length = frame->length;
    buf->info = info;
    buf->source = frame->source;
  } else {
    buf = std::move(frame);
  }

  auto& up = m_hosts[host]->up;
  for (std::uint16_t i = 0; i < info.segments; ++i) {
    enqueue(up, buf, i, info.segment_wire_bytes(i), now.count());
  }
}

void forwarder::route(queued_segment&& seg) {
  const packet_info& info = seg.buf->info;
  const std::size_t source = seg.buf->source;
  m_hosts[source]->up.link.counters().add(link_counter::delivered);
  m_hosts[source]->up.link.counters().add(link_counter::bytes_delivered,
                                          info.segment_wire_bytes(seg.segment));

  m_targets_scratch.clear();
  const std::uint32_t dst = info.dst;
  const bool broadcast = dst == k_limited_broadcast || dst == (m_network | ~m_netmask);
  if (broadcast || is_multicast(dst)) {
    if (broadcast || m_flood_multicast || is_link_local_multicast(dst)) {
      for (std::size_t j = 0; j < m_hosts.size(); ++j) {
        if (j != source) {
          m_targets_scratch.push_back(static_cast<std::uint16_t>(j));
        }
      }
    } else {
      for (const std::uint16_t j : m_members.members(dst)) {
        if (j != source) {
          m_targets_scratch.push_back(j);
        }
      }
    }
    if (m_targets_scratch.empty()) {
      count(global_counter::no_members);
      return;
    }
  } else {
    const auto target = host_of(dst);
    if (!target || *target == source) {
      count(global_counter::unknown_destination);
      return;
    }
    m_targets_scratch.push_back(static_cast<std::uint16_t>(*target));
  }
  const std::uint32_t wire = info.segment_wire_bytes(seg.segment);
  for (const std::uint16_t j : m_targets_scratch) {
    enqueue(m_hosts[j]->down, seg.buf, seg.segment, wire, seg.due_ns);
  }
}

void forwarder::release_up(std::int64_t now_ns) {
  // Merge the up directions in due order so that each down direction sees arrivals in
  // time order (its rate limiter assumes it).
  for (;;) {
    ring<queued_segment>* best = nullptr;
    std::int64_t best_due = std::numeric_limits<std::int64_t>::max();
    std::int64_t second_due = std::numeric_limits<std::int64_t>::max();
    for (auto& h : m_hosts) {
      for (auto* r : {&h->up.fifo, &h->up.late}) {
        if (r->empty()) {
          continue;
        }
        const std::int64_t due = r->front().due_ns;
        if (due < best_due) {
          second_due = best_due;
          best_due = due;
          best = r;
        } else if (due < second_due) {
          second_due = due;
        }
      }
    }
    if (best == nullptr || best_due > now_ns) {
      return;
    }
    const std::int64_t limit = std::min(now_ns, second_due);
    while (!best->empty() && best->front().due_ns <= limit) {
      route(best->pop_front());
    }
  }
}

void forwarder::write_run(std::size_t host, ring<queued_segment>& r, std::int64_t now_ns) {
  queued_segment& head = r.front();
  packet_buffer& buf = *head.buf;
  const packet_info& info = buf.info;
  const std::uint16_t first = head.segment;
  std::uint16_t run = 1;
  if (info.is_gso()) {
    while (run < r.size()) {
      const queued_segment& next = r.at(run);
      if (next.buf.get() != &buf || next.segment != first + run || next.due_ns > now_ns) {
        break;
      }
      ++run;
    }
  }

  std::array<std::span<const std::byte>, 2> parts;
  std::size_t part_count = 1;
  if (!info.is_gso() || (first == 0 && run == info.segments)) {
    parts[0] = std::span<const std::byte>(buf.data(), buf.length);
  } else {
    const std::size_t hlen = build_run_headers(
        info, std::span<const std::byte>(buf.data(), buf.length), first, run, m_header_scratch);
    parts[0] = std::span<const std::byte>(m_header_scratch.data(), hlen);
    parts[1] = std::span<const std::byte>(buf.data() + run_payload_offset(info, first),
                                          run_payload_len(info, first, run));
    part_count = 2;
  }

  // How late the shell released this run: the emulator's own timing error.
  const auto late_us =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, now_ns - head.due_ns) / 1000);
  count(global_counter::releases);
  count(global_counter::lateness_total_us, late_us);
  if (late_us > m_global[static_cast<std::size_t>(global_counter::lateness_max_us)].value()) {
    m_global[static_cast<std::size_t>(global_counter::lateness_max_us)].set(late_us);
  }
  std::size_t bucket = 0;
  while (bucket < k_lateness_bounds_us.size() && late_us >= k_lateness_bounds_us[bucket]) {
    ++bucket;
  }
  m_lateness[bucket].add();

  auto& counters = m_hosts[host]->down.link.counters();
  std::uint64_t bytes = 0;
  for (std::uint16_t i = 0; i < run; ++i) {
    bytes += info.segment_wire_bytes(static_cast<std::uint16_t>(first + i));
  }
  if (m_sink.write_frame(host, std::span(parts.data(), part_count))) {
    count(global_counter::frames_written);
    counters.add(link_counter::delivered, run);
    counters.add(link_counter::bytes_delivered, bytes);
  } else {
    count(global_counter::write_errors);
    counters.add(link_counter::dropped_other, run);
  }
  for (std::uint16_t i = 0; i < run; ++i) {
    (void)r.pop_front();
  }
}

void forwarder::flush_down(std::size_t host, std::int64_t now_ns) {
  auto& d = m_hosts[host]->down;
  for (;;) {
    const bool fifo_ready = !d.fifo.empty() && d.fifo.front().due_ns <= now_ns;
    const bool late_ready = !d.late.empty() && d.late.front().due_ns <= now_ns;
    if (!fifo_ready && !late_ready) {
      return;
    }
    if (fifo_ready && (!late_ready || d.fifo.front().due_ns <= d.late.front().due_ns)) {
      write_run(host, d.fifo, now_ns);
    } else {
      write_run(host, d.late, now_ns);
    }
  }
}

void forwarder::run_due(std::chrono::nanoseconds now) {
  release_up(now.count());
  for (std::size_t j = 0; j < m_hosts.size(); ++j) {
    flush_down(j, now.count());
  }
}

std::optional<std::chrono::nanoseconds> forwarder::next_due() const noexcept {
  std::optional<std::int64_t> best;
  for (const auto& h : m_hosts) {
    for (const auto* d : {&h->up, &h->down}) {
      const auto due = d->front_due();
      if (due && (!best || *due < *best)) {
        best = due;
      }
    }
  }
  if (!best) {
    return std::nullopt;
  }
  return std::chrono::nanoseconds(*best);
}

}  // namespace mcdist::linkem
