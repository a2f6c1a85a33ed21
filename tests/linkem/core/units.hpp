// Parsing of the physical quantities that appear in link specifications and on the
// command line of mcdist-linkem: durations, bit rates, probabilities, byte sizes.
//
// These run at start-up only, so they report errors by throwing config_error with a
// message meant for the operator (house style: exceptions only for configuration).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mcdist::linkem {

/// `s` without the white space (std::isspace) at either end.
std::string_view trim(std::string_view s);

/// Error in a scenario file, a --link specification or a command-line value. The
/// message names the offending text and says what is expected.
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses a duration such as "350ms", "1.5s", "200us", "0".
/// Units: ns, us (or µs), ms, s. A bare number is rejected unless it is 0, so that
/// "delay=350" cannot silently mean 350 ns or 350 s.
/// @return the duration rounded to whole nanoseconds; never negative.
/// @throws config_error on syntax errors, negative values or overflow (> 1 day).
std::chrono::nanoseconds parse_duration(std::string_view text);

/// Parses a bit rate such as "100Mbit", "1.5Gbit/s", "64kbit", "1e9", "12.5MB/s".
/// Prefixes k, M, G, T are decimal (1e3, 1e6, ...), case-insensitive, as in tc(8) and
/// dummynet. Unit "bit", "bit/s", "bps" or none means bits per second; "B/s" or
/// "Bps" means bytes per second (multiplied by 8).
/// @return bits per second, > 0.
/// @throws config_error on syntax errors or a non-positive rate.
double parse_bit_rate(std::string_view text);

/// Parses a probability given as a fraction ("1e-3", "0.01") or a percentage ("0.1%").
/// @return a value in [0, 1].
/// @throws config_error if the text is not a number or is outside [0, 1].
double parse_probability(std::string_view text);

/// Parses a byte count such as "1500", "64KB", "1MiB", "2GiB". SI prefixes (KB, MB, GB)
/// are powers of 1000, IEC prefixes (KiB, MiB, GiB) powers of 1024.
/// @return bytes.
/// @throws config_error on syntax errors or overflow.
std::uint64_t parse_byte_size(std::string_view text);

/// Parses a non-negative integer (decimal) with an upper bound.
/// @throws config_error if not an integer or above max_value.
std::uint64_t parse_count(std::string_view text, std::uint64_t max_value);

/// Parses a plain decimal number (no unit) in [min_value, max_value].
/// @throws config_error if not a number or out of range.
double parse_number(std::string_view text, double min_value, double max_value);

/// Formats a duration for humans: "350ms", "1.5s", "20us".
std::string format_duration(std::chrono::nanoseconds d);

/// Formats a bit rate for humans: "100Mbit/s", "1.2Gbit/s".
std::string format_bit_rate(double bits_per_second);

}  // namespace mcdist::linkem
