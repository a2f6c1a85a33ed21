// The daemon's side of catch-up over HTTP(S) for silent channels (docs/design-notes.md
// "Catch-up over HTTP"; receiver/io/catch_up_client.hpp does the fetching on its own threads).

#include "common/path_check.hpp"
#include "receiver/core/sequence_book.hpp"
#include "receiver/io/daemon.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace mcdist::receiver {

namespace {

/// Numbers of one channel waiting to be fetched: a heartbeat names at most wire::max_seq_ranges
/// ranges within sequence_book::window numbers; this bounds the table whatever a hub says.
constexpr std::size_t max_numbers_per_channel = sequence_book::window;
/// First retry after a failed attempt, doubling to max_backoff (a hub restarting, a link down
/// for an hour: the site asks every 5 minutes, not every second).
constexpr std::chrono::seconds first_backoff{2};
constexpr std::chrono::seconds max_backoff{300};
/// How often due numbers are looked for.
constexpr std::chrono::milliseconds catch_up_tick{500};

/// Progress of one number's deliveries through the storage path.
struct number_progress {
  std::size_t channel = 0;
  std::uint64_t seq = 0;
  std::size_t pending = 0;
  std::size_t stored = 0;
  std::size_t kept_newer = 0;
  std::size_t held = 0;
  std::uint64_t bytes = 0;
  std::string failure;  ///< the first delivery that failed
  std::string key;      ///< the index's signer, as the journal records it
  std::chrono::steady_clock::time_point started{};
};

}  // namespace

void daemon::note_missing(std::size_t index, const std::string& channel, const std::string& source,
                          const std::optional<crypto::key32>& signer,
                          std::span<const wire::seq_span> missing) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (m_catch_up.size() < m_cfg.channels.size()) m_catch_up.resize(m_cfg.channels.size());
  auto& st = m_catch_up[index];
  if (st.channel != channel || st.source != source) {
    // Another stream (a hub's new key, a renamed channel): its numbers are not these.
    std::erase_if(st.numbers, [](const auto& n) { return !n.second.in_flight; });
  }
  st.channel = channel;
  st.source = source;
  st.signer = signer;
  std::set<std::uint64_t> now_missing;
  for (const auto& [first, last] : missing) {
    for (auto n = first; n <= last && now_missing.size() < max_numbers_per_channel; ++n) {
      now_missing.insert(n);
      if (n == last) break;  // last may be the largest uint64
    }
  }
  std::erase_if(st.numbers, [&](const auto& n) {
    return !n.second.in_flight && !now_missing.contains(n.first);
  });
  const auto now = std::chrono::steady_clock::now();
  for (const auto n : now_missing) {
    if (st.numbers.size() >= max_numbers_per_channel) break;
    st.numbers.try_emplace(n, catch_up_number{now, std::chrono::seconds(0), false});
  }
  if (!m_catch_up_client && !st.numbers.empty()) {
    m_catch_up_client = std::make_unique<catch_up_client>(
        m_cfg.temp, [this](std::function<void()> f) { boost::asio::post(m_io, std::move(f)); },
        m_log);
  }
  if (!m_catch_up_timer) m_catch_up_timer = std::make_unique<boost::asio::steady_timer>(m_io);
  do_catch_up();
}

void daemon::do_catch_up() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!m_catch_up_client || m_stopping) return;
  const auto now = std::chrono::steady_clock::now();
  bool waiting = false;
  for (std::size_t i = 0; i < m_catch_up.size() && i < m_cfg.channels.size(); ++i) {
    auto& st = m_catch_up[i];
    const auto& ch = m_cfg.channels[i];
    if (m_retired[i] || ch.catch_up_url.empty()) continue;
    // Oldest first: an older number's products go before a newer one's.
    for (auto& [seq, n] : st.numbers) {
      if (n.in_flight) continue;
      waiting = true;
      if (n.due > now || m_catch_up_client->busy() >= catch_up_client::workers) continue;
      catch_up_job job;
      job.channel = static_cast<std::uint32_t>(i);
      job.channel_name = st.channel;
      job.seq = seq;
      job.base_url = ch.catch_up_url;
      job.ca = ch.catch_up_ca;
      job.trusted = ch.trusted_senders;
      job.signer = st.signer;
      job.dest = ch.dest;
      job.disk_reserve_bytes = m_cfg.disk_reserve_bytes;
      if (!m_catch_up_client->submit(std::move(job),
                                     [this](catch_up_outcome o) { on_catch_up(std::move(o)); })) {
        break;
      }
      n.in_flight = true;
    }
  }
  if (!waiting || !m_catch_up_timer) return;
  m_catch_up_timer->expires_after(catch_up_tick);
  m_catch_up_timer->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) do_catch_up();
  });
}

void daemon::on_catch_up(catch_up_outcome o) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const std::size_t index = o.job.channel;
  if (m_stopping || index >= m_cfg.channels.size() || index >= m_catch_up.size()) {
    for (const auto& f : o.files) {
      if (!f.temp_path.empty()) ::unlink(f.temp_path.c_str());
    }
    return;
  }
  if (!o.error.empty()) {
    catch_up_done(index, o.job.seq, false, o.error);
    return;
  }
  auto prog = std::make_shared<number_progress>();
  prog->channel = index;
  prog->seq = o.job.seq;
  prog->bytes = o.bytes;
  prog->started = std::chrono::steady_clock::now();
  // The journal's sender_key: the hub key that signed the index ("" for an unsigned channel).
  prog->key = o.signer ? crypto::format_public_key(*o.signer) : std::string();
  for (auto& f : o.files) {
    if (f.held) ++prog->held;
    if (f.newer_held) {
      ++prog->kept_newer;
      ++m_catch_up_kept_newer;
    }
    if (f.temp_path.empty()) continue;
    ++prog->pending;
    file_spec spec;
    spec.relative_path = f.product.name;
    spec.size = f.product.size;
    spec.mtime_ns = f.product.mtime_ns;
    spec.mode = f.product.mode;
    // Session 0: no session's file; the number keeps the intent apart from other deliveries.
    const file_key key{session_id{0},
                       file_index{static_cast<std::uint32_t>(++m_catch_up_file_seq)}};
    const auto digest = f.product.sha256;
    m_store->deliver_file(
        key, static_cast<std::uint32_t>(index), std::move(spec), f.temp_path, digest,
        [this, prog, product = f.product](store_result r) {
          const auto& ch = m_cfg.channels[prog->channel];
          file_outcome fo;
          fo.channel = static_cast<std::uint32_t>(prog->channel);
          fo.path = product.name;
          fo.size = product.size;
          fo.mtime_ns = product.mtime_ns;
          if (!r.ec) {
            fo.stored = true;
            fo.digest = &r.digest;
            ++prog->stored;
            ++m_catch_up_delivered;
            // Board, journal (with the index's signer), actions and WIS2, as any delivery.
            m_board.file_finished(fo, std::chrono::system_clock::now());
            journal_delivery(fo, &prog->key);
            for (auto& [c, p] : m_wis2) {
              if (c == prog->channel) p->publish(fo.path, fo.size, fo.mtime_ns, r.digest);
            }
          } else if (r.ec == make_error_code(errc::stale)) {
            ++prog->kept_newer;
            ++m_catch_up_kept_newer;
            m_log->info("channel {}: catch-up of {} {}: {}", ch.name, prog->seq,
                        printable(product.name), r.detail);
            journal_delivery(fo);  // drops the intent
          } else {
            if (prog->failure.empty()) prog->failure = printable(product.name) + ": " + r.detail;
            journal_delivery(fo);
          }
          if (--prog->pending == 0) {
            catch_up_done(prog->channel, prog->seq, prog->failure.empty(), prog->failure);
            if (prog->failure.empty()) {
              m_log->info(
                  "channel {}: caught up session {} over {}: {} product{} stored ({} bytes), {} "
                  "held, {} left for a newer version",
                  ch.name, prog->seq, ch.catch_up_url, prog->stored, prog->stored == 1 ? "" : "s",
                  prog->bytes, prog->held, prog->kept_newer);
            }
          }
        });
  }
  if (prog->pending == 0) {
    catch_up_done(index, o.job.seq, true, {});
    m_log->info(
        "channel {}: caught up session {} over {}: nothing to fetch ({} held, {} left "
        "for a newer version)",
        m_cfg.channels[index].name, o.job.seq, m_cfg.channels[index].catch_up_url, prog->held,
        prog->kept_newer);
  }
}

void daemon::catch_up_done(std::size_t index, std::uint64_t seq, bool ok, const std::string& why) {
  if (index >= m_catch_up.size()) return;
  auto& st = m_catch_up[index];
  const auto it = st.numbers.find(seq);
  if (ok) {
    if (it != st.numbers.end()) st.numbers.erase(it);
    const wire::seq_span done{seq, seq};
    m_engine->sequences().on_caught_up(st.channel, st.source, std::span(&done, 1));
    save_sequences_if_changed();
    ++m_catch_up_numbers_done;
    return;
  }
  ++m_catch_up_failed;
  if (it == st.numbers.end()) return;
  auto& n = it->second;
  n.in_flight = false;
  n.backoff = n.backoff.count() == 0 ? first_backoff : std::min(n.backoff * 2, max_backoff);
  n.due = std::chrono::steady_clock::now() + n.backoff;
  if (m_catch_up_logged.tick()) {
    m_log->warn("channel {}: catch-up of session {} failed: {}; retried in {} s",
                m_cfg.channels[index].name, seq, why, n.backoff.count());
  }
  do_catch_up();
}

}  // namespace mcdist::receiver
