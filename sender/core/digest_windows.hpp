#pragma once
/// @file
/// The sender's side of block digests (silent signed sessions; docs/security.md "Block
/// digests", common/block_digests.hpp): a silent session's pass is planned a window ahead of
/// the socket, so that the truncated SHA-256 of every data and parity datagram can go out, signed,
/// before the datagram itself. The session plans datagrams (sequence numbers given) into windows
/// of up to block_digests::max_window; before a window's first datagram is released, the digests
/// of the next window go out (its first copy) and then those of this window again (its second
/// copy): each digest travels twice, a window apart, both ahead of its block, so a burst of
/// losses rarely takes both, and a site needs no hold for blocks whose digest has not come yet.
/// At the start of a pass the first window's first copy goes too, before the second window's.
///
/// A silent session has no NAKs, so what it will send is known in advance: planning ahead only
/// moves the moment a sequence number is given. Passes are planned one at a time (a window
/// never spans two). Pure; memory: two windows of data_send (80 kB at max_window).

#include "common/block_digests.hpp"
#include "sender/core/sender_session.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace mcdist::sender {

/// Windows planned ahead of the one being released: its digests must be out one window
/// before it starts.
inline constexpr std::size_t digest_windows_ahead = 1;

/// The planned datagrams of a silent signed session's pass and the digest sends they call for.
class digest_windows {
 public:
  /// @param window_size    datagrams per window, 1..block_digests::max_window
  /// @param ip_udp_bytes   bytes each chunk costs the pacer beyond itself (IPv4 + UDP headers)
  explicit digest_windows(std::size_t window_size = block_digests::max_window,
                          std::uint32_t ip_udp_bytes = 0);

  /// A new pass: nothing of it is planned. Whatever was planned and not released is dropped
  /// (the session planned the previous pass to its end and released it all).
  void start_pass();
  /// True while the session should plan more: the pass is not planned to its end, and the
  /// window being released and the next one are not both planned in full.
  bool wants_more() const noexcept;
  /// Appends a datagram the session planned (its sequence number one more than the last one's).
  void plan(const data_send& d);
  /// The pass has nothing more to plan.
  void pass_planned() noexcept { m_pass_planned = true; }

  /// The next datagram to release; nullptr when none is planned (with the pass planned: it is
  /// over).
  const data_send* peek() const noexcept;
  /// Call before peek()'s datagram goes out: at a window's first datagram it queues the digest
  /// sends due (first copy of the next window, second copy of this one; at a pass's first
  /// window its first copy before them). @return the bytes of the chunks queued, as the pacer
  /// counts them (0 when none)
  std::uint64_t prepare();
  /// Releases peek()'s datagram (after prepare()).
  void release();

  /// Takes the next queued digest send. @return false when none is queued
  bool pop(digest_window_send& out);

  /// Chunks queued so far, both copies, and their bytes as the pacer counted them.
  std::uint64_t chunks_sent() const noexcept { return m_chunks; }
  std::uint64_t bytes_sent() const noexcept { return m_bytes; }
  /// Windows planned so far.
  std::uint64_t windows() const noexcept { return m_windows_planned; }

 private:
  struct window {
    std::vector<data_send> datagrams;
    std::size_t released = 0;
    bool first_queued = false;  ///< its first copy is queued
    bool started = false;       ///< prepare() ran for its first datagram
  };
  /// Queues one copy of `w`'s digests. @return their bytes as the pacer counts them
  std::uint64_t queue(window& w, bool first);

  std::size_t m_window;
  std::uint32_t m_ip_udp_bytes;
  std::deque<window> m_planned;  ///< the window being released first
  bool m_pass_planned = false;
  std::deque<digest_window_send> m_sends;
  std::uint64_t m_chunks = 0;
  std::uint64_t m_bytes = 0;
  std::uint64_t m_windows_planned = 0;
};

}  // namespace mcdist::sender
