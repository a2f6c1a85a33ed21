// The control protocol without a socket: every request round-trips through to_json and
// parse_request; hostile lines (not JSON, deep nesting, wrong types, unknown keys and commands,
// over-long) get an error answer, never an exception; the journal handler's answers carry the
// documented keys.
#include "feed/control_protocol.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

using mcdist::wall_time;
using namespace mcdist::feed;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

const wall_time t0 = wall_time{} + std::chrono::seconds(1'767'225'600);  // 2026-01-01

struct fake_handler : control_handler {
  int calls = 0;
  std::optional<resend_request> last_resend;
  json status() override {
    ++calls;
    return {{"daemon", true}};
  }
  json history(const history_request& r) override {
    ++calls;
    return {{"site", r.site}};
  }
  json missing(const missing_request&) override {
    ++calls;
    throw std::runtime_error("journal is locked");
  }
  json resend(const resend_request& r) override {
    ++calls;
    last_resend = r;
    return {{"products", 3}};
  }
};

template <class T>
T round_trip(const T& r) {
  const auto line = to_json(control_request(r)).dump();
  const auto p = parse_request(line);
  INFO(line << " -> " << p.error);
  REQUIRE(p.request);
  REQUIRE(std::holds_alternative<T>(*p.request));
  return std::get<T>(*p.request);
}

}  // namespace

TEST_CASE("control protocol: requests round-trip through JSON") {
  round_trip(status_request{});
  history_request h;
  h.site = "dwd";
  h.since = t0 + 123456789ns;
  h.glob = "*.grib2";
  h.channel = "nwp";
  h.limit = 50;
  const auto h2 = round_trip(h);
  CHECK(h2.site == "dwd");
  CHECK(h2.since == h.since);
  CHECK(h2.glob == "*.grib2");
  CHECK(h2.channel == "nwp");
  CHECK(h2.limit == 50);
  const auto m = round_trip(missing_request{"knmi", t0});
  CHECK(m.site == "knmi");
  CHECK(m.since == t0);
  resend_request r;
  r.site = "dwd";
  r.seqs = std::pair<std::uint64_t, std::uint64_t>{5, 9};
  r.unicast = true;
  const auto r2 = round_trip(r);
  CHECK(r2.seqs == r.seqs);
  CHECK(r2.unicast);
  CHECK_FALSE(r2.since);
  CHECK_FALSE(r2.glob);
}

TEST_CASE("control protocol: hostile lines are refused with a reason") {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not JSON"},
      {"{", "not JSON"},
      {"\xff\xfe", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {"\"status\"", "not a JSON object"},
      {"{}", "no \"cmd\""},
      {"{\"cmd\":7}", "no \"cmd\""},
      {"{\"cmd\":\"reboot\"}", "unknown command"},
      {"{\"cmd\":\"status\",\"x\":1}", "unknown key"},
      {"{\"cmd\":\"history\"}", "\"site\" is required"},
      {"{\"cmd\":\"history\",\"site\":\"a\"}", "\"since_ns\" is required"},
      {"{\"cmd\":\"history\",\"site\":\"\",\"since_ns\":0}", "empty"},
      {"{\"cmd\":\"history\",\"site\":5,\"since_ns\":0}", "must be a string"},
      {"{\"cmd\":\"history\",\"site\":\"a\",\"since_ns\":-1}", "non-negative"},
      {"{\"cmd\":\"history\",\"site\":\"a\",\"since_ns\":1.5}", "non-negative"},
      {"{\"cmd\":\"history\",\"site\":\"a\",\"since_ns\":18446744073709551615}", "out of range"},
      {"{\"cmd\":\"history\",\"site\":\"a\",\"since_ns\":0,\"limit\":0}", "\"limit\""},
      {"{\"cmd\":\"history\",\"site\":\"a\",\"since_ns\":0,\"limit\":100001}", "\"limit\""},
      {"{\"cmd\":\"resend\",\"site\":\"a\"}", "needs"},
      {"{\"cmd\":\"resend\",\"site\":\"a\",\"seq\":[3]}", "[first, last]"},
      {"{\"cmd\":\"resend\",\"site\":\"a\",\"seq\":[9,3]}", "first <= last"},
      {"{\"cmd\":\"resend\",\"site\":\"a\",\"seq\":[0,3]}", "first <= last"},
      {"{\"cmd\":\"resend\",\"site\":\"a\",\"seq\":[1,\"x\"]}", "non-negative"},
      {"{\"cmd\":\"resend\",\"site\":\"a\",\"seq\":[1,2],\"unicast\":1}", "true or false"},
      {"{\"cmd\":\"status\"} {\"cmd\":\"status\"}", "not JSON"},
  };
  for (const auto& [line, why] : cases) {
    const auto p = parse_request(line);
    INFO(line);
    CHECK_FALSE(p.request);
    CHECK_THAT(p.error, Catch::Contains(why));
  }
  // Nesting: refused before the parser recurses; brackets inside strings do not count.
  const std::string deep(100000, '[');
  CHECK_THAT(parse_request(deep).error, Catch::Contains("too long"));
  CHECK_THAT(parse_request(std::string(1000, '[')).error, Catch::Contains("nested"));
  CHECK(parse_request("{\"cmd\":\"history\",\"site\":\"[[[[[[{{{{\",\"since_ns\":0}").request);
  const std::string long_site(2000, 's');
  CHECK_THAT(
      parse_request("{\"cmd\":\"missing\",\"site\":\"" + long_site + "\",\"since_ns\":0}").error,
      Catch::Contains("too long"));
}

TEST_CASE("control protocol: answer() calls the handler, adds ok, turns throws into errors") {
  fake_handler h;
  auto a = answer(h, R"({"cmd":"status"})");
  CHECK(a["ok"] == true);
  CHECK(a["daemon"] == true);
  a = answer(h, R"({"cmd":"missing","site":"a","since_ns":0})");
  CHECK(a["ok"] == false);
  CHECK(a["error"] == "journal is locked");
  a = answer(h, "junk");
  CHECK(a["ok"] == false);
  CHECK(h.calls == 2);  // junk never reaches the handler
  a = answer(h, R"({"cmd":"resend","site":"dwd","product":"*.grib2"})", 1000u);
  CHECK(a["ok"] == true);
  CHECK(a["products"] == 3);
  REQUIRE(h.last_resend);
  CHECK(h.last_resend->peer_uid == 1000u);
  CHECK(h.last_resend->glob == "*.grib2");
}

TEST_CASE("control protocol: to_line replaces invalid UTF-8 instead of throwing") {
  const json j = {{"name", std::string("bad\xff\xfe.bin")}};
  const auto line = to_line(j);
  CHECK(line.back() == '\n');
  CHECK(line.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD
  CHECK(json::parse(line)["name"].get<std::string>().starts_with("bad"));
}

TEST_CASE("control protocol: format_time is UTC with milliseconds") {
  CHECK(format_time(t0) == "2026-01-01T00:00:00.000Z");
  CHECK(format_time(t0 + 90061s + 7ms) == "2026-01-02T01:01:01.007Z");
  CHECK(format_time(wall_time{} - 1ms) == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("control protocol: the journal handler answers status, history and missing") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mcdist-ctlproto-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  hub_journal j(path);
  j.site_seen({"dwd", "obs", t0, 0.07, 0.01, 1});
  product p;
  p.channel = "obs";
  p.name = "a.bufr";
  p.spool_path = "/spool/a.bufr";
  p.size = 42;
  p.queued_at = t0;
  const auto a = j.enqueue(p);
  p.name = p.spool_path = "b.bufr";
  const auto b = j.enqueue(p);
  const auto seq = j.next_seq("obs");
  j.begin_session({"obs", seq, "0000beef", session_kind::batch, t0}, std::vector{a, b});
  j.mark_sent(a, "/keep/a", t0);
  j.mark_sent(b, "/keep/b", t0);
  j.end_session("obs", seq, session_outcome::partial, t0 + 1s);
  j.record_outcome(a, "dwd", outcome::stored, "", seq, t0 + 1s);
  j.record_outcome(b, "dwd", outcome::failed, "disk full", seq, t0 + 1s);

  journal_handler h(j);
  auto s = answer(h, R"({"cmd":"status"})");
  CHECK(s["ok"] == true);
  CHECK(s["daemon"] == false);
  REQUIRE(s["channels"].size() == 1);
  CHECK(s["channels"][0]["sent"] == 2);
  CHECK(s["channels"][0]["last_seq"] == 1);
  CHECK(s["sites"][0]["site"] == "dwd");
  CHECK(s["sessions"][0]["outcome"] == "partial");

  const auto since = std::to_string(to_ns(t0));
  auto hist = answer(h, R"({"cmd":"history","site":"dwd","since_ns":)" + since + "}");
  REQUIRE(hist["rows"].size() == 2);
  CHECK(hist["truncated"] == false);
  CHECK(hist["since"] == "2026-01-01T00:00:00.000Z");
  const auto& row = hist["rows"][1];
  for (const char* key :
       {"product_id", "channel", "name", "size", "seq", "site", "outcome", "reason", "at", "at_ns"})
    CHECK(row.contains(key));
  hist = answer(h, R"({"cmd":"history","site":"dwd","limit":1,"since_ns":)" + since + "}");
  CHECK(hist["rows"].size() == 1);
  CHECK(hist["truncated"] == true);

  auto miss = answer(h, R"({"cmd":"missing","site":"dwd","since_ns":)" + since + "}");
  REQUIRE(miss["rows"].size() == 1);
  CHECK(miss["rows"][0]["name"] == "b.bufr");
  CHECK(miss["rows"][0]["last_outcome"] == "failed");
  CHECK(miss["rows"][0]["reason"] == "disk full");
  CHECK(miss["rows"][0]["retained"] == true);

  auto rs = answer(h, R"({"cmd":"resend","site":"dwd","seq":[1,1]})");
  CHECK(rs["ok"] == false);
  CHECK_THAT(rs["error"].get<std::string>(), Catch::Contains("running mcdist-feed"));
  std::filesystem::remove(path);
}
