/// @file
/// libFuzzer target: the unicast fallback's framing (common/unicast/frame.hpp) as a server or a
/// client reads it from a TCP byte stream or an SCTP message.
///
/// Input: one flags byte (bit 0: the reader accepts data frames, as a client's does; bit 1:
/// sealed frames of an encrypted session, below; the other bits seed how the stream is cut
/// into reads), then the byte stream. The stream is fed twice: whole, and cut into reads of
/// 1..64 bytes. Invariants checked (abort on violation): both feeds report the same control
/// frames, the same data bytes and the same error; every control body a decoder accepts (a
/// message of proto/unicast.proto whose values pass the checks) re-encodes (append_frame) into
/// a frame within its type's limit that decodes and re-encodes to the same bytes; every decoder
/// and decode_record survive every body.
///
/// Sealed (bit 1; common/unicast/record_seal.hpp): the input after the flags byte is a tamper
/// byte, then chunks `length u16 (big-endian) | inner frame bytes`. Each chunk is sealed under a
/// fixed key on stream 0 (a chunk that cannot be sealed ends the list); a non-zero tamper byte
/// flips one bit of the sealed stream at a place it chooses. The sealed stream goes through
/// readers with an opener of the same key, whole and cut, with the invariants above; untampered,
/// every inner frame must open (so an error can only come from the inner frame's content). The
/// raw input also goes to a reader with an opener: garbage is refused, never a crash.

#include "common/unicast/frame.hpp"
#include "common/unicast/record_seal.hpp"

#include <cstdlib>
#include <optional>
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

/// Feeds `stream` whole and cut (seeded by `seed`) to two readers, with openers of `key` when
/// given; aborts when the two disagree. @return the error of the whole feed
std::error_code feed_twice(std::span<const std::byte> stream, bool accept_data, std::uint8_t seed,
                           const crypto::key32* key) {
  std::optional<frame_opener> o1, o2;
  recorder whole;
  frame_reader r1(accept_data);
  recorder cut;
  frame_reader r2(accept_data);
  if (key) {
    o1.emplace(*key);
    o2.emplace(*key);
    r1.set_opener(&*o1);
    r2.set_opener(&*o2);
  }
  const std::error_code e1 = r1.feed(stream, whole);
  std::error_code e2;
  std::uint32_t rng = seed | 1u;
  for (std::size_t at = 0; at < stream.size() && !e2;) {
    rng = rng * 1103515245u + 12345u;
    const std::size_t n = std::min<std::size_t>(1 + (rng >> 16) % 64, stream.size() - at);
    e2 = r2.feed(stream.subspan(at, n), cut);
    at += n;
  }
  if (e1 != e2 || whole.controls != cut.controls || whole.data != cut.data) std::abort();
  if (!e1) (void)r1.finish();
  return e1;
}

const crypto::key32& fuzz_key() {
  static const crypto::key32 k = [] {
    crypto::key32 fallback{};
    fallback.fill(0x42);
    challenge c;
    c.nonce.fill(7);
    hello h;
    h.client_nonce = 1;
    return derive_seal_keys(fallback, c, h).to_client;
  }();
  return k;
}

int sealed_input(const std::uint8_t* data, std::size_t size) {
  const bool accept_data = data[0] & 1;
  const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  // Garbage to a reader that expects sealed frames.
  (void)feed_twice(rest, accept_data, data[0], &fuzz_key());
  if (rest.empty()) return 0;
  const auto tamper = std::to_integer<std::uint8_t>(rest[0]);
  std::span<const std::byte> chunks = rest.subspan(1);
  frame_sealer sealer(fuzz_key());
  std::vector<std::byte> sealed;
  std::vector<std::byte> buf;
  while (chunks.size() >= 2) {
    const std::size_t n =
        std::to_integer<std::size_t>(chunks[0]) << 8 | std::to_integer<std::size_t>(chunks[1]);
    if (chunks.size() - 2 < n) break;
    buf.assign(seal_front, std::byte{0});
    buf.insert(buf.end(), chunks.begin() + 2, chunks.begin() + 2 + static_cast<std::ptrdiff_t>(n));
    if (sealer.seal(0, buf)) break;
    sealed.insert(sealed.end(), buf.begin(), buf.end());
    chunks = chunks.subspan(2 + n);
  }
  if (tamper != 0 && !sealed.empty()) {
    const std::size_t at = (std::size_t{tamper} * 7919u) % sealed.size();
    sealed[at] ^= std::byte{static_cast<unsigned char>(1u << (tamper % 8))};
  }
  const auto ec = feed_twice(sealed, accept_data, data[0], &fuzz_key());
  // Untampered, every frame opens: an error is about an inner frame, never the tag.
  if (tamper == 0 && ec == make_error_code(errc::unauthenticated)) std::abort();
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  if (data[0] & 2) return sealed_input(data, size);
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
