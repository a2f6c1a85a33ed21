#include "common/wire.hpp"

#include "common/ranges.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace mcdist;

namespace {

std::vector<std::byte> control_datagram() {
  wire::marker m;
  m.set_pass(3);
  m.set_file(7);
  m.set_block(99);
  m.set_sender_time_us(123456789);
  m.set_grtt_us(700000);
  std::vector<std::byte> out(wire::header_size + m.ByteSizeLong());
  REQUIRE(wire::encode_control(out, wire::msg_type::marker, session_id{0xabcdef01}, m) ==
          out.size());
  return out;
}

}  // namespace

TEST_CASE("data header round-trips every field in network byte order", "[unit][wire]") {
  std::vector<std::byte> buf(wire::data_header_size + 5, std::byte{0x5a});
  const wire::data_header h{session_id{0x01020304}, 0xfffffffe, file_index{7},
                            block_index{0x10000}};
  wire::write_data_header(buf, h);
  REQUIRE(std::to_integer<int>(buf[0]) == 'M');
  REQUIRE(std::to_integer<int>(buf[1]) == 'D');
  REQUIRE(std::to_integer<int>(buf[4]) == 0x01);
  wire::header common;
  REQUIRE_FALSE(wire::parse_header(buf, common));
  REQUIRE(common.type == wire::msg_type::data);
  wire::data_header back;
  std::span<const std::byte> payload;
  REQUIRE_FALSE(wire::parse_data(buf, back, payload));
  REQUIRE(back.session == h.session);
  REQUIRE(back.seq == h.seq);
  REQUIRE(back.file == h.file);
  REQUIRE(back.block == h.block);
  REQUIRE(payload.size() == 5);
}

TEST_CASE("parity header round-trips every field and every truncation is refused", "[unit][wire]") {
  std::vector<std::byte> buf(wire::data_header_size + 7, std::byte{0x5a});
  const wire::parity_header h{session_id{0x0a0b0c0d}, 0x80000001, 0x00c0ffee, 54};
  wire::write_parity_header(buf, h);
  wire::header common;
  REQUIRE_FALSE(wire::parse_header(buf, common));
  REQUIRE(common.type == wire::msg_type::parity);
  REQUIRE(std::string(wire::to_string(common.type)) == "parity");
  wire::parity_header back;
  std::span<const std::byte> payload;
  REQUIRE_FALSE(wire::parse_parity(buf, back, payload));
  REQUIRE(back.session == h.session);
  REQUIRE(back.seq == h.seq);
  REQUIRE(back.fec_block == h.fec_block);
  REQUIRE(back.index == h.index);
  REQUIRE(payload.size() == 7);
  for (std::size_t n = wire::header_size; n < wire::data_header_size; ++n) {
    INFO("length " << n);
    REQUIRE(wire::parse_parity(std::span<const std::byte>(buf.data(), n), back, payload) ==
            errc::truncated);
  }
}

TEST_CASE("every truncation of a data datagram header is refused", "[unit][wire]") {
  std::vector<std::byte> buf(wire::data_header_size);
  wire::write_data_header(buf, {session_id{1}, 1, file_index{0}, block_index{0}});
  for (std::size_t n = 0; n < buf.size(); ++n) {
    INFO("length " << n);
    const std::span<const std::byte> cut(buf.data(), n);
    wire::header h;
    const auto ec = wire::parse_header(cut, h);
    if (n < wire::header_size) {
      REQUIRE(ec == errc::truncated);
      continue;
    }
    REQUIRE_FALSE(ec);
    wire::data_header d;
    std::span<const std::byte> payload;
    REQUIRE(wire::parse_data(cut, d, payload) == errc::truncated);
  }
}

TEST_CASE("control messages round-trip and every truncation fails cleanly", "[unit][wire]") {
  const auto full = control_datagram();
  wire::header h;
  REQUIRE_FALSE(wire::parse_header(full, h));
  REQUIRE(h.type == wire::msg_type::marker);
  REQUIRE(h.session == session_id{0xabcdef01});
  wire::marker m;
  REQUIRE_FALSE(wire::parse_control(full, m));
  REQUIRE(m.pass() == 3);
  REQUIRE(m.block() == 99);
  REQUIRE(m.grtt_us() == 700000);
  // Beast's parsegrind idea: every prefix either parses to something smaller or fails, and
  // never reads past its end (ASan checks the latter).
  std::size_t failures = 0;
  for (std::size_t n = wire::header_size; n < full.size(); ++n) {
    std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    wire::marker part;
    if (wire::parse_control(cut, part)) {
      ++failures;
    } else {
      REQUIRE(part.ByteSizeLong() < m.ByteSizeLong());
    }
  }
  REQUIRE(failures > 0);
}

TEST_CASE("headers with wrong magic, version, type or size are refused by name", "[unit][wire]") {
  auto d = control_datagram();
  wire::header h;
  auto bad = d;
  bad[0] = std::byte{'X'};
  REQUIRE(wire::parse_header(bad, h) == errc::bad_magic);
  bad = d;
  bad[2] = std::byte{4};
  REQUIRE(wire::parse_header(bad, h) == errc::bad_version);
  bad[2] = std::byte{0};
  REQUIRE(wire::parse_header(bad, h) == errc::bad_version);
  bad[2] = std::byte{wire::authenticated_version};  // accepted: the shells cut its trailer off
  REQUIRE_FALSE(wire::parse_header(bad, h));
  bad[2] = std::byte{wire::digest_version};  // accepted: the shells check its block digest
  REQUIRE_FALSE(wire::parse_header(bad, h));
  bad = d;
  bad[3] = std::byte{0};
  REQUIRE(wire::parse_header(bad, h) == errc::unknown_type);
  bad[3] = std::byte{12};  // parity
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::parity);
  bad[3] = std::byte{13};
  REQUIRE(wire::parse_header(bad, h) == errc::unknown_type);
  bad[3] = std::byte{19};
  REQUIRE(wire::parse_header(bad, h) == errc::unknown_type);
  bad[3] = std::byte{18};  // relay_hello (common/auth.hpp)
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::relay_hello);
  bad[3] = std::byte{16};  // heartbeat (common/beacon.hpp)
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::heartbeat);
  bad[3] = std::byte{17};  // gap_report
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::gap_report);
  bad[3] = std::byte{15};  // block_digests (silent signed sessions)
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::block_digests);
  REQUIRE(std::string(wire::to_string(h.type)) == "block_digests");
  bad[3] = std::byte{14};  // repair_advert
  REQUIRE_FALSE(wire::parse_header(bad, h));
  REQUIRE(h.type == wire::msg_type::repair_advert);
  REQUIRE(std::string(wire::to_string(h.type)) == "repair_advert");
  bad = d;
  bad.resize(wire::max_datagram_size + 1);
  REQUIRE(wire::parse_header(bad, h) == errc::oversized);
}

TEST_CASE("encode_control refuses a buffer that is too small", "[unit][wire]") {
  wire::complete c;
  c.set_receiver_id("site");
  std::vector<std::byte> small(wire::header_size + 2);
  REQUIRE(wire::encode_control(small, wire::msg_type::complete, session_id{1}, c) == 0);
}

TEST_CASE("receiver ids are site names, nothing else", "[unit][wire]") {
  REQUIRE(wire::valid_receiver_id("dwd-offenbach"));
  REQUIRE(wire::valid_receiver_id("a.b_c:d@e"));
  REQUIRE_FALSE(wire::valid_receiver_id(""));
  REQUIRE_FALSE(wire::valid_receiver_id("has space"));
  REQUIRE_FALSE(wire::valid_receiver_id("slash/"));
  REQUIRE_FALSE(wire::valid_receiver_id(std::string(65, 'a')));
  REQUIRE(wire::valid_receiver_id(std::string(64, 'a')));
}

TEST_CASE("range lists round-trip and malformed ones are refused whole", "[unit][ranges]") {
  std::vector<std::uint32_t> pairs;
  range_encoder enc(pairs);
  enc.add(0, 3);
  enc.add(10, 1);
  enc.add(4000000000u, 5);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> got;
  REQUIRE_FALSE(for_each_range(pairs, 4000000005u,
                               [&](std::uint32_t f, std::uint32_t c) { got.emplace_back(f, c); }));
  REQUIRE(got ==
          std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 3}, {10, 1}, {4000000000u, 5}});
  int calls = 0;
  auto count = [&](std::uint32_t, std::uint32_t) { ++calls; };
  REQUIRE(for_each_range(pairs, 4000000004u, count) == errc::invalid_field);  // past the limit
  const std::vector<std::uint32_t> odd{1, 2, 3};
  REQUIRE(for_each_range(odd, 100, count) == errc::invalid_field);
  const std::vector<std::uint32_t> zero{1, 0};
  REQUIRE(for_each_range(zero, 100, count) == errc::invalid_field);
  const std::vector<std::uint32_t> overflow{0xffffffffu, 0xffffffffu, 0xffffffffu, 1};
  REQUIRE(for_each_range(overflow, 0xffffffffu, count) == errc::invalid_field);
  REQUIRE(calls == 0);
}

TEST_CASE("subtracting sequence ranges keeps exactly the numbers in none of them", "[unit][wire]") {
  using ranges = std::vector<wire::seq_span>;
  const ranges from{{1, 5}, {8, 12}, {20, 20}};
  // Overlapping, ordered by first: 3-4 and 4-9 take 3..9; 11 and 20 go; 12 stays.
  const ranges minus{{3, 4}, {4, 9}, {11, 11}, {20, 30}};
  CHECK(wire::subtract_seq_ranges(from, minus) == ranges{{1, 2}, {10, 10}, {12, 12}});
  CHECK(wire::subtract_seq_ranges(from, {}) == from);
  const ranges all{{0, UINT64_MAX}};
  CHECK(wire::subtract_seq_ranges(from, all).empty());
  // Brute force over small numbers: every number is kept exactly when no range of minus has it.
  const ranges big{{2, 40}};
  const ranges holes{{1, 3}, {7, 7}, {9, 15}, {12, 13}, {39, 50}};
  const auto got = wire::subtract_seq_ranges(big, holes);
  for (std::uint64_t n = 1; n <= 60; ++n) {
    const auto in = [n](const ranges& rs) {
      return std::any_of(rs.begin(), rs.end(),
                         [n](const auto& r) { return r.first <= n && n <= r.second; });
    };
    CHECK(in(got) == (in(big) && !in(holes)));
  }
}
