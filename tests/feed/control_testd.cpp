// A stand-in for mcdist-feed in tests/integration/test_mcdistctl.py:
//   mcdist_control_testd populate JOURNAL   writes a journal of known rows, times relative to now
//   mcdist_control_testd serve JOURNAL SOCKET
//       serves the control socket with the journal's answers (journal_handler) and a resend that
//       only counts what it would send (no multicast), prints "READY" when listening, and stops
//       on SIGTERM or SIGINT (removing the socket).
// It runs control_server as the daemon does: in one io_context, one thread.
#include "feed/control_server.hpp"
#include "feed/sqlite_journal.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <iostream>
#include <string>

using mcdist::wall_time;
using namespace mcdist::feed;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

/// The fixture, described in test_mcdistctl.py (which asserts exactly these rows).
void populate(const std::string& file) {
  sqlite_journal j(file);
  const auto now = std::chrono::system_clock::now();
  auto add = [&](const std::string& channel, const std::string& name, std::uint64_t size,
                 wall_time at) {
    product p;
    p.channel = channel;
    p.name = name;
    p.spool_path = "/srv/spool/" + channel + "/" + name;
    p.size = size;
    p.mtime_ns = to_ns(at);
    p.queued_at = at;
    return j.enqueue(p);
  };
  auto batch = [&](const std::string& channel, const std::vector<std::int64_t>& ids, wall_time at) {
    const auto seq = j.next_seq(channel);
    j.begin_session({channel, seq, "0000a00" + std::to_string(seq), session_kind::batch, at}, ids);
    for (const auto id : ids) j.mark_sent(id, "/srv/retained/" + std::to_string(id), at);
    j.end_session(channel, seq, session_outcome::partial, at + 2s);
    return seq;
  };
  j.site_seen({"dwd", "obs", now - 10min, 0.071, 0.004, 2});
  j.site_seen({"dwd", "nwp", now - 10min, 0.071, 0.012, 1});
  j.site_seen({"knmi", "obs", now - 5min, 0.702, 0.031, 2});

  // obs seq 1, 30 h ago: old.bufr, which dwd never got (outside a 24 h window).
  const auto old = add("obs", "old.bufr", 512, now - 30h);
  batch("obs", {old}, now - 30h);
  // obs seq 2, 2 h ago: a.bufr (dwd stored, knmi stored), b.bufr (dwd held, knmi missed).
  const auto a = add("obs", "obs/a.bufr", 2048, now - 2h);
  const auto b = add("obs", "obs/b.bufr", 4096, now - 2h);
  const auto s2 = batch("obs", {a, b}, now - 2h);
  j.record_outcome(a, "dwd", outcome::stored, "", s2, now - 2h + 3s);
  j.record_outcome(b, "dwd", outcome::held, "", s2, now - 2h + 3s);
  j.record_outcome(a, "knmi", outcome::stored, "", s2, now - 2h + 4s);
  j.record_outcome(b, "knmi", outcome::missed, "seq gap 2-2", s2, now - 2h + 4s);
  // nwp seq 1, 1 h ago: t2m (dwd stored), u10 (dwd failed: disk full).
  const auto t2m = add("nwp", "nwp/t2m.grib2", 3 << 20, now - 1h);
  const auto u10 = add("nwp", "nwp/u10.grib2", 5 << 20, now - 1h);
  const auto n1 = batch("nwp", {t2m, u10}, now - 1h);
  j.record_outcome(t2m, "dwd", outcome::stored, "", n1, now - 1h + 5s);
  j.record_outcome(u10, "dwd", outcome::failed, "disk full", n1, now - 1h + 6s);
  // Two products still queued on obs.
  add("obs", "obs/c.bufr", 100, now - 1min);
  add("obs", "obs/d.bufr", 100, now - 1min);
}

/// journal_handler with a resend that selects what it would send.
struct test_handler : journal_handler {
  using journal_handler::journal_handler;
  json status() override {
    auto j = journal_handler::status();
    j["daemon"] = true;
    j["rate_bps"] = 100000000;
    return j;
  }
  json resend(const resend_request& r) override {
    product_filter f;
    f.channel = r.channel;
    f.since = r.since;
    f.glob = r.glob;
    f.seqs = r.seqs;
    const auto products = m_journal.find_products(f);
    std::uint64_t bytes = 0;
    for (const auto& p : products) bytes += p.size;
    return {{"site", r.site},
            {"products", products.size()},
            {"bytes", bytes},
            {"session", "0000beef"},
            {"unicast", r.unicast}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "populate" && argc == 3) {
      populate(argv[2]);
      return 0;
    }
    if (mode == "serve" && argc == 4) {
      boost::asio::io_context io;
      sqlite_journal j(argv[2]);
      test_handler h(j);
      control_server server(io, {argv[3], ""}, h);
      server.start();
      boost::asio::signal_set signals(io, SIGTERM, SIGINT);
      signals.async_wait([&](auto, int) { server.stop(); });
      std::cout << "READY" << std::endl;
      io.run();
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "mcdist_control_testd: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: mcdist_control_testd populate JOURNAL | serve JOURNAL SOCKET\n";
  return 2;
}
