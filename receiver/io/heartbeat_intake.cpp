#include "receiver/io/heartbeat_intake.hpp"

#include "common/beacon.hpp"
#include "receiver/core/sequence_book.hpp"

namespace mcdist::receiver {

heartbeat_intake::heartbeat_intake(std::string receiver_id, std::chrono::milliseconds max_age,
                                   std::chrono::milliseconds max_skew)
    : m_receiver_id(std::move(receiver_id)), m_max_age(max_age), m_max_skew(max_skew) {}

bool heartbeat_intake::spend(std::size_t index, std::chrono::steady_clock::time_point now) {
  if (m_budgets.size() <= index) m_budgets.resize(index + 1);
  auto& b = m_budgets[index];
  if (now - b.window_start >= std::chrono::seconds(1)) {
    b.window_start = now;
    b.used = 0;
  }
  return ++b.used <= max_per_second;
}

std::optional<heartbeat_intake::plan> heartbeat_intake::on_heartbeat(
    std::size_t index, const channel_config& ch, std::span<const std::byte> d, sequence_book& book,
    std::chrono::steady_clock::time_point now, std::uint64_t now_unix_ms) {
  if (!spend(index, now)) {
    ++m_counters.refused;
    return std::nullopt;
  }
  wire::heartbeat m;
  std::optional<crypto::key32> signer;
  if (beacon::open_heartbeat(d, ch.trusted_senders, m, signer)) {
    ++m_counters.refused;
    return std::nullopt;
  }
  // Fresh, and newer than the last one of its stream: a replayed heartbeat changes nothing.
  const auto age = static_cast<std::uint64_t>(m_max_age.count());
  const auto skew = static_cast<std::uint64_t>(m_max_skew.count());
  if (m.sent_unix_ms() + age < now_unix_ms || m.sent_unix_ms() > now_unix_ms + skew) {
    ++m_counters.refused;
    return std::nullopt;
  }
  plan p;
  p.source = sequence_book::source_of(signer ? crypto::format_public_key(*signer) : std::string(),
                                      m.sender_name());
  // An unsigned channel's heartbeats may name made-up senders: the table forgets them all
  // beyond sequence_book's bound on streams (a replayed heartbeat is harmless anyway).
  if (m_last.size() >= sequence_book::max_streams) m_last.clear();
  auto& last = m_last[{m.channel(), p.source}];
  if (m.sent_unix_ms() <= last) return std::nullopt;
  last = m.sent_unix_ms();
  ++m_counters.taken;
  std::vector<wire::seq_span> running;
  for (const auto& r : m.running()) running.emplace_back(r.first(), r.last());
  auto rep = book.on_heartbeat(m.channel(), p.source, m.newest_seq(), running);
  p.channel = m.channel();
  p.signer = signer;
  p.newest_seq = m.newest_seq();
  p.missing = std::move(rep.missing);
  for (const auto& [first, last_seq] : p.missing) p.missed += last_seq - first + 1;
  p.catch_up = ch.silent && !ch.catch_up_url.empty();
  if (ch.silent) return p;
  wire::gap_report& r = p.gap_report.emplace();
  r.set_receiver_id(m_receiver_id);
  r.set_channel(m.channel());
  r.set_last_seq(rep.last_seq);
  r.set_heartbeat_unix_ms(m.sent_unix_ms());
  for (const auto& [first, last_seq] : p.missing) {
    auto* s = r.add_missing();
    s->set_first(first);
    s->set_last(last_seq);
  }
  return p;
}

}  // namespace mcdist::receiver
