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
///
/// And CUBIC's (RFC 8312 section 5.1, the response function of Linux's default TCP), which
/// --rate auto's receivers take when it is the higher: see tcp_friendly_rate_bps().

#include "common/time.hpp"

#include <algorithm>
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

/// CUBIC's constants (RFC 8312's values, kept by RFC 9438): the window's growth C,
/// packets/s^3, and its multiplicative decrease beta.
inline constexpr double cubic_c = 0.4;
inline constexpr double cubic_beta = 0.7;

/// CUBIC's average rate, bit/s, at loss event rate `p` and round-trip time `rtt`, from its
/// average window under random loss (RFC 8312 section 5.1):
///
///     AVG_W = (C (3 + beta) / (4 (1 - beta)))^(1/4) * R^(3/4) / p^(3/4)  packets (R in s)
///
/// X = AVG_W * s / R. Above Reno's rate (tcp_throughput_bps) only where p is low for the RTT:
/// at R = 40 ms below p of about 3.6e-5, a window of about 200 packets; CUBIC itself runs at
/// the higher of the two (RFC 8312's "TCP-friendly region", RFC 9438's "Reno-friendly").
/// @param packet_bytes  s, bytes (> 0)
/// @param rtt           R (> 0)
/// @param p             loss event rate in (0, 1]; p <= 0 yields +infinity
/// @return bit/s, +infinity for p <= 0 or a non-positive rtt
inline double cubic_throughput_bps(std::uint32_t packet_bytes, duration rtt, double p) noexcept {
  const double r = std::chrono::duration<double>(rtt).count();
  if (!(p > 0) || !(r > 0)) return std::numeric_limits<double>::infinity();
  if (p > 1) p = 1;
  const double window =
      std::pow(cubic_c * (3 + cubic_beta) / (4 * (1 - cubic_beta)), 0.25) * std::pow(r / p, 0.75);
  return window * static_cast<double>(packet_bytes) * 8 / r;
}

/// The TCP-friendly rate --rate auto's receivers compute and report, bit/s: the higher of
/// Reno's (RFC 5348 section 3.1, what TFMCC specifies) and CUBIC's (RFC 8312 section 5.1), the
/// rate a CUBIC flow, the TCP of Linux hosts, takes at the same loss event rate and RTT. With
/// Reno's alone a session beside a CUBIC flow took 0.40-0.70 of its rate through a 200 Mbit/s
/// bottleneck at a 40 ms RTT, and less than a Reno TCP flow takes there (docs/benchmarks.md
/// "Rate auto: CUBIC's response"); at high loss rates or short RTTs the two agree (Reno's is
/// the higher).
/// @return as tcp_throughput_bps(); falls monotonically in p
inline double tcp_friendly_rate_bps(std::uint32_t packet_bytes, duration rtt, double p) noexcept {
  return std::max(tcp_throughput_bps(packet_bytes, rtt, p),
                  cubic_throughput_bps(packet_bytes, rtt, p));
}

}  // namespace mcdist
