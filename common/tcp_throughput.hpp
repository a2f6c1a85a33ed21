#pragma once
/// @file
/// The TCP throughput equation TFRC and TFMCC use to turn a loss event rate and a round-trip
/// time into a TCP-friendly sending rate (RFC 5348 section 3.1; RFC 4654 section 3.1):
///
///     X = s / (R * sqrt(2*b*p/3) + t_RTO * (3 * sqrt(3*b*p/8)) * p * (1 + 32*p^2))
///
/// with s the packet size (bytes), R the round-trip time (s), p the loss event rate, b = 1
/// (packets acknowledged per ACK, RFC 5348's recommended value) and t_RTO = 4R (RFC 5348's
/// simplification). X is in bytes/s; throughput_bps() returns it in bits/s.

#include "common/time.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

namespace mcdist {

/// TCP-friendly rate, bit/s, of a flow of `packet_bytes`-byte packets (whole IP packets, as
/// --rate counts them) seeing loss event rate `p` at round-trip time `rtt`.
/// @param packet_bytes  s, bytes (> 0)
/// @param rtt           R (> 0; callers floor it, see loss_estimator and rate_controller)
/// @param p             loss event rate in (0, 1]; p <= 0 yields +infinity (no loss: no limit)
/// @return X in bit/s, +infinity for p <= 0 or a non-positive rtt
inline double tcp_throughput_bps(std::uint32_t packet_bytes, duration rtt, double p) noexcept {
  const double r = std::chrono::duration<double>(rtt).count();
  if (!(p > 0) || !(r > 0)) return std::numeric_limits<double>::infinity();
  if (p > 1) p = 1;
  const double t_rto = 4 * r;  // RFC 5348 section 3.1: t_RTO = 4R
  const double denom =
      r * std::sqrt(2 * p / 3) + t_rto * (3 * std::sqrt(3 * p / 8)) * p * (1 + 32 * p * p);
  return static_cast<double>(packet_bytes) * 8 / denom;
}

}  // namespace mcdist
