#pragma once
/// @file
/// Helpers for the unicast tests and benchmark: an in-memory byte source with seeded
/// pseudo-random contents, a sink that checks every delivered byte against the source as it
/// arrives, an io_context runner that waits for events (never sleeps), and a TCP proxy that
/// cuts one connection after an exact number of bytes.

#include "common/sha256.hpp"
#include "common/unicast/types.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace mcdist::unicast::test {

/// Files held in memory; file f's bytes come from a splitmix64 stream seeded with f, so two
/// files never share content and a byte at the wrong offset is noticed.
class memory_source final : public byte_source {
 public:
  explicit memory_source(const std::vector<std::uint64_t>& sizes) {
    for (std::size_t f = 0; f < sizes.size(); ++f) {
      std::vector<std::byte> b(sizes[f]);
      std::uint64_t x = 0x9e3779b97f4a7c15ull * (f + 1);
      for (std::size_t i = 0; i < b.size(); i += 8) {
        x += 0x9e3779b97f4a7c15ull;
        std::uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        std::memcpy(b.data() + i, &z, std::min<std::size_t>(8, b.size() - i));
      }
      m_files.push_back(std::move(b));
    }
  }
  std::uint32_t file_count() const override { return static_cast<std::uint32_t>(m_files.size()); }
  std::uint64_t size(file_index f) const override { return m_files[f.value].size(); }
  std::error_code read(file_index f, std::uint64_t offset, std::span<std::byte> out) override {
    ++reads;
    std::memcpy(out.data(), m_files[f.value].data() + offset, out.size());
    return {};
  }
  const std::vector<std::byte>& bytes(std::uint32_t f) const { return m_files[f]; }
  std::uint64_t total() const {
    std::uint64_t t = 0;
    for (const auto& f : m_files) t += f.size();
    return t;
  }

  std::uint64_t reads = 0;

 private:
  std::vector<std::vector<std::byte>> m_files;
};

/// Where delivered bytes go: a copy of each file, written at the delivered offsets, plus a
/// check of every byte against the source when it arrives.
class checking_sink {
 public:
  explicit checking_sink(const memory_source& src) : m_src(src) {
    for (std::uint32_t f = 0; f < src.file_count(); ++f)
      m_files.emplace_back(src.size(file_index{f}));
    done.assign(src.file_count(), false);
  }

  void on_data(file_index f, std::uint64_t offset, std::span<const std::byte> b) {
    if (f.value >= m_files.size() || offset + b.size() > m_files[f.value].size()) {
      ++out_of_range;
      return;
    }
    if (std::memcmp(m_src.bytes(f.value).data() + offset, b.data(), b.size()) != 0) ++mismatches;
    std::memcpy(m_files[f.value].data() + offset, b.data(), b.size());
    delivered += b.size();
  }

  void on_file_done(file_index f) {
    if (f.value < done.size()) done[f.value] = true;
    done_order.push_back(f.value);
  }

  /// True when every file's SHA-256 equals the source's.
  bool all_equal() const {
    for (std::uint32_t f = 0; f < m_files.size(); ++f)
      if (sha256(m_files[f]) != sha256(m_src.bytes(f))) return false;
    return true;
  }

  std::uint64_t delivered = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t out_of_range = 0;
  std::vector<bool> done;
  std::vector<std::uint32_t> done_order;

 private:
  const memory_source& m_src;
  std::vector<std::vector<std::byte>> m_files;
};

/// Runs `io` until `done()` holds or `limit` passes. @return done()
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// A TCP proxy on loopback that forwards to `target` and, on its `cut_connection`-th accepted
/// connection (0-based), forwards exactly `cut_after` bytes from the server, then closes both
/// sides of that connection.
class cutting_proxy : public std::enable_shared_from_this<cutting_proxy> {
 public:
  using tcp = boost::asio::ip::tcp;

  cutting_proxy(boost::asio::io_context& io, tcp::endpoint target, std::size_t cut_connection,
                std::uint64_t cut_after)
      : m_io(io), m_acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)),
        m_target(target), m_cut_connection(cut_connection), m_cut_after(cut_after) {}

  tcp::endpoint local() const { return m_acceptor.local_endpoint(); }

  void start() {
    boost::asio::co_spawn(m_io, accept_loop(shared_from_this()), boost::asio::detached);
  }
  void stop() {
    boost::system::error_code ignored;
    m_acceptor.close(ignored);
    for (auto& s : m_sockets)
      if (s->is_open()) s->close(ignored);
  }

  bool cut_done = false;

 private:
  static constexpr auto tuple = boost::asio::as_tuple(boost::asio::use_awaitable);

  static boost::asio::awaitable<void> accept_loop(std::shared_ptr<cutting_proxy> self) {
    for (std::size_t k = 0;; ++k) {
      auto [ec, client] = co_await self->m_acceptor.async_accept(tuple);
      if (ec) co_return;
      auto c = std::make_shared<tcp::socket>(std::move(client));
      auto s = std::make_shared<tcp::socket>(self->m_io);
      auto [cec] = co_await s->async_connect(self->m_target, tuple);
      if (cec) co_return;
      self->m_sockets.push_back(c);
      self->m_sockets.push_back(s);
      const std::uint64_t limit = k == self->m_cut_connection ? self->m_cut_after : UINT64_MAX;
      boost::asio::co_spawn(self->m_io, pump(self, c, s, UINT64_MAX), boost::asio::detached);
      boost::asio::co_spawn(self->m_io, pump(self, s, c, limit), boost::asio::detached);
    }
  }

  static boost::asio::awaitable<void> pump(std::shared_ptr<cutting_proxy> self,
                                           std::shared_ptr<tcp::socket> from,
                                           std::shared_ptr<tcp::socket> to, std::uint64_t limit) {
    std::vector<std::byte> buf(64 << 10);
    std::uint64_t moved = 0;
    for (;;) {
      const std::size_t want =
          static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), limit - moved));
      auto [ec, n] = co_await from->async_read_some(boost::asio::buffer(buf.data(), want), tuple);
      if (ec) break;
      auto [wec, wn] =
          co_await boost::asio::async_write(*to, boost::asio::buffer(buf.data(), n), tuple);
      if (wec) break;
      moved += n;
      if (moved == limit) {
        self->cut_done = true;
        break;
      }
    }
    boost::system::error_code ignored;
    from->close(ignored);
    to->close(ignored);
  }

  boost::asio::io_context& m_io;
  tcp::acceptor m_acceptor;
  tcp::endpoint m_target;
  std::size_t m_cut_connection;
  std::uint64_t m_cut_after;
  std::vector<std::shared_ptr<tcp::socket>> m_sockets;
};

}  // namespace mcdist::unicast::test
