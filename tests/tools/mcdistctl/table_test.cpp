// mcdistctl's tables: widths from content in characters (UTF-8), right-aligned numbers, no
// trailing blanks, control characters neutralised; and the rendering of each answer.
#include "tools/mcdistctl/table.hpp"
#include "tools/mcdistctl/render.hpp"

#include <catch2/catch.hpp>

using namespace mcdist::ctl;
using json = nlohmann::json;

TEST_CASE("table: columns as wide as their widest cell, numbers right-aligned") {
  table t{{{"NAME"}, {"SIZE", align::right}, {"NOTE"}}, {}};
  t.rows.push_back({"a", "1", "x"});
  t.rows.push_back({"longer-name", "12345", ""});
  t.rows.push_back({"b"});  // short row: padded
  CHECK(format_table(t) ==
        "NAME          SIZE  NOTE\n"
        "a                1  x\n"
        "longer-name  12345\n"
        "b\n");
}

TEST_CASE("table: an empty table is its header") {
  table t{{{"A"}, {"B", align::right}}, {}};
  CHECK(format_table(t) == "A  B\n");
}

TEST_CASE("table: UTF-8 cells align by characters, not bytes") {
  table t{{{"SITE"}, {"N", align::right}}, {}};
  t.rows.push_back({"météo", "1"});  // 5 characters, 7 bytes
  t.rows.push_back({"dwd", "22"});
  CHECK(display_width("météo") == 5);
  CHECK(format_table(t) ==
        "SITE    N\n"
        "météo   1\n"
        "dwd    22\n");
}

TEST_CASE("table: control characters cannot break a row or reach the terminal") {
  CHECK(sanitize_cell("a\nb\rc\x1b[31md\x7f") == "a?b?c?[31md?");
  CHECK(sanitize_cell("x\xc2\x9b"
                      "2J") == "x?2J");  // C1 CSI
  CHECK(sanitize_cell("é") == "é");
  table t{{{"P"}, {"Q"}}, {}};
  t.rows.push_back({"evil\nname", "q"});
  CHECK(format_table(t) == "P          Q\nevil?name  q\n");
}

TEST_CASE("render: history, missing, resend and status from protocol answers") {
  const json hist = json::parse(R"({"ok":true,"site":"dwd","since":"2026-01-01T00:00:00.000Z",
    "truncated":true,"rows":[
     {"at":"2026-01-01T01:00:05.000Z","channel":"nwp","seq":1,"outcome":"failed","size":5242880,
      "name":"nwp/u10.grib2","reason":"disk full"},
     {"at":"2026-01-01T00:30:00.000Z","channel":"obs","seq":12,"outcome":"stored","size":2048,
      "name":"obs/a.bufr","reason":""}]})");
  CHECK(render_history(hist) ==
        "AT (UTC)             CHANNEL  SEQ  OUTCOME      SIZE  PRODUCT        REASON\n"
        "2026-01-01 01:00:05  nwp        1  failed   5.00 MiB  nwp/u10.grib2  disk full\n"
        "2026-01-01 00:30:00  obs       12  stored   2.00 KiB  obs/a.bufr\n"
        "2 outcomes for dwd since 2026-01-01 00:00:00 UTC (truncated: narrow --since or "
        "--product)\n");

  const json none =
      json::parse(R"({"ok":true,"site":"dwd","since":"2026-01-01T00:00:00.000Z","rows":[]})");
  CHECK(render_missing(none) == "nothing missing for dwd since 2026-01-01 00:00:00 UTC\n");
  const json miss = json::parse(R"({"ok":true,"site":"knmi","since":"2026-01-01T00:00:00.000Z",
    "rows":[{"channel":"obs","seq":2,"sent_at":"2026-01-01T02:00:00.000Z","last_outcome":"missed",
      "reason":"seq gap 2-2","size":4096,"name":"obs/b.bufr","retained":true},
     {"channel":"obs","seq":3,"sent_at":"2026-01-01T03:00:00.000Z","last_outcome":null,
      "reason":"","size":1,"name":"obs/c.bufr","retained":false}]})");
  CHECK(
      render_missing(miss) ==
      "CHANNEL  SEQ  SENT (UTC)           LAST OUTCOME      SIZE  PRODUCT     RESENDABLE  REASON\n"
      "obs        2  2026-01-01 02:00:00  missed        4.00 KiB  obs/b.bufr  yes         seq gap "
      "2-2\n"
      "obs        3  2026-01-01 03:00:00  none               1 B  obs/c.bufr  no\n"
      "2 products missing at knmi since 2026-01-01 00:00:00 UTC, 1 resendable\n");

  CHECK(render_resend(json::parse(R"({"ok":true,"site":"dwd","products":3,"bytes":3072,
          "session":"0000beef","unicast":true})")) ==
        "resend to dwd: 3 products (3.00 KiB) over unicast, session 0000beef\n");
  CHECK(render_resend(json::parse(R"({"ok":true,"site":"dwd","products":1,"session":""})")) ==
        "resend to dwd: 1 product over multicast, queued\n");

  const json st = json::parse(R"({"ok":true,"daemon":true,"rate_bps":100000000,
    "channels":[{"channel":"obs","last_seq":2,"queued":2,"sending":0,"sent":3,"failed":0,
                 "last_session":"2026-01-01T02:00:00.000Z"}],
    "sites":[{"site":"dwd","channel":"obs","last_seen":"2026-01-01T02:10:00.000Z","rtt_s":0.0712,
              "nak_ratio":0.004,"last_seq":2}],
    "sessions":[]})");
  CHECK(render_status(st) ==
        "mcdist-feed: running\n"
        "rate_bps: 100000000\n"
        "\n"
        "CHANNEL  LAST SEQ  QUEUED  SENDING  SENT  FAILED  LAST SESSION (UTC)\n"
        "obs             2       2        0     3       0  2026-01-01 02:00:00\n"
        "\n"
        "SITE  CHANNEL  LAST SEEN (UTC)      RTT ms  NAK %  LAST SEQ\n"
        "dwd   obs      2026-01-01 02:10:00    71.2   0.40         2\n");
  // A daemon answer without the expected keys still renders (blank cells), never throws.
  CHECK_NOTHROW(render_status(json::parse(R"({"ok":true,"channels":[{"x":1}],"sites":7})")));
  CHECK_NOTHROW(render_history(json::parse(R"({"ok":true,"rows":[{"size":"big","at":5}]})")));
}
