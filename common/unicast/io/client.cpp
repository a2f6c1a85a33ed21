#include "common/unicast/io/client.hpp"

#include "common/unicast/io/client_core.hpp"

#include <stdexcept>

namespace mcdist::unicast {

namespace {

/// What make_client returns: owns the shared implementation (which coroutines and handlers
/// keep alive while they run) and silences it when destroyed.
class client_handle final : public client {
 public:
  explicit client_handle(std::shared_ptr<client_impl> impl) : m_impl(std::move(impl)) {}
  ~client_handle() override { m_impl->abandon(); }

  void start() override { m_impl->start(); }
  std::error_code request(std::span<const byte_range> ranges) override {
    return m_impl->request(ranges);
  }
  void set_credentials(const client_credentials& c) override {
    if (c.seal_records && !c.proof_key)
      throw std::invalid_argument("unicast client: sealed records need the site's fallback key");
    m_impl->set_credentials(c);
  }
  bool grow(std::size_t count) override { return m_impl->grow(count); }
  void close() override { m_impl->close(); }
  void set_paused(bool paused) override { m_impl->set_paused(paused); }
  bool established() const override { return m_impl->established(); }
  std::vector<byte_range> outstanding() const override { return m_impl->outstanding(); }
  std::uint64_t outstanding_bytes() const override { return m_impl->outstanding_bytes(); }
  client_stats stats() const override { return m_impl->stats(); }
  transport_kind kind() const override { return m_impl->kind(); }

 private:
  std::shared_ptr<client_impl> m_impl;
};

}  // namespace

std::unique_ptr<client> make_client(boost::asio::io_context& io, client_options options,
                                    client_events events) {
  if (options.seal_records && !options.proof_key)
    throw std::invalid_argument("unicast client: sealed records need the site's fallback key");
  std::shared_ptr<client_impl> impl;
  if (options.kind == transport_kind::tcp) {
    impl = make_tcp_client(io, std::move(options), std::move(events));
  } else {
    impl = make_sctp_client(io, std::move(options), std::move(events));
  }
  return std::make_unique<client_handle>(std::move(impl));
}

}  // namespace mcdist::unicast
