// A forged site for the integration tests (tests/integration/test_auth_fallback.py): it knows
// a real site's fallback token (sniffed from a FALLBACK order), its receiver id and the
// session, but not its key. It connects to the sender's unicast server over TCP or SCTP,
// presents the token with no proof or with a proof under a key of its own, asks for bytes of
// file 0, and prints one line: "result=<error or ok> bytes=<payload bytes received>
// detail=<text>". Exit status 0 whatever happened (the test judges the line), 2 on bad usage.
//
// usage: fallback_intruder tcp|sctp ADDRESS:PORT TOKEN-HEX32 SESSION-HEX RECEIVER-ID
//        none|wrong-key

#include "common/crypto.hpp"
#include "common/endpoint.hpp"
#include "common/unicast/io/client.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

using namespace mcdist;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: fallback_intruder tcp|sctp ADDRESS:PORT TOKEN-HEX32 SESSION-HEX "
                 "RECEIVER-ID none|wrong-key\n";
    return 2;
  }
  const std::string kind = argv[1];
  const auto server = parse_endpoint(argv[2]);
  const std::string token_hex = argv[3];
  const auto parsed_kind = unicast::parse_transport_kind(kind);
  if (!parsed_kind || *parsed_kind == unicast::transport_kind::sctp_kernel || !server ||
      token_hex.size() != 32) {
    std::cerr << "fallback_intruder: bad arguments\n";
    return 2;
  }
  unicast::client_options o;
  o.kind = *parsed_kind;
  o.server = *server;
  for (std::size_t i = 0; i < o.token.size(); ++i)
    o.token[i] = static_cast<std::uint8_t>(std::stoul(token_hex.substr(2 * i, 2), nullptr, 16));
  o.session = session_id{static_cast<std::uint32_t>(std::stoul(argv[4], nullptr, 16))};
  o.receiver_id = argv[5];
  o.tcp_connections = 2;
  o.connect_timeout = std::chrono::seconds(10);
  if (std::string(argv[6]) == "wrong-key") {
    crypto::key32 k{};
    crypto::random_bytes(k);
    o.proof_key = k;
  }
  boost::asio::io_context io;
  std::uint64_t bytes = 0;
  std::string result = "timeout";
  std::string detail;
  std::unique_ptr<unicast::client> c;
  unicast::client_events ev;
  ev.on_complete = [&] { c->close(); };
  ev.on_data = [&](file_index, std::uint64_t, std::span<const std::byte> b) { bytes += b.size(); };
  ev.on_closed = [&](const std::error_code& ec, const std::string& d) {
    result = ec ? ec.message() : "ok";
    detail = d;
    io.stop();
  };
  c = unicast::make_client(io, o, ev);
  const byte_range want{file_index{0}, 0, 1000};
  (void)c->request({&want, 1});
  c->start();
  boost::asio::steady_timer limit(io);
  limit.expires_after(std::chrono::seconds(20));
  limit.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  io.run();
  std::printf("result=%s bytes=%llu detail=%s\n", result.c_str(),
              static_cast<unsigned long long>(bytes), detail.c_str());
  return 0;
}
