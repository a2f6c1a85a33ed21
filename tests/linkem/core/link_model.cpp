#include "tests/linkem/core/link_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/linkem/core/rng.hpp"
#include "tests/linkem/core/units.hpp"

namespace mcdist::linkem {
namespace {

/// Smallest byte limit accepted for a byte-counted queue: it must hold one full-size
/// 1500-byte datagram, or every datagram would be dropped.
constexpr std::uint64_t k_min_queue_bytes = 1500;

/// Largest packet-counted queue: 1e6 slots is already ~1.5 GB of 1500-byte datagrams.
constexpr std::uint32_t k_max_queue_packets = 1'000'000;

/// Salts that make the three decision streams of a direction independent.
constexpr std::uint64_t k_stream_loss = 1;
constexpr std::uint64_t k_stream_duplicate = 2;
constexpr std::uint64_t k_stream_reorder = 3;

}  // namespace

bool link_params::is_transparent() const noexcept {
  return delay.count() == 0 && loss_rate == 0 && rate_bps == 0 && reorder_rate == 0 &&
         duplicate_rate == 0;
}

void link_params::validate() const {
  if (delay.count() < 0) {
    throw config_error("delay must not be negative");
  }
  if (!(loss_rate >= 0 && loss_rate <= 1)) {
    throw config_error("loss must be in [0, 1]");
  }
  if (mean_burst) {
    // Throws with a precise message if infeasible.
    (void)gilbert_elliott_loss::from_rate_and_burst(loss_rate, *mean_burst);
  }
  if (rate_bps < 0) {
    throw config_error("rate must not be negative");
  }
  if (queue.bytes == 0 && (queue.packets == 0 || queue.packets > k_max_queue_packets)) {
    throw config_error("queue must be between 1 and " + std::to_string(k_max_queue_packets) +
                       " packets");
  }
  if (queue.bytes != 0 && queue.bytes < k_min_queue_bytes) {
    throw config_error("a queue limit in bytes must be at least " +
                       std::to_string(k_min_queue_bytes) + " (one full-size datagram)");
  }
  if (!(reorder_rate >= 0 && reorder_rate <= 1) || !(duplicate_rate >= 0 && duplicate_rate <= 1)) {
    throw config_error("reorder and dup must be in [0, 1]");
  }
  if (reorder_delay.count() < 0) {
    throw config_error("reorder_delay must not be negative");
  }
}

std::string link_params::describe() const {
  if (is_transparent()) {
    return "transparent";
  }
  std::string out;
  auto add = [&out](const std::string& s) {
    if (!out.empty()) {
      out += ' ';
    }
    out += s;
  };
  if (delay.count() != 0) {
    add("delay=" + format_duration(delay));
  }
  if (loss_rate != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "loss=%g", loss_rate);
    add(buf);
    if (mean_burst) {
      std::snprintf(buf, sizeof buf, "burst=%g", *mean_burst);
      add(buf);
    }
  }
  if (rate_bps != 0) {
    add("rate=" + format_bit_rate(rate_bps));
    add(queue.bytes != 0 ? "queue=" + std::to_string(queue.bytes) + "B"
                         : "queue=" + std::to_string(queue.packets));
  }
  if (reorder_rate != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "reorder=%g", reorder_rate);
    add(buf);
    add("reorder_delay=" + format_duration(reorder_delay));
  }
  if (duplicate_rate != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "dup=%g", duplicate_rate);
    add(buf);
  }
  return out;
}

std::string_view link_counter_name(link_counter c) noexcept {
  switch (c) {
    case link_counter::packets_in: return "packets_in";
    case link_counter::bytes_in: return "bytes_in";
    case link_counter::delivered: return "delivered";
    case link_counter::bytes_delivered: return "bytes_delivered";
    case link_counter::dropped_loss: return "dropped_loss";
    case link_counter::dropped_queue: return "dropped_queue";
    case link_counter::dropped_other: return "dropped_other";
    case link_counter::duplicated: return "duplicated";
    case link_counter::reordered: return "reordered";
    case link_counter::count_: break;
  }
  return "?";
}

link_direction::link_direction(const link_params& params, std::uint64_t seed)
    : m_params(params), m_transparent(params.is_transparent()),
      m_loss_rng(derive_seed(seed, k_stream_loss)),
      m_dup_rng(derive_seed(seed, k_stream_duplicate)),
      m_reorder_rng(derive_seed(seed, k_stream_reorder)) {
  if (params.mean_burst && params.loss_rate > 0) {
    m_loss = loss_process(
        gilbert_elliott_loss::from_rate_and_burst(params.loss_rate, *params.mean_burst),
        m_loss_rng);
  } else {
    m_loss = loss_process(params.loss_rate);
  }
  if (params.rate_bps > 0) {
    m_ps_per_byte = 8.0 * 1e12 / params.rate_bps;
  }
}

void link_direction::drain(std::int64_t now_ps) {
  while (!m_queue.empty() && m_queue.front().end_ps <= now_ps) {
    m_queued_bytes -= m_queue.front().bytes;
    (void)m_queue.pop_front();
  }
}

std::size_t link_direction::queue_length(std::chrono::nanoseconds now) {
  if (m_have_epoch) {
    drain((now.count() - m_epoch_ns) * 1000);
  }
  return m_queue.size();
}

admission link_direction::admit(std::chrono::nanoseconds now, std::uint32_t wire_bytes) {
  m_counters.add(link_counter::packets_in);
  m_counters.add(link_counter::bytes_in, wire_bytes);

  const std::int64_t now_ns = std::max(now.count(), m_last_arrival_ns);
  m_last_arrival_ns = now_ns;
  std::int64_t departure_ns = now_ns;

  if (m_ps_per_byte > 0) {
    // Picoseconds since the first arrival keep the serialisation arithmetic exact enough
    // (1 byte at 10 Gbit/s is 800 ps); int64 spans 106 days of run time.
    if (!m_have_epoch) {
      m_epoch_ns = now_ns;
      m_have_epoch = true;
    }
    const std::int64_t now_ps = (now_ns - m_epoch_ns) * 1000;
    drain(now_ps);
    const bool full = m_params.queue.bytes != 0 ? m_queued_bytes + wire_bytes > m_params.queue.bytes
                                                : m_queue.size() >= m_params.queue.packets;
    if (full) {
      m_counters.add(link_counter::dropped_queue);
      return {admission::verdict::drop_queue, {}, false, false};
    }
    const std::int64_t start_ps = std::max(now_ps, m_free_at_ps);
    const auto tx_ps = static_cast<std::int64_t>(std::llround(wire_bytes * m_ps_per_byte));
    m_free_at_ps = start_ps + tx_ps;
    m_queue.push_back({m_free_at_ps, wire_bytes});
    m_queued_bytes += wire_bytes;
    departure_ns = m_epoch_ns + (m_free_at_ps + 999) / 1000;
  }

  if (m_loss.lose(m_loss_rng)) {
    m_counters.add(link_counter::dropped_loss);
    return {admission::verdict::drop_loss, {}, false, false};
  }

  admission result;
  result.due = std::chrono::nanoseconds(departure_ns) + m_params.delay;
  if (m_params.duplicate_rate > 0 && bernoulli(m_dup_rng, m_params.duplicate_rate)) {
    result.duplicate = true;
    m_counters.add(link_counter::duplicated);
  }
  if (m_params.reorder_rate > 0 && bernoulli(m_reorder_rng, m_params.reorder_rate)) {
    result.reordered = true;
    result.due += m_params.reorder_delay;
    m_counters.add(link_counter::reordered);
  }
  return result;
}

}  // namespace mcdist::linkem
