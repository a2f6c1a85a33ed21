// The daemon's status HTTP server: /metrics, /status and the status page (status_render.hpp),
// served by common/http/server.hpp in the daemon's io_context.

#include "common/http/prometheus_text.hpp"
#include "receiver/io/daemon.hpp"
#include "receiver/io/status_render.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace mcdist::receiver {

namespace {

/// How often the bytes-received total is sampled into the per-minute ring (a minute's figure
/// is late by at most this much).
constexpr auto sample_interval = std::chrono::seconds(1);

}  // namespace

void daemon::do_sample() {
  m_board.observe_bytes(m_engine->stats().data_bytes, std::chrono::system_clock::now());
  m_sample_timer.expires_after(sample_interval);
  m_sample_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !m_stopping) do_sample();
  });
}

void daemon::file_finished(const file_outcome& outcome) {
  MCDIST_ASSERT_SINGLE_THREAD(m_io_thread);
  m_board.file_finished(outcome, std::chrono::system_clock::now());
  journal_delivery(outcome);
  publish_wis2(outcome);
}

void daemon::publish_wis2(const file_outcome& outcome) {
  if (!outcome.stored || !outcome.digest) return;
  for (auto& [channel, p] : m_wis2) {
    if (channel == outcome.channel) {
      p->publish(outcome.path, outcome.size, outcome.mtime_ns, *outcome.digest);
    }
  }
}

std::string daemon::render_status(status_view view, log_summary log) {
  status_snapshot s;
  s.id = m_cfg.id;
  s.now = std::chrono::system_clock::now();
  s.started = m_status.started();
  s.channels = &m_cfg.channels;
  s.retired = &m_channels.retired_flags();
  s.reloads_ok = m_reloads_ok;
  s.reloads_failed = m_reloads_failed;
  s.stats = &m_engine->stats();
  m_board.observe_bytes(s.stats->data_bytes, s.now);
  s.board = &m_board;
  s.sessions_active = m_engine->active_sessions();
  s.unicast_active = m_unicast.size();
  const auto ss = m_store->get_stats();
  s.bytes_written = ss.bytes_written;
  s.parity = {ss.parity_kept,          ss.parity_refused,   ss.parity_bytes,
              ss.fec_blocks_recovered, ss.blocks_recovered, ss.decode_failures};
  s.commit_batches = ss.commit_batches;
  s.commit_batches_syncfs = ss.commit_batches_syncfs;
  s.dropped_by_option = m_dropped_by_option;
  s.not_authenticated = m_keys->stats();
  s.read_pauses = m_read_pauses;
  s.sequences = m_engine->sequences().status();
  for (const auto& [channel, p] : m_wis2) {
    s.wis2.push_back({p->channel(), p->action().topic, p->stats()});
  }
  s.actions = m_deliveries->actions().stats();
  for (std::size_t i = 0; i < m_cfg.channels.size(); ++i) {
    if (const auto r = m_relays.stats(i)) s.relays.emplace_back(m_cfg.channels[i].name, *r);
  }
  s.retention_deleted = m_retention->deleted();
  s.retention_skipped = m_retention->skipped();
  s.log = std::move(log);
  switch (view) {
    case status_view::metrics: return render_metrics(s);
    case status_view::page: return render_status_page(s);
    case status_view::json: break;
  }
  s.status_file = status_json();
  return status_json_text(render_status_json(s));
}

}  // namespace mcdist::receiver
