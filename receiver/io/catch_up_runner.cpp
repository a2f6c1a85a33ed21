#include "receiver/io/catch_up_runner.hpp"

#include "common/path_check.hpp"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

namespace mcdist::receiver {

namespace {

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
};

}  // namespace

catch_up_runner::catch_up_runner(boost::asio::io_context& io,
                                 const std::vector<channel_config>& channels,
                                 std::filesystem::path temp, std::uint64_t disk_reserve_bytes,
                                 std::shared_ptr<spdlog::logger> log, catch_up_port port)
    : m_io(io), m_channels(channels), m_temp(std::move(temp)),
      m_disk_reserve_bytes(disk_reserve_bytes), m_log(std::move(log)), m_port(std::move(port)),
      m_timer(io) {}

catch_up_runner::~catch_up_runner() = default;

void catch_up_runner::note_missing(std::size_t index, const std::string& channel,
                                   const std::string& source,
                                   const std::optional<crypto::key32>& signer,
                                   std::span<const wire::seq_span> missing) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_queue.note_missing(index, channel, source, signer, missing, std::chrono::steady_clock::now());
  if (!m_client && m_queue.pending(index) > 0) {
    m_client = std::make_unique<catch_up_client>(
        m_temp, [this](std::function<void()> f) { boost::asio::post(m_io, std::move(f)); }, m_log);
  }
  do_catch_up();
}

void catch_up_runner::stop() {
  m_stopping = true;
  m_timer.cancel();
}

void catch_up_runner::do_catch_up() {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  if (!m_client || m_stopping) return;
  const auto eligible = [this](std::size_t i) {
    return i < m_channels.size() && m_port.live(i) && !m_channels[i].catch_up_url.empty();
  };
  const auto submit = [this](const catch_up_queue::pick& p) {
    if (m_client->busy() >= catch_up_client::workers) return catch_up_queue::offer::busy;
    const auto& ch = m_channels[p.index];
    catch_up_job job;
    job.channel = static_cast<std::uint32_t>(p.index);
    job.channel_name = p.channel;
    job.seq = p.seq;
    job.base_url = ch.catch_up_url;
    job.ca = ch.catch_up_ca;
    job.trusted = ch.trusted_senders;
    job.signer = p.signer;
    job.dest = ch.dest;
    job.disk_reserve_bytes = m_disk_reserve_bytes;
    return m_client->submit(std::move(job),
                            [this](catch_up_outcome o) { on_catch_up(std::move(o)); })
               ? catch_up_queue::offer::taken
               : catch_up_queue::offer::full;
  };
  if (!m_queue.offer_due(std::chrono::steady_clock::now(), eligible, submit)) return;
  m_timer.expires_after(tick);
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) do_catch_up();
  });
}

void catch_up_runner::on_catch_up(catch_up_outcome o) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  const std::size_t index = o.job.channel;
  if (m_stopping || index >= m_channels.size() || !m_queue.knows(index)) {
    for (const auto& f : o.files) {
      if (!f.temp_path.empty()) ::unlink(f.temp_path.c_str());
    }
    return;
  }
  if (!o.error.empty()) {
    done(index, o.job.seq, false, o.error);
    return;
  }
  auto prog = std::make_shared<number_progress>();
  prog->channel = index;
  prog->seq = o.job.seq;
  prog->bytes = o.bytes;
  // The journal's sender_key: the hub key that signed the index ("" for an unsigned channel).
  prog->key = o.signer ? crypto::format_public_key(*o.signer) : std::string();
  for (auto& f : o.files) {
    if (f.held) ++prog->held;
    if (f.newer_held) {
      ++prog->kept_newer;
      ++m_kept_newer;
    }
    if (f.temp_path.empty()) continue;
    ++prog->pending;
    file_spec spec;
    spec.relative_path = f.product.name;
    spec.size = f.product.size;
    spec.mtime_ns = f.product.mtime_ns;
    spec.mode = f.product.mode;
    spec.sender_key = prog->key;
    // Session 0: no session's file; the number keeps it apart from other files in the store.
    const file_key key{session_id{0}, file_index{static_cast<std::uint32_t>(++m_file_seq)}};
    m_port.deliver(key, static_cast<std::uint32_t>(index), std::move(spec), f.temp_path,
                   f.product.sha256, [this, prog, product = f.product](store_result r) {
                     const auto& ch = m_channels[prog->channel];
                     file_outcome fo;
                     fo.channel = static_cast<std::uint32_t>(prog->channel);
                     fo.path = product.name;
                     fo.size = product.size;
                     fo.mtime_ns = product.mtime_ns;
                     if (!r.ec) {
                       fo.stored = true;
                       fo.digest = &r.digest;
                       ++prog->stored;
                       ++m_delivered;
                     } else if (r.ec == make_error_code(errc::stale)) {
                       ++prog->kept_newer;
                       ++m_kept_newer;
                       m_log->info("channel {}: catch-up of {} {}: {}", ch.name, prog->seq,
                                   printable(product.name), r.detail);
                     } else if (prog->failure.empty()) {
                       prog->failure = printable(product.name) + ": " + r.detail;
                     }
                     // Stored: board, journal (with the index's signer), actions and WIS2, as
                     // any delivery.
                     m_port.finished(fo, prog->key);
                     if (--prog->pending > 0) return;
                     done(prog->channel, prog->seq, prog->failure.empty(), prog->failure);
                     if (!prog->failure.empty()) return;
                     m_log->info(
                         "channel {}: caught up session {} over {}: {} product{} stored ({} "
                         "bytes), {} held, {} left for a newer version",
                         ch.name, prog->seq, ch.catch_up_url, prog->stored,
                         prog->stored == 1 ? "" : "s", prog->bytes, prog->held, prog->kept_newer);
                   });
  }
  if (prog->pending == 0) {
    done(index, o.job.seq, true, {});
    m_log->info(
        "channel {}: caught up session {} over {}: nothing to fetch ({} held, {} left "
        "for a newer version)",
        m_channels[index].name, o.job.seq, m_channels[index].catch_up_url, prog->held,
        prog->kept_newer);
  }
}

void catch_up_runner::done(std::size_t index, std::uint64_t seq, bool ok, const std::string& why) {
  if (ok) {
    if (const auto s = m_queue.succeeded(index, seq)) m_port.caught_up(*s, seq);
    return;
  }
  const auto backoff = m_queue.failed(index, seq, std::chrono::steady_clock::now());
  if (!backoff) return;
  if (m_failures_logged.tick()) {
    m_log->warn("channel {}: catch-up of session {} failed: {}; retried in {} s",
                m_channels[index].name, seq, why, backoff->count());
  }
  do_catch_up();
}

nlohmann::json catch_up_runner::status() const {
  nlohmann::json cu = {{"pending_numbers", m_queue.pending()},
                       {"numbers_caught_up", m_queue.numbers_done()},
                       {"attempts_failed", m_queue.attempts_failed()},
                       {"files_delivered", m_delivered},
                       {"files_kept_newer", m_kept_newer}};
  if (!m_client) return cu;
  const auto& k = m_client->counters();
  cu["indexes"] = k.indexes.load();
  cu["indexes_refused"] = k.indexes_refused.load();
  cu["downloads"] = k.downloads.load();
  cu["bytes"] = k.bytes.load();
  cu["held"] = k.held.load();
  // By reason: what a hostile or broken path did (an index or a download refused).
  auto& by_reason = cu["refused"] = nlohmann::json::object();
  for (std::size_t r = 1; r < k.index_refusals.size(); ++r) {
    if (const auto n = k.index_refusals[r].load()) {
      by_reason[std::string(catch_up::to_string(static_cast<catch_up::refusal>(r)))] = n;
    }
  }
  for (std::size_t r = 0; r < k.file_refusals.size(); ++r) {
    if (const auto n = k.file_refusals[r].load()) {
      by_reason[std::string(to_string(static_cast<file_refusal>(r)))] = n;
    }
  }
  return cu;
}

}  // namespace mcdist::receiver
