#pragma once
/// @file
/// Framing of the unicast fallback, the same over TCP and SCTP (docs/design-notes.md "Unicast
/// fallback").
///
/// Every frame starts with an 8-byte header in network byte order:
///
///     0      2      3      4                8
///     +------+------+------+----------------+
///     | 'MU' | ver  | type | body length    |
///     +------+------+------+----------------+
///
/// A data frame's body is a 12-byte record prefix and the record's bytes (XFTP records,
/// Allman, Ostermann & Kruse section 3: each record carries where it belongs in its file):
///
///     8              12                             20
///     +--------------+------------------------------+-------------------+
///     | file index   | byte offset in the file      | payload ...       |
///     +--------------+------------------------------+-------------------+
///
/// Control bodies (client -> server: hello, request, ack, bye; server -> client: challenge,
/// welcome, refuse) are the protobuf messages of proto/unicast.proto, one per frame, the frame
/// header's type saying which; bye has an empty body. Each body is capped by its type's limit
/// before it is read, parsed, then every value is checked (decode below) before a caller sees
/// it. The structs below are what the rest of the program uses; this file is the one place
/// that converts them to and from the messages.
///
/// Over TCP, frames follow each other in the byte stream; over SCTP each frame is one SCTP
/// message (control on stream 0, data on the file's stream), and a message that does not hold
/// exactly one frame is refused.
///
/// The server speaks first: its challenge (16 random bytes) is the first frame of every TCP
/// connection and of the association. A client of a signed session waits for it and proves
/// the site's key in its hello (common/unicast/hello_proof.hpp); a client of an unsigned
/// session sends its hello at once and skips the challenge.

#include "common/crypto.hpp"
#include "common/error.hpp"
#include "common/ids.hpp"
#include "common/unicast/error.hpp"
#include "common/unicast/types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mcdist::unicast {

/// "MU" in ASCII, big-endian: not the multicast datagram magic "MD", so a datagram sent to the
/// wrong port is refused at the first check.
inline constexpr std::uint16_t frame_magic = 0x4d55;
/// The framing version this build speaks; frames of any other version are refused. Version 2:
/// 128-bit tokens, the server's challenge and the hello's proof of the site key. Version 3:
/// control bodies are the messages of proto/unicast.proto (version 2's were fixed binary
/// layouts).
inline constexpr std::uint8_t frame_version = 3;
/// Size of the frame header, bytes.
inline constexpr std::size_t frame_header_size = 8;
/// Size of a data frame's record prefix (file index + offset), bytes.
inline constexpr std::size_t record_prefix_size = 12;
/// Bytes in front of a record's payload: frame header + record prefix.
inline constexpr std::size_t record_header_size = frame_header_size + record_prefix_size;

/// Smallest record size a server may be configured with, bytes: below this the 20-byte header
/// costs more than 4 %.
inline constexpr std::uint32_t min_record_size = 512;
/// Largest record payload either side accepts, bytes. A record is buffered whole by the server
/// (one per TCP connection, one pending per association), so this bounds memory per session;
/// 1 MiB is 16 default records.
inline constexpr std::uint32_t max_record_size = 1u << 20;
/// Default record size, bytes. XFTP used 8 KiB records on a T1; 64 KiB keeps the header under
/// 0.04 %, keeps the per-record costs (one pread, one write/sendv) small at 10 Gbit/s, and is
/// still far more records than connections (m >> n) for any file over a few hundred kB. Small
/// files are one record each.
inline constexpr std::uint32_t default_record_size = 64u << 10;
/// Largest request or ack body, bytes: a request of max_request_ranges ranges fits with any
/// values (2048 x 25 bytes of varints), and so does an ack of max_ack_files files.
inline constexpr std::uint32_t max_control_body = 64u << 10;
/// Most ranges in one request frame. A client with more ranges sends several request frames
/// back to back (still pipelined); 2048 keeps a frame under max_control_body whatever its
/// values.
inline constexpr std::size_t max_request_ranges = 2048;
/// Most files in one ack frame: 8192 x 5 bytes of varints = 40 KiB, under max_control_body.
inline constexpr std::size_t max_ack_files = 8192;
/// Longest refuse text, bytes: one operator-readable sentence.
inline constexpr std::size_t max_refuse_text = 512;
/// Longest receiver id in a hello, bytes (same limit as the multicast protocol's ids).
inline constexpr std::size_t max_hello_receiver_id = 64;
/// Most TCP connections one client may open in one session: XFTP found 8 optimal on a T1
/// satellite path and more overflowed router queues; 16 leaves room for faster paths while
/// bounding what one client can take from the server.
inline constexpr std::uint8_t max_connections = 16;

/// Frame types (the header's type byte).
enum class frame_type : std::uint8_t {
  hello = 1,      ///< client -> server, first frame on every connection / the association
  welcome = 2,    ///< server -> client, hello accepted
  refuse = 3,     ///< server -> client, hello refused; the server closes after it
  request = 4,    ///< client -> server, byte ranges wanted (any number of frames, pipelined)
  ack = 5,        ///< client -> server, files whose requested bytes all arrived
  bye = 6,        ///< client -> server, the client is done; the server closes
  data = 7,       ///< server -> client, one record
  challenge = 8,  ///< server -> client, first frame on every connection / the association
  /// either way after the hello, encrypted sessions only: another frame sealed under the
  /// connection's key (common/unicast/record_seal.hpp)
  sealed = 9,
};

/// Short name of a frame type for logs, "unknown" otherwise.
std::string_view to_string(frame_type t) noexcept;

/// A decoded frame header.
struct frame_header {
  frame_type type{};
  std::uint32_t length = 0;  ///< body bytes after the 8-byte header
};

/// Decodes and checks a frame header, in order: at least 8 bytes (errc::truncated), magic
/// (bad_magic), version (bad_version), type (unknown_type), body length within the type's limit
/// (oversized; a data body must also hold the prefix and one byte: invalid_field).
std::error_code decode_frame_header(std::span<const std::byte> in, frame_header& out) noexcept;

/// Writes a frame header into the first 8 bytes of `out` (which must hold them).
void write_frame_header(std::span<std::byte> out, frame_type type, std::uint32_t length) noexcept;

/// Writes a data frame's 20-byte header (frame header + record prefix) into `out`, for a
/// payload of `payload_length` bytes that follows it.
void write_record_header(std::span<std::byte> out, file_index file, std::uint64_t offset,
                         std::uint32_t payload_length) noexcept;

/// Decodes a data frame's body: the record prefix, then the payload. Refuses a body shorter
/// than the prefix + 1 byte (truncated) and an offset + length past 2^64 (invalid_field).
std::error_code decode_record(std::span<const std::byte> body, file_index& file,
                              std::uint64_t& offset, std::span<const std::byte>& payload) noexcept;

/// Bytes of a challenge's nonce: 128 random bits, so a challenge never repeats (birthday bound
/// 2^64 connections) and a recorded hello is never valid on another connection.
inline constexpr std::size_t challenge_size = 16;
/// Bytes of a challenge body (unicast.challenge: tag, length, nonce). A client of a signed
/// session reads exactly this much after the frame header.
inline constexpr std::size_t challenge_body_size = 2 + challenge_size;

/// A challenge: the server's first frame (unicast.challenge).
struct challenge {
  std::array<std::uint8_t, challenge_size> nonce{};  ///< random, from getrandom
};

/// Bytes of a hello's proof (HMAC-SHA-512/256, common/unicast/hello_proof.hpp).
inline constexpr std::size_t hello_proof_size = crypto::hmac_bytes;

/// A hello: the client's first frame on every connection and on the association
/// (unicast.hello).
struct hello {
  fallback_token token{};             ///< secret given by the sender with the fallback order
  session_id session{};               ///< the multicast session this remainder belongs to
  std::uint64_t client_nonce = 0;     ///< random per client object: groups its connections
  std::uint8_t connection_index = 0;  ///< 0 carries control; < connection_count
  std::uint8_t connection_count = 1;  ///< TCP connections or SCTP associations of this client
  std::string receiver_id;            ///< the site's id (wire::valid_receiver_id)
  /// Proof of the site key over the server's challenge (signed sessions only).
  std::optional<crypto::hmac_tag> proof;
};
/// Largest hello body, bytes: with a 64-byte id, a proof and the largest varints a hello is
/// 144 bytes; the rest is room for fields a later version may add.
inline constexpr std::size_t max_hello_size = 192;

/// A welcome: the server accepts the hello (unicast.welcome).
struct welcome {
  std::uint32_t record_size = 0;      ///< bytes, min_record_size to max_record_size
  std::uint16_t streams = 0;          ///< SCTP outbound streams the server uses; 0 for TCP
  std::uint8_t connection_count = 0;  ///< connections/associations the server accepts for it
};
/// Largest welcome body, bytes: three varints of at most 6 bytes with their tags, and room.
inline constexpr std::size_t max_welcome_size = 32;

/// Why a hello was refused (unicast.refuse.reason_t, the same numbers).
enum class refuse_reason : std::uint8_t {
  bad_credentials = 1,  ///< token, receiver id and session do not match a registered client
  busy = 2,             ///< session limit reached
  bad_hello = 3,        ///< connection index/count out of range, duplicate connection
  shutting_down = 4,    ///< the server is closing
};
/// Short name of a refuse reason, "unknown" otherwise.
std::string_view to_string(refuse_reason r) noexcept;

/// A refuse: the server refuses the hello and closes (unicast.refuse).
struct refuse {
  refuse_reason reason = refuse_reason::bad_credentials;
  std::string text;  ///< one sentence for the operator; printable ASCII after decode
};
/// Largest refuse body, bytes: the text with its tag and 2-byte length, the reason, and room.
inline constexpr std::size_t max_refuse_size = max_refuse_text + 32;

/// A request: byte ranges wanted, 1 to max_request_ranges (unicast.request).
struct request {
  std::vector<byte_range> ranges;
};

/// An ack: files whose requested bytes all arrived, 1 to max_ack_files (unicast.ack).
struct ack {
  std::vector<file_index> files;
};

/// Appends a whole frame (header + body) to `out`. Values must respect the limits above
/// (receiver id <= 64 bytes, text <= 512, 1 to max_request_ranges ranges, 1 to max_ack_files
/// files); longer text is cut, longer or empty lists are the caller's bug (asserted).
void append_frame(std::vector<std::byte>& out, const challenge& m);
void append_frame(std::vector<std::byte>& out, const hello& m);
void append_frame(std::vector<std::byte>& out, const welcome& m);
void append_frame(std::vector<std::byte>& out, const refuse& m);
void append_frame(std::vector<std::byte>& out, const request& m);
void append_frame(std::vector<std::byte>& out, const ack& m);
/// Appends a bye frame (empty body).
void append_bye(std::vector<std::byte>& out);

/// Decoders of control bodies (the bytes after the frame header). Each checks, in order: the
/// body is under its type's limit (oversized), it parses as its message (invalid_field; a body
/// cut short fails here or at the next check), the counts are under their limits (oversized),
/// then the values: token, nonce and proof sizes, receiver id characters, connection index and
/// count, record size, known reason, non-empty lists of non-empty ranges that end by 2^64
/// (invalid_field). `out` is only written when the body is accepted. Never throws (an
/// allocation failure is errc::oversized).
std::error_code decode(std::span<const std::byte> body, challenge& out) noexcept;
std::error_code decode(std::span<const std::byte> body, hello& out) noexcept;
std::error_code decode(std::span<const std::byte> body, welcome& out) noexcept;
std::error_code decode(std::span<const std::byte> body, refuse& out) noexcept;
std::error_code decode(std::span<const std::byte> body, request& out) noexcept;
std::error_code decode(std::span<const std::byte> body, ack& out) noexcept;

class frame_opener;

/// Receives what a frame_reader decodes. A non-empty return stops the reader with that error.
class frame_handler {
 public:
  /// A complete control frame (any type but data); `body` is valid during the call only.
  virtual std::error_code on_control(frame_type type, std::span<const std::byte> body) = 0;
  /// Bytes of a record, in order: `offset` is the file offset of bytes[0]. A record may come
  /// in several pieces (as its bytes arrive); each piece is exact and final.
  virtual std::error_code on_data(file_index file, std::uint64_t offset,
                                  std::span<const std::byte> bytes) = 0;

 protected:
  ~frame_handler() = default;
};

/// Incremental decoder of a byte stream of frames (a TCP connection, or the successive pieces
/// of SCTP messages on one stream). Control bodies are collected whole (at most
/// max_control_body bytes); record payloads are handed on as they arrive, without copying.
class frame_reader {
 public:
  /// @param accept_data      false on the server: a data frame is a protocol violation
  /// @param max_record_bytes largest record payload accepted (<= max_record_size)
  explicit frame_reader(bool accept_data, std::uint32_t max_record_bytes = max_record_size);

  /// Decodes all of `in`, calling `h` for every control frame and record piece.
  /// @return empty, the first framing error (mcdist::errc or error::protocol_violation), or
  ///         the handler's error. After an error the reader refuses everything with it.
  std::error_code feed(std::span<const std::byte> in, frame_handler& h);

  /// From the next frame on, every frame must be a sealed one that `opener` opens (with the
  /// sequence of `stream`); the inner frames are handed to the handler as if they had come
  /// plain (a record whole, in one on_data call). A plain frame is then a protocol violation,
  /// except a refuse on a reader that accepts data (the client's: the server refuses a hello
  /// in plain, having no keys for a client it does not know). `opener` must outlive the
  /// reader's use. A sealed frame on a reader without an opener is a protocol violation.
  void set_opener(frame_opener* opener, std::uint32_t stream = 0) noexcept {
    m_opener = opener;
    m_stream = stream;
  }

  /// True when no frame is partly read: the stream may end here.
  bool at_boundary() const noexcept { return m_state == state::header && m_have == 0; }

  /// What the end of the stream means now: empty at a boundary, errc::truncated inside a frame.
  std::error_code finish() const noexcept;

  /// Total frames completed (control and data).
  std::uint64_t frames() const noexcept { return m_frames; }

 private:
  enum class state : std::uint8_t { header, prefix, payload, control };

  std::error_code fail(std::error_code ec) noexcept {
    m_error = ec;
    return ec;
  }
  /// Opens the complete sealed frame in m_body and hands its inner frame to `h`.
  std::error_code open_sealed(frame_handler& h);

  bool m_accept_data;
  std::uint32_t m_max_record;
  state m_state = state::header;
  std::array<std::byte, record_header_size> m_head{};
  std::size_t m_have = 0;  ///< bytes of m_head (header/prefix) or m_body held
  frame_header m_header{};
  file_index m_file{};
  std::uint64_t m_offset = 0;  ///< file offset of the next payload byte
  std::uint64_t m_left = 0;    ///< payload bytes still to come
  std::vector<std::byte> m_body;
  std::uint64_t m_frames = 0;
  std::error_code m_error;
  frame_opener* m_opener = nullptr;
  std::uint32_t m_stream = 0;
};

}  // namespace mcdist::unicast
