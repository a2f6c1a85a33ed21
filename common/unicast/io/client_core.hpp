#pragma once
/// @file
/// Internals of the unicast client shared by its transports (not a public header): request
/// bookkeeping, validation of everything the server sends, callbacks, timeouts and the
/// one-time end report.

#include "common/sys/single_thread.hpp"
#include "common/unicast/frame.hpp"
#include "common/unicast/io/client.hpp"
#include "common/unicast/range_tracker.hpp"
#include "common/unicast/record_seal.hpp"

#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace mcdist::unicast {

class client_impl : public std::enable_shared_from_this<client_impl> {
 public:
  client_impl(boost::asio::io_context& io, client_options options, client_events events);
  virtual ~client_impl() = default;
  client_impl(const client_impl&) = delete;
  client_impl& operator=(const client_impl&) = delete;

  /// Starts the transport; calls begin_connect() first.
  virtual void start() = 0;

  std::error_code request(std::span<const byte_range> ranges);
  /// See client::set_credentials.
  void set_credentials(const client_credentials& credentials);
  /// See client::grow; checks, then grow_transport.
  bool grow(std::size_t count);
  void close();
  /// The owning handle is gone: no more callbacks, tear down now.
  void abandon();

  /// See client::set_paused. Resuming wakes the transport's readers.
  void set_paused(bool paused);
  bool paused() const noexcept { return m_paused; }
  /// See client::established.
  bool established() const noexcept { return m_connected_once && !dead(); }

  std::vector<byte_range> outstanding() const { return m_tracker.outstanding(); }
  std::uint64_t outstanding_bytes() const { return m_tracker.outstanding_bytes(); }
  client_stats stats() const { return m_stats; }
  transport_kind kind() const { return m_options.kind; }

 protected:
  enum class phase : std::uint8_t { idle, connecting, running, closing, closed };

  /// The outbox has new frames: send them when the transport can.
  virtual void flush_control() = 0;
  /// set_credentials() gave a client that awaited them its credentials: say hello when the
  /// transport can.
  virtual void credentials_ready() = 0;
  /// Adds connections up to `count` (above the current count, at most max_connections), only
  /// while awaiting_credentials(); opens them at once when started() (else start() does).
  /// @return false when the transport cannot have several (kernel SCTP)
  virtual bool grow_transport(std::size_t count) = 0;
  /// Tears the transport down at once; called once, by fail/closed_ok/abandon.
  virtual void transport_abort() = 0;
  /// Reading may go on again after a pause.
  virtual void transport_resume() = 0;

  /// Arms the connect timer and idle watchdog; phase connecting.
  void begin_connect();
  /// The transport can carry control now: the hello goes first, ahead of queued requests
  /// (empty: it was queued before, see queue_hello_early).
  void connected(std::vector<std::byte> hello_frame);
  /// The transport is up (the association, or a TCP connection): the connect timeout no longer
  /// applies; connected() follows with the hello, at once or after set_credentials() or the
  /// server's challenge.
  void transport_up();
  /// True once start() has run.
  bool started() const noexcept { return m_phase != phase::idle; }
  /// True until set_credentials() for a client created with await_credentials: no hello yet.
  bool awaiting_credentials() const noexcept { return m_awaiting_credentials; }
  /// Puts the hello ahead of the queued requests before the transport is up (SCTP bundles
  /// them with its COOKIE ECHO); connected({}) follows when it is.
  void queue_hello_early(std::vector<std::byte> hello_frame);
  /// The hello's fields for connection `index` of `count` (token, session, nonce, receiver),
  /// without the proof: make_hello adds it, record_keys derives from these.
  hello hello_fields(std::uint8_t index, std::uint8_t count) const;
  /// A hello for connection `index` of `count`; with the proof over `c` when the options hold
  /// a proof key.
  std::vector<std::byte> make_hello(std::uint8_t index, std::uint8_t count,
                                    const challenge* c = nullptr) const;
  /// True when hellos must wait for the server's challenge (a signed session).
  bool proves() const noexcept { return m_options.proof_key.has_value(); }
  /// True when frames after the hello are sealed (an encrypted session; proves() too).
  bool seals() const noexcept { return m_options.seal_records && proves(); }
  /// The record keys of connection `index` of `count` whose challenge is `c` (seals() only).
  seal_keys record_keys(std::uint8_t index, std::uint8_t count, const challenge& c) const;
  /// Seals the control frame `f` in place for `stream` unless it is the hello (which always
  /// goes plain) or sealed already (a send that would have blocked is retried with it).
  static void seal_outgoing(frame_sealer& s, std::vector<std::byte>& f, std::uint32_t stream);

  /// Checks and delivers record bytes that arrived on `channel` (TCP connection / SCTP stream)
  /// of `connection` (TCP connection / SCTP association).
  /// @return protocol_violation (with m_detail) when they were not requested or came twice.
  std::error_code deliver(file_index file, std::uint64_t offset, std::span<const std::byte> bytes,
                          std::size_t channel, std::size_t connection);
  /// Handles a control frame from the server (welcome, refuse; anything else is a violation).
  std::error_code handle_control(frame_type type, std::span<const std::byte> body);
  /// After a batch of input: sends acks for completed files, reports on_complete.
  void after_batch();
  /// Ends with an error (once; on_closed is posted).
  void fail(const std::error_code& ec, const std::string& detail);
  /// Ends after close() (once; on_closed({}) is posted).
  void closed_ok();
  /// Input arrived: resets the idle watchdog.
  void touch() noexcept { m_last_activity = std::chrono::steady_clock::now(); }
  /// True once nothing may be processed any more (failed, closed or abandoned).
  bool dead() const noexcept { return m_phase == phase::closed; }
  bool closing() const noexcept { return m_phase == phase::closing; }
  /// Where we connect to, for messages: "tcp to 10.0.0.5:4712".
  const std::string& where() const noexcept { return m_where; }

  boost::asio::io_context& m_io;
  /// The thread of m_io: every call and completion of this client runs there
  /// (common/sys/single_thread.hpp).
  single_thread m_io_thread;
  client_options m_options;
  std::deque<std::vector<std::byte>> m_outbox;  ///< control frames not yet handed to the transport
  std::string m_detail;                         ///< detail of the last handler error
  client_stats m_stats;

 private:
  void do_watchdog();
  void post_closed(const std::error_code& ec, const std::string& detail);

  client_events m_events;
  range_tracker m_tracker;
  std::vector<file_index> m_acks;  ///< files completed since the last ack frame
  phase m_phase = phase::idle;
  bool m_abandoned = false;
  bool m_paused = false;
  bool m_connected_once = false;        ///< connected() or transport_up() ran
  bool m_awaiting_credentials = false;  ///< see awaiting_credentials()
  bool m_complete_reported = true;      ///< on_complete already said for the current requests
  bool m_requests_framed = false;       ///< a request frame was queued (the first is small)
  std::uint64_t m_nonce;
  std::string m_where;
  boost::asio::steady_timer m_connect_timer;
  boost::asio::steady_timer m_watchdog;
  boost::asio::steady_timer m_close_timer;
  std::chrono::steady_clock::time_point m_last_activity = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point m_start = m_last_activity;  ///< of begin_connect()
};

/// Transport factories (tcp_client.cpp, sctp_client.cpp).
std::shared_ptr<client_impl> make_tcp_client(boost::asio::io_context& io, client_options o,
                                             client_events e);
std::shared_ptr<client_impl> make_sctp_client(boost::asio::io_context& io, client_options o,
                                              client_events e);

}  // namespace mcdist::unicast
