#include "feed/wis2_input.hpp"

#include "common/path_check.hpp"
#include "common/version.hpp"
#include "common/wis2/wis2_publisher.hpp"

#include <boost/asio/post.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace mcdist::feed {

namespace {

/// The refusal word of a failed download: "http_404", "integrity", "timeout", ...
std::string reason_of(const download_result& r) {
  if (r.error == download_error::http_status && r.http_status >= 100 && r.http_status <= 599) {
    return "http_" + std::to_string(r.http_status);
  }
  return std::string(to_string(r.error));
}

/// Opens (creating it if needed) the directory `name` below `parent`, not through a link.
int open_dir_below(int parent, const char* name) {
  if (::mkdirat(parent, name, 0755) != 0 && errno != EEXIST) return -1;
  return ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/// Removes the files a stop left in a temp directory (downloads not finished: their
/// notifications are pending and downloaded again).
void clear_dir(int dir) {
  const int fd = ::dup(dir);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n(e->d_name);
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : names) ::unlinkat(dir, n.c_str(), 0);
}

}  // namespace

std::string wis2_temp_dir_name(std::string_view input) { return ".wis2-" + std::string(input); }

wis2_input::wis2_input(boost::asio::io_context& io, const wis2_input_config& cfg,
                       const std::vector<channel_config>& channels, wis2_seen& seen,
                       std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_cfg(cfg), m_channels(channels), m_seen(seen), m_log(std::move(log)) {}

wis2_input::~wis2_input() {
  *m_alive = false;
  m_subscriber.reset();  // no on_message after this
  m_downloader.reset();  // nor on_download
  for (auto& [row, j] : m_jobs) {
    if (j.retry) j.retry->cancel();
  }
}

wis2_input::spool_dirs& wis2_input::dirs_of(const std::string& channel) {
  if (const auto it = m_dirs.find(channel); it != m_dirs.end()) return it->second;
  const auto c = std::find_if(m_channels.begin(), m_channels.end(),
                              [&](const channel_config& cc) { return cc.name == channel; });
  if (c == m_channels.end()) throw std::runtime_error("no channel " + channel);
  const auto& root_path = c->spools.front();
  std::error_code ec;
  std::filesystem::create_directories(root_path, ec);
  const int root = ::open(root_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    throw std::runtime_error("WIS2 input " + m_cfg.name + ": cannot open the spool " +
                             root_path.string() + " of channel " + channel + ": " +
                             std::strerror(errno));
  }
  auto root_fd = std::make_shared<const unique_fd>(root);
  const auto temp_name = wis2_temp_dir_name(m_cfg.name);
  const int temp = open_dir_below(root, temp_name.c_str());
  if (temp < 0) {
    throw std::runtime_error("WIS2 input " + m_cfg.name + ": cannot make " +
                             (root_path / temp_name).string() + ": " + std::strerror(errno));
  }
  clear_dir(temp);
  auto& d = m_dirs[channel];
  d.root = std::move(root_fd);
  d.temp = std::make_shared<const unique_fd>(temp);
  return d;
}

void wis2_input::start(std::vector<wis2_taken> resumed) {
  for (const auto& sub : m_cfg.topics) dirs_of(sub.channel);
  download_options o;
  o.concurrency = m_cfg.concurrency;
  o.timeout = m_cfg.download_timeout;
  o.ca_file = m_cfg.download_ca_file;
  o.tls_insecure = m_cfg.download_tls_insecure;
  o.user_agent = "mcdist-feed/" + std::string(version());
  m_downloader = std::make_unique<http_downloader>(
      std::move(o), [this](download_result r) { on_download(std::move(r)); });
  if (m_cfg.broker.tls_insecure) {
    m_log->warn("WIS2 input {}: tls_insecure: the broker's certificate is not verified",
                m_cfg.name);
  }
  if (m_cfg.download_tls_insecure) {
    m_log->warn("WIS2 input {}: download_tls_insecure: data servers' certificates are not verified",
                m_cfg.name);
  }
  for (auto& t : resumed) {
    job j;
    if (!t.integrity_method.empty()) {
      const auto m = parse_integrity_method(t.integrity_method);
      auto d = base64_decode(t.integrity_value);
      if (m && d && d->size() == digest_size(*m)) j.integrity = wnm_integrity{*m, std::move(*d)};
    }
    const auto row = t.row;
    const bool channel_known = std::any_of(m_channels.begin(), m_channels.end(),
                                           [&](const auto& c) { return c.name == t.channel; });
    if (!channel_known || (!t.integrity_method.empty() && !j.integrity)) {
      m_seen.mark_failed(row, "its channel is no longer configured",
                         std::chrono::system_clock::now());
      continue;
    }
    j.taken = std::move(t);
    m_jobs.emplace(row, std::move(j));
    submit(row);
  }
  if (!m_jobs.empty()) {
    m_log->info("WIS2 input {}: {} download{} a stop interrupted resumed", m_cfg.name,
                m_jobs.size(), m_jobs.size() == 1 ? "" : "s");
  }
  mqtt_subscription sub;
  sub.broker = m_cfg.broker;
  for (const auto& s : m_cfg.topics) {
    if (std::find(sub.filters.begin(), sub.filters.end(), s.filter) == sub.filters.end()) {
      sub.filters.push_back(s.filter);
    }
  }
  sub.client_id = m_cfg.client_id;
  sub.qos = m_cfg.qos;
  m_subscriber = std::make_unique<wis2_subscriber>(
      std::move(sub), m_cfg.name,
      [this](std::string topic, std::string payload) {
        on_message(std::move(topic), std::move(payload));
      },
      m_log);
}

void wis2_input::on_message(std::string topic, std::string payload) {
  bool post = false;
  {
    std::lock_guard lock(m_inbox_mutex);
    const auto bytes = topic.size() + payload.size();
    if (m_inbox_bytes + bytes > wis2_inbox_max_bytes) {
      const auto n = ++m_overload;
      if (worth_logging(n)) {
        m_log->warn(
            "WIS2 input {}: notification refused: overload: the io thread has {} bytes of "
            "notifications to take ({} refused so far)",
            m_cfg.name, m_inbox_bytes, n);
      }
      return;
    }
    m_inbox_bytes += bytes;
    m_inbox.push_back({std::move(topic), std::move(payload)});
    post = !std::exchange(m_drain_posted, true);
  }
  if (post) {
    boost::asio::post(m_io, [this, alive = m_alive] {
      if (*alive) drain();
    });
  }
}

void wis2_input::on_download(download_result r) {
  bool post = false;
  {
    std::lock_guard lock(m_inbox_mutex);
    m_results.push_back(std::move(r));
    post = !std::exchange(m_drain_posted, true);
  }
  if (post) {
    boost::asio::post(m_io, [this, alive = m_alive] {
      if (*alive) drain();
    });
  }
}

void wis2_input::drain() {
  std::vector<message> inbox;
  std::vector<download_result> results;
  {
    std::lock_guard lock(m_inbox_mutex);
    inbox.swap(m_inbox);
    results.swap(m_results);
    m_inbox_bytes = 0;
    m_drain_posted = false;
  }
  std::vector<std::int64_t> to_submit;
  try {
    sqlite::transaction tx(m_seen.db());
    for (const auto& m : inbox) take(m, to_submit);
    for (const auto& r : results) finished(r);
    tx.commit();
  } catch (const std::exception& e) {
    // The journal failed (disk full, I/O error): what was taken is not recorded; the broker's
    // next delivery of these notifications (a restart with a persistent session) brings them
    // again. The daemon goes on.
    m_log->error("WIS2 input {}: journal: {}; {} notification{} and {} download result{} lost",
                 m_cfg.name, e.what(), inbox.size(), inbox.size() == 1 ? "" : "s", results.size(),
                 results.size() == 1 ? "" : "s");
    for (const auto row : to_submit) m_jobs.erase(row);
    return;
  }
  for (const auto row : to_submit) submit(row);
}

void wis2_input::take(const message& m, std::vector<std::int64_t>& to_submit) {
  auto parsed = parse_wnm(m.payload, m_cfg.require_integrity);
  if (!parsed.notification) {
    refuse(to_string(parsed.refusal), "on topic " + printable(m.topic, 200), parsed.detail);
    return;
  }
  auto& n = *parsed.notification;
  const auto what = "id " + printable(n.id, 80);
  const auto* sub = route(m.topic);
  if (!sub) {
    refuse("no_channel", what, "topic " + printable(m.topic, 200) + " matches no topics entry");
    return;
  }
  if (n.length && *n.length > m_cfg.max_bytes) {
    refuse("too_big", what,
           std::to_string(*n.length) + " bytes declared, max_bytes is " +
               std::to_string(m_cfg.max_bytes));
    return;
  }
  std::string why;
  const auto name = wis2_product_name(n, m_cfg.product_name, m_cfg.name_prefix, why);
  if (!name) {
    refuse("bad_name", what, why);
    return;
  }
  const auto verdict = m_seen.check(n.id, n.data_id, n.pubtime_ns);
  if (verdict != wis2_verdict::fresh) {
    ++(verdict == wis2_verdict::duplicate_id ? m_counters.duplicate_id
                                             : m_counters.duplicate_data_id);
    m_log->debug("WIS2 input {}: {} dropped: duplicate {} (data_id {})", m_cfg.name, what,
                 to_string(verdict), printable(n.data_id, 200));
    return;
  }
  if (m_jobs.size() >= m_cfg.max_pending) {
    refuse("overload", what, std::to_string(m_jobs.size()) + " downloads pending (max_pending)");
    return;
  }
  job j;
  auto& t = j.taken;
  t.notification_id = n.id;
  t.data_id = n.data_id;
  t.pubtime_ns = n.pubtime_ns;
  t.input = m_cfg.name;
  t.channel = sub->channel;
  t.name = *name;
  t.href = n.href;
  t.length = n.length;
  if (n.integrity) {
    t.integrity_method = std::string(to_string(n.integrity->method));
    t.integrity_value = base64(n.integrity->digest);
  }
  j.integrity = std::move(n.integrity);
  t.row = m_seen.accept(t, std::chrono::system_clock::now());
  ++m_counters.accepted;
  m_log->debug("WIS2 input {}: {} taken: {} -> channel {} as {}", m_cfg.name, what,
               printable(t.href, 300), t.channel, printable(t.name, 200));
  to_submit.push_back(t.row);
  m_jobs.emplace(t.row, std::move(j));
}

void wis2_input::submit(std::int64_t row) {
  const auto it = m_jobs.find(row);
  if (it == m_jobs.end()) return;
  const auto& t = it->second.taken;
  const auto& d = dirs_of(t.channel);
  download_job dj;
  dj.id = static_cast<std::uint64_t>(row);
  dj.url = t.href;
  dj.max_bytes = m_cfg.max_bytes;
  dj.expected_length = t.length;
  dj.integrity = it->second.integrity;
  dj.root = d.root;
  dj.temp_dir = d.temp;
  dj.target = t.name;
  dj.mtime_ns = t.pubtime_ns;
  m_downloader->submit(std::move(dj));
}

void wis2_input::finished(const download_result& r) {
  const auto row = static_cast<std::int64_t>(r.id);
  const auto it = m_jobs.find(row);
  if (it == m_jobs.end()) return;
  auto& j = it->second;
  auto& t = j.taken;
  const auto now = std::chrono::system_clock::now();
  ++t.attempts;
  if (r.error == download_error::none) {
    m_seen.mark_done(row, now);
    ++m_counters.delivered;
    m_counters.delivered_bytes += r.bytes;
    m_counters.last_delivered = now;
    m_log->debug("WIS2 input {}: {} ({} bytes) in channel {}'s spool", m_cfg.name,
                 printable(t.name, 200), r.bytes, t.channel);
    m_jobs.erase(it);
    return;
  }
  const auto reason = reason_of(r);
  if (r.retryable && t.attempts <= m_cfg.retries) {
    ++m_counters.retries;
    m_seen.set_attempts(row, t.attempts);
    auto delay = m_cfg.retry_delay;
    for (std::uint32_t k = 1; k < t.attempts && delay < wis2_max_retry_delay; ++k) delay *= 2;
    delay = std::min<std::chrono::nanoseconds>(delay, wis2_max_retry_delay);
    m_log->info("WIS2 input {}: {}: {}: {}; attempt {} of {} in {:.1f} s", m_cfg.name,
                printable(t.href, 300), reason, printable(r.detail, 300), t.attempts + 1,
                m_cfg.retries + 1, std::chrono::duration<double>(delay).count());
    j.retry = std::make_unique<boost::asio::steady_timer>(m_io, delay);
    j.retry->async_wait([this, row, alive = m_alive](const boost::system::error_code& ec) {
      if (ec || !*alive) return;
      submit(row);
    });
    return;
  }
  const auto detail =
      printable(r.detail, 300) + " (" + printable(t.href, 300) + ", data_id " +
      printable(t.data_id, 200) +
      (t.attempts > 1 ? ", after " + std::to_string(t.attempts) + " attempts" : "") + ")";
  m_seen.mark_failed(row, reason + ": " + detail, now);
  refuse(reason, "id " + printable(t.notification_id, 80), detail);
  m_jobs.erase(it);
}

void wis2_input::refuse(std::string_view reason, std::string_view what, std::string_view detail) {
  auto c = m_counters.refused.find(reason);
  if (c == m_counters.refused.end()) c = m_counters.refused.emplace(std::string(reason), 0).first;
  const auto n = ++c->second;
  auto l = m_log_limits.find(reason);
  if (l == m_log_limits.end()) l = m_log_limits.try_emplace(std::string(reason)).first;
  if (!l->second.tick()) return;
  m_log->warn("WIS2 input {}: notification refused: {}: {}: {} ({} so far)", m_cfg.name, reason,
              what, detail, n);
}

const wis2_subscription* wis2_input::route(std::string_view topic) const {
  for (const auto& s : m_cfg.topics) {
    if (topic_matches(s.filter, topic)) return &s;
  }
  return nullptr;
}

nlohmann::json wis2_input::status() const {
  const auto s = m_subscriber ? m_subscriber->stats() : wis2_subscriber_stats{};
  const auto downloading = m_downloader ? m_downloader->active() : 0;
  nlohmann::json refused = nlohmann::json::object();
  for (const auto& [reason, n] : m_counters.refused) refused[reason] = n;
  if (s.too_large)
    refused["too_large"] = refused.value("too_large", std::uint64_t{0}) + s.too_large;
  if (const auto o = m_overload.load()) {
    refused["overload"] = refused.value("overload", std::uint64_t{0}) + o;
  }
  nlohmann::json topics = nlohmann::json::array();
  for (const auto& t : m_cfg.topics)
    topics.push_back({{"topic", t.filter}, {"channel", t.channel}});
  nlohmann::json j = {
      {"name", m_cfg.name},
      {"broker", m_cfg.broker.display()},
      {"topics", topics},
      {"connected", s.connected},
      {"received", s.received},
      {"accepted", m_counters.accepted},
      {"delivered", m_counters.delivered},
      {"delivered_bytes", m_counters.delivered_bytes},
      {"duplicates", {{"id", m_counters.duplicate_id}, {"data_id", m_counters.duplicate_data_id}}},
      {"refused", refused},
      {"retries", m_counters.retries},
      {"downloading", downloading},
      {"waiting", m_jobs.size() > downloading ? m_jobs.size() - downloading : 0}};
  if (m_counters.last_delivered) {
    j["last_delivered"] =
        std::chrono::duration<double>(m_counters.last_delivered->time_since_epoch()).count();
  }
  return j;
}

}  // namespace mcdist::feed
