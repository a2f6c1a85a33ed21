// The sender core's side of silent sessions (docs/design-notes.md "Silent sessions"): no
// registration, a fixed number of passes, fresh parity in every pass after the first, the
// announce saying so, whatever arrives dropped, an end after the last pass.
#include "sender/core/sender_session.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>

using namespace mcdist;
using namespace mcdist::sender;
using namespace std::chrono_literals;

namespace {

const endpoint rx = *parse_endpoint("10.0.0.2:7000");

struct run {
  /// Data datagrams by the pass they went out in.
  std::map<std::uint32_t, std::vector<data_send>> by_pass;
  std::vector<control_send> control;
  session_report report;
  bool succeeded = false;
};

/// One file of `blocks` full 1400-byte blocks in a silent session of `passes` passes, driven in
/// 1 ms steps until done.
run drive(sender_config cfg, std::uint32_t blocks, std::uint32_t passes,
          const std::vector<std::vector<std::byte>>& inbound = {}) {
  cfg.session = session_id{77};
  cfg.rate_bps = 80'000'000;
  cfg.silent_passes = passes;
  manifest_entry e;
  e.path = "f";
  e.size = std::uint64_t{blocks} * 1400;
  e.digest = sha256_digest{};
  sender_session s(cfg, std::vector{e}, 1, nullptr);
  time_point now{100s};
  s.start(now);
  run r;
  std::array<data_send, 64> buf;
  for (const auto& d : inbound) s.on_datagram(d, rx, now);
  for (int i = 0; i < 100000 && !s.done(); ++i) {
    s.on_timer(now);
    // A batch ends where its pass does (next_data starts the next pass after it).
    const std::uint32_t pass = s.pass();
    const auto n = s.next_data(now, buf);
    for (std::size_t j = 0; j < n; ++j) r.by_pass[pass].push_back(buf[j]);
    s.on_timer(now);
    control_send c;
    while (s.pop_control(c)) r.control.push_back(std::move(c));
    now += 1ms;
  }
  REQUIRE(s.done());
  r.report = s.report(now);
  r.succeeded = s.succeeded();
  return r;
}

template <class Msg>
std::vector<Msg> messages(const run& r, wire::msg_type t) {
  std::vector<Msg> out;
  for (const auto& c : r.control) {
    wire::header h;
    if (wire::parse_header(c.bytes, h) || h.type != t) continue;
    Msg m;
    REQUIRE_FALSE(wire::parse_control(c.bytes, m));
    out.push_back(m);
  }
  return out;
}

}  // namespace

TEST_CASE("a silent session sends the sources once, then fresh parity each pass, and ends",
          "[unit][sender][silent]") {
  sender_config cfg;
  cfg.fec_k = 64;
  cfg.fec_max_parity = 8;
  cfg.fec_depth = 1;
  cfg.fec_overhead = 0.05;  // ceil(3.2) = 4 parity blocks per FEC block and pass
  const auto r = drive(cfg, 256, 3);
  REQUIRE(r.succeeded);
  REQUIRE(r.report.passes == 3);
  REQUIRE(r.report.silent_passes == 3);
  REQUIRE(r.report.receivers.empty());
  REQUIRE(r.report.source_datagrams == 256);
  REQUIRE(r.report.parity_datagrams == 4 * 4 * 3);
  // Pass 1: every source and 4 parity blocks per FEC block; passes 2 and 3: parity only.
  std::map<std::uint32_t, std::set<std::pair<std::uint32_t, std::uint32_t>>> parity_of_pass;
  for (const auto& [pass, sends] : r.by_pass) {
    for (const auto& d : sends) {
      if (d.parity) {
        parity_of_pass[pass].insert({d.fec_block, d.parity_index});
      } else {
        REQUIRE(pass == 1);
      }
    }
  }
  REQUIRE(parity_of_pass[1].size() == 16);
  REQUIRE(parity_of_pass[2].size() == 16);
  // Pass 2's parity is new to every site (indexes 4..7); pass 3 wraps past max_parity 8.
  for (const auto& p : parity_of_pass[2]) {
    REQUIRE(parity_of_pass[1].count(p) == 0);
    REQUIRE(p.second >= 4);
  }
  REQUIRE(parity_of_pass[3] == parity_of_pass[1]);
  // Announces say it is silent; no marker asks for status; END goes out three times.
  const auto announces = messages<wire::announce>(r, wire::msg_type::announce);
  REQUIRE(!announces.empty());
  for (const auto& a : announces) REQUIRE(a.params().silent_passes() == 3);
  for (const auto& m : messages<wire::marker>(r, wire::msg_type::marker)) {
    REQUIRE_FALSE(m.status_request());
  }
  REQUIRE(messages<wire::session_end>(r, wire::msg_type::session_end).size() == 3);
}

TEST_CASE("a silent session without FEC sends every source in every pass",
          "[unit][sender][silent]") {
  const auto r = drive(sender_config{}, 100, 2);
  REQUIRE(r.report.passes == 2);
  REQUIRE(r.report.source_datagrams == 200);
  REQUIRE(r.report.parity_datagrams == 0);
  REQUIRE(r.by_pass.at(1).size() == 100);
  REQUIRE(r.by_pass.at(2).size() == 100);
}

TEST_CASE("a silent session counts and drops whatever sites send it", "[unit][sender][silent]") {
  wire::register_request reg;
  reg.set_receiver_id("a");
  std::vector<std::byte> d(wire::header_size + reg.ByteSizeLong());
  wire::encode_control(d, wire::msg_type::register_request, session_id{77}, reg);
  const auto r = drive(sender_config{}, 10, 1, {d, d});
  REQUIRE(r.report.control.silent_refused == 2);
  REQUIRE(r.report.control.registers == 0);
  REQUIRE(r.report.receivers.empty());
  REQUIRE(r.report.passes == 1);
}

TEST_CASE("a silent session refuses what needs receivers", "[unit][sender][silent]") {
  manifest_entry e;
  e.path = "f";
  e.size = 1400;
  e.digest = sha256_digest{};
  sender_config a;
  a.silent_passes = 2;
  a.receivers = {"site-a"};
  REQUIRE_THROWS_AS(sender_session(a, {e}, 1, nullptr), std::invalid_argument);
  sender_config b;
  b.silent_passes = 2;
  b.rate_auto = true;
  REQUIRE_THROWS_AS(sender_session(b, {e}, 1, nullptr), std::invalid_argument);
  sender_config c;
  c.silent_passes = 65;
  REQUIRE_THROWS_AS(sender_session(c, {e}, 1, nullptr), std::invalid_argument);
}
