#pragma once
/// @file
/// Parsing and formatting of the quantities operators type: rates in bit/s with SI suffixes,
/// sizes in bytes with binary suffixes, durations with a unit.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist {

/// Parses a rate in bit/s: a decimal number with an optional SI suffix k, M or G (powers of
/// 1000, case of k/K ignored) and an optional "bit/s" or "bps", e.g. "500M", "1.5G", "100000".
/// "max" or "0" parse as 0, meaning unpaced.
/// @return bits per second, or std::nullopt for anything else (negative, junk, > 1 Tbit/s).
std::optional<std::uint64_t> parse_rate(std::string_view text) noexcept;

/// Parses a size in bytes: an integer with an optional suffix K, M, G (powers of 1024; KiB,
/// MiB, GiB also accepted), e.g. "1400", "64K", "2GiB".
/// @return bytes, or std::nullopt for anything else.
std::optional<std::uint64_t> parse_size(std::string_view text) noexcept;

/// Parses a duration: a decimal number with unit us, ms, s, m, h or d (24 h), e.g. "250ms",
/// "1.5s", "7d"; a bare number is seconds. Longer than 10^18 ns (~31 years): nullopt.
std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text) noexcept;

/// Formats bit/s with an SI suffix, three significant digits: "953 Mbit/s".
std::string format_rate(double bits_per_second);

/// Formats bytes with a binary suffix: "1.00 GiB", "10.0 KiB", "512 B".
std::string format_bytes(double bytes);

}  // namespace mcdist
