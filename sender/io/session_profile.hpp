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

/// The FEC block size the loss `p` (a share of the datagrams, 0..1) asks for: k p =
/// auto_fec_lack, so that among many sites the largest lack in a FEC block is about twice the
/// mean and the repairs stay within about 2 x the largest single site's loss, where a fixed
/// k = 200 leaves them at 5-6 x when k p is 0.2 (docs/design-notes.md "FEC block size and the
/// repair floor"). Within [default_fec_k, fec::max_k]: at least what a session without a
/// measurement gets, and a clean path (p = 0) the largest. The sender's parity coding per second
/// is then about the same at any loss: parity blocks ~ rate x p, each costing k sources.
std::uint32_t fec_k_for_loss(double p) noexcept;
/// The lack per FEC block fec_k_for_loss aims at (k x p). At 2.5 the repairs would be about
/// 2.3 x the largest single loss with p known exactly; 4 keeps them under 3 x when the first
/// sessions' estimate is 1.5-2 x too high (what a hub's first seconds measured).
inline constexpr double auto_fec_lack = 4;

/// How a session is sent. Every field has its default here and nowhere else.
struct session_profile {
  /// Parity repairs: source blocks per FEC block (0: none; up to 4096, GF(2^16) beyond 254).
  /// With fec_k_auto, the k of a session whose sites' loss is not measured.
  std::uint32_t fec_k = default_fec_k;
  /// fec_k "auto": a hub chooses each session's k from the loss its sites reported in earlier
  /// sessions (fec_k_for_loss); fec_k until it has a measurement, and always in mcdist-send,
  /// which has none before its one session.
  bool fec_k_auto = true;
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
  /// @param loss  the session's sites' measured loss (a share of the datagrams), if any: with
  ///              fec_k_auto, the session's k is fec_k_for_loss(*loss)
  void apply(sender_config& c, std::optional<double> loss = std::nullopt) const;
  /// The profile as settings text ("fec_k 200, fec_depth 8, ..."), for logs and status.
  std::string describe() const;

  friend bool operator==(const session_profile&, const session_profile&) = default;
};

/// fec_k as mcdist-send's option and a channel's TOML give it: "auto" or 0 to fec::max_k. Sets
/// `p.fec_k` and `p.fec_k_auto`; false for anything else.
bool parse_fec_k(std::string_view text, session_profile& p);

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
