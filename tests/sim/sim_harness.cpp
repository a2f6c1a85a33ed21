#include "tests/sim/sim_harness.hpp"

#include "common/fec/fec.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <algorithm>
#include <cstring>
#include <ctime>

namespace mcdist::sim {

bool loss_chain::lost(const link_model& l, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  if (l.loss <= 0) return false;
  if (l.burst <= 1) return u(rng) < l.loss;
  const double r = 1 / l.burst;
  const double p = l.loss >= 1 ? 1 : l.loss * r / (1 - l.loss);
  bad = bad ? !(u(rng) < r) : u(rng) < p;
  return bad;
}

std::vector<sim_file> make_files(std::mt19937_64& rng, std::size_t count,
                                 const std::vector<std::uint64_t>& sizes) {
  std::vector<sim_file> files(count);
  for (std::size_t i = 0; i < count; ++i) {
    auto& f = files[i];
    f.path = "d" + std::to_string(i % 7) + "/s" + std::to_string(i % 3) + "/f" + std::to_string(i);
    f.data.resize(sizes[i % sizes.size()]);
    for (auto& b : f.data) b = static_cast<std::byte>(rng());
  }
  return files;
}

namespace {

using namespace std::chrono_literals;

/// multicast(): a datagram outside any FEC block (control, or a session without FEC).
constexpr std::uint32_t no_fec_block = 0xffffffffU;

class world;

/// Disjoint half-open byte ranges [first, end), merged on insertion.
class range_set {
 public:
  void add(std::uint64_t a, std::uint64_t b) {
    if (a >= b) return;
    auto it = m_r.upper_bound(a);
    if (it != m_r.begin() && std::prev(it)->second >= a) --it;
    while (it != m_r.end() && it->first <= b) {
      a = std::min(a, it->first);
      b = std::max(b, it->second);
      it = m_r.erase(it);
    }
    m_r.emplace(a, b);
  }
  void remove(std::uint64_t a, std::uint64_t b) {
    if (a >= b) return;
    auto it = m_r.upper_bound(a);
    if (it != m_r.begin()) --it;
    while (it != m_r.end() && it->first < b) {
      const auto [f, e] = *it;
      if (e <= a) {
        ++it;
        continue;
      }
      it = m_r.erase(it);
      if (f < a) m_r.emplace(f, a);
      if (e > b) m_r.emplace(b, e);
    }
  }
  /// True when [0, n) is wholly inside the set (always for n == 0).
  /// True when [a, b) is wholly inside the set.
  bool contains(std::uint64_t a, std::uint64_t b) const {
    if (a >= b) return true;
    auto it = m_r.upper_bound(a);
    if (it == m_r.begin()) return false;
    --it;
    return it->first <= a && it->second >= b;
  }
  bool covers(std::uint64_t n) const {
    if (n == 0) return true;
    return !m_r.empty() && m_r.begin()->first == 0 && m_r.begin()->second >= n;
  }
  /// True when some of [a, b) is inside the set.
  bool intersects(std::uint64_t a, std::uint64_t b) const {
    if (a >= b) return false;
    auto it = m_r.upper_bound(a);
    if (it != m_r.begin() && std::prev(it)->second > a) return true;
    return it != m_r.end() && it->first < b;
  }
  bool empty() const noexcept { return m_r.empty(); }
  void clear() noexcept { m_r.clear(); }

 private:
  std::map<std::uint64_t, std::uint64_t> m_r;
};

/// Thread CPU time, seconds.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// A relay's downstream side (receiver_spec::relay): the gate over what its rx_node holds and,
/// once its engine has the upstream manifest, the same session towards its group, the part a
/// relay's shell runs beside its engine.
struct relay_node {
  std::size_t rx = 0;                ///< its rx_node
  endpoint addr;                     ///< where its group sends control
  std::vector<std::size_t> members;  ///< the receivers of its group
  std::unique_ptr<sender::relay_gate> gate;
  std::unique_ptr<sender::sender_session> down;
  sim_result::relay_stats stats;
  std::uint64_t m_wake_token = 0;
  std::optional<time_point> m_wake;
  std::uint64_t held_seen = 0;  ///< the rx_node's m_held_generation at the last on_available
};

/// Receiver node: the engine plus an in-memory "disk" that survives crashes.
class rx_node final : public receiver::receiver_sink, public receiver::storage_port {
 public:
  rx_node(world& w, receiver_spec spec, endpoint addr, std::uint64_t seed);

  void send(const endpoint& to, std::span<const std::byte> datagram) override;
  // storage_port: an in-memory "disk"
  void begin_file(receiver::file_key key, std::uint32_t, const manifest_entry& entry,
                  bool resume) override {
    auto& t = m_temp[{key.session.value, key.file.value}];
    if (!resume || t.size != entry.size) {
      t.written.clear();
      t.wrong.clear();
    }
    t.size = entry.size;
  }
  bool write(receiver::file_key key, std::uint64_t offset,
             std::span<const std::byte> data) override;
  void finalize(receiver::file_key key, const sha256_digest& expected) override;
  void discard_file(receiver::file_key key) override {
    m_temp.erase({key.session.value, key.file.value});
  }
  void query_held(session_id s, std::uint32_t, std::vector<receiver::held_query> q) override;
  bool decodes_parity() const override { return !m_spec.refuse_parity; }
  bool write_parity(session_id s, std::uint32_t fb, std::uint32_t index,
                    std::span<const std::byte> data) override {
    if (m_spec.refuse_parity) return false;
    // A receiver that decodes by count keeps the index only (the bytes are the sender's).
    auto& kept = m_parity[{s.value, fb}][index];
    if (!m_spec.decode_by_count) kept.assign(data.begin(), data.end());
    return true;
  }
  void recover(session_id s, receiver::recovery_request req) override;
  void checkpoint(session_id s, std::string blob) override {
    m_checkpoints[s.value] = std::move(blob);
  }
  void start_unicast(session_id s, const receiver::unicast_order& order,
                     std::vector<receiver::byte_range> wanted) override;
  void stop_unicast(session_id) override { ++m_unicast_generation; }
  void session_closed(session_id, bool) override {}
  void close_session(session_id s, bool) override {
    m_checkpoints.erase(s.value);
    for (auto it = m_temp.begin(); it != m_temp.end();) {
      it = it->first.first == s.value ? m_temp.erase(it) : std::next(it);
    }
    for (auto it = m_parity.begin(); it != m_parity.end();) {
      it = it->first.first == s.value ? m_parity.erase(it) : std::next(it);
    }
  }

  void on_datagram(std::span<const std::byte> d, const endpoint& from, time_point now);
  /// Whether this node's storage holds source block `block` of `file` of the session as the
  /// sender sent it: written with the right bytes to its temp file, or delivered.
  bool holds(std::uint32_t file, std::uint32_t block) const;
  bool manifest_complete(session_id s) const { return m_engine && m_engine->manifest_complete(s); }
  const receiver::receiver_stats& stats() const {
    return m_engine ? m_engine->stats() : m_last_stats;
  }
  void service(time_point now);
  void crash();
  void restart(time_point now);

  receiver_spec m_spec;
  endpoint m_addr;
  std::vector<bool> m_delivered;  ///< by manifest index
  std::uint64_t m_corrupt = 0;    ///< files finalized with wrong content
  receiver::receiver_stats m_last_stats;
  loss_chain m_down_state;
  loss_chain m_up_state;
  std::uint64_t m_lost_originals = 0;
  std::uint64_t m_wake_token = 0;
  std::optional<time_point> m_wake;
  relay_node* m_relay = nullptr;  ///< its downstream side, for a relay
  /// Counts what its storage came to hold (writes, deliveries): a relay's session is told
  /// on_available when it moved, as a shell would be by its storage.
  std::uint64_t m_held_generation = 0;

 private:
  /// A file being written: which bytes were written, and which of them differ from the
  /// reference (the last write of a byte decides).
  struct temp_file {
    std::uint64_t size = 0;
    range_set written;
    range_set wrong;
  };
  world& m_world;
  std::uint64_t m_seed;
  std::unique_ptr<receiver::receiver_engine> m_engine;
  std::map<std::pair<std::uint32_t, std::uint32_t>, temp_file> m_temp;
  /// Parity blocks kept for decoding: (session, FEC block) -> parity index -> bytes.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::map<std::uint32_t, std::vector<std::byte>>>
      m_parity;
  std::map<std::uint32_t, std::string> m_checkpoints;
  bool m_crashed = false;
  std::uint64_t m_generation = 0;
  std::mt19937_64 m_rng;
  std::uint64_t m_unicast_generation = 0;

 public:
  std::uint64_t m_unicast_bytes = 0;
};

class world {
 public:
  world(const sim_config& cfg, const std::vector<sim_file>& files)
      : m_cfg(cfg), m_files(files), m_rng(cfg.seed) {
    std::vector<manifest_entry> manifest;
    for (const auto& f : files) {
      manifest_entry e;
      e.path = f.path;
      e.size = f.data.size();
      e.mtime_ns = 1'700'000'000'000'000'000;
      e.mode = 0644;
      m_digests.push_back(sha256(f.data));
      if (f.digest_in_manifest) e.digest = m_digests.back();
      manifest.push_back(std::move(e));
      m_sent_before.emplace_back();
    }
    m_sender_addr = *parse_endpoint("10.0.0.1:5000");
    m_manifest = manifest;
    m_sender =
        std::make_unique<sender::sender_session>(cfg.sender, std::move(manifest), m_rng(), nullptr);
    m_sender->set_unicast_endpoint(sender::transport_kind::sctp_udp,
                                   *parse_endpoint("10.0.0.1:5001"));
    m_sender->set_unicast_endpoint(sender::transport_kind::tcp, *parse_endpoint("10.0.0.1:5002"));
    std::map<duration, std::vector<std::size_t>> by_delay;
    std::map<std::string, std::size_t> relay_of;
    for (std::size_t i = 0; i < cfg.receivers.size(); ++i) {
      auto addr = *parse_endpoint("10." + std::to_string(1 + i / 62500) + "." +
                                  std::to_string(i / 250 % 250) + "." +
                                  std::to_string(i % 250 + 1) + ":6000");
      m_receivers.push_back(std::make_unique<rx_node>(*this, cfg.receivers[i], addr, m_rng()));
      m_by_addr.emplace(addr, i);
      if (cfg.receivers[i].upstream.empty()) by_delay[cfg.receivers[i].down.delay].push_back(i);
      if (cfg.receivers[i].relay) {
        auto r = std::make_unique<relay_node>();
        r->rx = i;
        r->addr = *parse_endpoint("10.200.0." + std::to_string(m_relays.size() + 1) + ":5000");
        rx_node* node = m_receivers.back().get();
        r->gate = std::make_unique<sender::relay_gate>(
            [node](std::uint32_t f, std::uint32_t b) { return node->holds(f, b); });
        node->m_relay = r.get();
        relay_of.emplace(cfg.receivers[i].id, m_relays.size());
        m_relay_by_addr.emplace(r->addr, m_relays.size());
        m_relays.push_back(std::move(r));
      }
    }
    for (std::size_t i = 0; i < cfg.receivers.size(); ++i) {
      const auto& up = cfg.receivers[i].upstream;
      if (up.empty()) continue;
      const auto it = relay_of.find(up);
      if (it == relay_of.end()) throw std::invalid_argument("no relay " + up);
      m_relays[it->second]->members.push_back(i);
    }
    for (auto& [d, v] : by_delay) m_fanout.push_back({d, std::move(v)});
    m_passes.emplace_back();
  }

  time_point now() const { return m_now; }
  duration since_start() const { return m_now - m_start; }
  session_id session() const { return m_cfg.sender.session; }
  std::uint64_t block_size() const { return m_cfg.sender.block_size; }
  sender::sender_session& sender() { return *m_sender; }
  void service_sender_at_now() { service_sender(); }
  std::mt19937_64& rng() { return m_rng; }
  const std::vector<sim_file>& files() const { return m_files; }
  /// Block `block` of `file` zero-padded to the block size: what a FEC block codes.
  std::vector<std::byte> padded_block(std::uint32_t file, std::uint32_t block) const {
    const std::uint32_t bs = m_cfg.sender.block_size;
    std::vector<std::byte> out(bs);
    const auto& d = m_files[file].data;
    const std::uint64_t off = std::uint64_t{block} * bs;
    if (off < d.size()) {
      std::memcpy(out.data(), d.data() + off, std::min<std::uint64_t>(bs, d.size() - off));
    }
    return out;
  }
  /// Parity block `index` of FEC block `fb`, computed from the reference files.
  std::vector<std::byte> parity_block(std::uint32_t fb, std::uint32_t index) {
    const auto& l = *m_sender->fec_layout();
    if (!m_codec) {
      const std::uint32_t k = m_cfg.sender.fec_k;
      m_codec.emplace(k, m_cfg.sender.fec_max_parity ? m_cfg.sender.fec_max_parity
                                                     : fec::default_max_parity(k));
    }
    std::vector<std::vector<std::byte>> src;
    std::vector<const std::byte*> in;
    for (std::uint32_t i = 0; i < l.sources(fb); ++i) {
      const auto r = l.source(fb, i);
      src.push_back(padded_block(r.file, r.block));
    }
    for (const auto& b : src) in.push_back(b.data());
    std::vector<std::byte> out(m_cfg.sender.block_size);
    std::byte* dst = out.data();
    m_codec->encode(in, std::span(&index, 1), std::span(&dst, 1), out.size());
    return out;
  }
  const sha256_digest& digest(std::uint32_t file) const { return m_digests[file]; }

  void at(time_point t, std::function<void()> fn) {
    m_queue.push({t, m_next_seq++, std::move(fn)});
  }

  /// Schedules node service at `t` unless an earlier one is pending.
  template <class Node, class Fn>
  void wake(Node& n, std::optional<time_point> t, Fn service) {
    if (!t) return;
    time_point when = std::max(*t, m_now);
    if (n.m_wake && *n.m_wake <= when && *n.m_wake >= m_now) return;
    n.m_wake = when;
    const std::uint64_t token = ++n.m_wake_token;
    at(when, [&n, token, service] {
      if (n.m_wake_token != token) return;
      n.m_wake.reset();
      service();
    });
  }

  void log_event(std::uint64_t node, std::span<const std::byte> d) {
    ++m_events;
    if (!m_cfg.trace) return;
    std::byte rec[32] = {};
    const auto t = m_now.time_since_epoch().count();
    std::memcpy(rec, &t, 8);
    std::memcpy(rec + 8, &node, 8);
    std::memcpy(rec + 16, d.data(), std::min<std::size_t>(16, d.size()));
    m_trace.update(rec);
  }

  /// Applies one link direction after its loss draw passed: arrival times (1 or 2 of them).
  std::vector<time_point> timing(const link_model& l, time_point sent) {
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<time_point> out;
    time_point t = sent + l.delay;
    if (l.reorder > 0 && u(m_rng) < l.reorder) t += l.reorder_delay;
    out.push_back(t);
    if (l.duplicate > 0 && u(m_rng) < l.duplicate) out.push_back(t + 10us);
    return out;
  }

  void deliver(std::size_t i, const std::shared_ptr<std::vector<std::byte>>& bytes) {
    deliver(i, bytes, m_sender_addr);
  }
  void deliver(std::size_t i, const std::shared_ptr<std::vector<std::byte>>& bytes,
               const endpoint& from) {
    log_event(i + 1, *bytes);
    m_receivers[i]->on_datagram(*bytes, from, m_now);
  }

  /// Sends `d` to the group. `original` is true for a block's first transmission, whose
  /// losses are counted in loss_stats.
  /// `fec_block`: the FEC block a data or parity datagram belongs to (no_fec_block without FEC),
  /// for pass_stats::lost_fec_blocks.
  void multicast(std::span<const std::byte> d, bool original = false, bool data = false,
                 std::uint32_t fec_block = no_fec_block) {
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    // Index of this first transmission in m_original_lost (unused otherwise).
    const std::size_t ordinal = m_original_lost.size();
    if (original) {
      ++m_losses.original_blocks;
      m_original_lost.push_back(false);
    }
    // Index of this data datagram in m_data_lost (unused for control).
    const std::size_t data_ordinal = m_data_lost.size();
    if (data) {
      m_data_lost.push_back({static_cast<std::uint32_t>(m_passes.size() - 1), false, fec_block});
    }
    if (m_common_state.lost(m_cfg.common, m_rng)) {
      if (original) {
        ++m_losses.common_lost;
        m_original_lost[ordinal] = true;
        for (auto& r : m_receivers) ++r->m_lost_originals;
      }
      if (data) m_data_lost[data_ordinal].lost = true;
      return;
    }
    // One event per distinct receiver delay: the group fans out when the datagram arrives, and
    // each receiver's own loss, reordering and duplication apply then.
    const time_point sent = m_now + m_cfg.common.delay;
    for (std::size_t g = 0; g < m_fanout.size(); ++g) {
      at(sent + m_fanout[g].first, [this, bytes, g, original, sent, ordinal, data, data_ordinal] {
        bool any_lost = false;
        bool data_lost = false;
        for (const std::size_t i : m_fanout[g].second) {
          auto* r = m_receivers[i].get();
          const auto& down = r->m_spec.down;
          if (r->m_down_state.lost(down, m_rng)) {
            if (r->m_relay) {
              ++r->m_relay->stats.upstream_lost;
              if (data) ++r->m_relay->stats.upstream_data_lost;
            }
            if (original) {
              any_lost = true;
              ++r->m_lost_originals;
            }
            data_lost = true;
            continue;
          }
          const auto times = timing(down, sent);
          for (const time_point t : times) {
            if (t == m_now) {
              deliver(i, bytes);
            } else {
              at(t, [this, i, bytes] { deliver(i, bytes); });
            }
          }
        }
        if (any_lost) m_original_lost[ordinal] = true;
        if (data && data_lost) m_data_lost[data_ordinal].lost = true;
      });
    }
    if (m_cfg.garbage > 0) {
      std::uniform_real_distribution<double> u(0, 1);
      for (auto& r : m_receivers) {
        if (u(m_rng) < m_cfg.garbage) inject_garbage(*r);
      }
    }
  }

  void inject_garbage(rx_node& r) {
    std::vector<std::byte> g(m_rng() % 120);
    for (auto& b : g) b = static_cast<std::byte>(m_rng());
    if (g.size() >= wire::header_size && (m_rng() & 1)) {
      // A well-formed header with a random type, the real session id and a junk body.
      const auto type = static_cast<wire::msg_type>(1 + m_rng() % 10);
      wire::write_header(g, type, m_cfg.sender.session);
    }
    // A forged SESSION_END from the sender's own address whose junk body happens to parse
    // (an empty one does: reason DONE) ends the session at that receiver, as it would for real
    // in an unsigned session: garbage of that type comes from a stranger instead.
    wire::header h;
    const bool forged_end = !wire::parse_header(g, h) && h.type == wire::msg_type::session_end;
    auto bytes = std::make_shared<std::vector<std::byte>>(std::move(g));
    const bool from_sender = (m_rng() & 1) && !forged_end;
    const endpoint from = from_sender ? m_sender_addr : *parse_endpoint("10.9.9.9:666");
    at(m_now + 1ms, [this, &r, bytes, from] { r.on_datagram(*bytes, from, m_now); });
  }

  void unicast_from_sender(const endpoint& to, std::span<const std::byte> d) {
    const auto it = m_by_addr.find(to);
    if (it == m_by_addr.end()) return;
    const std::size_t i = it->second;
    auto* r = m_receivers[i].get();
    if (r->m_down_state.lost(r->m_spec.down, m_rng)) {
      if (r->m_relay) ++r->m_relay->stats.upstream_lost;
      return;
    }
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    for (time_point t : timing(r->m_spec.down, m_now)) {
      at(t, [this, i, bytes] { deliver(i, bytes); });
    }
  }

  /// A receiver's datagram to `to`: the sender, or the relay whose group it is in.
  void route(rx_node& from, const endpoint& to, std::span<const std::byte> d) {
    if (to == m_sender_addr) {
      to_sender(from, d);
      return;
    }
    const auto it = m_relay_by_addr.find(to);
    if (it == m_relay_by_addr.end()) return;
    relay_node& r = *m_relays[it->second];
    if (from.m_up_state.lost(from.m_spec.up, m_rng)) return;
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    for (time_point t : timing(from.m_spec.up, m_now)) {
      const endpoint addr = from.m_addr;
      at(t, [this, &r, bytes, addr] {
        if (!r.down) return;  // nothing to answer before its session exists
        r.down->on_datagram(*bytes, addr, m_now);
        service_relay(r);
      });
    }
  }

  /// What a relay's shell reads of an upstream datagram before its engine takes it: the
  /// upstream sweep's progress for the gate, and digests announced late.
  void relay_tap(relay_node& r, std::span<const std::byte> d) {
    wire::header h;
    if (wire::parse_header(d, h) || h.session != m_cfg.sender.session) return;
    switch (h.type) {
      case wire::msg_type::data: {
        wire::data_header dh;
        std::span<const std::byte> payload;
        if (!wire::parse_data(d, dh, payload))
          r.gate->on_upstream_block(dh.file.value, dh.block.value);
        break;
      }
      case wire::msg_type::marker: {
        wire::marker m;
        if (!wire::parse_control(d, m)) {
          r.gate->on_upstream_marker(m.pass(), m.file(), m.block(), m.pass_end());
        }
        break;
      }
      case wire::msg_type::digest_list: {
        wire::digest_list m;
        if (wire::parse_control(d, m) || !r.down) break;
        for (const auto& e : m.digests()) {
          sha256_digest dg{};
          if (e.sha256().size() != dg.size()) continue;
          std::memcpy(dg.data(), e.sha256().data(), dg.size());
          r.down->on_digest(file_index{e.file()}, dg, m_now);
        }
        break;
      }
      case wire::msg_type::session_end: r.gate->upstream_pass_over(); break;
      default: break;
    }
  }

  /// The relay's node stored something, or took a datagram: its downstream session starts once
  /// the upstream manifest is complete, and goes on with what is held now.
  void relay_poke(relay_node& r) {
    if (!r.down) {
      if (!m_receivers[r.rx]->manifest_complete(m_cfg.sender.session)) return;
      sender::sender_config c = m_cfg.sender;
      c.receivers.clear();
      for (const auto i : r.members) c.receivers.push_back(m_receivers[i]->m_spec.id);
      c.only_receivers.clear();
      c.not_awaited.clear();
      c.fallback = sender::fallback_mode::off;
      c.max_passes = 1000;
      relay_node* rp = &r;
      c.block_gate = [rp](std::uint32_t f, std::uint32_t b) { return rp->gate->answer(f, b); };
      c.parity_gate = [rp](std::uint32_t fb) {
        return rp->gate->parity_ready(*rp->down->fec_layout(), fb);
      };
      auto files = m_manifest;
      for (auto& e : files) {
        if (!m_files[&e - files.data()].digest_in_manifest) e.digest.reset();
      }
      r.down = std::make_unique<sender::sender_session>(std::move(c), std::move(files), m_rng(),
                                                        nullptr);
      r.down->start(m_now);
    }
    const std::uint64_t held = m_receivers[r.rx]->m_held_generation;
    if (held != r.held_seen) {
      r.held_seen = held;
      r.down->on_available(m_now);
    }
    service_relay(r);
  }

  void relay_multicast(relay_node& r, std::span<const std::byte> d) {
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    for (const std::size_t i : r.members) {
      auto* rx = m_receivers[i].get();
      if (rx->m_down_state.lost(rx->m_spec.down, m_rng)) continue;
      for (const time_point t : timing(rx->m_spec.down, m_now)) {
        at(t, [this, i, bytes, from = r.addr] { deliver(i, bytes, from); });
      }
    }
  }

  void relay_unicast(relay_node& r, const endpoint& to, std::span<const std::byte> d) {
    const auto it = m_by_addr.find(to);
    if (it == m_by_addr.end()) return;
    const std::size_t i = it->second;
    auto* rx = m_receivers[i].get();
    if (rx->m_down_state.lost(rx->m_spec.down, m_rng)) return;
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    for (const time_point t : timing(rx->m_spec.down, m_now)) {
      at(t, [this, i, bytes, from = r.addr] { deliver(i, bytes, from); });
    }
  }

  void service_relay(relay_node& r) {
    if (!r.down) return;
    auto& s = *r.down;
    s.on_timer(m_now);
    const rx_node& node = *m_receivers[r.rx];
    std::array<sender::data_send, 64> batch;
    std::vector<std::byte> buf;
    auto flush = [&] {
      sender::control_send c;
      while (s.pop_control(c)) {
        if (c.to) {
          relay_unicast(r, *c.to, c.bytes);
        } else {
          relay_multicast(r, c.bytes);
        }
      }
    };
    for (;;) {
      flush();
      const std::size_t n = s.next_data(m_now, batch);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& d = batch[i];
        buf.resize(wire::data_header_size + d.length);
        if (d.parity) {
          if (!r.gate->parity_ready(*s.fec_layout(), d.fec_block)) ++r.stats.unheld_sends;
          wire::write_parity_header(buf,
                                    {m_cfg.sender.session, d.seq, d.fec_block, d.parity_index});
          const auto p = parity_block(d.fec_block, d.parity_index);
          std::memcpy(buf.data() + wire::data_header_size, p.data(), p.size());
        } else {
          if (!node.holds(d.file.value, d.block.value)) ++r.stats.unheld_sends;
          wire::write_data_header(buf, {m_cfg.sender.session, d.seq, d.file, d.block});
          std::memcpy(buf.data() + wire::data_header_size,
                      m_files[d.file.value].data.data() + d.offset, d.length);
        }
        if (r.stats.first_sent == duration::zero()) r.stats.first_sent = m_now - m_start;
        relay_multicast(r, buf);
      }
      if (n < batch.size()) break;
    }
    flush();
    auto next = s.next_deadline(m_now);
    if (next && *next <= m_now) next = m_now + 1us;
    wake(r, next, [this, &r] { service_relay(r); });
    note_done();
  }

  /// The run is over when the sender and every relay's downstream session are done.
  void note_done() {
    if (m_done_at || !m_sender->done()) return;
    for (const auto& r : m_relays) {
      if (!r->down || !r->down->done()) return;
    }
    m_done_at = m_now;
  }

  void to_sender(rx_node& from, std::span<const std::byte> d) {
    ++m_unicast_to_sender;
    if (from.m_up_state.lost(from.m_spec.up, m_rng)) return;
    ++m_to_sender_by[from.m_spec.id];
    auto bytes = std::make_shared<std::vector<std::byte>>(d.begin(), d.end());
    for (time_point t : timing(from.m_spec.up, m_now)) {
      const endpoint addr = from.m_addr;
      at(t, [this, bytes, addr] {
        log_event(0, *bytes);
        count_received(*bytes);
        const double c0 = thread_cpu_s();
        m_sender->on_datagram(*bytes, addr, m_now);
        m_passes.back().sender_cpu_s += thread_cpu_s() - c0;
        service_sender();
      });
    }
  }

  /// Counts a datagram arriving at the sender against the current pass.
  void count_received(std::span<const std::byte> d) {
    auto& p = m_passes.back();
    wire::header h;
    if (wire::parse_header(d, h)) {
      ++p.other;
      return;
    }
    switch (h.type) {
      case wire::msg_type::nak: {
        wire::nak m;
        if (wire::parse_control(d, m)) {
          ++p.other;
          return;
        }
        if (m.files_size() == 0 && m.fec_lacks_size() == 0) {
          ++p.status;
          return;
        }
        ++p.naks;
        std::uint64_t named = 0;
        for (const auto& fn : m.files()) {
          for (int k = 1; k < fn.ranges_size(); k += 2) named += fn.ranges(k);
        }
        p.nak_blocks += named;
        if (named > 0 && m_cfg.sender.fec_k > 0) {
          auto [it, fresh] = m_named_naks.try_emplace(m.receiver_id());
          if (fresh) it->second.first_pass = p.pass;
          it->second.blocks += named;
        }
        for (int k = 1; k < m.fec_lacks_size(); k += 2) p.nak_blocks += m.fec_lacks(k);
        return;
      }
      case wire::msg_type::complete: ++p.completes; return;
      case wire::msg_type::register_request: ++p.registers; return;
      default: ++p.other; return;
    }
  }

  void track_pass() {
    while (m_sender->pass() >= m_passes.size()) {
      m_passes.emplace_back();
      m_passes.back().pass = static_cast<std::uint32_t>(m_passes.size() - 1);
    }
  }

  void flush_control(sender::sender_session& s) {
    sender::control_send c;
    for (;;) {
      const double c0 = thread_cpu_s();
      const bool got = s.pop_control(c);
      m_passes.back().sender_cpu_s += thread_cpu_s() - c0;
      if (!got) break;
      ++m_passes.back().control_sent;
      if (c.to) {
        unicast_from_sender(*c.to, c.bytes);
      } else {
        multicast(c.bytes);
      }
    }
  }

  void service_sender() {
    auto& s = *m_sender;
    double c0 = thread_cpu_s();
    s.on_timer(m_now);
    m_passes.back().sender_cpu_s += thread_cpu_s() - c0;
    track_pass();
    std::array<sender::data_send, 64> batch;
    std::vector<std::byte> buf;
    for (;;) {
      flush_control(s);
      c0 = thread_cpu_s();
      const std::size_t n = s.next_data(m_now, batch);
      m_passes.back().sender_cpu_s += thread_cpu_s() - c0;
      track_pass();
      for (std::size_t i = 0; i < n; ++i) {
        const auto& d = batch[i];
        if (d.parity) {
          buf.resize(wire::data_header_size + d.length);
          wire::write_parity_header(buf,
                                    {m_cfg.sender.session, d.seq, d.fec_block, d.parity_index});
          const auto p = parity_block(d.fec_block, d.parity_index);
          std::memcpy(buf.data() + wire::data_header_size, p.data(), p.size());
          ++m_passes.back().data_datagrams;
          ++m_passes.back().parity_datagrams;
          multicast(buf, false, true, d.fec_block);
          continue;
        }
        buf.resize(wire::data_header_size + d.length);
        wire::write_data_header(buf, {m_cfg.sender.session, d.seq, d.file, d.block});
        std::memcpy(buf.data() + wire::data_header_size,
                    m_files[d.file.value].data.data() + d.offset, d.length);
        auto& sent = m_sent_before[d.file.value];
        if (sent.size() <= d.block.value) sent.resize(d.block.value + 1);
        const bool original = !sent[d.block.value];
        sent[d.block.value] = true;
        ++m_passes.back().data_datagrams;
        if (!original) ++m_passes.back().repair_datagrams;
        const auto* layout = s.fec_layout();
        multicast(buf, original, true,
                  layout ? layout->locate(d.file.value, d.block.value).fec_block : no_fec_block);
      }
      if (n < batch.size()) break;
    }
    flush_control(s);
    c0 = thread_cpu_s();
    auto next = s.next_deadline(m_now);
    m_passes.back().sender_cpu_s += thread_cpu_s() - c0;
    if (next && *next <= m_now) next = m_now + 1us;
    wake(m_sender_node, next, [this] { service_sender(); });
    note_done();
  }

  sim_result run() {
    m_sender->start(m_now);
    service_sender();
    // Digests of files announced without one arrive over time, in index order.
    time_point t = m_now;
    for (std::size_t i = 0; i < m_files.size(); ++i) {
      if (m_files[i].digest_in_manifest) continue;
      t += m_cfg.hash_delay;
      const auto digest = m_digests[i];
      at(t, [this, i, digest] {
        m_sender->on_digest(file_index{static_cast<std::uint32_t>(i)}, digest, m_now);
        service_sender();
      });
    }
    for (auto& r : m_receivers) {
      if (r->m_spec.crash_at.count() > 0) {
        rx_node* node = r.get();
        at(m_now + r->m_spec.crash_at, [node] { node->crash(); });
        at(m_now + r->m_spec.crash_at + r->m_spec.restart_after,
           [this, node] { node->restart(m_now); });
      }
    }
    const time_point start = m_now;
    m_start = start;
    while (!m_queue.empty()) {
      auto ev = m_queue.top();
      m_queue.pop();
      m_now = ev.t;
      if (m_now - start > m_cfg.limit) break;
      if (m_done_at && m_now - *m_done_at > 5s) break;
      ev.fn();
    }
    sim_result res;
    res.sender_done = m_sender->done();
    res.succeeded = m_sender->succeeded();
    res.report = m_sender->report(m_now);
    res.elapsed = res.report.elapsed;
    for (auto& r : m_receivers) {
      auto& d = res.delivered[r->m_spec.id];
      for (std::size_t i = 0; i < r->m_delivered.size(); ++i) {
        if (r->m_delivered[i]) d.insert(m_files[i].path);
      }
      res.receiver_stats[r->m_spec.id] = r->stats();
      res.unicast_bytes[r->m_spec.id] = r->m_unicast_bytes;
      res.corrupt_files += r->m_corrupt;
      m_losses.total_receiver_lost += r->m_lost_originals;
      if (r->m_lost_originals > m_losses.max_receiver_lost || m_losses.max_receiver.empty()) {
        m_losses.max_receiver_lost = r->m_lost_originals;
        m_losses.max_receiver = r->m_spec.id;
      }
    }
    m_losses.union_lost = static_cast<std::uint64_t>(
        std::count(m_original_lost.begin(), m_original_lost.end(), true));
    res.trace = m_trace.finish();
    res.events = m_events;
    res.unicast_to_sender = m_unicast_to_sender;
    std::set<std::pair<std::uint32_t, std::uint32_t>> lost_fec;  // (pass, FEC block)
    for (const auto& d : m_data_lost) {
      if (!d.lost || d.pass >= m_passes.size()) continue;
      ++m_passes[d.pass].lost_datagrams;
      if (d.fec_block != no_fec_block && lost_fec.insert({d.pass, d.fec_block}).second) {
        ++m_passes[d.pass].lost_fec_blocks;
      }
    }
    res.passes = m_passes;
    res.fec_named_naks = m_named_naks;
    res.losses = m_losses;
    res.to_sender_by = m_to_sender_by;
    for (const auto& r : m_relays) {
      auto st = r->stats;
      if (r->down) {
        st.report = r->down->report(m_now);
        st.done = r->down->done();
        st.succeeded = r->down->succeeded();
      }
      res.relays[m_receivers[r->rx]->m_spec.id] = st;
    }
    return res;
  }

  struct sender_node {
    std::uint64_t m_wake_token = 0;
    std::optional<time_point> m_wake;
  };

 private:
  struct event {
    time_point t;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  const sim_config& m_cfg;
  const std::vector<sim_file>& m_files;
  std::vector<sha256_digest> m_digests;
  std::mt19937_64 m_rng;
  std::priority_queue<event, std::vector<event>, std::greater<>> m_queue;
  std::uint64_t m_next_seq = 0;
  time_point m_now{std::chrono::seconds(1000)};
  time_point m_start{std::chrono::seconds(1000)};  ///< when run() began
  endpoint m_sender_addr;
  std::unique_ptr<sender::sender_session> m_sender;
  sender_node m_sender_node;
  std::vector<std::unique_ptr<rx_node>> m_receivers;
  std::map<endpoint, std::size_t> m_by_addr;
  std::vector<manifest_entry> m_manifest;  ///< as the sender announces it
  std::vector<std::unique_ptr<relay_node>> m_relays;
  std::map<endpoint, std::size_t> m_relay_by_addr;
  std::map<std::string, std::uint64_t> m_to_sender_by;
  /// Receivers grouped by downstream delay, in delay order.
  std::vector<std::pair<duration, std::vector<std::size_t>>> m_fanout;
  loss_chain m_common_state;
  std::vector<std::vector<bool>> m_sent_before;  ///< per file, per block
  std::vector<bool> m_original_lost;             ///< per first transmission: lost by some receiver
  /// Per data datagram: the pass it was sent in, and whether some receiver lost it.
  /// A data or parity datagram sent: its pass, whether some receiver lost it, its FEC block.
  struct data_sent {
    std::uint32_t pass = 0;
    bool lost = false;
    std::uint32_t fec_block = no_fec_block;
  };
  std::vector<data_sent> m_data_lost;
  std::vector<pass_stats> m_passes;
  std::map<std::string, sim_result::named_naks> m_named_naks;
  loss_stats m_losses;
  std::optional<time_point> m_done_at;
  sha256_hasher m_trace;
  std::uint64_t m_events = 0;
  std::uint64_t m_unicast_to_sender = 0;
  std::optional<fec::codec> m_codec;
};

rx_node::rx_node(world& w, receiver_spec spec, endpoint addr, std::uint64_t seed)
    : m_spec(std::move(spec)), m_addr(addr), m_world(w), m_seed(seed), m_rng(seed) {
  receiver::receiver_config cfg;
  cfg.id = m_spec.id;
  m_engine = std::make_unique<receiver::receiver_engine>(cfg, *this, *this, m_seed, nullptr);
  m_delivered.assign(m_world.files().size(), false);
  for (const auto f : m_spec.held) m_delivered[f] = true;
}

void rx_node::send(const endpoint& to, std::span<const std::byte> datagram) {
  m_world.route(*this, to, datagram);
}

void rx_node::on_datagram(std::span<const std::byte> d, const endpoint& from, time_point now) {
  if (m_crashed) return;
  if (m_relay) m_world.relay_tap(*m_relay, d);
  m_engine->on_datagram(d, from, 0, now);
  service(now);
}

bool rx_node::holds(std::uint32_t file, std::uint32_t block) const {
  if (m_delivered[file]) return true;
  const auto it = m_temp.find({m_world.session().value, file});
  if (it == m_temp.end()) return false;
  const std::uint64_t bs = m_world.block_size();
  const std::uint64_t off = std::uint64_t{block} * bs;
  const std::uint64_t end = std::min(off + bs, it->second.size);
  return it->second.written.contains(off, end) && !it->second.wrong.intersects(off, end);
}

bool rx_node::write(receiver::file_key key, std::uint64_t offset, std::span<const std::byte> data) {
  if (m_spec.storage_refuse > 0 &&
      std::uniform_real_distribution<double>(0, 1)(m_rng) < m_spec.storage_refuse) {
    return false;
  }
  auto it = m_temp.find({key.session.value, key.file.value});
  if (it == m_temp.end() || offset + data.size() > it->second.size) return false;
  // No copy of the bytes: compare them with the reference file the sender reads.
  const auto& ref = m_world.files()[key.file.value].data;
  const std::uint64_t end = offset + data.size();
  auto& t = it->second;
  ++m_held_generation;
  t.written.add(offset, end);
  if (data.empty() || std::memcmp(ref.data() + offset, data.data(), data.size()) == 0) {
    t.wrong.remove(offset, end);
  } else {
    t.wrong.add(offset, end);
  }
  return true;
}

void rx_node::finalize(receiver::file_key key, const sha256_digest& expected) {
  const session_id s = key.session;
  const file_index f = key.file;
  const std::uint64_t gen = m_generation;
  m_world.at(m_world.now() + m_spec.store_time, [this, s, f, expected, gen] {
    if (m_crashed || gen != m_generation) return;
    auto it = m_temp.find({s.value, f.value});
    std::error_code ec;
    if (it == m_temp.end()) {
      ec = errc::cancelled;
    } else if (!it->second.written.covers(it->second.size) || !it->second.wrong.empty()) {
      // The content differs from the reference, so (barring a SHA-256 collision) from any
      // digest the sender announced.
      ec = errc::digest_mismatch;
      ++m_corrupt;
      m_temp.erase(it);
    } else if (m_world.digest(f.value) != expected) {
      ec = errc::digest_mismatch;
      m_temp.erase(it);
    } else {
      m_delivered[f.value] = true;
      ++m_held_generation;
      m_temp.erase(it);
      if (m_relay &&
          std::all_of(m_delivered.begin(), m_delivered.end(), [](bool b) { return b; })) {
        m_relay->stats.all_held = m_world.since_start();
      }
    }
    m_engine->on_file_stored(s, f, ec, {}, m_world.now());
    service(m_world.now());
  });
}

void rx_node::recover(session_id s, receiver::recovery_request req) {
  const std::uint64_t gen = m_generation;
  m_world.at(m_world.now() + m_spec.store_time, [this, s, req = std::move(req), gen] {
    if (m_crashed || gen != m_generation) return;
    // Read back the available sources as a storage path would: from the temp file when that
    // range was written with the right bytes, from the destination when the file is delivered
    // (held or stored). Anything else reads as zeros, and the decode then writes wrong bytes,
    // which finalize catches as a digest mismatch.
    std::vector<std::vector<std::byte>> bufs;
    std::vector<fec::symbol> rx;
    std::vector<std::uint32_t> missing;
    bool all_readable = true;
    const auto key = std::pair{s.value, req.fec_block};
    const auto par = m_parity.find(key);
    bufs.reserve(req.sources.size() + req.parity.size());
    for (std::uint32_t i = 0; i < req.sources.size(); ++i) {
      const auto& src = req.sources[i];
      if (!src.available) {
        missing.push_back(i);
        continue;
      }
      const auto t = m_temp.find({s.value, src.file.value});
      const bool readable =
          m_delivered[src.file.value] ||
          (t != m_temp.end() && t->second.written.contains(src.offset, src.offset + src.length) &&
           !t->second.wrong.contains(src.offset, src.offset + 1));
      all_readable = all_readable && readable;
      bufs.push_back(readable ? m_world.padded_block(src.file.value, src.block)
                              : std::vector<std::byte>(req.block_size));
      rx.push_back({false, i, bufs.back().data()});
    }
    std::error_code ec;
    if (par == m_parity.end()) {
      ec = errc::invalid_field;
    } else {
      for (const auto index : req.parity) {
        const auto it = par->second.find(index);
        if (it != par->second.end()) rx.push_back({true, index, it->second.data()});
      }
    }
    std::vector<std::vector<std::byte>> out(missing.size(), std::vector<std::byte>(req.block_size));
    std::vector<std::byte*> dst;
    for (auto& o : out) dst.push_back(o.data());
    if (!ec && m_spec.decode_by_count) {
      // Any n distinct blocks of an MDS code decode (common/fec/fec.hpp): the count decides, and
      // the result is what the codec would give, the reference blocks, unless a source read
      // back wrong (then the codec's output is wrong too: zeros here, caught at finalize).
      if (rx.size() < req.sources.size()) {
        ec = errc::invalid_field;
      } else {
        for (std::size_t j = 0; j < missing.size() && all_readable; ++j) {
          const auto& src = req.sources[missing[j]];
          out[j] = m_world.padded_block(src.file.value, src.block);
        }
      }
    } else if (!ec) {
      const fec::codec c(req.k, req.max_parity);
      ec = c.decode(static_cast<std::uint32_t>(req.sources.size()), rx, missing, dst,
                    req.block_size);
    }
    if (!ec) {
      for (std::size_t j = 0; j < missing.size(); ++j) {
        const auto& src = req.sources[missing[j]];
        if (src.wanted) write({s, src.file}, src.offset, std::span(out[j]).first(src.length));
      }
    }
    if (par != m_parity.end()) m_parity.erase(par);
    m_engine->on_recovered(s, req.fec_block, ec, m_world.now());
    service(m_world.now());
  });
}

void rx_node::start_unicast(session_id s, const receiver::unicast_order&,
                            std::vector<receiver::byte_range> wanted) {
  // A reliable pipe at the receiver's unicast rate: two round trips to connect (handshake and
  // request), then records of 64 KiB back to back.
  const std::uint64_t gen = ++m_unicast_generation;
  const duration rtt = m_spec.down.delay + m_spec.up.delay;
  time_point t = m_world.now() + 2 * rtt;
  const std::string id = m_spec.id;
  m_world.at(t, [this, id, gen] {
    if (m_crashed || gen != m_unicast_generation) return;
    m_world.sender().on_unicast_started(id, m_world.now());
    m_world.service_sender_at_now();
  });
  for (const auto& r : wanted) {
    for (std::uint64_t off = 0; off < r.length; off += 65536) {
      const std::uint64_t len = std::min<std::uint64_t>(65536, r.length - off);
      t += std::chrono::nanoseconds(static_cast<std::int64_t>(len * 8e9 / m_spec.unicast_rate_bps));
      const auto file = r.file;
      const std::uint64_t at = r.offset + off;
      m_world.at(t, [this, s, file, at, len, gen] {
        if (m_crashed || gen != m_unicast_generation) return;
        const auto& data = m_world.files()[file.value].data;
        m_unicast_bytes += len;
        m_engine->on_unicast_data(s, file, at, {data.data() + at, static_cast<std::size_t>(len)},
                                  m_world.now());
        service(m_world.now());
      });
    }
  }
  m_world.at(t, [this, s, gen] {
    if (m_crashed || gen != m_unicast_generation) return;
    m_engine->on_unicast_closed(s, true, {}, m_world.now());
    service(m_world.now());
  });
}

void rx_node::query_held(session_id s, std::uint32_t, std::vector<receiver::held_query> q) {
  std::vector<receiver::held_answer> held;
  for (const auto& hq : q) {
    if (std::find(m_spec.held.begin(), m_spec.held.end(), hq.file.value) != m_spec.held.end()) {
      held.push_back({hq.file, m_world.digest(hq.file.value)});
    }
  }
  const std::uint64_t gen = m_generation;
  m_world.at(m_world.now(), [this, s, held, gen] {
    if (m_crashed || gen != m_generation) return;
    m_engine->on_held(s, held, m_world.now());
    service(m_world.now());
  });
}

void rx_node::service(time_point now) {
  if (m_crashed) return;
  m_engine->on_timer(now);
  auto next = m_engine->next_deadline();
  m_world.wake(*this, next, [this] { service(m_world.now()); });
  if (m_relay) m_world.relay_poke(*m_relay);
}

void rx_node::crash() {
  m_crashed = true;
  ++m_generation;
  ++m_wake_token;
  m_wake.reset();
  m_last_stats = m_engine->stats();
  m_engine.reset();
}

void rx_node::restart(time_point now) {
  receiver::receiver_config cfg;
  cfg.id = m_spec.id;
  m_engine = std::make_unique<receiver::receiver_engine>(cfg, *this, *this, m_seed + m_generation,
                                                         nullptr);
  m_crashed = false;
  for (const auto& [s, blob] : m_checkpoints) m_engine->restore(blob, now);
  service(now);
}

}  // namespace

sim_result run(const sim_config& cfg, const std::vector<sim_file>& files) {
  world w(cfg, files);
  return w.run();
}

}  // namespace mcdist::sim
