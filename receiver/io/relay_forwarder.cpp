#include "receiver/io/relay_forwarder.hpp"

#include "common/beacon.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/receiver_engine.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <random>

namespace mcdist::receiver {

/// One relayed channel: its socket, where it sends, what it counted, the sessions it saw.
struct relay_forwarder::relay {
  relay(net::udp::socket s, endpoint g, endpoint src, std::filesystem::path d, bool gather,
        std::vector<std::string> r)
      : socket(std::move(s)), group(g), source(src), dest(std::move(d)), relays(std::move(r)),
        gathers(gather), report_timer(socket.get_executor()) {}
  net::udp::socket socket;
  endpoint group;
  endpoint source;                  ///< the socket's local address: the sender the sites behind see
  std::filesystem::path dest;       ///< the channel's destination tree (relay_downstream reads it)
  std::vector<std::string> relays;  ///< its sites that relay in turn (channel_config::relays)
  counters stats;
  std::unordered_set<std::uint32_t> relayed;      ///< sessions forwarded
  std::unordered_set<std::uint32_t> not_relayed;  ///< two-way sessions refused
  /// Two-way sessions run for the sites behind, and the parameters of those announced whose
  /// manifest is not complete here yet (at most max_two_way_sessions).
  std::map<std::uint32_t, std::unique_ptr<relay_downstream>> two_way;
  std::map<std::uint32_t, wire::session_params> params;
  /// Signed sessions among `params`: the hub's signed datagrams kept so far, and since when
  /// the manifest is complete without a delegation.
  std::map<std::uint32_t, std::shared_ptr<signed_copies>> copies;
  /// Signed sessions whose manifest is complete here, waiting for the delegation: since when,
  /// the manifest and where the session comes from (a session this relay held whole may end
  /// here before the delegation comes; it is then started from these).
  struct waiting {
    time_point since;
    std::vector<manifest_entry> files;
    endpoint upstream;
  };
  std::map<std::uint32_t, waiting> undelegated;
  /// Sessions among `params` this relay takes up again after a restart, and their run.
  std::map<std::uint32_t, std::uint32_t> runs;
  /// Catch-up through the relay (the channel may transmit): what its sites miss, and the
  /// relay's answer to the hub's last heartbeat, sent when its timer fires.
  bool gathers;
  gap_book gaps;
  struct pending_report {
    endpoint hub;
    wire::gap_report own;
    std::uint64_t newest = 0;
    bool sign = false;  ///< the hub's heartbeat was signed: so is the report
  };
  std::optional<pending_report> pending;
  boost::asio::steady_timer report_timer;
  /// Delegation requests of relays behind this one passed upstream, awaiting the hub's
  /// answer (at most max_origin_pending, each origin_wait), and how many went this second.
  struct origin_request {
    session_id session;
    std::string site;
    endpoint from;
    endpoint upstream;  ///< where it went: the answer comes from that host
    time_point at;
    unsigned asked = 0;  ///< requests passed up and not answered yet
  };
  std::deque<origin_request> origin_pending;
  time_point origin_second{};
  unsigned origin_sent = 0;
};

relay_forwarder::relay_forwarder(boost::asio::io_context& io,
                                 net::resolved_interface daemon_interface,
                                 std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_daemon_interface(std::move(daemon_interface)), m_log(std::move(log)), m_timer(io),
      m_seed(std::random_device{}()) {
  m_buffer.resize(max_batch_bytes);
  m_queue.reserve(max_batch);
  m_run.reserve(max_batch);
}

relay_forwarder::~relay_forwarder() = default;

net::resolved_interface relay_forwarder::resolve(const channel_config& ch) const {
  if (ch.relay_interface.any()) return m_daemon_interface;
  try {
    return net::resolve_interface(ch.relay_interface, ch.relay_group->v6);
  } catch (const net::interface_error& e) {
    throw config_error("channel " + ch.name + ": relay_interface: " + e.what());
  }
}

void relay_forwarder::check(const channel_config& ch) const {
  if (ch.relay_group) (void)resolve(ch);
}

void relay_forwarder::open(std::size_t index, const channel_config& ch) {
  if (m_relays.size() <= index) m_relays.resize(index + 1);
  if (!ch.relay_group) return;
  const auto iface = resolve(ch);
  net::sender_socket_options o;
  o.interface = iface.address;
  o.interface_index = iface.index;
  o.ttl = ch.relay_ttl;
  o.send_buffer = send_buffer_bytes;
  o.receive_buffer = 1 << 20;  // only what misconfigured sites send, read and dropped
  auto s = net::open_sender_socket(m_io, o);
  const auto source = net::from_asio(s.local_endpoint());
  m_relays[index] = std::make_unique<relay>(std::move(s), *ch.relay_group, source, ch.dest,
                                            !ch.silent, ch.relays);
  m_log->info(
      "channel {}: relaying its one-way sessions, two-way sessions and heartbeats into {} from {} "
      "(ttl {})",
      ch.name, ch.relay_group->to_string(), source.to_string(), ch.relay_ttl);
  read_sites(index);
}

namespace {

void add(relay_downstream::counters& to, const relay_downstream::counters& c) {
  to.data += c.data;
  to.parity += c.parity;
  to.control += c.control;
  to.from_cache += c.from_cache;
  to.from_dest += c.from_dest;
  to.unreadable += c.unreadable;
  to.hellos += c.hellos;
  to.site_refused += c.site_refused;
  to.ends_withheld += c.ends_withheld;
}

}  // namespace

std::optional<relay_forwarder::counters> relay_forwarder::stats(std::size_t index) const {
  if (!relays(index)) return std::nullopt;
  counters c = m_relays[index]->stats;
  for (const auto& [id, down] : m_relays[index]->two_way) add(c.two_way, down->stats());
  return c;
}

bool relay_forwarder::own_source(const endpoint& from) const noexcept {
  return std::any_of(m_relays.begin(), m_relays.end(),
                     [&](const auto& r) { return r && r->source == from; });
}

void relay_forwarder::queue(std::size_t index, std::span<const std::byte> d,
                            std::optional<time_point> arrival) {
  std::size_t used = m_queue.empty() ? 0 : m_queue.back().offset + m_queue.back().size;
  if (m_queue.size() == max_batch || used + d.size() > m_buffer.size()) {
    flush(from_steady(std::chrono::steady_clock::now()));
    used = 0;
  }
  if (d.size() > m_buffer.size()) return;  // larger than any UDP datagram: not reached
  std::copy(d.begin(), d.end(), m_buffer.begin() + static_cast<std::ptrdiff_t>(used));
  m_queue.push_back({index, used, d.size(), arrival});
}

void relay_forwarder::forward(std::size_t index, session_id s, std::span<const std::byte> d,
                              std::optional<time_point> arrival) {
  if (!relays(index)) return;
  auto& r = *m_relays[index];
  if (r.relayed.size() >= max_sessions_seen) r.relayed.clear();
  if (r.relayed.insert(s.value).second) ++r.stats.sessions;
  queue(index, d, arrival);
}

void relay_forwarder::forward_heartbeat(std::size_t index, std::span<const std::byte> d,
                                        std::optional<time_point> arrival) {
  if (!relays(index)) return;
  ++m_relays[index]->stats.heartbeats;
  queue(index, d, arrival);
}

void relay_forwarder::remember_end(std::size_t index, session_id s, std::span<const std::byte> d,
                                   time_point now) {
  while (!m_ends.empty() && (m_ends.size() >= max_ends || m_ends.front().expires <= now)) {
    m_ends.pop_front();
  }
  m_ends.push_back({index, s, std::vector<std::byte>(d.begin(), d.end()), now + end_memory});
}

bool relay_forwarder::end_repeat(std::size_t index, session_id s, std::span<const std::byte> d,
                                 time_point now) const {
  return std::any_of(m_ends.begin(), m_ends.end(), [&](const kept_end& e) {
    return e.index == index && e.session == s && e.expires > now &&
           std::equal(d.begin(), d.end(), e.bytes.begin(), e.bytes.end());
  });
}

void relay_forwarder::not_relayed(std::size_t index, session_id s) {
  if (!relays(index)) return;
  auto& r = *m_relays[index];
  ++r.stats.not_relayed_datagrams;
  if (r.not_relayed.count(s.value)) return;  // counted and logged at its first datagram
  note_not_relayed(r, s,
                   fmt::format("a session with a unicast start, one this relay restarted in "
                               "without what it kept of it, or more than {} two-way sessions "
                               "at once",
                               max_two_way_sessions));
}

void relay_forwarder::note_not_relayed(relay& r, session_id s, std::string_view why) {
  if (r.not_relayed.size() >= max_sessions_seen) r.not_relayed.clear();
  if (!r.not_relayed.insert(s.value).second) return;
  ++r.stats.not_relayed_sessions;
  if (m_not_relayed_logged.tick()) {
    m_log->warn("session {}: not relayed into {}: {}", s, r.group.to_string(), why);
  }
}

bool relay_forwarder::runs(std::size_t index, session_id s) const noexcept {
  return relays(index) && m_relays[index]->two_way.count(s.value) > 0;
}

namespace {

constexpr std::array<char, 4> state_magic{'M', 'C', 'R', 'S'};
/// Kept parameters larger than this are not ours.
constexpr std::size_t max_state_bytes = 64 * 1024;

std::string state_name(session_id s) { return fmt::format("{}", s); }
/// A signed session's copies of the hub's datagrams, beside its parameters.
std::string signed_name(session_id s) { return fmt::format("{}.signed", s); }

/// Writes `bytes` to `dir`/`name` through a temporary file and a rename (0600, no link
/// followed). @return errno, or 0
int write_state_file(const std::filesystem::path& dir, const std::string& name,
                     std::string_view bytes) {
  const auto path = dir / name;
  const auto tmp = dir / (name + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  const bool written =
      fd >= 0 && ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : err;
    ::unlink(tmp.c_str());
    return e == 0 ? EIO : e;
  }
  return 0;
}

/// The content of `dir`/`name` when it is a regular file of at most `max` bytes (no link
/// followed); empty otherwise.
std::string read_state_file(const std::filesystem::path& dir, const std::string& name,
                            std::size_t max) {
  const auto path = dir / name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string bytes;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      static_cast<std::size_t>(st.st_size) <= max) {
    bytes.resize(static_cast<std::size_t>(st.st_size));
    if (::pread(fd, bytes.data(), bytes.size(), 0) != st.st_size) bytes.clear();
  }
  ::close(fd);
  return bytes;
}

}  // namespace

void relay_forwarder::set_state_dir(std::filesystem::path dir) {
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
  m_state_dir = std::move(dir);
}

void relay_forwarder::save_state(session_id s, std::uint32_t run,
                                 const wire::session_params& p) const {
  if (m_state_dir.empty()) return;
  std::string bytes(state_magic.begin(), state_magic.end());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((run >> (8 * i)) & 0xff));
  bytes += p.SerializeAsString();
  if (const int e = write_state_file(m_state_dir, state_name(s), bytes)) {
    m_log->warn(
        "session {}: cannot keep its relay state in {} ({}): a restart will not take "
        "it up again for the sites behind this relay",
        s, (m_state_dir / state_name(s)).string(), std::strerror(e));
  }
}

void relay_forwarder::save_signed(session_id s, const signed_copies& c) const {
  if (m_state_dir.empty()) return;
  if (const int e = write_state_file(m_state_dir, signed_name(s), c.serialize())) {
    m_log->warn(
        "session {}: cannot keep the hub's signed announces in {} ({}): a restart will not "
        "take it up again for the sites behind this relay",
        s, (m_state_dir / signed_name(s)).string(), std::strerror(e));
  }
}

std::shared_ptr<signed_copies> relay_forwarder::load_signed(session_id s) const {
  if (m_state_dir.empty()) return nullptr;
  const auto bytes = read_state_file(m_state_dir, signed_name(s), signed_copies::max_bytes + 4096);
  auto c = std::make_shared<signed_copies>();
  if (!c->restore(bytes) || c->announces.empty()) return nullptr;
  return c;
}

bool relay_forwarder::load_state(session_id s, std::uint32_t& run, wire::session_params& p) const {
  if (m_state_dir.empty()) return false;
  const std::string bytes = read_state_file(m_state_dir, state_name(s), max_state_bytes);
  if (bytes.size() < 8 || !std::equal(state_magic.begin(), state_magic.end(), bytes.begin())) {
    return false;
  }
  run = 0;
  for (int i = 0; i < 4; ++i) {
    run |= std::uint32_t{static_cast<unsigned char>(bytes[4 + static_cast<std::size_t>(i)])}
           << (8 * i);
  }
  return p.ParseFromArray(bytes.data() + 8, static_cast<int>(bytes.size() - 8)) &&
         p.block_size() > 0;
}

void relay_forwarder::drop_state(session_id s) const {
  if (m_state_dir.empty()) return;
  ::unlink((m_state_dir / state_name(s)).c_str());
  ::unlink((m_state_dir / signed_name(s)).c_str());
}

void relay_forwarder::forget_stale_states() {
  if (m_state_dir.empty() || !m_engine) return;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(m_state_dir, ec)) {
    auto name = e.path().filename().string();
    if (name.ends_with(".signed")) name.resize(name.size() - 7);
    std::uint32_t id = 0;
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), id, 16);
    const bool ours = err == std::errc() && end == name.data() + name.size() && name.size() == 8;
    if (!ours || !m_engine->channel_of(session_id{id})) {
      std::filesystem::remove(e.path(), ec);
    }
  }
}

bool relay_forwarder::on_upstream(std::size_t index, const wire::header& h,
                                  std::span<const std::byte> raw, std::span<const std::byte> plain,
                                  const endpoint& from, time_point now) {
  const bool signed_session = h.version == wire::authenticated_version;
  if (!relays(index) || !m_engine || (h.version != wire::version && !signed_session) ||
      (signed_session && !m_delegation)) {
    return false;
  }
  auto& r = *m_relays[index];
  auto it = r.two_way.find(h.session.value);
  if (it == r.two_way.end()) {
    if (r.not_relayed.count(h.session.value)) return false;
    // Announced sessions whose manifest never completed here (refused, timed out) hold no
    // place among the max_two_way_sessions.
    // A signed session waiting for its delegation stays, ended here or not.
    const auto gone = [this, &r](const auto& e) {
      return !m_engine->channel_of(session_id{e.first}) && !r.undelegated.count(e.first);
    };
    std::erase_if(r.params, gone);
    std::erase_if(r.copies, gone);
    std::erase_if(r.undelegated, gone);
    std::erase_if(r.runs, gone);
    if (h.type == wire::msg_type::announce && !r.params.count(h.session.value)) {
      wire::announce a;
      if (wire::parse_control(plain, a)) return true;  // the engine refused it too
      const auto& p = a.params();
      if (p.has_unicast_start() || p.block_digests() != 0 ||
          r.two_way.size() + r.params.size() >= max_two_way_sessions) {
        return false;
      }
      if (signed_session) r.copies.emplace(h.session.value, std::make_shared<signed_copies>());
      auto down = p;
      if (!p.only_receivers().empty()) {
        // The engine took it, so it names this relay: a catch-up (or an operator's resend) for
        // the relay's subtree. Below, it is for the sites whose reports it covers; when it
        // covers none (the relay's own gaps, a resend), every site may take it.
        std::vector<wire::seq_span> seqs;
        for (const auto& q : p.catch_up_seqs()) seqs.emplace_back(q.first(), q.last());
        down.clear_only_receivers();
        if (!seqs.empty()) {
          for (auto& site : r.gaps.sites_missing(p.channel(), seqs)) {
            down.add_only_receivers(std::move(site));
          }
        }
      }
      // Kept parameters of it: this relay restarted while the hub still announces it (its
      // registration is open). The sites registered with the run before.
      std::uint32_t kept_run = 0;
      wire::session_params kept;
      if (load_state(h.session, kept_run, kept)) {
        r.runs.insert_or_assign(h.session.value, kept_run + 1);
        if (signed_session) {
          if (auto c = load_signed(h.session)) r.copies.insert_or_assign(h.session.value, c);
        }
      }
      r.params.emplace(h.session.value, std::move(down));
    }
    auto pit = r.params.find(h.session.value);
    auto copies = r.copies.find(h.session.value);
    if (signed_session && copies != r.copies.end() && !copies->second->keep(h, raw, plain)) {
      m_log->warn(
          "session {}: not relayed into {}: its signed announces and digest lists pass "
          "{} bytes",
          h.session, r.group.to_string(), signed_copies::max_bytes);
      r.params.erase(h.session.value);
      r.copies.erase(copies);
      return false;
    }
    if (pit == r.params.end()) {
      if (!m_engine->manifest_complete(h.session)) return true;
      // A manifest complete here without an announce seen: this relay restarted during the
      // session. What it kept of it takes it up again for the sites behind, numbered past the
      // run before; without it the session is not relayed (its sites time out). A signed
      // session needs the hub's signed datagrams kept too (its delegation is asked for anew:
      // the saved keys hold none).
      wire::session_params kept;
      std::uint32_t kept_run = 0;
      std::shared_ptr<signed_copies> signed_kept;
      if (r.two_way.size() + r.params.size() >= max_two_way_sessions ||
          !load_state(h.session, kept_run, kept) ||
          (signed_session && !(signed_kept = load_signed(h.session)))) {
        return false;
      }
      r.runs.insert_or_assign(h.session.value, kept_run + 1);
      pit = r.params.emplace(h.session.value, std::move(kept)).first;
      if (signed_kept) copies = r.copies.insert_or_assign(h.session.value, signed_kept).first;
    }
    if (!m_engine->manifest_complete(h.session)) return true;
    std::optional<relay_downstream::signed_session> sig;
    if (signed_session) {
      auto d = m_delegation(h.session);
      if (!d.delegation || copies == r.copies.end()) {
        // The delegation comes with the answer to the relay's key request; it may still be on
        // its way, unless that answer came without one. The timer looks again (the session
        // may send nothing more).
        auto [w, fresh] = r.undelegated.try_emplace(h.session.value);
        if (fresh) w->second = {now, m_engine->manifest_of(h.session), from};
        const auto since = w->second.since;
        if (!d.refused && now - since < delegation_wait) {
          arm(now + delegation_poll);
          return true;
        }
        ++r.stats.not_relayed_datagrams;
        give_up_undelegated(r, h.session, d.refused ? "" : " within 10 s");
        return true;  // counted and logged, with the reason: the caller's not_relayed is not
      }
      sig = relay_downstream::signed_session{std::move(*d.delegation), copies->second};
      r.copies.erase(copies);
      r.undelegated.erase(h.session.value);
    }
    if (!start_two_way(r, h.session, m_engine->manifest_of(h.session), std::move(sig), now)) {
      return false;
    }
    it = r.two_way.find(h.session.value);
  }
  if (h.type == wire::msg_type::announce || !it->second->upstream()) it->second->set_upstream(from);
  it->second->on_upstream(h, raw, plain, now);
  if (const auto c = it->second->copies(); c && c->changed) {
    // A digest list (or a changed announce) the sites behind may need after a restart.
    c->changed = false;
    save_signed(h.session, *c);
  }
  arm(now);
  return true;
}

relay_downstream* relay_forwarder::start_two_way(
    relay& r, session_id s, std::vector<manifest_entry> files,
    std::optional<relay_downstream::signed_session> sig, time_point now) {
  const auto pit = r.params.find(s.value);
  if (pit == r.params.end()) return nullptr;
  std::uint32_t run = 0;
  if (const auto rr = r.runs.find(s.value); rr != r.runs.end()) run = rr->second;
  const bool signed_session = sig.has_value();
  const auto sig_copies = signed_session ? sig->copies : nullptr;
  const std::size_t count = files.size();
  relay_downstream* down = nullptr;
  try {
    down = r.two_way
               .emplace(s.value, std::make_unique<relay_downstream>(
                                     s, pit->second, std::move(files), r.dest, m_seed++, run,
                                     m_cache_used, r.relays, m_log, now, std::move(sig)))
               .first->second.get();
  } catch (const std::invalid_argument& e) {
    m_log->warn("session {}: not relayed into {}: {}", s, r.group.to_string(), e.what());
    r.params.erase(pit);
    r.runs.erase(s.value);
    return nullptr;
  }
  save_state(s, run, pit->second);
  if (signed_session) {
    ++r.stats.signed_sessions;
    save_signed(s, *sig_copies);
    sig_copies->changed = false;
  }
  const auto& kept = pit->second;
  const bool catch_up = kept.catch_up_seqs_size() > 0;
  const auto named = static_cast<std::size_t>(kept.only_receivers_size());
  r.params.erase(pit);
  r.runs.erase(s.value);
  ++r.stats.two_way_sessions;
  if (catch_up) ++r.stats.catch_ups;
  if (run == 0 && catch_up) {
    m_log->info("session {}: relaying the hub's catch-up into {} for {}: {} files", s,
                r.group.to_string(),
                named == 0 ? std::string("every site behind this relay")
                           : std::to_string(named) + " site" + (named == 1 ? "" : "s") +
                                 " that reported its sessions missing",
                count);
  } else if (run == 0) {
    m_log->info("session {}: relaying into {} for the sites behind this relay: {} files{}", s,
                r.group.to_string(), count,
                signed_session ? " (signed: under the hub's delegation to this relay)" : "");
  } else {
    m_log->info(
        "session {}: resumed relaying into {} for the sites behind this relay after "
        "a restart (run {}): {} files",
        s, r.group.to_string(), run, count);
  }
  return down;
}

void relay_forwarder::on_file_stored(session_id s, file_index f, bool ok) {
  for (auto& r : m_relays) {
    if (!r) continue;
    if (const auto it = r->two_way.find(s.value); it != r->two_way.end()) {
      it->second->on_file_stored(f.value, ok);
      arm(from_steady(std::chrono::steady_clock::now()));
    }
  }
}

void relay_forwarder::on_site(std::size_t index, std::span<const std::byte> d,
                              const endpoint& from) {
  auto& r = *m_relays[index];
  wire::header h;
  if (!wire::parse_header(d, h)) {
    if (h.type == wire::msg_type::gap_report) return on_gap_report(index, d, from);
    if (const auto it = r.two_way.find(h.session.value); it != r.two_way.end()) {
      ++r.stats.two_way_site_datagrams;
      const auto now = from_steady(std::chrono::steady_clock::now());
      if (h.type == wire::msg_type::register_request &&
          on_origin_request(r, *it->second, h, d, from, now)) {
        // A relay asking the hub before any hello of this relay bound the session needs one.
        it->second->hello_to(from, now);
        arm(now);
        return;
      }
      it->second->on_site(h, d, from, now);
      arm(now);
      return;
    }
  }
  ++r.stats.site_datagrams;
  if (m_site_datagrams_logged.tick()) {
    m_log->warn(
        "relay into {}: a datagram from {} for no session this relay runs (dropped): sites "
        "behind a relay of one-way sessions must be silent (silent = true on their channel)",
        r.group.to_string(), from.to_string());
  }
}

bool relay_forwarder::on_origin_request(relay& r, const relay_downstream& down,
                                        const wire::header& h, std::span<const std::byte> d,
                                        const endpoint& from, time_point now) {
  // Only the body is read here (it is in clear; its tag is the hub's to check).
  const std::size_t trailer = auth::trailer_size(wire::msg_type::register_request);
  if (h.version != wire::authenticated_version || d.size() < wire::header_size + trailer) {
    return false;
  }
  const auto body = d.subspan(wire::header_size, d.size() - wire::header_size - trailer);
  wire::register_request req;
  if (!req.ParseFromArray(body.data(), static_cast<int>(body.size())) || !req.for_origin()) {
    return false;
  }
  const auto drop = [&r] {
    ++r.stats.origin_dropped;
    return true;
  };
  // Only for a session this relay runs signed (an unsigned one has no delegation to ask for),
  // from a relay with a valid id asking with a key.
  if (!down.copies() || !down.upstream() || !m_send_upstream || !req.key_request() ||
      req.relay_public().size() != crypto::key_bytes ||
      !wire::valid_receiver_id(req.receiver_id())) {
    return drop();
  }
  if (now - r.origin_second >= std::chrono::seconds(1)) {
    r.origin_second = now;
    r.origin_sent = 0;
  }
  if (r.origin_sent >= origin_requests_per_second) return drop();
  ++r.origin_sent;
  while (!r.origin_pending.empty() && (now - r.origin_pending.front().at >= origin_wait ||
                                       r.origin_pending.size() >= max_origin_pending)) {
    r.origin_pending.pop_front();
  }
  if (!m_send_upstream(*down.upstream(), d)) {
    ++r.stats.send_failed;
    return true;
  }
  ++r.stats.origin_requests;
  auto p = std::find_if(r.origin_pending.begin(), r.origin_pending.end(), [&](const auto& q) {
    return q.session == h.session && q.site == req.receiver_id();
  });
  if (p == r.origin_pending.end()) {
    p = r.origin_pending.insert(r.origin_pending.end(),
                                {h.session, req.receiver_id(), from, *down.upstream(), now});
  }
  // The hub answers each request: each answer goes to where the latest came from.
  p->from = from;
  p->upstream = *down.upstream();
  p->at = now;
  ++p->asked;
  if (m_origin_logged.tick()) {
    m_log->info("session {}: passed relay {}'s delegation request for the hub on to {}", h.session,
                req.receiver_id(), down.upstream()->to_string());
  }
  return true;
}

bool relay_forwarder::on_origin_reply(const wire::header& h, std::span<const std::byte> d,
                                      const endpoint& from, time_point now) {
  const std::size_t trailer = auth::trailer_size(wire::msg_type::register_reply);
  std::optional<wire::register_reply> reply;
  // The relay's own session may have ended meanwhile (its sites held the files): the answer
  // still goes to the relay that asked.
  for (auto& rp : m_relays) {
    if (!rp || rp->origin_pending.empty()) continue;
    auto& r = *rp;
    if (!reply) {
      if (d.size() < wire::header_size + trailer) return false;
      const auto body = d.subspan(wire::header_size, d.size() - wire::header_size - trailer);
      if (!reply.emplace().ParseFromArray(body.data(), static_cast<int>(body.size())) ||
          !reply->key_only()) {
        return false;
      }
    }
    const auto p =
        std::find_if(r.origin_pending.begin(), r.origin_pending.end(), [&](const auto& q) {
          return q.session == h.session && q.site == reply->receiver_id() &&
                 now - q.at < origin_wait && same_host(q.upstream, from);
        });
    if (p == r.origin_pending.end()) continue;
    std::error_code ec;
    if (!r.socket.is_open() || !net::send_one(r.socket.native_handle(), p->from, d, ec)) {
      ++r.stats.send_failed;
    } else {
      ++r.stats.origin_replies;
    }
    if (--p->asked == 0) r.origin_pending.erase(p);
    return true;
  }
  return false;
}

bool relay_forwarder::awaits_delegation(session_id s) const noexcept {
  return std::any_of(m_relays.begin(), m_relays.end(),
                     [&](const auto& r) { return r && r->undelegated.count(s.value) > 0; });
}

bool relay_forwarder::gathers_gaps(std::size_t index) const noexcept {
  return relays(index) && m_relays[index]->gathers;
}

void relay_forwarder::on_gap_report(std::size_t index, std::span<const std::byte> d,
                                    const endpoint& from) {
  auto& r = *m_relays[index];
  wire::gap_report m;
  const auto refuse = [&](const char* why) {
    ++r.stats.gap_reports_refused;
    if (m_gap_reports_logged.tick()) {
      m_log->warn("relay into {}: gap report from {} refused: {}", r.group.to_string(),
                  from.to_string(), why);
    }
  };
  // Signed or not, a report is a hint (the relay pins no site key, and a signature by the key
  // the datagram carries proves nothing about its id): parsed without a signature check, so a
  // flood costs no Ed25519 work. What it can make the relay do is ask the hub for what it
  // retained, as its own report, and run it for the sites that asked.
  if (!r.gathers) return refuse("this relay's channel is silent");
  if (beacon::parse_gap_report(d, m)) return refuse("not a valid report");
  std::vector<wire::seq_span> missing;
  for (const auto& q : m.missing()) missing.emplace_back(q.first(), q.last());
  if (!r.gaps.note(m.receiver_id(), m.channel(), std::move(missing))) {
    return refuse("too many sites report gaps");
  }
  ++r.stats.gap_reports_taken;
  m_log->debug("relay into {}: site {} reports {} missed session range{} of channel {}",
               r.group.to_string(), m.receiver_id(), m.missing_size(),
               m.missing_size() == 1 ? "" : "s", m.channel());
}

void relay_forwarder::on_hub_heartbeat(std::size_t index, const endpoint& hub, wire::gap_report own,
                                       std::uint64_t newest, bool sign) {
  if (!gathers_gaps(index)) return;
  auto& r = *m_relays[index];
  send_gap_report(index);
  r.gaps.next_generation();
  r.pending = relay::pending_report{hub, std::move(own), newest, sign};
  r.report_timer.expires_after(gap_gather);
  r.report_timer.async_wait([this, index](const boost::system::error_code& ec) {
    if (!ec && relays(index)) send_gap_report(index);
  });
}

void relay_forwarder::send_gap_report(std::size_t index) {
  auto& r = *m_relays[index];
  if (!r.pending) return;
  auto p = std::move(*r.pending);
  r.pending.reset();
  std::vector<wire::seq_span> own;
  for (const auto& q : p.own.missing()) own.emplace_back(q.first(), q.last());
  // Numbers a session it runs for its sites is delivering now are not asked for them again (a
  // heartbeat during a long catch-up); should that session fail them, the next report has them.
  std::vector<wire::seq_span> busy;
  for (const auto& [id, down] : r.two_way) {
    if (down->channel() == p.own.channel()) {
      busy.insert(busy.end(), down->completes().begin(), down->completes().end());
    }
  }
  std::sort(busy.begin(), busy.end());
  const auto all = r.gaps.merged(p.own.channel(), p.newest, own, busy);
  if (all.empty() || !m_send_report) return;
  const bool subtree = !r.gaps.merged(p.own.channel(), p.newest, {}).empty();
  p.own.clear_missing();
  std::uint64_t missed = 0;
  for (const auto& [first, last] : all) {
    auto* q = p.own.add_missing();
    q->set_first(first);
    q->set_last(last);
    missed += last - first + 1;
  }
  if (!m_send_report(p.hub, p.own, p.sign)) return;
  if (subtree) ++r.stats.subtree_reports_sent;
  m_log->info(
      "channel {}: the hub's newest session is {}; {} {} session{} below it: gap report "
      "sent to {}",
      p.own.channel(), p.newest,
      subtree ? "this relay and the sites behind it miss" : "this relay misses", missed,
      missed == 1 ? "" : "s", p.hub.to_string());
}

void relay_forwarder::note_sites(relay& r, const relay_downstream& down,
                                 const sender::session_report& rep) {
  for (const auto& site : rep.receivers) {
    // A REGISTER's gaps count until the site's next report; a session it completed is no
    // longer missing there.
    if (!site.missing_seqs.empty()) r.gaps.note(site.id, down.channel(), site.missing_seqs);
    if (site.state == sender::receiver_report::state_t::completed) {
      r.gaps.completed(site.id, down.channel(), down.completes());
    }
  }
}

void relay_forwarder::arm(time_point at) {
  if (m_armed && *m_armed <= at) return;
  m_armed = at;
  m_timer.expires_at(std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(at.time_since_epoch())));
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    m_armed.reset();
    service_two_way();
  });
}

void relay_forwarder::give_up_undelegated(relay& r, session_id s, std::string_view why) {
  r.params.erase(s.value);
  r.runs.erase(s.value);
  r.copies.erase(s.value);
  r.undelegated.erase(s.value);
  note_not_relayed(r, s,
                   fmt::format("signed, and the hub did not delegate it to this relay{} (the hub "
                               "must list this site in its relays and pin its key, and a relay "
                               "in front of this one must pass its request on; encrypted "
                               "sessions are never delegated)",
                               why));
}

void relay_forwarder::service_two_way() {
  const auto now = from_steady(std::chrono::steady_clock::now());
  std::optional<time_point> next;
  for (std::size_t index = 0; index < m_relays.size(); ++index) {
    if (!m_relays[index]) continue;
    auto& r = *m_relays[index];
    // Signed sessions waiting for their delegation: refused, too late, or ended here before it
    // came (a session this relay held whole ends at its REGISTER's answer, sooner than the hub
    // answers a relay behind a relay; a short session may send nothing more).
    for (auto u = r.undelegated.begin(); u != r.undelegated.end();) {
      const session_id s{u->first};
      auto d = m_delegation ? m_delegation(s) : delegation_state{};
      const bool gone = m_engine && !m_engine->channel_of(s);
      auto& w = u->second;
      const bool late = now - w.since >= delegation_wait;
      ++u;  // the entry is erased below
      const auto copies = r.copies.find(s.value);
      if (gone && d.delegation && !d.refused && copies != r.copies.end()) {
        // Started from what was kept of it: the sites get it from the relay's destination.
        auto files = std::move(w.files);
        const endpoint upstream = w.upstream;
        relay_downstream::signed_session sig{std::move(*d.delegation), copies->second};
        r.copies.erase(copies);
        r.undelegated.erase(s.value);
        if (auto* down = start_two_way(r, s, std::move(files), std::move(sig), now)) {
          down->set_upstream(upstream);
        }
        if (m_release) m_release(s);
        continue;
      }
      if (d.refused || late) {
        give_up_undelegated(r, s, d.refused ? "" : " within 10 s");
        if (gone && m_release) m_release(s);
      } else {
        next = next ? std::min(*next, now + delegation_poll) : now + delegation_poll;
      }
    }
    const auto send = [&r](const std::optional<endpoint>& to, std::span<const std::byte> d) {
      // Counted by the session (relay_downstream::counters), not as forwarded.
      std::error_code ec;
      if (!r.socket.is_open() ||
          !net::send_one(r.socket.native_handle(), to ? *to : r.group, d, ec)) {
        ++r.stats.send_failed;
      }
    };
    for (auto it = r.two_way.begin(); it != r.two_way.end();) {
      auto& down = *it->second;
      if (m_engine && !m_engine->channel_of(down.session())) down.upstream_gone(now);
      const auto at = down.service(now, send);
      if (!at) {
        // Done: its counters join the channel's.
        const auto& c = down.stats();
        add(r.stats.two_way, c);
        const auto rep = down.report(now);
        note_sites(r, down, rep);
        for (const auto& site : rep.receivers) {
          if (site.state == sender::receiver_report::state_t::completed) {
            ++r.stats.two_way_sites_completed;
          } else {
            ++r.stats.two_way_sites_failed;
          }
        }
        m_log->info(
            "session {}: relayed into {}: {} sites completed, {} failed; {} data and {} parity "
            "datagrams sent, {} passes",
            down.session(), r.group.to_string(),
            std::count_if(rep.receivers.begin(), rep.receivers.end(),
                          [](const auto& x) {
                            return x.state == sender::receiver_report::state_t::completed;
                          }),
            std::count_if(rep.receivers.begin(), rep.receivers.end(),
                          [](const auto& x) {
                            return x.state != sender::receiver_report::state_t::completed;
                          }),
            c.data, c.parity, rep.passes);
        drop_state(down.session());
        it = r.two_way.erase(it);
        continue;
      }
      next = next ? std::min(*next, *at) : *at;
      ++it;
    }
  }
  if (next) arm(std::max(*next, now));
}

void relay_forwarder::flush(time_point now) {
  if (m_queue.empty()) return;
  auto& run = m_run;
  std::size_t i = 0;
  while (i < m_queue.size()) {
    // A run of consecutive datagrams of one channel: one sendmmsg.
    const std::size_t index = m_queue[i].index;
    std::size_t j = i;
    run.clear();
    for (; j < m_queue.size() && m_queue[j].index == index; ++j) {
      run.emplace_back(m_buffer.data() + m_queue[j].offset, m_queue[j].size);
    }
    auto& r = *m_relays[index];
    std::error_code ec;
    const std::size_t sent =
        r.socket.is_open() ? net::send_many(r.socket.native_handle(), r.group, run, ec) : 0;
    for (std::size_t k = i; k < i + sent; ++k) {
      ++r.stats.forwarded;
      r.stats.forwarded_bytes += m_queue[k].size;
      if (const auto a = m_queue[k].arrival) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - *a).count();
        m_delays[m_delays_taken % delay_samples] =
            static_cast<std::uint32_t>(std::clamp<std::int64_t>(us, 0, UINT32_MAX));
        ++m_delays_taken;
      }
    }
    if (sent < run.size()) {
      r.stats.send_failed += run.size() - sent;
      if (m_send_errors_logged.tick()) {
        m_log->warn(
            "relay into {}: {} datagrams not sent ({}): the sites behind it recover "
            "them from parity, later passes or catch-up",
            r.group.to_string(), run.size() - sent,
            ec ? ec.message() : "the socket's send buffer is full");
      }
    }
    i = j;
  }
  m_queue.clear();
}

void relay_forwarder::read_sites(std::size_t index) {
  auto& r = *m_relays[index];
  r.socket.async_wait(
      net::udp::socket::wait_read, [this, index](const boost::system::error_code& ec) {
        if (ec || !relays(index) || !m_relays[index]->socket.is_open()) return;
        auto& rr = *m_relays[index];
        std::array<std::byte, 2048> buf;
        for (int n = 0; n < 64; ++n) {
          sockaddr_storage from{};
          socklen_t len = sizeof from;
          const ssize_t got = ::recvfrom(rr.socket.native_handle(), buf.data(), buf.size(),
                                         MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
          if (got < 0) break;
          on_site(index, std::span(buf.data(), static_cast<std::size_t>(got)),
                  net::from_sockaddr(from));
        }
        read_sites(index);
      });
}

void relay_forwarder::close(std::size_t index) {
  if (!relays(index)) return;
  boost::system::error_code ignored;
  m_relays[index]->socket.close(ignored);
  // Nor does its report go upstream any more.
  m_relays[index]->report_timer.cancel();
  m_relays[index]->pending.reset();
}

void relay_forwarder::cancel_all() {
  m_timer.cancel();
  m_armed.reset();
  for (auto& r : m_relays) {
    if (!r) continue;
    boost::system::error_code ignored;
    r->socket.cancel(ignored);
    r->report_timer.cancel();
  }
}

nlohmann::json relay_forwarder::status(const std::vector<channel_config>& channels) const {
  auto out = nlohmann::json::array();
  std::vector<std::uint32_t> d(
      m_delays.begin(),
      m_delays.begin() + static_cast<std::ptrdiff_t>(std::min(m_delays_taken, delay_samples)));
  const auto quantile = [&](double q) -> std::uint32_t {
    if (d.empty()) return 0;
    const auto k = static_cast<std::size_t>(q * static_cast<double>(d.size() - 1));
    std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(k), d.end());
    return d[k];
  };
  const auto p50 = quantile(0.5);
  const auto p99 = quantile(0.99);
  for (std::size_t i = 0; i < m_relays.size() && i < channels.size(); ++i) {
    if (!m_relays[i]) continue;
    const auto& r = *m_relays[i];
    const auto s = *stats(i);
    const auto& t = s.two_way;
    const auto now = from_steady(std::chrono::steady_clock::now());
    std::uint64_t sites = 0;
    for (const auto& [id, down] : r.two_way) sites += down->report(now).receivers.size();
    out.push_back({{"channel", channels[i].name},
                   {"group", r.group.to_string()},
                   {"source", r.source.to_string()},
                   {"open", r.socket.is_open()},
                   {"forwarded", s.forwarded},
                   {"forwarded_bytes", s.forwarded_bytes},
                   {"heartbeats", s.heartbeats},
                   {"sessions", s.sessions},
                   {"not_relayed_sessions", s.not_relayed_sessions},
                   {"not_relayed_datagrams", s.not_relayed_datagrams},
                   {"send_failed", s.send_failed},
                   {"site_datagrams", s.site_datagrams},
                   {"two_way",
                    {{"sessions", s.two_way_sessions},
                     {"sessions_active", r.two_way.size()},
                     {"sites_active", sites},
                     {"sites_completed", s.two_way_sites_completed},
                     {"sites_failed", s.two_way_sites_failed},
                     {"site_datagrams", s.two_way_site_datagrams},
                     {"data", t.data},
                     {"parity", t.parity},
                     {"control", t.control},
                     {"from_cache", t.from_cache},
                     {"from_dest", t.from_dest},
                     {"unreadable", t.unreadable},
                     {"signed_sessions", s.signed_sessions},
                     {"hellos", t.hellos},
                     {"site_refused", t.site_refused},
                     {"ends_withheld", t.ends_withheld},
                     {"origin_requests", s.origin_requests},
                     {"origin_replies", s.origin_replies},
                     {"origin_dropped", s.origin_dropped}}},
                   {"catch_up",
                    {{"gap_reports_taken", s.gap_reports_taken},
                     {"gap_reports_refused", s.gap_reports_refused},
                     {"sites_missing", r.gaps.size()},
                     {"reports_sent", s.subtree_reports_sent},
                     {"sessions", s.catch_ups}}},
                   // Over every relayed channel: kernel arrival to the send call.
                   {"forward_delay_us", {{"p50", p50}, {"p99", p99}, {"samples", d.size()}}}});
  }
  return out;
}

}  // namespace mcdist::receiver
