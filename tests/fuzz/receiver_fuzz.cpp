/// @file
/// libFuzzer target: every control message (and data) through the receiver engine.
///
/// The input is a script (tests/fuzz/fuzz_script.hpp) run against one receiver_engine with a
/// storage sink that records what it is asked and answers when the script says so, as the
/// daemon's file_store would (asynchronously, later). Ops (op % 8):
///   0  datagram from the sender's address, channel 0 (payload = the datagram)
///   1  datagram from another host, channel 1
///   2  advance the clock by payload[0..3) ms (big-endian) and run on_timer
///   3  answer the oldest query_held: payload[0..32) is the digest, bits of payload[32..) say
///      which queried files are held
///   4  answer the oldest finalize_file: stored, or failed if payload[0] is odd
///   5  deliver the next payload[0..2) bytes (>= 1) of a wanted range of the oldest unicast
///      order (range payload[2] % count), sequentially, each byte once, as the unicast client
///   6  the unicast client closes (complete if payload[0] is odd)
///   7  checkpoint every session; each blob must restore into a fresh engine
/// on_timer runs after every record, as the daemon runs it after every event.
///
/// Announces are not filtered: the engine charges its memory budgets before allocating. The engine
/// runs with max_sessions = 4 to keep one input's memory small.

#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/receiver_engine.hpp"
#include "tests/fuzz/fuzz_script.hpp"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <deque>
#include <map>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

/// What the engine asked of storage, answered later by the script.
struct recording_sink final : receiver_sink, storage_port {
  struct held_q {
    session_id s;
    std::vector<held_query> files;
  };
  struct order {
    session_id s;
    std::vector<byte_range> wanted;
    std::vector<std::uint64_t> done;  ///< bytes delivered of each range
  };
  std::deque<held_q> held;
  std::deque<std::pair<session_id, file_index>> finalizing;
  std::deque<order> orders;
  std::vector<std::string> blobs;

  void send(const endpoint&, std::span<const std::byte> d) override {
    // Whatever the engine sends must be a datagram it could parse itself.
    wire::header h;
    if (wire::parse_header(d, h)) std::abort();
  }
  void begin_file(file_key, std::uint32_t, const manifest_entry&, bool) override {}
  bool write(file_key, std::uint64_t, std::span<const std::byte>) override { return true; }
  void finalize(file_key k, const sha256_digest&) override {
    finalizing.emplace_back(k.session, k.file);
  }
  void discard_file(file_key) override {}
  void query_held(session_id s, std::uint32_t, std::vector<held_query> q) override {
    held.push_back({s, std::move(q)});
  }
  void checkpoint(session_id, std::string blob) override { blobs.push_back(std::move(blob)); }
  void close_session(session_id, bool) override {}
  void session_closed(session_id, bool) override {}
  void start_unicast(session_id s, const unicast_order&, std::vector<byte_range> w) override {
    std::vector<std::uint64_t> done(w.size(), 0);
    orders.push_back({s, std::move(w), std::move(done)});
  }
  void stop_unicast(session_id s) override {
    std::erase_if(orders, [&](const order& o) { return o.s == s; });
  }
};

std::shared_ptr<spdlog::logger> null_logger() {
  // Trace level: every log line is formatted, so the formatting of hostile fields is fuzzed too.
  static auto log = [] {
    auto l =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return log;
}

receiver_config fuzz_config() {
  receiver_config cfg;
  cfg.id = "site";
  cfg.max_sessions = 4;
  return cfg;
}

const endpoint sender_ep = *parse_endpoint("10.0.0.1:5000");
const endpoint stranger = *parse_endpoint("10.6.6.6:5000");

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  recording_sink sink;
  receiver_engine engine(fuzz_config(), sink, sink, 1, null_logger());
  time_point now{50s};
  fuzz::script_reader script(in);
  fuzz::record r;
  while (script.next(r)) {
    const auto p = r.payload;
    switch (r.op % 8) {
      case 0:
      case 1: engine.on_datagram(p, r.op % 8 == 0 ? sender_ep : stranger, r.op % 8, now); break;
      case 2: now += std::chrono::milliseconds(fuzz::read_be(p, 0, 3)); break;
      case 3: {
        if (sink.held.empty()) break;
        auto q = std::move(sink.held.front());
        sink.held.pop_front();
        sha256_digest digest;
        digest.fill(0x11);
        for (std::size_t i = 0; i < 32 && i < p.size(); ++i)
          digest[i] = std::to_integer<std::uint8_t>(p[i]);
        std::vector<held_answer> held;
        for (std::size_t i = 0; i < q.files.size(); ++i) {
          const std::size_t byte = 32 + i / 8;
          if (byte < p.size() && (std::to_integer<unsigned>(p[byte]) >> (i % 8) & 1)) {
            held.push_back({q.files[i].file, digest});
          }
        }
        engine.on_held(q.s, held, now);
        break;
      }
      case 4: {
        if (sink.finalizing.empty()) break;
        const auto [s, f] = sink.finalizing.front();
        sink.finalizing.pop_front();
        const bool fail = !p.empty() && (std::to_integer<unsigned>(p[0]) & 1);
        engine.on_file_stored(s, f,
                              fail ? std::make_error_code(std::errc::io_error) : std::error_code{},
                              fail ? "fuzz: i/o error" : "", now);
        break;
      }
      case 5: {
        if (sink.orders.empty() || sink.orders.front().wanted.empty()) break;
        auto& o = sink.orders.front();
        const std::size_t i = fuzz::read_be(p, 2, 1) % o.wanted.size();
        const auto& w = o.wanted[i];
        const std::uint64_t left = w.length - o.done[i];
        const std::uint64_t n =
            std::min<std::uint64_t>(std::max<std::uint64_t>(fuzz::read_be(p, 0, 2), 1), left);
        if (n == 0) break;
        const std::vector<std::byte> bytes(n, std::byte{7});
        const std::uint64_t at = w.offset + o.done[i];
        o.done[i] += n;
        const session_id s = o.s;
        engine.on_unicast_data(s, w.file, at, bytes, now);
        break;
      }
      case 6: {
        if (sink.orders.empty()) break;
        const session_id s = sink.orders.front().s;
        sink.orders.pop_front();
        engine.on_unicast_closed(s, !p.empty() && (std::to_integer<unsigned>(p[0]) & 1), "fuzz",
                                 now);
        break;
      }
      case 7: {
        sink.blobs.clear();
        engine.checkpoint_all(now);
        for (const auto& blob : sink.blobs) {
          // The engine's own checkpoint is refused by the engine that holds the session...
          if (!engine.restore(blob, now)) std::abort();
          // ... and restores into a fresh one (the daemon after a restart).
          recording_sink other_sink;
          receiver_engine other(fuzz_config(), other_sink, other_sink, 2, null_logger());
          if (other.restore(blob, now)) std::abort();
          other.on_timer(now + 1s);
        }
        break;
      }
    }
    engine.on_timer(now);
  }
  return 0;
}
