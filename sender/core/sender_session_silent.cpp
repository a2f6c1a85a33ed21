// Silent sessions (docs/design-notes.md "Silent sessions"): the parts of
// sender_session that a session for one-way links does differently. Its sites never transmit,
// so it takes no registration and no NAK; it repeats the manifest and digests through the
// session and sends a fixed number of passes, each after the first made of parity blocks not
// sent before, so a site combines what every pass brought (FLUTE over ALC, RFC 6726, sends
// file carousels with FEC to receivers without a return path; UDPcast has an async mode).
#include "sender/core/sender_session.hpp"

#include "sender/core/sender_session_parts.hpp"

namespace mcdist::sender {

using namespace session_detail;

namespace {
/// Most passes of a silent session: 64 passes of 5 % parity are 3.2 copies of the data, more
/// than any loss this mode is meant for calls for; beyond it an operator typed a wrong number.
constexpr std::uint32_t max_silent_passes = 64;
}  // namespace

void sender_session::configure_silent() {
  if (m_cfg.silent_passes > max_silent_passes) {
    throw std::invalid_argument("a silent session sends at most " +
                                std::to_string(max_silent_passes) + " passes, not " +
                                std::to_string(m_cfg.silent_passes));
  }
  if (!m_cfg.receivers.empty() || !m_cfg.only_receivers.empty()) {
    throw std::invalid_argument(
        "a silent session takes no receiver list: its sites never register (drop "
        "--receivers/--only or --silent-passes)");
  }
  if (m_cfg.rate_auto) {
    throw std::invalid_argument(
        "--rate auto follows the sites' rate reports, and the sites of a silent session send "
        "none: give a fixed --rate");
  }
  if (m_cfg.force_unicast) {
    throw std::invalid_argument("a silent session is multicast only: no unicast for one-way links");
  }
  // Nothing of the receivers-driven machinery applies: no fallback, no wait for keys or
  // registrations before pass 1, and the announced pass limit is the pass count.
  m_cfg.fallback = fallback_mode::off;
  m_fallback = fallback_policy(fallback_settings_of(m_cfg));
  m_cfg.eager_start = true;
  m_cfg.start_on_registration = false;
  m_cfg.max_passes = m_cfg.silent_passes;
  if (m_cfg.block_digests) {
    m_digests = std::make_unique<digest_windows>(block_digests::max_window, ip_udp_overhead);
  }
}

bool sender_session::plan_silent_pass() {
  if (m_passes.pass() >= m_cfg.silent_passes) return false;
  if (!m_fec) {
    // No parity: the pass is the whole file set again (a plain carousel).
    m_passes.want_all();
    return true;
  }
  // Fresh parity for every FEC block: the planner's index moves on from what earlier passes
  // sent, so a site combines the parity of every pass (Reed-Solomon is MDS: any k of a FEC
  // block's k + parity blocks decode it; RFC 5510). Past fec_max_parity the index wraps and repeats
  // parity sent before, which repairs the same losses as repeating the sources would.
  const double share = m_cfg.fec_overhead;
  for (std::uint32_t fb = 0; fb < m_fec->fec_blocks(); ++fb) {
    const std::uint32_t n_src = m_fec->sources(fb);
    const auto want =
        static_cast<std::uint32_t>(std::ceil(share * static_cast<double>(n_src) - 1e-9));
    const std::uint32_t count = std::min(std::max<std::uint32_t>(want, 1), m_cfg.fec_max_parity);
    m_parity->add(fb, count);
    m_proactive_parity += count;
  }
  return true;
}

std::size_t sender_session::next_data_planned(time_point now, std::span<data_send> out) {
  std::uint64_t allowance = m_pacer.allowance(now);
  std::size_t n = 0;
  while (n < out.size()) {
    // Plan the window being released and the next one in full (digest_windows.hpp).
    while (m_digests->wants_more()) {
      data_send d;
      if (!take_next(d)) {
        m_digests->pass_planned();
        break;
      }
      m_digests->plan(d);
    }
    const data_send* d = m_digests->peek();
    if (!d) {
      end_pass(now);  // planned to its end and all released
      break;
    }
    const std::uint64_t wire_bytes =
        d->length + wire::data_header_size + ip_udp_overhead + m_cfg.data_trailer_bytes;
    if (wire_bytes > allowance) break;
    // The digests due before this datagram (the shell sends them before this call's data)
    // count against the rate like every byte on the link.
    if (const std::uint64_t chunks = m_digests->prepare()) {
      m_pacer.consume(now, chunks);
      allowance = allowance > chunks ? allowance - chunks : 0;
      if (wire_bytes > allowance) break;  // the datagram waits for the next wake-up
    }
    allowance -= wire_bytes;
    m_pacer.consume(now, wire_bytes);
    out[n++] = *d;
    m_digests->release();
  }
  return n;
}

bool sender_session::pop_digest_window(digest_window_send& out) {
  return m_digests && m_digests->pop(out);
}

void sender_session::requeue_digests() {
  for (std::uint32_t f = 0; f < m_files.size(); ++f) {
    if (m_files[f].digest) m_digest_queue.push_back(f);
  }
}

void sender_session::silent_announce(time_point now) {
  if (m_phase == phase::ending || m_phase == phase::done) return;
  const std::uint64_t chunk_bytes = wire::control_budget + ip_udp_overhead;
  while (m_announce.due(now) && m_pacer.allowance(now) >= chunk_bytes) send_announce_chunk(now);
  // Digests known after the announce was built (files hashed while the session runs) go out
  // again after every announce cycle: a site that lost one cannot ask for it.
  if (digests_sendable() && m_announce.cycles() != m_silent_digest_cycle) {
    m_silent_digest_cycle = m_announce.cycles();
    requeue_digests();
  }
}

}  // namespace mcdist::sender
