#pragma once
/// @file
/// The hub's product server (docs/design-notes.md "Catch-up over HTTP"): one-way sites fetch
/// what they missed over a terrestrial path, and WIS2 canonical links resolve to the hub.
///
///   GET /catch-up/CHANNEL/SEQ?nonce=HEX  the signed index (common/catch_up_index.hpp) of the
///                                        retained, not superseded products of batch session
///                                        SEQ; 404 for a number unknown, running or expired
///   GET /products/ID/NAME                the retained file of product ID, streamed
///   GET /data/NAME                       the newest retained version of NAME (any channel):
///                                        a WIS2 href is base_url + NAME percent-encoded
///   HEAD of each                         the same headers, no body
///
/// Beside the status server (feed_http.hpp), not on it: the status page stays on loopback
/// while this one faces the sites' network, with TLS; a download lasts minutes where a status
/// request lasts milliseconds, so it has its own bounds (concurrent downloads, an idle timeout
/// per write instead of a whole-response timeout); and it runs on a thread of its own with its
/// own io_context and its own read-only journal connection, so a disk read, a SHA-256 of a
/// retained file, a journal query or a TLS handshake never delays the thread that paces the
/// sessions.
///
/// Files are read only from the retained directory, each opened with open_below
/// (common/sys/path_walk.hpp: no link followed) at CHANNEL/ID/NAME, where ID and NAME are what the
/// journal holds for a product ID the client named and NAME matched; a file that is not a
/// regular file with the journal's size and mtime is refused. Nothing a client sends is used
/// as a path beyond that validated id and name.

#include "common/crypto.hpp"
#include "common/endpoint.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::feed {

/// Bounds of the product server (each says what it defends against).
struct product_server_limits {
  /// Connections at once (64: a few hundred sites catch up rarely and briefly; an idle
  /// connection over the limit is evicted, the oldest first, as on the status port).
  std::size_t max_connections = 64;
  /// Downloads streaming at once (16: each holds a file descriptor and a buffer; more
  /// would split the hub's terrestrial link so thin that every site takes longer); a request
  /// over it is answered 503 with Retry-After and the site retries.
  std::size_t max_downloads = 16;
  /// Request head (8 KiB, as the status port: a site's GET is ~200 bytes).
  std::size_t max_header_bytes = 8 * 1024;
  /// TLS handshake and whole request, from the connection or the previous response (10 s).
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
  /// Longest wait for the client to take one chunk of a response (30 s): a slow link keeps its
  /// download as long as it moves, a stalled client is cut off; no whole-response limit.
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(30);
  /// Bytes read from a file and written per step (256 KiB: few system calls at link speed,
  /// bounded memory per download).
  std::size_t chunk_bytes = 256 * 1024;
  /// Requests on one keep-alive connection (1000: a site fetches an index and its products on
  /// one connection).
  std::size_t max_requests_per_connection = 1000;
  /// SHA-256s of retained files kept in memory for indexes, by product id (10,000 x ~100 B): a
  /// file without its digest xattr is hashed once.
  std::size_t digest_cache_entries = 10'000;
};

/// What the product server needs of the feed's configuration.
struct product_server_options {
  endpoint at;                          ///< products_http
  std::filesystem::path journal;        ///< opened read-only on the server's thread
  std::filesystem::path retained_dir;   ///< where the feed keeps sent products
  std::vector<std::string> channels;    ///< configured channel names (the server's view)
  std::optional<crypto::identity> key;  ///< signs indexes; none: unsigned indexes
  std::filesystem::path tls_cert;       ///< PEM chain; empty: plain HTTP
  std::filesystem::path tls_key;        ///< PEM private key
  product_server_limits limits;
};

/// Counters, readable from any thread.
struct product_server_stats {
  std::atomic<std::uint64_t> indexes{0};    ///< indexes answered (200)
  std::atomic<std::uint64_t> downloads{0};  ///< file responses started (GET)
  std::atomic<std::uint64_t> bytes{0};      ///< file bytes written
  std::atomic<std::uint64_t> not_found{0};  ///< 404s
  std::atomic<std::uint64_t> busy{0};       ///< 503s at max_downloads
  std::atomic<std::uint64_t> refused{0};    ///< 400s, 405s, TLS handshakes that failed
};

/// The server. Construct (binds, loads the certificate), start() (its thread), stop() or
/// destroy.
class product_server {
 public:
  /// @throws std::system_error when the address cannot be bound; std::runtime_error when the
  ///         certificate or key cannot be loaded or the retained directory opened (the message
  ///         names the setting)
  product_server(product_server_options opts, std::shared_ptr<spdlog::logger> log);
  ~product_server();
  product_server(const product_server&) = delete;
  product_server& operator=(const product_server&) = delete;

  /// Starts the server's thread (logs "products on https://ADDR:PORT/").
  void start();
  /// Closes the port and every connection, joins the thread. Idempotent.
  void stop();
  /// The bound address (port 0 in the options picks one).
  endpoint local_endpoint() const;
  const product_server_stats& stats() const noexcept;

  struct impl;

 private:
  std::shared_ptr<impl> m_impl;
};

/// Percent-decodes a URI path segment run (RFC 3986 section 2.1); std::nullopt for a '%' not
/// followed by two hex digits or a decoded NUL.
std::optional<std::string> percent_decode(std::string_view s);

}  // namespace mcdist::feed
