#include "receiver/io/status_render.hpp"

#include <catch2/catch.hpp>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

struct fixture {
  std::vector<channel_config> channels;
  receiver_stats stats;
  status_board board{2};
  status_snapshot snap;

  fixture() {
    channels.push_back({"obs \"main\" \\ 1", *parse_endpoint("239.192.0.1:4711"), "/srv/in/obs"});
    channels.push_back({"nwp", *parse_endpoint("239.192.0.2:4711"), "/srv/in/nwp"});
    const wall_time t0{std::chrono::seconds(1795429000)};
    board.file_finished({session_id{0xabc}, 0, "obs/<script>alert(1)</script>.bufr", 10, true, {}},
                        t0);
    board.file_finished({session_id{0xabc}, 0, "obs/bad\xff.bin", 20, false, "disk full"}, t0);
    stats.files_stored = 1;
    stats.files_failed = 1;
    stats.data_bytes = 30;
    stats.drops.add(errc::bad_magic);
    snap.id = "site-a";
    snap.now = t0 + std::chrono::seconds(75);
    snap.started = t0 - std::chrono::seconds(3600);
    snap.channels = &channels;
    snap.stats = &stats;
    snap.board = &board;
  }
};

}  // namespace

TEST_CASE("metrics carry the channel's name escaped and a sample per channel and reason",
          "[status_render]") {
  fixture f;
  const auto m = render_metrics(f.snap);
  CHECK(m.find("mcdist_receiver_files_stored_total{channel=\"obs \\\"main\\\" \\\\ 1\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_files_stored_total{channel=\"nwp\"} 0\n") != std::string::npos);
  CHECK(m.find("mcdist_receiver_files_failed_total{channel=\"obs \\\"main\\\" \\\\ 1\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_datagrams_dropped_total{reason=\"bad_magic\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_datagrams_dropped_total{reason=\"truncated\"} 0\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_last_product_timestamp_seconds{channel=\"obs \\\"main\\\" \\\\ "
               "1\"} 1795429000\n") != std::string::npos);
  // Only a channel with a stored product has a last-product time.
  CHECK(m.find("mcdist_receiver_last_product_timestamp_seconds{channel=\"nwp\"}") ==
        std::string::npos);
  CHECK(m.find("# TYPE mcdist_receiver_bytes_received_total counter\n"
               "mcdist_receiver_bytes_received_total 30\n") != std::string::npos);
}

TEST_CASE("the page shows names from the network as text, ages, and the failure",
          "[status_render]") {
  fixture f;
  const auto h = render_status_page(f.snap);
  CHECK(h.find("<script>") == std::string::npos);
  CHECK(h.find("obs/&lt;script&gt;alert(1)&lt;/script&gt;.bufr") != std::string::npos);
  CHECK(h.find("obs/bad\xef\xbf\xbd.bin") != std::string::npos);
  CHECK(h.find("disk full") != std::string::npos);
  CHECK(h.find("<td>1 min 15 s</td>") != std::string::npos);
  CHECK(h.find("id=\"files-stored\">1<") != std::string::npos);
  CHECK(h.find("id=\"channel-0-stored\">1<") != std::string::npos);
  CHECK(h.find("<svg") != std::string::npos);
  CHECK(h.find("http://") == h.find("http://www.w3.org/2000/svg"));  // no external asset
}

TEST_CASE("the JSON lists the last products newest first with their age", "[status_render]") {
  fixture f;
  f.snap.status_file = {{"id", "site-a"}, {"files_stored", 1}};
  const auto j = render_status_json(f.snap);
  CHECK(j["id"] == "site-a");
  CHECK(j["uptime_seconds"] == 3675.0);
  const auto& p = j["channels"][0]["last_products"];
  REQUIRE(p.size() == 2);
  CHECK(p[0]["stored"] == false);
  CHECK(p[0]["failure"] == "disk full");
  CHECK(p[1]["path"] == "obs/<script>alert(1)</script>.bufr");
  CHECK(p[1]["age_seconds"] == 75.0);
  CHECK(p[1]["session"] == "00000abc");
  CHECK(j["channels"][1]["last_products"].empty());
  // Invalid UTF-8 in a path must not make the dump throw (the daemon dumps with replace).
  CHECK_NOTHROW(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

TEST_CASE("metrics and page show each channel's last session number and missing sessions",
          "[status_render][sequence]") {
  fixture f;
  CHECK(render_metrics(f.snap).find("mcdist_receiver_channel_missing_sessions") ==
        std::string::npos);  // no sequenced session seen: no family
  f.snap.sequences = {{"obs", "key:mcdist-ed25519:AAAA", 9, 8, 2},
                      {"obs", "name:<b>backup</b>", 4, 4, 1},
                      {"warnings", "key:mcdist-ed25519:AAAA", 40, 40, 0}};
  const auto m = render_metrics(f.snap);
  CHECK(m.find("# TYPE mcdist_receiver_channel_missing_sessions gauge\n") != std::string::npos);
  // Two senders numbering one channel: their gaps add up, the newest number is the larger.
  CHECK(m.find("mcdist_receiver_channel_missing_sessions{channel=\"obs\"} 3\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_channel_missing_sessions{channel=\"warnings\"} 0\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_receiver_channel_last_seq{channel=\"obs\"} 9\n") != std::string::npos);
  const auto h = render_status_page(f.snap);
  CHECK(h.find("<table id=\"sequences\">") != std::string::npos);
  CHECK(h.find("name:&lt;b&gt;backup&lt;/b&gt;") != std::string::npos);
  CHECK(h.find("<td class=\"num bad\">2</td>") != std::string::npos);
}

TEST_CASE("metrics and page show a relayed channel's counters, problems marked",
          "[status_render][relay]") {
  fixture f;
  CHECK(render_metrics(f.snap).find("mcdist_relay_") == std::string::npos);
  relay_forwarder::counters c;
  c.forwarded = 1200;
  c.forwarded_bytes = 1'700'000;
  c.sessions = 3;
  c.not_relayed_sessions = 1;
  c.send_failed = 0;
  c.two_way_sessions = 2;
  c.two_way.data = 900;
  c.two_way.parity = 40;
  c.two_way_sites_completed = 7;
  c.two_way_sites_failed = 1;
  c.gap_reports_taken = 5;
  c.gap_reports_refused = 2;
  c.subtree_reports_sent = 3;
  c.catch_ups = 4;
  f.snap.relays = {{"obs <a>", c}};
  const auto m = render_metrics(f.snap);
  CHECK(m.find("mcdist_relay_sessions_total{channel=\"obs <a>\",outcome=\"two_way\"} 2\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_two_way_datagrams_total{channel=\"obs <a>\",kind=\"parity\"} 40\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_two_way_sites_total{channel=\"obs <a>\",outcome=\"failed\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_datagrams_forwarded_total{channel=\"obs <a>\"} 1200\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_sessions_total{channel=\"obs <a>\",outcome=\"not_relayed\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_send_failed_total{channel=\"obs <a>\"} 0\n") != std::string::npos);
  CHECK(m.find("mcdist_relay_gap_reports_total{channel=\"obs <a>\",outcome=\"refused\"} 2\n") !=
        std::string::npos);
  CHECK(m.find("mcdist_relay_gap_reports_total{channel=\"obs <a>\",outcome=\"sent_upstream\"} "
               "3\n") != std::string::npos);
  CHECK(m.find("mcdist_relay_catch_ups_total{channel=\"obs <a>\"} 4\n") != std::string::npos);
  const auto h = render_status_page(f.snap);
  CHECK(h.find("<table id=\"relays\">") != std::string::npos);
  CHECK(h.find("<td>obs &lt;a&gt;</td><td class=\"num\">1200</td>") != std::string::npos);
  CHECK(h.find("<td class=\"num bad\">1</td>") != std::string::npos);  // a session not relayed
}
