// The unicast transports over loopback, end to end: real sockets, both ends on one io_context
// (as in one program), every delivered byte checked against the source as it arrives and every
// file's SHA-256 at the end.

#include "common/unicast/io/server.hpp"

#include "common/net/udp.hpp"
#include "common/unicast/io/client.hpp"
#include "common/unicast/io/sctp_assoc.hpp"
#include "tests/common/unicast/io/test_support.hpp"
#include "tests/common/unicast/token.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <numeric>

using namespace mcdist;
using namespace mcdist::unicast;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

constexpr std::uint64_t token_value = 0x5eed5eed12345678ull;
const fallback_token token = test::tok(token_value);
const session_id session{0xc0ffee01};
const std::string receiver = "site-a";

/// The mixed set of the brief: file 0 is 20 MB (first, so small files must overtake it),
/// 1 MB, 0 B, 1 B, then 100 x 10 kB.
std::vector<std::uint64_t> mixed_sizes() {
  std::vector<std::uint64_t> s{20'000'000, 1'000'000, 0, 1};
  for (int i = 0; i < 100; ++i) s.push_back(10'000);
  return s;
}

/// 127.0.0.1, port 0 (ephemeral; parse_endpoint refuses port 0).
endpoint loopback() { return *parse_address("127.0.0.1"); }

struct session_end {
  session_info info;
  session_stats stats;
  std::error_code ec;
  std::string detail;
};

/// A server on loopback with every listener that works here, over an in-memory source.
struct rig {
  explicit rig(const std::vector<std::uint64_t>& sizes, server_options o = {}) : source(sizes) {
    o.sctp_udp = loopback();
    o.tcp = loopback();
    server_events ev;
    ev.on_session_end = [this](const session_info& i, const session_stats& s,
                               const std::error_code& ec, const std::string& d) {
      ends.push_back({i, s, ec, d});
    };
    ev.on_file_acked = [this](const session_info&, file_index) { ++acked; };
    srv = std::make_unique<server>(io, source, o, ev);
    std::string detail;
    const auto ec = srv->start(detail);
    INFO(detail);
    REQUIRE_FALSE(ec);
    REQUIRE_FALSE(srv->register_client({token, receiver, session, {}, true}));
  }

  client_options options(transport_kind k, std::size_t connections = 0) const {
    client_options o;
    o.kind = k;
    o.server = k == transport_kind::tcp ? *srv->tcp_endpoint() : *srv->sctp_udp_endpoint();
    o.token = token;
    o.session = session;
    o.receiver_id = receiver;
    o.tcp_connections = connections;
    o.sctp_associations = connections;
    return o;
  }

  std::vector<byte_range> everything() const {
    std::vector<byte_range> r;
    for (std::uint32_t f = 0; f < source.file_count(); ++f)
      r.push_back({file_index{f}, 0, source.size(file_index{f})});
    return r;
  }

  asio::io_context io;
  test::memory_source source;
  std::unique_ptr<server> srv;
  std::vector<session_end> ends;
  std::uint64_t acked = 0;
};

struct outcome {
  bool closed = false;
  std::error_code ec;
  std::string detail;
  client_stats stats;
  std::vector<byte_range> outstanding;
  std::int64_t done_before_file0 = -1;  ///< files completed before file 0 completed
};

/// Records how a client ended: set by the on_closed event it hands to make_client.
struct close_record {
  bool closed = false;
  std::error_code got;
  std::string text;
  client_events events() {
    client_events ev;
    ev.on_closed = [this](const std::error_code& e, const std::string& d) {
      closed = true;
      got = e;
      text = d;
    };
    return ev;
  }
};

/// A client made with client_options::await_credentials for grant `g`, registered with `r`'s
/// server here: its bytes go to a checking sink, and it closes once everything requested is
/// in. Not started. Stays in place (its events point at it).
struct awaiting_client {
  awaiting_client(rig& r, transport_kind kind, std::size_t connections, const client_grant& g)
      : sink(r.source) {
    REQUIRE_FALSE(r.srv->register_client(g));
    auto o = r.options(kind, connections);
    o.token = {};
    o.receiver_id = g.receiver_id;
    o.await_credentials = true;
    client_events ev = cr.events();
    ev.on_data = [this](file_index f, std::uint64_t off, std::span<const std::byte> b) {
      sink.on_data(f, off, b);
    };
    ev.on_file_done = [this](file_index f) { sink.on_file_done(f); };
    ev.on_complete = [this] { c->close(); };
    c = make_client(r.io, o, ev);
  }
  awaiting_client(const awaiting_client&) = delete;
  awaiting_client& operator=(const awaiting_client&) = delete;

  test::checking_sink sink;
  close_record cr;
  std::unique_ptr<client> c;
};

/// Runs one client to its end: requests `wanted` at once, closes on completion.
/// `on_progress` sees the bytes delivered so far after each piece.
outcome fetch(rig& r, const client_options& o, test::checking_sink& sink,
              const std::vector<byte_range>& wanted,
              const std::function<void(std::uint64_t)>& on_progress = {},
              std::chrono::milliseconds limit = 120s) {
  outcome out;
  std::unique_ptr<client> c;
  std::size_t done_count = 0;
  client_events ev;
  ev.on_data = [&](file_index f, std::uint64_t off, std::span<const std::byte> b) {
    sink.on_data(f, off, b);
    if (on_progress) on_progress(sink.delivered);
  };
  ev.on_file_done = [&](file_index f) {
    sink.on_file_done(f);
    if (f.value == 0 && out.done_before_file0 < 0)
      out.done_before_file0 = static_cast<std::int64_t>(done_count);
    ++done_count;
  };
  ev.on_complete = [&] { c->close(); };
  ev.on_closed = [&](const std::error_code& ec, const std::string& d) {
    out.closed = true;
    out.ec = ec;
    out.detail = d;
  };
  c = make_client(r.io, o, ev);
  REQUIRE_FALSE(c->request(wanted));
  c->start();
  const bool finished = test::run_until(
      r.io, [&] { return out.closed; }, limit);
  out.stats = c->stats();
  out.outstanding = c->outstanding();
  c.reset();
  REQUIRE(finished);
  return out;
}

std::uint64_t sum_bytes(const std::vector<byte_range>& v) {
  return std::accumulate(v.begin(), v.end(), std::uint64_t{0},
                         [](std::uint64_t a, const byte_range& r) { return a + r.length; });
}

std::uint64_t sum_of(const std::vector<std::uint64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
}

/// How many of the connections (or channels) in `v` carried any bytes.
std::size_t carriers(const std::vector<std::uint64_t>& v) {
  return static_cast<std::size_t>(
      std::count_if(v.begin(), v.end(), [](std::uint64_t b) { return b > 0; }));
}

std::string kind_name(transport_kind k, std::size_t n) {
  return std::string(to_string(k)) + " n=" + std::to_string(n);
}

}  // namespace

TEST_CASE("each transport delivers a mixed set exactly, files interleaved",
          "[integration][unicast]") {
  const std::vector<std::pair<transport_kind, std::size_t>> variants{{transport_kind::sctp_udp, 0},
                                                                     {transport_kind::sctp_udp, 4},
                                                                     {transport_kind::tcp, 1},
                                                                     {transport_kind::tcp, 4}};
  for (const auto& [kind, n] : variants) {
    SECTION(kind_name(kind, n)) {
      rig r(mixed_sizes());
      test::checking_sink sink(r.source);
      const auto o = fetch(r, r.options(kind, n), sink, r.everything());
      INFO(o.detail);
      REQUIRE_FALSE(o.ec);
      REQUIRE(sink.mismatches == 0);
      REQUIRE(sink.out_of_range == 0);
      REQUIRE(sink.delivered == r.source.total());
      REQUIRE(sink.all_equal());
      REQUIRE(std::all_of(sink.done.begin(), sink.done.end(), [](bool d) { return d; }));
      REQUIRE(o.outstanding.empty());
      // Pipelining: all requests went out at once and the server served files side by side,
      // so the 100 small files and the 1 MB file finished while the 20 MB file 0 was still
      // arriving.
      REQUIRE(o.done_before_file0 >= 90);
      if (kind == transport_kind::tcp) {
        REQUIRE(o.stats.connections == n);
        // Records went on several connections (whichever could take them). Which ones, and
        // so whether every one did, is the scheduler's: a loaded machine may leave one idle.
        REQUIRE(o.stats.bytes_per_channel.size() <= n);
        REQUIRE(sum_of(o.stats.bytes_per_channel) == r.source.total());
        if (n > 1) REQUIRE(carriers(o.stats.bytes_per_channel) >= 2);
      } else {
        // Records went on several associations (each while it had room in its congestion
        // window), and on many streams at once, none on the control stream 0.
        const std::size_t associations = std::max<std::size_t>(n, 1);
        REQUIRE(o.stats.connections == associations);
        REQUIRE(o.stats.bytes_per_connection.size() <= associations);
        REQUIRE(sum_of(o.stats.bytes_per_connection) == r.source.total());
        if (associations > 1) REQUIRE(carriers(o.stats.bytes_per_connection) >= 2);
        REQUIRE(o.stats.streams == default_sctp_streams);
        REQUIRE(o.stats.bytes_per_channel.at(0) == 0);
        const auto used =
            std::count_if(o.stats.bytes_per_channel.begin(), o.stats.bytes_per_channel.end(),
                          [](std::uint64_t b) { return b > 0; });
        REQUIRE(used >= 16);
      }
      // The server saw one session, ended by the client's bye, every file acknowledged.
      REQUIRE(test::run_until(
          r.io, [&] { return !r.ends.empty(); }, 10s));
      REQUIRE(r.ends.size() == 1);
      REQUIRE_FALSE(r.ends[0].ec);
      REQUIRE(r.ends[0].info.receiver_id == receiver);
      REQUIRE(r.ends[0].stats.bytes_sent == r.source.total());
      REQUIRE(r.ends[0].stats.requests == r.source.file_count() - 1);  // 0-byte file not sent
      REQUIRE(r.acked == r.source.file_count() - 1);
      REQUIRE(r.srv->active_sessions() == 0);
    }
  }
}

TEST_CASE(
    "stopping the server ends a session whose receiver completed as done, any other as aborted",
    "[integration][unicast]") {
  // The sender stops its server when its session is over. A receiver's COMPLETE may come in
  // before its bye and close (a lost segment still being retransmitted): that unicast session
  // is done, not failed, in the log, the counters and on_session_end.
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    for (const bool completed : {true, false}) {
      DYNAMIC_SECTION(to_string(kind) << (completed ? ", completed" : ", not completed")) {
        rig r({10'000, 20'000});
        test::checking_sink sink(r.source);
        std::unique_ptr<client> c;
        bool all_in = false;
        client_events ev;
        ev.on_data = [&](file_index f, std::uint64_t off, std::span<const std::byte> b) {
          sink.on_data(f, off, b);
        };
        ev.on_file_done = [&](file_index f) { sink.on_file_done(f); };
        ev.on_complete = [&] { all_in = true; };  // no close: the bye never leaves
        c = make_client(r.io, r.options(kind), ev);
        REQUIRE_FALSE(c->request(r.everything()));
        c->start();
        REQUIRE(test::run_until(
            r.io, [&] { return all_in && r.acked == r.source.file_count(); }, 30s));
        REQUIRE(sink.all_equal());
        REQUIRE(r.srv->active_sessions() == 1);
        REQUIRE(r.ends.empty());
        std::vector<std::string> asked;
        r.srv->stop([&](const std::string& id) {
          asked.push_back(id);
          return completed && id == receiver;
        });
        REQUIRE(asked == std::vector<std::string>{receiver});
        REQUIRE(r.ends.size() == 1);
        REQUIRE(r.ends[0].info.receiver_id == receiver);
        REQUIRE(r.ends[0].stats.bytes_sent == r.source.total());
        REQUIRE(r.srv->active_sessions() == 0);
        if (completed) {
          REQUIRE_FALSE(r.ends[0].ec);
          REQUIRE(r.srv->counters().sessions_completed == 1);
          REQUIRE(r.srv->counters().sessions_failed == 0);
        } else {
          REQUIRE(r.ends[0].ec == error::aborted);
          REQUIRE(r.srv->counters().sessions_completed == 0);
          REQUIRE(r.srv->counters().sessions_failed == 1);
        }
        c.reset();
      }
    }
  }
}

TEST_CASE("a cut mid-transfer delivers only correct bytes and a second client completes",
          "[integration][unicast]") {
  const std::vector<std::pair<transport_kind, std::size_t>> variants{{transport_kind::sctp_udp, 0},
                                                                     {transport_kind::sctp_udp, 3},
                                                                     {transport_kind::tcp, 1},
                                                                     {transport_kind::tcp, 4}};
  for (const auto& [kind, n] : variants) {
    SECTION(kind_name(kind, n)) {
      rig r(mixed_sizes());
      test::checking_sink sink(r.source);
      auto first_opts = r.options(kind, n);
      std::shared_ptr<test::cutting_proxy> proxy;
      std::function<void(std::uint64_t)> progress;
      bool aborted = false;
      if (kind == transport_kind::tcp) {
        // Cut the server-to-client bytes of one connection at an odd count, inside a record.
        const auto t = net::to_asio(*r.srv->tcp_endpoint());
        proxy = std::make_shared<test::cutting_proxy>(
            r.io, asio::ip::tcp::endpoint(t.address(), t.port()), n > 1 ? 1 : 0, 3'000'000 + 777);
        proxy->start();
        first_opts.server = net::from_asio(
            asio::ip::udp::endpoint(proxy->local().address(), proxy->local().port()));
      } else {
        // Drop the associations (SCTP ABORT from the server) once 5 MB have arrived.
        progress = [&](std::uint64_t delivered) {
          if (!aborted && delivered > 5'000'000) {
            aborted = true;
            asio::post(r.io, [&] { r.srv->abort_client(token); });
          }
        };
      }
      const auto first = fetch(r, first_opts, sink, r.everything(), progress);
      INFO(first.detail);
      REQUIRE(first.ec);  // the cut is an error, reported
      REQUIRE(first.ec == error::connection_lost);
      if (proxy) REQUIRE(proxy->cut_done);
      // Everything delivered was exactly right, and exactly what is missing is outstanding.
      REQUIRE(sink.mismatches == 0);
      REQUIRE(sink.out_of_range == 0);
      REQUIRE(sink.delivered > 0);
      REQUIRE(sink.delivered < r.source.total());
      REQUIRE(sink.delivered + sum_bytes(first.outstanding) == r.source.total());

      // A second client asks for just what is missing and completes the set.
      const auto second = fetch(r, r.options(kind, n), sink, first.outstanding);
      INFO(second.detail);
      REQUIRE_FALSE(second.ec);
      REQUIRE(sink.mismatches == 0);
      REQUIRE(sink.delivered == r.source.total());
      REQUIRE(sink.all_equal());
      if (proxy) proxy->stop();
    }
  }
}

TEST_CASE("a bad token is refused with a clear error", "[integration][unicast]") {
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({1000});
      test::checking_sink sink(r.source);
      auto o = r.options(kind, 2);
      o.token = test::tok(token_value ^ 1);
      const auto out = fetch(r, o, sink, r.everything(), {}, 20s);
      REQUIRE(out.ec == error::refused);
      REQUIRE(out.detail.find("refused receiver 'site-a'") != std::string::npos);
      REQUIRE(out.detail.find("bad_credentials") != std::string::npos);
      REQUIRE(sink.delivered == 0);
      REQUIRE(r.srv->counters().hellos_refused >= 1);
      REQUIRE(r.srv->counters().sessions_started == 0);
      // A wrong receiver id with the right token is refused the same way.
      o.token = token;
      o.receiver_id = "site-b";
      const auto out2 = fetch(r, o, sink, r.everything(), {}, 20s);
      REQUIRE(out2.ec == error::refused);
    }
  }
}

TEST_CASE("a signed grant lets in only a client that proves the site key",
          "[integration][unicast]") {
  crypto::key32 site_key{};
  crypto::random_bytes(site_key);
  crypto::key32 wrong_key = site_key;
  wrong_key[0] ^= 1;
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({300'000, 10'000, 0});
      const auto signed_token = test::tok(token_value + 7);
      client_grant g{signed_token, "site-s", session, {}, true};
      g.proof_key = site_key;
      REQUIRE_FALSE(r.srv->register_client(g));
      auto o = r.options(kind, 3);
      o.token = signed_token;
      o.receiver_id = "site-s";
      // The right token, id and session (a sniffed FALLBACK order), but no key, then the
      // wrong key: refused at the hello, nothing delivered, counted as a missing proof.
      for (const auto& key : {std::optional<crypto::key32>{}, std::optional(wrong_key)}) {
        test::checking_sink sink(r.source);
        o.proof_key = key;
        const auto out = fetch(r, o, sink, r.everything(), {}, 20s);
        REQUIRE(out.ec == error::refused);
        REQUIRE(out.detail.find("did not prove its site key") != std::string::npos);
        REQUIRE(sink.delivered == 0);
      }
      REQUIRE(r.srv->counters().hellos_bad_proof >= 2);
      REQUIRE(r.srv->counters().sessions_started == 0);
      // The site itself gets every byte.
      test::checking_sink sink(r.source);
      o.proof_key = site_key;
      const auto out = fetch(r, o, sink, r.everything());
      INFO(out.detail);
      REQUIRE_FALSE(out.ec);
      REQUIRE(sink.delivered == 310'000);
      REQUIRE(r.srv->counters().sessions_completed == 1);
      // An unsigned grant still works for a client with no key (it skips the challenge).
      auto plain = r.options(kind, 3);
      test::checking_sink sink2(r.source);
      const auto out2 = fetch(r, plain, sink2, r.everything());
      INFO(out2.detail);
      REQUIRE_FALSE(out2.ec);
      REQUIRE(sink2.delivered == 310'000);
    }
  }
}

TEST_CASE("a client opened before its credentials says nothing until they come, then fetches",
          "[integration][unicast]") {
  // A site of a session served over unicast from the start opens its association (or its
  // connections) with its REGISTER and gets the token from the FALLBACK order a round trip
  // later (client_options::await_credentials).
  enum class grant_kind { plain, proved, sealed };
  const auto gk = GENERATE(grant_kind::plain, grant_kind::proved, grant_kind::sealed);
  CAPTURE(static_cast<int>(gk));
  crypto::key32 site_key{};
  crypto::random_bytes(site_key);
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({300'000, 10'000, 0});
      const auto t = test::tok(token_value + 11);
      client_grant g{t, "site-p", session, {}, true};
      if (gk != grant_kind::plain) g.proof_key = site_key;
      g.seal_records = gk == grant_kind::sealed;
      awaiting_client a(r, kind, 3, g);
      auto& [sink, cr, c] = a;
      c->start();
      REQUIRE(test::run_until(
          r.io, [&] { return c->established() && r.srv->counters().connections_accepted >= 1; },
          10s));
      // Up, but no hello: no session, nothing sent, even with requests queued.
      REQUIRE_FALSE(c->request(r.everything()));
      test::run_until(
          r.io, [] { return false; }, 200ms);
      CHECK_FALSE(cr.closed);
      CHECK(r.srv->counters().sessions_started == 0);
      CHECK(sink.delivered == 0);
      client_credentials creds{t, std::nullopt, false};
      if (gk != grant_kind::plain) creds.proof_key = site_key;
      creds.seal_records = gk == grant_kind::sealed;
      c->set_credentials(creds);
      REQUIRE(test::run_until(
          r.io, [&] { return cr.closed; }, 60s));
      INFO(cr.text);
      REQUIRE_FALSE(cr.got);
      REQUIRE(sink.delivered == 310'000);
      REQUIRE(sink.out_of_range == 0);
      REQUIRE(r.srv->counters().sessions_started == 1);
      REQUIRE(r.srv->counters().sessions_completed == 1);
      c.reset();
    }
  }
}

TEST_CASE("a client opened before its credentials grows to the order's count, then fetches",
          "[integration][unicast]") {
  // The announce's count (computed before any RTT is known) opened the transport; the FALLBACK
  // order asks for more. The connections already up stay; the new ones join them, and every
  // hello names the grown count.
  const bool sealed = GENERATE(false, true);
  CAPTURE(sealed);
  crypto::key32 site_key{};
  crypto::random_bytes(site_key);
  for (const auto& [kind, before, after] :
       {std::tuple{transport_kind::sctp_udp, std::size_t{1}, std::size_t{4}},
        std::tuple{transport_kind::tcp, std::size_t{2}, std::size_t{5}}}) {
    SECTION(kind_name(kind, before) + " -> " + std::to_string(after)) {
      rig r({6'000'000, 10'000, 0});
      const auto t = test::tok(token_value + 21);
      client_grant g{t, "site-g", session, {}, true};
      if (sealed) {
        g.proof_key = site_key;
        g.seal_records = true;
      }
      awaiting_client a(r, kind, before, g);
      auto& [sink, cr, c] = a;
      REQUIRE_FALSE(c->request(r.everything()));
      c->start();
      REQUIRE(test::run_until(
          r.io,
          [&] { return c->established() && r.srv->counters().connections_accepted >= before; },
          10s));
      // Never below what it has, never above the protocol's limit.
      REQUIRE_FALSE(c->grow(before - 1));
      REQUIRE_FALSE(c->grow(max_connections + 1));
      REQUIRE(c->grow(before));
      REQUIRE(c->grow(after));
      // Every connection is up before the hellos go, so every one can carry records.
      REQUIRE(test::run_until(
          r.io, [&] { return r.srv->counters().connections_accepted >= after; }, 10s));
      client_credentials creds{t, std::nullopt, false};
      if (sealed) {
        creds.proof_key = site_key;
        creds.seal_records = true;
      }
      c->set_credentials(creds);
      // The hellos are made: the count is fixed now.
      REQUIRE_FALSE(c->grow(after + 1));
      REQUIRE(test::run_until(
          r.io, [&] { return cr.closed; }, 60s));
      INFO(cr.text);
      REQUIRE_FALSE(cr.got);
      REQUIRE(sink.delivered == r.source.total());
      REQUIRE(sink.mismatches == 0);
      REQUIRE(sink.out_of_range == 0);
      REQUIRE(sink.all_equal());
      // One session of the grown count (the welcome names the count of the hellos), records
      // on several connections (which ones is the scheduler's).
      const auto st = c->stats();
      REQUIRE(st.connections == after);
      REQUIRE(st.bytes_per_connection.size() <= after);
      REQUIRE(sum_of(st.bytes_per_connection) == r.source.total());
      REQUIRE(carriers(st.bytes_per_connection) >= 2);
      REQUIRE(r.srv->counters().sessions_started == 1);
      REQUIRE(r.srv->counters().sessions_completed == 1);
      REQUIRE(test::run_until(
          r.io, [&] { return !r.ends.empty(); }, 10s));
      REQUIRE(r.ends[0].info.connections == after);
      REQUIRE(r.ends[0].stats.bytes_sent == r.source.total());
      c.reset();
    }
  }
}

TEST_CASE("a client grows only before its credentials, and kernel SCTP never",
          "[integration][unicast]") {
  rig r({10'000});
  SECTION("after set_credentials") {
    auto o = r.options(transport_kind::tcp, 2);
    o.token = {};
    o.await_credentials = true;
    test::checking_sink sink(r.source);
    close_record cr;
    std::unique_ptr<client> c;
    client_events ev = cr.events();
    ev.on_data = [&](file_index f, std::uint64_t off, std::span<const std::byte> b) {
      sink.on_data(f, off, b);
    };
    ev.on_complete = [&] { c->close(); };
    c = make_client(r.io, o, ev);
    c->set_credentials({token, std::nullopt, false});
    REQUIRE_FALSE(c->grow(4));
    REQUIRE_FALSE(c->request(r.everything()));
    c->start();
    REQUIRE(test::run_until(
        r.io, [&] { return cr.closed; }, 20s));
    INFO(cr.text);
    REQUIRE_FALSE(cr.got);
    REQUIRE(sink.delivered == r.source.total());
    // Two connections, as created: the refused grow changed nothing.
    CHECK(c->stats().connections == 2);
    REQUIRE(test::run_until(
        r.io, [&] { return !r.ends.empty(); }, 10s));
    CHECK(r.ends[0].info.connections == 2);
  }
  SECTION("without await_credentials") {
    close_record cr;
    auto c = make_client(r.io, r.options(transport_kind::sctp_udp, 1), cr.events());
    REQUIRE_FALSE(c->grow(3));
  }
  SECTION("kernel SCTP") {
    auto o = r.options(transport_kind::sctp_kernel, 1);
    o.token = {};
    o.await_credentials = true;
    close_record cr;
    auto c = make_client(r.io, o, cr.events());
    REQUIRE_FALSE(c->grow(2));
    REQUIRE(c->grow(1));
  }
  SECTION("a failed client") {
    auto o = r.options(transport_kind::tcp, 1);
    o.server = *parse_endpoint("127.0.0.1:1");  // nobody listens
    o.token = {};
    o.await_credentials = true;
    close_record cr;
    auto c = make_client(r.io, o, cr.events());
    c->start();
    REQUIRE(test::run_until(
        r.io, [&] { return cr.closed; }, 10s));
    REQUIRE(cr.got);
    REQUIRE_FALSE(c->grow(2));
  }
}

TEST_CASE("a client opened before its credentials is refused with wrong ones",
          "[integration][unicast]") {
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({10'000});
      auto o = r.options(kind, 2);
      o.token = {};
      o.await_credentials = true;
      close_record cr;
      auto c = make_client(r.io, o, cr.events());
      REQUIRE_FALSE(c->request(r.everything()));
      c->start();
      REQUIRE(test::run_until(
          r.io, [&] { return c->established(); }, 10s));
      c->set_credentials({test::tok(token_value ^ 1), std::nullopt, false});
      REQUIRE(test::run_until(
          r.io, [&] { return cr.closed; }, 20s));
      CHECK(cr.got == error::refused);
      CHECK(r.srv->counters().hellos_refused >= 1);
      CHECK(r.srv->counters().sessions_started == 0);
    }
  }
}

TEST_CASE("an encrypted grant seals every frame after the hello, both transports",
          "[integration][unicast]") {
  crypto::key32 site_key{};
  crypto::random_bytes(site_key);
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      // Mixed sizes: a 20 MB file over many records, 0- and 1-byte files, 100 small ones (over
      // SCTP on 31 streams, each with its own sequence).
      rig r(mixed_sizes());
      const auto sealed_token = test::tok(token_value + 9);
      client_grant g{sealed_token, "site-e", session, {}, true};
      g.proof_key = site_key;
      g.seal_records = true;
      REQUIRE_FALSE(r.srv->register_client(g));
      auto o = r.options(kind, 4);
      o.token = sealed_token;
      o.receiver_id = "site-e";
      o.proof_key = site_key;
      // A client that proves the key but speaks plain gets a sealed welcome it cannot read,
      // and its plain request is refused by the server: whichever comes first ends it
      // (protocol violation here, or the server's abort), with nothing delivered.
      {
        test::checking_sink sink(r.source);
        const auto out = fetch(r, o, sink, r.everything(), {}, 20s);
        INFO(out.detail);
        REQUIRE((out.ec == error::protocol_violation || out.ec == error::connection_lost));
        REQUIRE(sink.delivered == 0);
      }
      // The site with sealing on gets every byte, exact (checking_sink compares each byte).
      o.seal_records = true;
      test::checking_sink sink(r.source);
      const auto out = fetch(r, o, sink, r.everything());
      INFO(out.detail);
      REQUIRE_FALSE(out.ec);
      REQUIRE(sink.delivered == r.source.total());
      REQUIRE(r.srv->counters().sessions_completed >= 1);
      // Sealed records were refused nowhere.
      REQUIRE(r.srv->counters().frames[errc::unauthenticated] == 0);
      // Without the key no client can be made to seal (never plain by mistake).
      auto keyless = o;
      keyless.proof_key.reset();
      REQUIRE_THROWS_AS(make_client(r.io, keyless, {}), std::invalid_argument);
    }
  }
}

TEST_CASE("garbage on the TCP port is dropped and the server keeps serving",
          "[integration][unicast]") {
  server_options so;
  so.hello_timeout = 300ms;
  rig r(mixed_sizes(), so);
  using tcp = asio::ip::tcp;
  const auto t = net::to_asio(*r.srv->tcp_endpoint());
  const tcp::endpoint target(t.address(), t.port());

  // Each of these must make the server close the connection.
  std::vector<std::vector<std::byte>> garbage;
  auto text = [](std::string_view s) {
    std::vector<std::byte> v(s.size());
    std::memcpy(v.data(), s.data(), s.size());
    return v;
  };
  garbage.push_back(text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  {
    std::vector<std::byte> f(frame_header_size);
    write_frame_header(f, frame_type::request, 0x7fffffff);  // oversized length
    garbage.push_back(f);
  }
  {
    std::vector<std::byte> f;
    append_frame(f, request{{{file_index{0}, 0, 10}}});  // request before hello
    garbage.push_back(f);
  }
  {
    std::vector<std::byte> f(record_header_size + 4);
    write_record_header(f, file_index{0}, 0, 4);  // data to the server
    garbage.push_back(f);
  }
  garbage.push_back({});  // says nothing: the hello timeout drops it

  std::vector<std::unique_ptr<tcp::socket>> socks;
  std::vector<bool> dropped(garbage.size(), false);
  std::vector<std::array<std::byte, 256>> bufs(garbage.size());
  std::vector<std::function<void()>> readers(garbage.size());
  for (std::size_t i = 0; i < garbage.size(); ++i) {
    socks.push_back(std::make_unique<tcp::socket>(r.io));
    socks.back()->connect(target);
    if (!garbage[i].empty()) asio::write(*socks.back(), asio::buffer(garbage[i]));
    // The server's challenge comes first; read on until EOF or reset: dropped.
    readers[i] = [&, i] {
      socks[i]->async_read_some(asio::buffer(bufs[i]),
                                [&, i](const boost::system::error_code& ec, std::size_t) {
                                  if (ec) {
                                    dropped[i] = true;
                                  } else {
                                    readers[i]();
                                  }
                                });
    };
    readers[i]();
  }
  // Meanwhile a good client is served in full.
  test::checking_sink sink(r.source);
  const auto out = fetch(r, r.options(transport_kind::tcp, 4), sink, r.everything());
  INFO(out.detail);
  REQUIRE_FALSE(out.ec);
  REQUIRE(sink.all_equal());
  REQUIRE(test::run_until(
      r.io, [&] { return std::all_of(dropped.begin(), dropped.end(), [](bool d) { return d; }); },
      10s));
  const auto& c = r.srv->counters();
  REQUIRE(c.frames[errc::bad_magic] == 1);
  REQUIRE(c.frames[errc::oversized] == 1);
  REQUIRE(c.protocol_violations == 2);
  REQUIRE(c.hello_timeouts == 1);
  REQUIRE(c.sessions_completed == 1);
}

TEST_CASE("a hello after its client's session ended is closed, not a second session",
          "[integration][unicast]") {
  // A connection or association of a client that comes up after the client's bye (a grown
  // client's late association, a handshake retransmitted after a loss) must not start a
  // session that waits out the idle timeout; a new client (a new nonce) still gets one.
  rig r({10'000});
  auto hello_frame = [](std::uint64_t nonce) {
    hello h;
    h.token = token;
    h.session = session;
    h.receiver_id = receiver;
    h.client_nonce = nonce;
    h.connection_index = 0;
    h.connection_count = 2;
    std::vector<std::byte> f;
    append_frame(f, h);
    return f;
  };
  auto with_bye = [](std::vector<std::byte> f) {
    append_bye(f);
    return f;
  };
  using tcp = asio::ip::tcp;
  SECTION("tcp") {
    const auto t = net::to_asio(*r.srv->tcp_endpoint());
    const tcp::endpoint target(t.address(), t.port());
    // Says `frames`, then reads until the server closes; returns once it has.
    auto say = [&](const std::vector<std::byte>& frames) {
      tcp::socket sock(r.io);
      sock.connect(target);
      asio::write(sock, asio::buffer(frames));
      bool closed = false;
      std::array<std::byte, 512> buf{};
      std::function<void()> read = [&] {
        sock.async_read_some(asio::buffer(buf),
                             [&](const boost::system::error_code& ec, std::size_t) {
                               if (ec) {
                                 closed = true;
                               } else {
                                 read();
                               }
                             });
      };
      read();
      REQUIRE(test::run_until(
          r.io, [&] { return closed; }, 10s));
    };
    say(with_bye(hello_frame(0x1111)));  // a session, ended by its bye
    REQUIRE(r.srv->counters().sessions_started == 1);
    REQUIRE(r.srv->counters().sessions_completed == 1);
    say(hello_frame(0x1111));  // its second connection, too late
    CHECK(r.srv->counters().late_hellos == 1);
    CHECK(r.srv->counters().sessions_started == 1);
    CHECK(r.srv->active_sessions() == 0);
    say(with_bye(hello_frame(0x2222)));  // another client of the same grant
    CHECK(r.srv->counters().sessions_started == 2);
    CHECK(r.srv->counters().sessions_completed == 2);
    CHECK(r.srv->counters().late_hellos == 1);
  }
  SECTION("sctp") {
    const sctp_socket_options so;
    const usrsctp_tuning tuning;
    // Says `frames` on stream 0, one message each (an SCTP message is exactly one frame),
    // then waits until the server ends the association.
    auto say = [&](const std::vector<std::vector<std::byte>>& frames) {
      std::error_code ec;
      std::string detail;
      auto a =
          usrsctp_connect(r.io, *r.srv->sctp_udp_endpoint(), std::nullopt, so, tuning, ec, detail);
      INFO(detail);
      REQUIRE(a);
      bool ended = false;
      std::size_t sent = 0;
      std::vector<std::byte> buf(70'000);
      a->set_ready_handler([&] {
        if (a->connect_status()) {
          ended = a->connect_status() != std::errc::operation_in_progress;
          return;
        }
        while (sent < frames.size() && !a->send(0, frames[sent])) ++sent;
        for (;;) {
          sctp_assoc::received got;
          const auto rec = a->receive(buf, got);
          if (rec == std::errc::operation_would_block) return;
          if (rec || (!got.notification && got.bytes == 0)) {
            ended = true;
            return;
          }
        }
      });
      REQUIRE(test::run_until(
          r.io, [&] { return ended; }, 10s));
      a->abort();
    };
    say({hello_frame(0x3333), with_bye({})});
    REQUIRE(r.srv->counters().sessions_started == 1);
    REQUIRE(r.srv->counters().sessions_completed == 1);
    say({hello_frame(0x3333)});
    CHECK(r.srv->counters().late_hellos == 1);
    CHECK(r.srv->counters().sessions_started == 1);
    CHECK(r.srv->active_sessions() == 0);
    say({hello_frame(0x4444), with_bye({})});
    CHECK(r.srv->counters().sessions_started == 2);
    CHECK(r.srv->counters().sessions_completed == 2);
    CHECK(r.srv->counters().late_hellos == 1);
  }
}

TEST_CASE("a usrsctp association reports its send queue against its congestion window",
          "[integration][unicast]") {
  // What the server spreads records over several associations by (sctp_assoc::send_queue,
  // usrsctp's SCTP_GET_SNDBUF_USE, which usrsctp.h does not export): without it every record
  // would go to the first association that can take one.
  asio::io_context io;
  std::error_code ec;
  std::string detail;
  const sctp_socket_options so;
  const usrsctp_tuning tuning;
  auto listener = open_usrsctp_listener(io, loopback(), so, tuning, {}, ec, detail);
  INFO(detail);
  REQUIRE(listener);
  std::unique_ptr<sctp_assoc> accepted;
  listener->set_accept_handler([&](std::unique_ptr<sctp_assoc> a) { accepted = std::move(a); });
  auto a = usrsctp_connect(io, listener->local(), std::nullopt, so, tuning, ec, detail);
  REQUIRE(a);
  a->set_ready_handler([] {});
  REQUIRE(test::run_until(
      io, [&] { return accepted && !a->connect_status(); }, 10s));
  accepted->set_ready_handler([] {});
  const auto idle = accepted->send_queue();
  REQUIRE(idle);
  CHECK(idle->queued_bytes == 0);
  CHECK(idle->cwnd_bytes >= so.path_mtu);  // at least one packet (IW10 at the start)
  // Queued and not yet acknowledged: counted until the client's SACK frees it.
  const std::vector<std::byte> msg(50'000, std::byte{7});
  REQUIRE_FALSE(accepted->send(1, msg));
  const auto busy = accepted->send_queue();
  REQUIRE(busy);
  CHECK(busy->queued_bytes >= msg.size());
  REQUIRE(test::run_until(
      io, [&] { return accepted->send_queue() && accepted->send_queue()->queued_bytes == 0; },
      10s));
  accepted->abort();
  a->abort();
}

TEST_CASE("garbage on the SCTP UDP port is dropped and the server keeps serving",
          "[integration][unicast]") {
  rig r(mixed_sizes());
  using udp = asio::ip::udp;
  udp::socket junk(r.io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto target = net::to_asio(*r.srv->sctp_udp_endpoint());
  std::vector<std::byte> d(1200);
  std::uint32_t x = 12345;
  for (auto& b : d) b = std::byte(x = x * 1103515245u + 12345u);
  junk.send_to(asio::buffer(d.data(), 3), target);     // shorter than an SCTP header
  junk.send_to(asio::buffer(d), target);               // random, unknown source, not an INIT
  std::vector<std::byte> fake_init(64, std::byte{0});  // vtag 0, chunk type 1, bad CRC32c
  fake_init[12] = std::byte{1};
  junk.send_to(asio::buffer(fake_init), target);
  junk.send_to(asio::buffer(d), target);  // now from a known peer: usrsctp's CRC drops it
  std::vector<std::byte> big(9000, std::byte{0x42});
  junk.send_to(asio::buffer(big), target);

  test::checking_sink sink(r.source);
  const auto out = fetch(r, r.options(transport_kind::sctp_udp), sink, r.everything());
  INFO(out.detail);
  REQUIRE_FALSE(out.ec);
  REQUIRE(sink.all_equal());
  const auto c = r.srv->sctp_udp_counters();
  REQUIRE(c.dropped_short == 1);
  REQUIRE(c.dropped_unknown == 1);
  REQUIRE(r.srv->counters().sessions_completed == 1);
}

TEST_CASE("a request outside the grant drops that client only", "[integration][unicast]") {
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({1000, 2000, 3000});
      REQUIRE_FALSE(r.srv->register_client(
          {test::tok(token_value + 1), "site-b", session, {file_index{0}}, false}));
      test::checking_sink sink(r.source);
      auto o = r.options(kind, 1);
      o.token = test::tok(token_value + 1);
      o.receiver_id = "site-b";
      const auto out = fetch(r, o, sink, {{file_index{1}, 0, 2000}}, {}, 20s);
      REQUIRE(out.ec == error::connection_lost);
      REQUIRE(sink.delivered == 0);
      REQUIRE(test::run_until(
          r.io, [&] { return !r.ends.empty(); }, 10s));
      REQUIRE(r.ends[0].ec == error::request_invalid);
      REQUIRE(r.srv->counters().invalid_requests == 1);
      // Past the end of a file is refused too.
      o.token = token;
      o.receiver_id = receiver;
      const auto out2 = fetch(r, o, sink, {{file_index{2}, 2000, 1001}}, {}, 20s);
      REQUIRE(out2.ec == error::connection_lost);
      // The right request still works.
      const auto out3 = fetch(r, o, sink, r.everything(), {}, 20s);
      REQUIRE_FALSE(out3.ec);
      REQUIRE(sink.all_equal());
    }
  }
}

TEST_CASE("asking for kernel SCTP on a host without it fails at once and clearly",
          "[integration][unicast]") {
  const int probe = ::socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP);
  if (probe >= 0) {
    ::close(probe);
    WARN("this kernel has SCTP; the 'not available' path cannot be exercised here");
    return;
  }
  asio::io_context io;
  test::memory_source src({10});
  server_options so;
  so.sctp_kernel = loopback();
  server srv(io, src, so);
  std::string detail;
  const auto ec = srv.start(detail);
  REQUIRE(ec == error::kernel_sctp_unavailable);
  REQUIRE(detail.find("kernel SCTP is not available on this host") != std::string::npos);
  REQUIRE(detail.find("127.0.0.1") != std::string::npos);

  client_options co;
  co.kind = transport_kind::sctp_kernel;
  co.server = *parse_endpoint("127.0.0.1:9");
  co.token = token;
  co.session = session;
  co.receiver_id = receiver;
  close_record cr;
  auto c = make_client(io, co, cr.events());
  c->start();
  REQUIRE_FALSE(cr.closed);  // reported through the io_context, not from inside start()
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(test::run_until(
      io, [&] { return cr.closed; }, 5s));
  REQUIRE(std::chrono::steady_clock::now() - t0 < 1s);
  REQUIRE(cr.got == error::kernel_sctp_unavailable);
  REQUIRE(cr.text.find("use sctp over UDP or tcp") != std::string::npos);
}

TEST_CASE("connecting where nobody listens fails with a clear error", "[integration][unicast]") {
  asio::io_context io;
  // A port that was just free: bind, learn, close.
  asio::ip::udp::socket u(io, asio::ip::udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto udp_port = u.local_endpoint().port();
  const auto tcp_port = a.local_endpoint().port();
  u.close();
  a.close();
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    client_options co;
    co.kind = kind;
    co.server = *parse_endpoint("127.0.0.1:" +
                                std::to_string(kind == transport_kind::tcp ? tcp_port : udp_port));
    co.token = token;
    co.session = session;
    co.receiver_id = receiver;
    co.connect_timeout = 3s;
    close_record cr;
    auto c = make_client(io, co, cr.events());
    c->start();
    REQUIRE(test::run_until(
        io, [&] { return cr.closed; }, 10s));
    INFO(cr.text);
    REQUIRE(cr.got);
    REQUIRE(cr.text.find(co.server.to_string()) != std::string::npos);
  }
}

TEST_CASE("several receivers are served at once over both transports", "[integration][unicast]") {
  rig r(mixed_sizes());
  REQUIRE_FALSE(r.srv->register_client({test::tok(token_value + 1), "site-b", session, {}, true}));
  REQUIRE_FALSE(r.srv->register_client({test::tok(token_value + 2), "site-c", session, {}, true}));
  struct one {
    std::unique_ptr<test::checking_sink> sink;
    std::unique_ptr<client> c;
    bool closed = false;
    std::error_code ec;
    std::string detail;
  };
  std::vector<one> clients(3);
  const std::vector<std::tuple<transport_kind, fallback_token, std::string>> who{
      {transport_kind::sctp_udp, token, receiver},
      {transport_kind::tcp, test::tok(token_value + 1), "site-b"},
      {transport_kind::sctp_udp, test::tok(token_value + 2), "site-c"}};
  for (std::size_t i = 0; i < clients.size(); ++i) {
    auto& k = clients[i];
    k.sink = std::make_unique<test::checking_sink>(r.source);
    auto o = r.options(std::get<0>(who[i]), 2);
    o.token = std::get<1>(who[i]);
    o.receiver_id = std::get<2>(who[i]);
    client_events ev;
    ev.on_data = [&k](file_index f, std::uint64_t off, std::span<const std::byte> b) {
      k.sink->on_data(f, off, b);
    };
    ev.on_complete = [&k] { k.c->close(); };
    ev.on_closed = [&k](const std::error_code& e, const std::string& d) {
      k.closed = true;
      k.ec = e;
      k.detail = d;
    };
    k.c = make_client(r.io, o, ev);
    REQUIRE_FALSE(k.c->request(r.everything()));
    k.c->start();
  }
  REQUIRE(test::run_until(
      r.io,
      [&] {
        return std::all_of(clients.begin(), clients.end(), [](const one& k) { return k.closed; });
      },
      120s));
  for (auto& k : clients) {
    INFO(k.detail);
    REQUIRE_FALSE(k.ec);
    REQUIRE(k.sink->mismatches == 0);
    REQUIRE(k.sink->all_equal());
  }
  REQUIRE(test::run_until(
      r.io, [&] { return r.ends.size() == 3; }, 10s));
  REQUIRE(r.srv->counters().sessions_completed == 3);
}

TEST_CASE("a connected client outlives its connect timeout", "[integration][unicast]") {
  for (const auto kind : {transport_kind::sctp_udp, transport_kind::tcp}) {
    SECTION(std::string(to_string(kind))) {
      rig r({1000});
      auto o = r.options(kind, 2);
      o.connect_timeout = 100ms;
      std::unique_ptr<client> c;
      bool complete = false;
      bool closed = false;
      std::error_code got;
      client_events ev;
      ev.on_complete = [&] { complete = true; };
      ev.on_closed = [&](const std::error_code& e, const std::string&) {
        closed = true;
        got = e;
      };
      c = make_client(r.io, o, ev);
      REQUIRE_FALSE(c->request(r.everything()));
      c->start();
      REQUIRE(test::run_until(
          r.io, [&] { return complete; }, 10s));
      // Stay connected and idle for three connect timeouts.
      asio::steady_timer t(r.io, 300ms);
      bool waited = false;
      t.async_wait([&](const boost::system::error_code&) { waited = true; });
      REQUIRE(test::run_until(
          r.io, [&] { return waited || closed; }, 10s));
      REQUIRE_FALSE(closed);
      c->close();
      REQUIRE(test::run_until(
          r.io, [&] { return closed; }, 10s));
      REQUIRE_FALSE(got);
    }
  }
}

TEST_CASE("a server that sends nothing makes the client time out", "[integration][unicast]") {
  asio::io_context io;
  // Accepts and then says nothing at all.
  asio::ip::tcp::acceptor mute(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::socket accepted(io);
  mute.async_accept(accepted, [](const boost::system::error_code&) {});
  client_options co;
  co.kind = transport_kind::tcp;
  co.tcp_connections = 1;
  co.server = *parse_endpoint("127.0.0.1:" + std::to_string(mute.local_endpoint().port()));
  co.token = token;
  co.session = session;
  co.receiver_id = receiver;
  co.idle_timeout = 200ms;
  close_record cr;
  auto c = make_client(io, co, cr.events());
  REQUIRE_FALSE(c->request(std::vector<byte_range>{{file_index{0}, 0, 100}}));
  c->start();
  REQUIRE(test::run_until(
      io, [&] { return cr.closed; }, 10s));
  REQUIRE(cr.got == error::idle_timeout);
  REQUIRE(cr.text.find("100 bytes outstanding") != std::string::npos);
  REQUIRE(c->outstanding() == std::vector<byte_range>{{file_index{0}, 0, 100}});
}
