#include "feed/feed_board.hpp"

#include "common/http/prometheus_text.hpp"
#include "feed/feed_render.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using mcdist::wall_time;
using mcdist::feed::datagram_kind;
using mcdist::feed::feed_board;
using mcdist::feed::feed_snapshot;
using mcdist::feed::outcome;
using mcdist::feed::product;
using mcdist::feed::session_kind;
using mcdist::sender::receiver_report;
using mcdist::sender::session_report;
using st = receiver_report::state_t;

namespace {

const wall_time t0{std::chrono::hours(24 * 365 * 56)};  // a whole minute, 2026

product make(std::int64_t id, std::string name, std::uint64_t size) {
  product p;
  p.id = id;
  p.name = std::move(name);
  p.size = size;
  return p;
}

receiver_report site(std::string id, st state) {
  receiver_report r;
  r.id = std::move(id);
  r.state = state;
  if (state != st::missing) r.address.port = 4000;  // registered sites have an address
  return r;
}

}  // namespace

TEST_CASE("a batch counts its products once, and per product the sites that have it",
          "[unit][feed]") {
  feed_board b({"warnings", "fields"});
  const std::vector<product> ps = {make(1, "a.txt", 100), make(2, "b.txt", 50)};
  session_report rep;
  rep.data_bytes = 180;
  rep.data_datagrams = 20;
  rep.repair_datagrams = 3;
  rep.proactive_parity = 2;
  rep.late_key_blocks = 1;
  auto ok = site("site-a", st::completed);
  auto held = site("site-b", st::failed);
  held.held_files = {1};
  rep.receivers = {ok, held};
  b.session_done(1, session_kind::batch, 7, ps, rep, true, t0 + 5s);
  const auto& c = b.channels()[1];
  REQUIRE(c.products_sent == 2);
  REQUIRE(c.bytes_sent == 150);
  REQUIRE(c.sessions[0] == 1);
  REQUIRE(c.last_sent == t0 + 5s);
  REQUIRE(c.recent.size() == 2);
  REQUIRE(c.recent[0].sites_ok == 1);  // a.txt: only site-a
  REQUIRE(c.recent[1].sites_ok == 2);  // b.txt: site-b held it
  REQUIRE(c.recent[1].seq == 7);
  REQUIRE(b.channels()[0].products_sent == 0);
  const auto minutes = b.bytes_per_minute(1, t0 + 30s);
  REQUIRE(minutes.back() == 180);

  // A batch cut by shutdown is not sent (it is queued again), nor are catch-ups counted twice.
  b.session_done(1, session_kind::batch, 8, ps, rep, false, t0 + 6s);
  b.session_done(1, session_kind::catchup, 0, ps, rep, false, t0 + 7s);
  REQUIRE(c.products_sent == 2);
  REQUIRE(c.sessions[0] == 2);
  REQUIRE(c.sessions[1] == 1);
  // Every session's datagrams count, by kind, whatever became of its products.
  REQUIRE(c.datagrams[static_cast<std::size_t>(datagram_kind::first)] == 3 * 15);
  REQUIRE(c.datagrams[static_cast<std::size_t>(datagram_kind::repair)] == 3 * 2);
  REQUIRE(c.datagrams[static_cast<std::size_t>(datagram_kind::late_key)] == 3 * 1);
  REQUIRE(c.datagrams[static_cast<std::size_t>(datagram_kind::proactive_parity)] == 3 * 2);
  REQUIRE(b.channels()[0].datagrams == std::array<std::uint64_t, 4>{});
}

TEST_CASE("throughput older than an hour leaves the chart", "[unit][feed]") {
  feed_board b({"warnings"});
  session_report rep;
  rep.data_bytes = 1000;
  b.session_done(0, session_kind::batch, 1, {}, rep, true, t0);
  b.session_done(0, session_kind::batch, 2, {}, rep, true, t0 + 59min);
  auto m = b.bytes_per_minute(0, t0 + 59min);
  REQUIRE(m.front() == 1000);
  REQUIRE(m.back() == 1000);
  m = b.bytes_per_minute(0, t0 + 60min);
  REQUIRE(m.front() == 0);
  REQUIRE(m[feed_board::minutes_kept - 2] == 1000);
}

TEST_CASE("a site's lag is what it failed or missed until it stores it", "[unit][feed]") {
  feed_board b({"warnings"});
  b.record_outcome("site-a", 0, 1, outcome::missed, t0);
  b.record_outcome("site-a", 0, 2, outcome::failed, t0 + 10s);
  b.record_outcome("site-a", 0, 1, outcome::missed, t0 + 20s);  // keeps the first time
  const auto& s = b.sites().at("site-a");
  REQUIRE(s.missing.size() == 2);
  REQUIRE(s.missing.at(1).second == t0);
  REQUIRE(s.state == "missed");
  b.record_outcome("site-a", 0, 1, outcome::stored, t0 + 30s);  // a catch-up delivered it
  b.record_outcome("site-a", 0, 2, outcome::held, t0 + 30s);
  REQUIRE(s.missing.empty());
  REQUIRE(s.outcomes == std::array<std::uint64_t, 4>{1, 1, 1, 2});
}

TEST_CASE("a restart restores a site's lag from the journal without counting outcomes",
          "[unit][feed]") {
  feed_board b({"warnings"});
  b.restore_missing("site-a", 0, 4, t0);
  b.restore_missing("site-a", 7, 5, t0);  // a channel no longer configured
  const auto& s = b.sites().at("site-a");
  REQUIRE(s.missing.size() == 1);
  REQUIRE(s.missing.at(4).second == t0);
  REQUIRE(s.outcomes == std::array<std::uint64_t, 4>{});
  REQUIRE(s.state.empty());
  b.record_outcome("site-a", 0, 4, outcome::stored, t0 + 1s);
  REQUIRE(s.missing.empty());
}

TEST_CASE("the missing products of a site are bounded", "[unit][feed]") {
  feed_board b({"warnings"});
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(feed_board::max_missing_tracked) + 5; ++i)
    b.record_outcome("down", 0, i, outcome::missed, t0);
  const auto& s = b.sites().at("down");
  REQUIRE(s.missing.size() == feed_board::max_missing_tracked);
  REQUIRE(s.missing_truncated);
}

TEST_CASE("a site's report sets its state, RTT, NAK ratio and fallbacks", "[unit][feed]") {
  feed_board b({"warnings", "fields"});
  auto r = site("site-a", st::completed);
  r.rtt = std::chrono::milliseconds(12);
  r.rtt_valid = true;
  r.path = mcdist::delivery_path::tcp;
  b.site_report(1, r, 0.25, t0);
  b.site_report(1, r, 0.5, t0 + 1s);
  const auto& s = b.sites().at("site-a");
  REQUIRE(s.state == "completed");
  REQUIRE(to_string(*s.path) == "unicast-tcp");
  REQUIRE(s.channel == "fields");
  REQUIRE(s.last_seen == t0 + 1s);
  REQUIRE(s.rtt_s == Approx(0.012));
  REQUIRE(s.nak_ratio == 0.5);
  REQUIRE(s.fallbacks.at(mcdist::transport_kind::tcp) == 2);

  // Listed in a closed group but never registered: failed with no address.
  auto ghost = site("ghost", st::failed);
  ghost.address.port = 0;
  b.site_report(0, ghost, 0, t0);
  REQUIRE(b.sites().at("ghost").state == "missing");
  REQUIRE_FALSE(b.sites().at("ghost").last_seen);
}

TEST_CASE("the documents render hostile names safely and valid metrics", "[unit][feed]") {
  mcdist::feed::feed_config cfg;
  cfg.interface = {};
  mcdist::feed::channel_config ch;
  ch.name = "warnings";
  cfg.channels.push_back(ch);
  feed_board b({"warnings"});
  const std::string evil = "<script>alert(\"x\")</script>\n\\";
  b.record_outcome(evil, 0, 1, outcome::missed, t0);
  session_report rep;
  rep.receivers = {site(evil, st::completed)};
  b.session_done(0, session_kind::batch, 1, {make(1, evil, 10)}, rep, true, t0);
  feed_snapshot s;
  s.version = "0.1.0";
  s.now = t0 + 90s;
  s.started = t0;
  s.cfg = &cfg;
  s.daemon = {
      {"channels", {{{"name", "warnings"}, {"waiting_products", 3}, {"running", nullptr}}}}};
  s.board = &b;

  const auto page = mcdist::feed::render_feed_page(s);
  REQUIRE(page.find("<script>") == std::string::npos);
  REQUIRE(page.find("&lt;script&gt;") != std::string::npos);
  const auto metrics = mcdist::feed::render_feed_metrics(s);
  REQUIRE(metrics.find("mcdist_feed_products_sent_total{channel=\"warnings\"} 1\n") !=
          std::string::npos);
  REQUIRE(metrics.find("mcdist_feed_products_queued{channel=\"warnings\"} 3\n") !=
          std::string::npos);
  // The label value is escaped: no raw newline inside a sample line.
  REQUIRE(metrics.find("site=\"<script>alert(\\\"x\\\")</script>\\n\\\\\"") != std::string::npos);
  const auto j = mcdist::feed::render_feed_status(s);
  REQUIRE(j["channels"][0]["products_sent"] == 1);
  REQUIRE(j["sites"][0]["site"] == evil);
  REQUIRE(j["sites"][0]["lag"]["queued_products"] == 3);
}
