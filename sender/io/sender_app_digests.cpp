// sender_app: block digests of silent signed sessions (docs/security.md "Block digests"): the
// digest chunks the core queued go out before the datagrams they cover, and those datagrams go
// out as digest_source built and hashed them. Apart from sender_app.cpp, which was past the
// size of one file.
#include "sender/io/sender_app.hpp"

#include <spdlog/spdlog.h>

#include <cstring>

namespace mcdist::sender {

bool sender_app::send_digest_windows() {
  digest_window_send w;
  while (m_session.pop_digest_window(w)) {
    std::string why;
    if (w.first_copy && m_digest_source->build(w, why)) {
      fail(why);
      return false;
    }
    for (const auto& chunk : m_digest_source->chunks(w.first_seq)) {
      std::error_code ec;
      if (!net::send_one(m_socket.native_handle(), m_opts.group, chunk, ec) && m_log) {
        // Each window's digests go out twice; a site missing both drops its blocks, which the
        // later passes repair like any loss.
        m_log->debug("could not send block digests to {}: {}", m_opts.group.to_string(),
                     ec.message());
      }
    }
  }
  return true;
}

bool sender_app::copy_built(std::size_t first, std::size_t last, std::size_t segment,
                            std::byte* base) {
  for (std::size_t i = first; i < last; ++i) {
    const auto& d = m_pending[i];
    const auto built = m_digest_source->datagram(d.seq, d.length);
    if (built.empty()) {
      fail("internal error: datagram " + std::to_string(d.seq) +
           " was not built with its block digest");
      return false;
    }
    std::memcpy(base + (i - first) * segment, built.data(), built.size());
  }
  return true;
}

}  // namespace mcdist::sender
