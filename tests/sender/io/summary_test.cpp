#include "sender/io/summary.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace std::chrono_literals;
using mcdist::delivery_path;
using mcdist::sender::receiver_report;
using mcdist::sender::run_result;
using st = receiver_report::state_t;

namespace {

run_result sample() {
  run_result r;
  r.wall_seconds = 2;
  r.report.session = mcdist::session_id{0x5f0e21c4};
  r.report.files = 3;
  r.report.bytes = 3'000'000;
  r.report.transferred_bytes = 2'000'000;
  r.report.passes = 2;
  r.report.data_datagrams = 2200;
  r.report.repair_datagrams = 60;
  receiver_report multicast;
  multicast.id = "site-a";
  multicast.state = st::completed;
  multicast.files_stored = 3;
  receiver_report tcp;
  tcp.id = "site-b";
  tcp.state = st::completed;
  tcp.path = delivery_path::tcp;
  tcp.fallback_reason = "NAK ratio 10.2 % above 5.0 % (224 of 2200 blocks)";
  tcp.fallback_connections = 4;
  tcp.fallback_at = 1500ms;
  receiver_report failed;
  failed.id = "site-c";
  failed.state = st::failed;
  failed.path = delivery_path::sctp_udp;
  failed.fallback_connections = 2;
  failed.reason = "unicast fallback failed: connection refused";
  receiver_report absent;
  absent.id = "site-d";
  absent.state = st::missing;
  absent.reason = "did not register within 30 s";
  r.report.receivers = {multicast, tcp, failed, absent};
  return r;
}

}  // namespace

TEST_CASE("a receiver's state is its outcome and its path how the data came", "[unit][sender]") {
  const auto r = sample();
  const auto& rs = r.report.receivers;
  REQUIRE(mcdist::sender::to_string(rs[0].state) == "completed");
  REQUIRE(to_string(rs[0].path) == "multicast");
  REQUIRE(to_string(rs[1].path) == "unicast-tcp");
  REQUIRE(to_string(rs[2].path) == "unicast-sctp");
  receiver_report kernel;
  kernel.path = mcdist::unicast_path(mcdist::transport_kind::sctp_kernel);
  REQUIRE(to_string(kernel.path) == "unicast-sctp-kernel");

  const auto j = nlohmann::json::parse(mcdist::sender::summary_json(r));
  REQUIRE(j["session_id"] == 0x5f0e21c4u);
  REQUIRE(j["receivers"].size() == 4);
  const std::vector<std::pair<std::string, std::string>> want{{"completed", "multicast"},
                                                              {"completed", "unicast-tcp"},
                                                              {"failed", "unicast-sctp"},
                                                              {"missing", "multicast"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(j["receivers"][i].dump());
    REQUIRE(j["receivers"][i]["state"] == want[i].first);
    REQUIRE(j["receivers"][i]["path"] == want[i].second);
  }
  REQUIRE_FALSE(j["receivers"][0].contains("fallback"));
  REQUIRE(j["receivers"][1]["fallback"]["transport"] == "tcp");
  REQUIRE(j["receivers"][1]["fallback"]["connections"] == 4);
  REQUIRE(j["receivers"][1]["fallback"]["at_seconds"] == Approx(1.5));
  REQUIRE(j["receivers"][2]["fallback"]["transport"] == "sctp");
  REQUIRE(j["receivers"][2]["fallback"]["connections"] == 2);
  REQUIRE(j["goodput_bps"] == Approx(8e6));
}

TEST_CASE("the text summary shows state and path columns and the fallback line", "[unit][sender]") {
  const auto text = mcdist::sender::format_summary(sample());
  INFO(text);
  REQUIRE(text.rfind("session 5f0e21c4: 3 files", 0) == 0);
  REQUIRE(text.find("receiver             state      path") != std::string::npos);
  REQUIRE(text.find("site-a               completed  multicast") != std::string::npos);
  REQUIRE(text.find("site-b               completed  unicast-tcp") != std::string::npos);
  REQUIRE(text.find("site-c               failed     unicast-sctp") != std::string::npos);
  REQUIRE(text.find("    unicast over tcp (4 connections) from 1.500 s: NAK ratio 10.2 %") !=
          std::string::npos);
  REQUIRE(text.find("    unicast over sctp (2 associations) from") != std::string::npos);
  REQUIRE(text.find("    reason: unicast fallback failed: connection refused") !=
          std::string::npos);
  REQUIRE(text.find("error:") == std::string::npos);
}

TEST_CASE("the incomplete receivers are named with their reasons", "[unit][sender]") {
  REQUIRE(mcdist::sender::incomplete_receivers(sample()) ==
          "2 of 4 receivers did not complete: site-c (unicast fallback failed: connection "
          "refused), site-d (did not register within 30 s)");
  run_result none;
  REQUIRE(mcdist::sender::incomplete_receivers(none) ==
          "0 of 0 receivers did not complete: no receiver registered");
}

TEST_CASE("connections the fallback's listener closed before their hello are counted",
          "[unit][sender]") {
  auto r = sample();
  const auto quiet = nlohmann::json::parse(mcdist::sender::summary_json(r));
  CHECK(quiet["fallback_refused"]["per_source"] == 0);
  CHECK(quiet["fallback_refused"]["evicted"] == 0);
  CHECK(mcdist::sender::format_summary(r).find("before their hello") == std::string::npos);
  // A flood of silent connections: most refused for their address, some evicted.
  r.fallback_per_source_refused = 2840;
  r.fallback_handshakes_evicted = 17;
  r.fallback_busy_refused = 1;
  r.fallback_hello_timeouts = 48;
  const auto j = nlohmann::json::parse(mcdist::sender::summary_json(r));
  CHECK(j["fallback_refused"]["per_source"] == 2840);
  CHECK(j["fallback_refused"]["evicted"] == 17);
  CHECK(j["fallback_refused"]["busy"] == 1);
  CHECK(j["fallback_refused"]["hello_timeouts"] == 48);
  CHECK(mcdist::sender::format_summary(r).find(
            "closed 2858 unicast fallback connections before their hello (2840 over their "
            "address's limit, 17 evicted at the total limit, 1 at the session limit; 48 hello "
            "timeouts)") != std::string::npos);
}
