/// @file
/// libFuzzer target: the unicast fallback's framing (common/unicast/frame.hpp) as a server or a
/// client reads it from a TCP byte stream or an SCTP message.
///
/// Input: one flags byte (bit 0: the reader accepts data frames, as a client's does; the other
/// bits seed how the stream is cut into reads), then the byte stream. The stream is fed twice:
/// whole, and cut into reads of 1..64 bytes. Invariants checked (abort on violation): both feeds
/// report the same control frames, the same data bytes and the same error; every control body
/// a decoder accepts re-encodes (append_frame) into a frame that decodes and re-encodes to the
/// same bytes; every decoder and decode_record survive every body.

#include "common/unicast/frame.hpp"

#include <cstdlib>
#include <vector>

using namespace mcdist;
using namespace mcdist::unicast;

namespace {

template <class Msg>
void stable(std::span<const std::byte> body) {
  Msg m;
  if (decode(body, m)) return;
  std::vector<std::byte> once;
  append_frame(once, m);
  frame_header h;
  if (decode_frame_header(once, h) || h.length + frame_header_size != once.size()) std::abort();
  Msg m2;
  if (decode(std::span<const std::byte>(once).subspan(frame_header_size), m2)) std::abort();
  std::vector<std::byte> twice;
  append_frame(twice, m2);
  if (once != twice) std::abort();
}

void every_decoder(std::span<const std::byte> body) {
  stable<hello>(body);
  stable<welcome>(body);
  stable<refuse>(body);
  stable<request>(body);
  stable<ack>(body);
  stable<challenge>(body);
  file_index f;
  std::uint64_t off = 0;
  std::span<const std::byte> payload;
  if (!decode_record(body, f, off, payload) && off + payload.size() < off) std::abort();
}

struct recorder final : frame_handler {
  std::vector<std::pair<frame_type, std::vector<std::byte>>> controls;
  std::vector<std::byte> data;
  std::error_code on_control(frame_type type, std::span<const std::byte> body) override {
    controls.emplace_back(type, std::vector<std::byte>(body.begin(), body.end()));
    every_decoder(body);
    return {};
  }
  std::error_code on_data(file_index, std::uint64_t offset, std::span<const std::byte> b) override {
    if (b.empty() || offset + b.size() < offset) std::abort();
    data.insert(data.end(), b.begin(), b.end());
    return {};
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool accept_data = data[0] & 1;
  const std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data) + 1, size - 1);

  recorder whole;
  frame_reader r1(accept_data);
  const std::error_code e1 = r1.feed(stream, whole);

  recorder cut;
  frame_reader r2(accept_data);
  std::error_code e2;
  std::uint32_t rng = data[0] | 1u;
  for (std::size_t at = 0; at < stream.size() && !e2;) {
    rng = rng * 1103515245u + 12345u;
    const std::size_t n = std::min<std::size_t>(1 + (rng >> 16) % 64, stream.size() - at);
    e2 = r2.feed(stream.subspan(at, n), cut);
    at += n;
  }
  if (e1 != e2 || whole.controls != cut.controls || whole.data != cut.data) std::abort();
  if (!e1) (void)r1.finish();
  // Each frame body alone, as SCTP delivers it (one message = one frame).
  frame_header h;
  if (!decode_frame_header(stream, h)) {
    const auto rest = stream.subspan(frame_header_size);
    every_decoder(rest.first(std::min<std::size_t>(h.length, rest.size())));
  }
  return 0;
}
