#pragma once
/// @file
/// A session's profile: the settings of how one session is sent (parity, silent passes, the
/// unicast fallback's transport, the registration window, the rate mode) in the words both of
/// mcdist-send's options and of a hub channel's TOML (README "Channel profiles"), parsed by the
/// same functions and with one default each, so a `[[channel]]` of mcdist-feed and a one-shot
/// `mcdist-send` behave alike. The defaults are chosen by measurement (docs/design-notes.md
/// "Parity by default").

#include "sender/core/fallback_policy.hpp"
#include "sender/core/sender_session.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mcdist::sender {

/// How a session is sent. Every field has its default here and nowhere else.
struct session_profile {
  /// Parity repairs: source blocks per FEC block (0: none; up to 4096, GF(2^16) beyond 254).
  std::uint32_t fec_k = default_fec_k;
  /// Interleaving depth of the FEC blocks (1..fec::max_depth).
  std::uint32_t fec_depth = default_fec_depth;
  /// Proactive parity in pass 1, a share of the source blocks (0..1); needs fec_k.
  double fec_overhead = 0;
  /// A silent session for one-way links: passes sent, 0 for a normal session.
  std::uint32_t silent_passes = 0;
  /// The unicast fallback's transport.
  fallback_mode fallback = fallback_mode::automatic;
  /// Open group: how long registrations are accepted.
  std::chrono::nanoseconds register_window = std::chrono::seconds(2);

  /// Copies the profile into a session's configuration.
  void apply(sender_config& c) const;
  /// The profile as settings text ("fec_k 200, fec_depth 8, ..."), for logs and status.
  std::string describe() const;

  friend bool operator==(const session_profile&, const session_profile&) = default;
};

/// A share given as "3%" or "0.03": the fraction, or std::nullopt unless 0 <= share <= 1.
std::optional<double> parse_share(std::string_view text);

/// The fallback transport's name: "auto", "sctp", "tcp", "sctp-kernel" or "off".
std::optional<fallback_mode> parse_fallback_mode(std::string_view text);
/// The inverse of parse_fallback_mode.
std::string_view to_string(fallback_mode m) noexcept;

/// How a message names the settings: mcdist-send's options or a channel's TOML keys.
enum class setting_names { options, toml };

/// Why `p` cannot be sent as given, or empty: fec_k and fec_depth out of range, fec_overhead
/// without fec_k, a silent session with a closed group (`closed_group`), encryption
/// (`encrypted`: its session key is handed out at registration) or rate auto (`rate_auto`:
/// its rate follows the sites' reports). The message names the settings as `names` says.
std::string profile_problem(const session_profile& p, bool closed_group, bool encrypted,
                            bool rate_auto, setting_names names);

}  // namespace mcdist::sender
