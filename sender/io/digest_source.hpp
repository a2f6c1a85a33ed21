#pragma once
/// @file
/// The shell's side of block digests (silent signed sessions; docs/security.md "Block digests",
/// common/block_digests.hpp): for each window of datagrams the core planned
/// (sender/core/digest_windows.hpp), builds the datagrams as they will be sent (version 3
/// header, payload read from the files or parity encoded, no trailer), hashes each, writes the
/// window's block digest chunks and seals them with one signature (auth::sender_keys), and keeps
/// the last windows, so that the chunks can be sent again (their second copy) and the
/// datagrams go out exactly as they were hashed (flush_pending copies them from here instead of
/// reading the files a second time). Lives on the network thread; memory: windows_kept windows
/// of up to block_digests::max_window datagrams (5.8 MB at 1400-byte blocks).

#include "common/auth.hpp"
#include "common/ids.hpp"
#include "sender/core/sender_session.hpp"
#include "sender/io/block_reader.hpp"
#include "sender/io/parity_source.hpp"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace mcdist::sender {

/// Builds, hashes and signs the windows of a block digest session.
class digest_source {
 public:
  /// Windows kept: the one being sent, the next (built a window ahead), the one after it (built
  /// while the last datagrams of the first may still wait for the socket), and one spare.
  static constexpr std::size_t windows_kept = 4;

  /// @param reader  the shell's block reader: reads go through it in pass order, so the in-band
  ///                SHA-256 of large files (block_reader::hash_while_reading) still sees them;
  ///                must outlive this
  /// @param parity  the session's parity source; null without FEC; must outlive this
  /// @param keys    the session's keys (seals the chunks); must outlive this
  digest_source(session_id session, std::uint32_t block_size, block_reader& reader,
                parity_source* parity, auth::sender_keys& keys);

  /// Builds the first copy of a window (digest_window_send::first_copy): its datagrams, their
  /// digests and its sealed chunks, forgetting the oldest window kept beyond windows_kept.
  /// @return an error, with `why` naming the file, when a source cannot be read
  std::error_code build(const digest_window_send& w, std::string& why);
  /// The sealed chunks of the window that starts at `first_seq`; empty when it is not kept.
  std::span<const std::vector<std::byte>> chunks(std::uint32_t first_seq) const;
  /// Datagram `seq` as built (header and payload, `length` payload bytes); empty when no kept
  /// window holds it.
  std::span<const std::byte> datagram(std::uint32_t seq, std::uint32_t length) const;

 private:
  struct window {
    std::uint32_t first_seq = 0;
    std::uint32_t count = 0;
    std::vector<std::byte> bytes;  ///< count datagrams, m_stride apart
    std::vector<std::vector<std::byte>> chunks;
  };
  /// Reads the source payloads of `w`'s datagrams into `out`, one preadv per run of
  /// consecutive blocks of a file.
  std::error_code read_sources(const digest_window_send& w, window& out, std::string& why);

  session_id m_session;
  std::uint32_t m_block_size;
  std::size_t m_stride;  ///< header and a full block
  block_reader& m_reader;
  parity_source* m_parity;
  auth::sender_keys& m_keys;
  std::deque<window> m_windows;  ///< oldest first
  std::vector<iovec> m_iov;
  std::vector<block_digests::digest> m_digests;
  std::vector<auth::sender_keys::announce_slot> m_slots;
};

}  // namespace mcdist::sender
