#include "common/unicast/frame.hpp"

#include "unicast.pb.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

/// Everything a frame_reader reported, flattened for comparison.
struct recorder final : frame_handler {
  struct control_event {
    frame_type type;
    std::vector<std::byte> body;
  };
  std::vector<control_event> controls;
  /// Record bytes per (file, offset) start, reassembled from pieces.
  std::vector<std::tuple<std::uint32_t, std::uint64_t, std::vector<std::byte>>> data;
  std::error_code fail_with;

  std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
    controls.push_back({type, {body.begin(), body.end()}});
    return fail_with;
  }
  std::error_code on_data(file_index f, std::uint64_t off, std::span<const std::byte> b) override {
    // A piece continues the previous one when it starts where that one ended.
    if (!data.empty()) {
      auto& [pf, po, pb] = data.back();
      if (pf == f.value && po + pb.size() == off) {
        pb.insert(pb.end(), b.begin(), b.end());
        return fail_with;
      }
    }
    data.emplace_back(f.value, off, std::vector<std::byte>(b.begin(), b.end()));
    return fail_with;
  }
};

std::vector<std::byte> data_frame(std::uint32_t file, std::uint64_t offset, std::size_t n,
                                  std::uint8_t fill) {
  std::vector<std::byte> f(record_header_size + n, std::byte{fill});
  write_record_header(f, file_index{file}, offset, static_cast<std::uint32_t>(n));
  return f;
}

/// The body of a protobuf message, as a peer other than ours might write it.
std::vector<std::byte> body_of(const google::protobuf::MessageLite& m) {
  const std::string s = m.SerializeAsString();
  return bytes_of(s);
}

/// A whole frame of `type` around `body`.
std::vector<std::byte> frame_of(frame_type type, const std::vector<std::byte>& body) {
  std::vector<std::byte> f(frame_header_size);
  write_frame_header(f, type, static_cast<std::uint32_t>(body.size()));
  f.insert(f.end(), body.begin(), body.end());
  return f;
}

hello sample_hello() {
  hello h;
  h.token = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  h.session = session_id{0xdeadbeef};
  h.client_nonce = 42;
  h.connection_index = 2;
  h.connection_count = 4;
  h.receiver_id = "dwd-offenbach";
  return h;
}

}  // namespace

TEST_CASE("frame header round-trips in network byte order", "[unit][unicast][frame]") {
  std::array<std::byte, frame_header_size> buf{};
  write_frame_header(buf, frame_type::ack, 0x01020304 & 0xffff);
  REQUIRE(std::to_integer<char>(buf[0]) == 'M');
  REQUIRE(std::to_integer<char>(buf[1]) == 'U');
  REQUIRE(std::to_integer<int>(buf[2]) == frame_version);
  REQUIRE(std::to_integer<int>(buf[3]) == static_cast<int>(frame_type::ack));
  frame_header h;
  REQUIRE_FALSE(decode_frame_header(buf, h));
  REQUIRE(h.type == frame_type::ack);
  REQUIRE(h.length == 0x0304);
}

TEST_CASE("every truncation of a frame header is refused", "[unit][unicast][frame]") {
  std::array<std::byte, frame_header_size> buf{};
  write_frame_header(buf, frame_type::request, 24);
  for (std::size_t n = 0; n < buf.size(); ++n) {
    INFO("length " << n);
    frame_header h;
    REQUIRE(decode_frame_header(std::span(buf).first(n), h) == errc::truncated);
  }
}

TEST_CASE("every truncation of a record header is refused", "[unit][unicast][frame]") {
  const auto f = data_frame(7, 1ull << 40, 3, 0xab);
  // The frame header alone is refused below 8 bytes; the body below prefix + 1 byte.
  for (std::size_t n = 0; n < f.size(); ++n) {
    INFO("length " << n);
    frame_header h;
    const auto ec = decode_frame_header(std::span(f).first(n), h);
    if (n < frame_header_size) {
      REQUIRE(ec == errc::truncated);
      continue;
    }
    REQUIRE_FALSE(ec);
    REQUIRE(h.type == frame_type::data);
    file_index file;
    std::uint64_t offset = 0;
    std::span<const std::byte> payload;
    const auto body = std::span(f).subspan(frame_header_size, n - frame_header_size);
    if (body.size() <= record_prefix_size) {
      REQUIRE(decode_record(body, file, offset, payload) == errc::truncated);
    } else {
      REQUIRE_FALSE(decode_record(body, file, offset, payload));
      REQUIRE(file == file_index{7});
      REQUIRE(offset == (1ull << 40));
      REQUIRE(payload.size() == body.size() - record_prefix_size);
    }
  }
}

TEST_CASE("frame header checks come in order", "[unit][unicast][frame]") {
  std::array<std::byte, frame_header_size> buf{};
  frame_header h;
  write_frame_header(buf, frame_type::hello, 30);
  auto bad = buf;
  bad[0] = std::byte{'M'};
  bad[1] = std::byte{'D'};  // the multicast magic is not ours
  REQUIRE(decode_frame_header(bad, h) == errc::bad_magic);
  for (int v : {1, 2}) {  // 1: 64-bit tokens (before signed sessions); 2: fixed binary bodies
    bad = buf;
    bad[2] = std::byte(v);
    REQUIRE(decode_frame_header(bad, h) == errc::bad_version);
  }
  for (int t : {0, 10, 255}) {
    bad = buf;
    bad[3] = std::byte(t);
    REQUIRE(decode_frame_header(bad, h) == errc::unknown_type);
  }
  write_frame_header(bad, frame_type::hello, max_hello_size + 1);
  REQUIRE(decode_frame_header(bad, h) == errc::oversized);
  write_frame_header(bad, frame_type::challenge, challenge_body_size + 1);
  REQUIRE(decode_frame_header(bad, h) == errc::oversized);
  write_frame_header(bad, frame_type::bye, 1);
  REQUIRE(decode_frame_header(bad, h) == errc::oversized);
  write_frame_header(bad, frame_type::request, max_control_body + 1);
  REQUIRE(decode_frame_header(bad, h) == errc::oversized);
  write_frame_header(bad, frame_type::data, record_prefix_size + max_record_size + 1);
  REQUIRE(decode_frame_header(bad, h) == errc::oversized);
  write_frame_header(bad, frame_type::data, record_prefix_size);  // no payload byte
  REQUIRE(decode_frame_header(bad, h) == errc::invalid_field);
}

TEST_CASE("a record whose end passes 2^64 is refused", "[unit][unicast][frame]") {
  const auto f = data_frame(1, UINT64_MAX - 1, 4, 0);
  file_index file;
  std::uint64_t offset = 0;
  std::span<const std::byte> payload;
  REQUIRE(decode_record(std::span(f).subspan(frame_header_size), file, offset, payload) ==
          errc::invalid_field);
  frame_reader r(true);
  recorder rec;
  REQUIRE(r.feed(f, rec) == errc::invalid_field);
  REQUIRE(rec.data.empty());
}

TEST_CASE("control bodies round-trip", "[unit][unicast][frame]") {
  std::vector<std::byte> out;
  frame_header h;

  append_frame(out, sample_hello());
  REQUIRE_FALSE(decode_frame_header(out, h));
  REQUIRE(h.type == frame_type::hello);
  hello back;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), back));
  REQUIRE(back.token == sample_hello().token);
  REQUIRE(back.session == sample_hello().session);
  REQUIRE(back.client_nonce == 42);
  REQUIRE(back.connection_index == 2);
  REQUIRE(back.connection_count == 4);
  REQUIRE(back.receiver_id == "dwd-offenbach");
  REQUIRE_FALSE(back.proof);

  // With a proof of the site key (signed sessions).
  out.clear();
  auto proved = sample_hello();
  proved.proof.emplace();
  for (std::size_t i = 0; i < proved.proof->size(); ++i)
    (*proved.proof)[i] = static_cast<std::uint8_t>(i);
  append_frame(out, proved);
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), back));
  REQUIRE(back.proof == proved.proof);
  REQUIRE(back.token == proved.token);
  REQUIRE(back.receiver_id == proved.receiver_id);
  // The longest hello fits its limit.
  proved.receiver_id = std::string(max_hello_receiver_id, 'x');
  proved.connection_index = max_connections - 1;
  proved.connection_count = max_connections;
  out.clear();
  append_frame(out, proved);
  REQUIRE(out.size() <= frame_header_size + max_hello_size);
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), back));
  REQUIRE(back.receiver_id == proved.receiver_id);

  out.clear();
  const challenge c{{1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 0, 0, 7}};
  append_frame(out, c);
  REQUIRE(out.size() == frame_header_size + challenge_body_size);  // what a client reads
  REQUIRE_FALSE(decode_frame_header(out, h));
  REQUIRE(h.type == frame_type::challenge);
  challenge cb;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), cb));
  REQUIRE(cb.nonce == c.nonce);

  out.clear();
  append_frame(out, welcome{65536, 32, 4});
  welcome w;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), w));
  REQUIRE(w.record_size == 65536);
  REQUIRE(w.streams == 32);
  REQUIRE(w.connection_count == 4);

  out.clear();
  append_frame(out, refuse{refuse_reason::busy, "full\x01"});
  refuse rf;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), rf));
  REQUIRE(rf.reason == refuse_reason::busy);
  REQUIRE(rf.text == "full?");  // control characters from the network are not printed

  out.clear();
  request rq;
  for (std::uint32_t i = 0; i < 100; ++i) rq.ranges.push_back({file_index{i}, i * 7ull, i + 1ull});
  append_frame(out, rq);
  request rq2;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), rq2));
  REQUIRE(rq2.ranges == rq.ranges);

  out.clear();
  ack a{{file_index{3}, file_index{1}}};
  append_frame(out, a);
  ack a2;
  REQUIRE_FALSE(decode(std::span(out).subspan(frame_header_size), a2));
  REQUIRE(a2.files == a.files);
}

TEST_CASE("every truncation of a control body is refused", "[unit][unicast][frame]") {
  // unicast.proto puts last in each message a field it cannot be valid without, and packs its
  // lists, so a cut at a field boundary fails validation and any other cut fails to parse.
  std::vector<std::vector<std::byte>> frames(8);
  append_frame(frames[0], sample_hello());
  auto proved = sample_hello();
  proved.proof.emplace();
  proved.proof->fill(0x77);
  append_frame(frames[5], proved);
  append_frame(frames[6], challenge{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6}});
  append_frame(frames[1], welcome{4096, 16, 1});
  append_frame(frames[2], refuse{refuse_reason::bad_credentials, "no"});
  append_frame(frames[3], request{{{file_index{1}, 0, 10}, {file_index{2}, 5, 5}}});
  append_frame(frames[4], ack{{file_index{9}, file_index{300}}});
  append_frame(frames[7], request{{{file_index{0}, 1ull << 40, 1}}});
  for (const auto& f : frames) {
    const auto body = std::span(f).subspan(frame_header_size);
    for (std::size_t n = 0; n < body.size(); ++n) {
      INFO("type " << std::to_integer<int>(f[3]) << " length " << n);
      const auto cut = body.first(n);
      std::error_code ec;
      switch (static_cast<frame_type>(std::to_integer<int>(f[3]))) {
        case frame_type::hello: {
          hello m;
          ec = decode(cut, m);
          break;
        }
        case frame_type::welcome: {
          welcome m;
          ec = decode(cut, m);
          break;
        }
        case frame_type::refuse: {
          refuse m;
          ec = decode(cut, m);
          break;
        }
        case frame_type::request: {
          request m;
          ec = decode(cut, m);
          break;
        }
        case frame_type::ack: {
          ack m;
          ec = decode(cut, m);
          break;
        }
        case frame_type::challenge: {
          challenge m;
          ec = decode(cut, m);
          break;
        }
        default: FAIL("unexpected type");
      }
      REQUIRE(ec == errc::invalid_field);
    }
  }
}

TEST_CASE("every truncation of a frame stream is held back, never delivered",
          "[unit][unicast][frame]") {
  // The frame header's length, not the body, says where a frame ends: a stream cut anywhere
  // delivers the frames before the cut and nothing of the one cut, and its end is a truncation.
  std::vector<std::byte> stream;
  append_frame(stream, sample_hello());
  append_frame(stream, request{{{file_index{1}, 0, 10}, {file_index{2}, 5, 5}}});
  append_frame(stream, ack{{file_index{1}}});
  append_bye(stream);
  recorder whole;
  frame_reader all(false);
  REQUIRE_FALSE(all.feed(stream, whole));
  REQUIRE(whole.controls.size() == 4);
  std::vector<std::size_t> ends;  // where each frame ends
  for (std::size_t at = 0; at < stream.size();) {
    frame_header h;
    REQUIRE_FALSE(decode_frame_header(std::span(stream).subspan(at), h));
    at += frame_header_size + h.length;
    ends.push_back(at);
  }
  for (std::size_t n = 0; n < stream.size(); ++n) {
    INFO("length " << n);
    recorder rec;
    frame_reader r(false);
    REQUIRE_FALSE(r.feed(std::span(stream).first(n), rec));
    const auto complete = static_cast<std::size_t>(
        std::count_if(ends.begin(), ends.end(), [n](std::size_t e) { return e <= n; }));
    REQUIRE(rec.controls.size() == complete);
    const bool boundary = n == 0 || std::find(ends.begin(), ends.end(), n) != ends.end();
    REQUIRE((boundary ? !r.finish() : r.finish() == errc::truncated));
  }
}

TEST_CASE("bodies over their limit are refused before they are parsed", "[unit][unicast][frame]") {
  // The reader refuses a frame whose header declares too much before reading its body.
  std::vector<std::byte> big(frame_header_size);
  write_frame_header(big, frame_type::request, max_control_body + 1);
  frame_reader r(false);
  recorder rec;
  REQUIRE(r.feed(big, rec) == errc::oversized);
  // The decoders refuse a body past their type's limit whatever it holds.
  std::vector<std::byte> body(max_control_body + 1);
  request rq;
  REQUIRE(decode(body, rq) == errc::oversized);
  ack a;
  REQUIRE(decode(body, a) == errc::oversized);
  hello h;
  REQUIRE(decode(std::span(body).first(max_hello_size + 1), h) == errc::oversized);
  welcome w;
  REQUIRE(decode(std::span(body).first(max_welcome_size + 1), w) == errc::oversized);
  refuse rf;
  REQUIRE(decode(std::span(body).first(max_refuse_size + 1), rf) == errc::oversized);
  challenge c;
  REQUIRE(decode(std::span(body).first(challenge_body_size + 1), c) == errc::oversized);
}

TEST_CASE("counts over their limit and lists that disagree are refused", "[unit][unicast][frame]") {
  pb::request rq;
  for (std::uint32_t i = 0; i <= max_request_ranges; ++i) {
    rq.add_file(i);
    rq.add_offset(0);
    rq.add_length(1);
  }
  REQUIRE(rq.ByteSizeLong() <= max_control_body);
  request back;
  REQUIRE(decode(body_of(rq), back) == errc::oversized);
  rq.mutable_file()->RemoveLast();  // down to the limit: accepted
  rq.mutable_offset()->RemoveLast();
  rq.mutable_length()->RemoveLast();
  REQUIRE_FALSE(decode(body_of(rq), back));
  REQUIRE(back.ranges.size() == max_request_ranges);
  rq.mutable_length()->RemoveLast();  // one length short of the files
  REQUIRE(decode(body_of(rq), back) == errc::invalid_field);
  REQUIRE(back.ranges.size() == max_request_ranges);  // untouched by a refused body
  REQUIRE(decode(body_of(pb::request{}), back) == errc::invalid_field);  // no range at all

  pb::ack a;
  for (std::uint32_t i = 0; i <= max_ack_files; ++i) a.add_file(i);
  REQUIRE(a.ByteSizeLong() <= max_control_body);
  ack ab;
  REQUIRE(decode(body_of(a), ab) == errc::oversized);
  REQUIRE(decode(body_of(pb::ack{}), ab) == errc::invalid_field);  // no file at all
}

TEST_CASE("sizes of tokens, nonces and proofs are checked", "[unit][unicast][frame]") {
  pb::hello h;
  h.set_token(std::string(16, 't'));
  h.set_session(7);
  h.set_connection_count(1);
  h.set_receiver_id("site-a");
  hello back;
  REQUIRE_FALSE(decode(body_of(h), back));
  REQUIRE_FALSE(back.proof);
  h.set_token(std::string(15, 't'));
  REQUIRE(decode(body_of(h), back) == errc::invalid_field);
  h.set_token(std::string(16, 't'));
  h.set_proof(std::string(31, 'p'));
  REQUIRE(decode(body_of(h), back) == errc::invalid_field);
  h.set_proof(std::string(32, 'p'));
  REQUIRE_FALSE(decode(body_of(h), back));
  REQUIRE(back.proof);
  h.set_receiver_id(std::string(max_hello_receiver_id + 1, 'x'));
  REQUIRE(decode(body_of(h), back) == errc::oversized);

  pb::challenge c;
  c.set_nonce(std::string(17, 'n'));
  challenge cb;
  REQUIRE(decode(body_of(c), cb) == errc::oversized);  // 19 bytes: over the exact size
  c.set_nonce(std::string(15, 'n'));
  REQUIRE(decode(body_of(c), cb) == errc::invalid_field);

  pb::refuse r;
  r.set_reason(static_cast<pb::refuse::reason_t>(9));
  refuse rb;
  REQUIRE(decode(body_of(r), rb) == errc::invalid_field);  // unknown reason
  r.set_reason(pb::refuse::BUSY);
  REQUIRE_FALSE(decode(body_of(r), rb));
  REQUIRE(rb.reason == refuse_reason::busy);
  REQUIRE(rb.text.empty());

  pb::welcome w;
  w.set_record_size(min_record_size - 1);
  welcome wb;
  REQUIRE(decode(body_of(w), wb) == errc::invalid_field);
  w.set_record_size(max_record_size + 1);
  REQUIRE(decode(body_of(w), wb) == errc::invalid_field);
  w.set_record_size(max_record_size);
  w.set_streams(70000);
  REQUIRE(decode(body_of(w), wb) == errc::invalid_field);
}

TEST_CASE("fields a later version adds are ignored", "[unit][unicast][frame]") {
  // An unknown field (number 100, varint 1) after a welcome: still a welcome.
  std::vector<std::byte> out;
  append_frame(out, welcome{65536, 4, 2});
  auto body = std::vector<std::byte>(out.begin() + frame_header_size, out.end());
  body.push_back(std::byte{0xa0});  // field 100, wire type 0: (100 << 3) = 800 = 0xa0 0x06
  body.push_back(std::byte{0x06});
  body.push_back(std::byte{0x01});
  welcome w;
  REQUIRE_FALSE(decode(body, w));
  REQUIRE(w.record_size == 65536);
  REQUIRE(w.streams == 4);
  REQUIRE(w.connection_count == 2);
  frame_reader r(true);
  recorder rec;
  REQUIRE_FALSE(r.feed(frame_of(frame_type::welcome, body), rec));
  REQUIRE(rec.controls.size() == 1);
}

TEST_CASE("hello values are validated", "[unit][unicast][frame]") {
  auto check = [](hello h) {
    std::vector<std::byte> out;
    append_frame(out, h);
    hello back;
    return decode(std::span(out).subspan(frame_header_size), back);
  };
  REQUIRE_FALSE(check(sample_hello()));
  auto h = sample_hello();
  h.receiver_id = "bad id";
  REQUIRE(check(h) == errc::invalid_field);
  h = sample_hello();
  h.receiver_id = "";
  REQUIRE(check(h) == errc::invalid_field);
  h = sample_hello();
  h.connection_index = 4;
  REQUIRE(check(h) == errc::invalid_field);
  h = sample_hello();
  h.connection_count = max_connections + 1;
  h.connection_index = 0;
  REQUIRE(check(h) == errc::invalid_field);
  h = sample_hello();
  h.connection_count = 0;
  h.connection_index = 0;
  REQUIRE(check(h) == errc::invalid_field);
}

TEST_CASE("requests refuse empty and wrapping ranges", "[unit][unicast][frame]") {
  for (const byte_range r :
       {byte_range{file_index{1}, 0, 0}, byte_range{file_index{1}, UINT64_MAX, 1}}) {
    std::vector<std::byte> out;
    append_frame(out, request{{r}});
    request back;
    REQUIRE(decode(std::span(out).subspan(frame_header_size), back) == errc::invalid_field);
  }
}

TEST_CASE("frame_reader gives the same frames at every split point", "[unit][unicast][frame]") {
  std::vector<std::byte> stream;
  append_frame(stream, welcome{65536, 8, 1});
  const auto d1 = data_frame(3, 100, 1000, 0x11);
  stream.insert(stream.end(), d1.begin(), d1.end());
  append_frame(stream, ack{{file_index{1}, file_index{2}}});
  const auto d2 = data_frame(4, 0, 1, 0x22);
  stream.insert(stream.end(), d2.begin(), d2.end());
  append_bye(stream);

  recorder whole;
  frame_reader r0(true);
  REQUIRE_FALSE(r0.feed(stream, whole));
  REQUIRE(r0.at_boundary());
  REQUIRE(r0.frames() == 5);
  REQUIRE(whole.controls.size() == 3);
  REQUIRE(whole.data.size() == 2);
  REQUIRE(std::get<2>(whole.data[0]) == std::vector<std::byte>(1000, std::byte{0x11}));
  REQUIRE(std::get<1>(whole.data[0]) == 100);

  for (std::size_t a = 0; a <= stream.size(); ++a) {
    for (std::size_t b = a; b <= stream.size(); b += 37) {
      recorder rec;
      frame_reader r(true);
      REQUIRE_FALSE(r.feed(std::span(stream).first(a), rec));
      REQUIRE_FALSE(r.feed(std::span(stream).subspan(a, b - a), rec));
      if (b < stream.size()) {
        // Cut inside a frame: the end of the stream here would be a truncation.
        const bool boundary = r.at_boundary();
        REQUIRE((boundary ? !r.finish() : r.finish() == errc::truncated));
      }
      REQUIRE_FALSE(r.feed(std::span(stream).subspan(b), rec));
      REQUIRE_FALSE(r.finish());
      REQUIRE(rec.controls.size() == whole.controls.size());
      for (std::size_t i = 0; i < rec.controls.size(); ++i) {
        REQUIRE(rec.controls[i].type == whole.controls[i].type);
        REQUIRE(rec.controls[i].body == whole.controls[i].body);
      }
      REQUIRE(rec.data == whole.data);
    }
  }
}

TEST_CASE("frame_reader hands record bytes on as they arrive", "[unit][unicast][frame]") {
  const auto d = data_frame(9, 4096, 300, 0x5a);
  frame_reader r(true);
  recorder rec;
  REQUIRE_FALSE(r.feed(std::span(d).first(record_header_size + 100), rec));
  REQUIRE(rec.data.size() == 1);
  REQUIRE(std::get<1>(rec.data[0]) == 4096);
  REQUIRE(std::get<2>(rec.data[0]).size() == 100);
  REQUIRE(r.finish() == errc::truncated);  // a cut here leaves a correct prefix only
}

TEST_CASE("the server's reader refuses data frames", "[unit][unicast][frame]") {
  const auto d = data_frame(1, 0, 10, 0);
  frame_reader r(false);
  recorder rec;
  REQUIRE(r.feed(d, rec) == error::protocol_violation);
  REQUIRE(rec.data.empty());
  // Dead after an error.
  std::vector<std::byte> bye;
  append_bye(bye);
  REQUIRE(r.feed(bye, rec) == error::protocol_violation);
  REQUIRE(rec.controls.empty());
}

TEST_CASE("frame_reader refuses garbage and records over its limit", "[unit][unicast][frame]") {
  frame_reader r(true);
  recorder rec;
  REQUIRE(r.feed(bytes_of("GET / HTTP/1.1\r\n\r\n"), rec) == errc::bad_magic);
  frame_reader small(true, 1024);
  REQUIRE(small.feed(data_frame(1, 0, 1025, 0), rec) == errc::oversized);
  REQUIRE(rec.data.empty());
}

TEST_CASE("a handler error stops the reader", "[unit][unicast][frame]") {
  std::vector<std::byte> s;
  append_bye(s);
  append_bye(s);
  frame_reader r(true);
  recorder rec;
  rec.fail_with = error::protocol_violation;
  REQUIRE(r.feed(s, rec) == error::protocol_violation);
  REQUIRE(rec.controls.size() == 1);
}
