#include "feed/wis2_seen.hpp"

namespace mcdist::feed {

std::string_view to_string(wis2_verdict v) noexcept {
  switch (v) {
    case wis2_verdict::duplicate_id: return "id";
    case wis2_verdict::duplicate_data_id: return "data_id";
    case wis2_verdict::fresh: break;
  }
  return "";
}

wis2_verdict wis2_seen::check(std::string_view notification_id, std::string_view data_id,
                              std::int64_t pubtime_ns) {
  auto by_id = m_db.prepare("SELECT 1 FROM wis2_notifications WHERE notification_id = ?1");
  by_id.bind(1, notification_id);
  if (by_id.step()) return wis2_verdict::duplicate_id;
  auto by_data = m_db.prepare(
      "SELECT 1 FROM wis2_notifications WHERE data_id = ?1 AND pubtime >= ?2 "
      "AND state IN ('pending', 'done') LIMIT 1");
  by_data.bind(1, data_id).bind(2, pubtime_ns);
  if (by_data.step()) return wis2_verdict::duplicate_data_id;
  return wis2_verdict::fresh;
}

std::int64_t wis2_seen::accept(const wis2_taken& t, wall_time now) {
  auto st = m_db.prepare(
      "INSERT INTO wis2_notifications(notification_id, data_id, pubtime, input, channel, name, "
      "href, length, integrity_method, integrity_value, state, attempts, received_at) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', ?11, ?12)");
  st.bind(1, t.notification_id)
      .bind(2, t.data_id)
      .bind(3, t.pubtime_ns)
      .bind(4, t.input)
      .bind(5, t.channel)
      .bind(6, t.name)
      .bind(7, t.href);
  if (t.length) {
    st.bind(8, static_cast<std::int64_t>(*t.length));
  } else {
    st.bind_null(8);
  }
  st.bind(9, t.integrity_method)
      .bind(10, t.integrity_value)
      .bind(11, t.attempts)
      .bind(12, to_ns(now));
  st.run();
  return m_db.last_insert_rowid();
}

void wis2_seen::mark_done(std::int64_t row, wall_time now) {
  m_db.prepare("UPDATE wis2_notifications SET state = 'done', done_at = ?2 WHERE id = ?1")
      .bind(1, row)
      .bind(2, to_ns(now))
      .run();
}

void wis2_seen::mark_failed(std::int64_t row, std::string_view reason, wall_time now) {
  m_db.prepare(
          "UPDATE wis2_notifications SET state = 'failed', reason = ?2, done_at = ?3 WHERE id = ?1")
      .bind(1, row)
      .bind(2, reason)
      .bind(3, to_ns(now))
      .run();
}

void wis2_seen::set_attempts(std::int64_t row, std::uint32_t attempts) {
  m_db.prepare("UPDATE wis2_notifications SET attempts = ?2 WHERE id = ?1")
      .bind(1, row)
      .bind(2, attempts)
      .run();
}

std::vector<wis2_taken> wis2_seen::pending() {
  auto st = m_db.prepare(
      "SELECT id, notification_id, data_id, pubtime, input, channel, name, href, length, "
      "integrity_method, integrity_value, attempts FROM wis2_notifications "
      "WHERE state = 'pending' ORDER BY received_at, id");
  std::vector<wis2_taken> out;
  while (st.step()) {
    wis2_taken t;
    t.row = st.column_int64(0);
    t.notification_id = st.column_text(1);
    t.data_id = st.column_text(2);
    t.pubtime_ns = st.column_int64(3);
    t.input = st.column_text(4);
    t.channel = st.column_text(5);
    t.name = st.column_text(6);
    t.href = st.column_text(7);
    if (const auto l = st.column_opt_int64(8); l && *l >= 0)
      t.length = static_cast<std::uint64_t>(*l);
    t.integrity_method = st.column_text(9);
    t.integrity_value = st.column_text(10);
    t.attempts = static_cast<std::uint32_t>(st.column_int64(11));
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<std::string> wis2_seen::state_of(std::string_view notification_id) {
  auto st = m_db.prepare("SELECT state FROM wis2_notifications WHERE notification_id = ?1");
  st.bind(1, notification_id);
  if (!st.step()) return std::nullopt;
  return st.column_text(0);
}

std::int64_t wis2_seen::expire(wall_time before, std::size_t max_rows) {
  sqlite::transaction tx(m_db);
  m_db.prepare(
          "DELETE FROM wis2_notifications WHERE state IN ('done', 'failed') AND received_at < ?1")
      .bind(1, to_ns(before))
      .run();
  std::int64_t removed = m_db.changes();
  auto count = m_db.prepare("SELECT count(*) FROM wis2_notifications");
  count.step();
  const auto rows = count.column_int64(0);
  count.reset();
  if (rows > static_cast<std::int64_t>(max_rows)) {
    m_db.prepare(
            "DELETE FROM wis2_notifications WHERE id IN (SELECT id FROM wis2_notifications "
            "WHERE state IN ('done', 'failed') ORDER BY received_at, id LIMIT ?1)")
        .bind(1, rows - static_cast<std::int64_t>(max_rows))
        .run();
    removed += m_db.changes();
  }
  tx.commit();
  return removed;
}

}  // namespace mcdist::feed
