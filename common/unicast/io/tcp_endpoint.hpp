#pragma once
/// @file
/// Conversion between mcdist's endpoint and Asio's TCP endpoint, for the TCP server and client
/// of the unicast fallback (address and port carried over unchanged, IPv4 or IPv6).

#include "common/endpoint.hpp"
#include "common/net/udp.hpp"

#include <boost/asio/ip/tcp.hpp>

namespace mcdist::unicast {

/// `e` as an Asio TCP endpoint (same address and port).
inline boost::asio::ip::tcp::endpoint to_tcp(const endpoint& e) {
  const auto u = net::to_asio(e);
  return {u.address(), u.port()};
}

/// An Asio TCP endpoint as mcdist's endpoint (same address and port).
inline endpoint from_tcp(const boost::asio::ip::tcp::endpoint& e) {
  return net::from_asio(boost::asio::ip::udp::endpoint(e.address(), e.port()));
}

}  // namespace mcdist::unicast
