#pragma once
/// @file
/// mcdistd's authentication state (docs/security.md): this site's key pair (key_file, or one
/// made under TEMP/site.key), one keyring per channel index trusting that channel's senders,
/// the check of every datagram before the engine sees it, the key requests and the announces
/// held before a session key, the session keys saved under TEMP/keys so a restarted daemon can
/// go on with a session (its checkpoint alone cannot verify its data), the refusal counters,
/// and the two filters that spare signature checks: a signed announce repeated within
/// auth::announce_repeat_interval is dropped unchecked, and a datagram of a session whose key
/// is awaited reads the control socket first (at most max_key_polls_per_wake times a wake-up
/// for blocks and markers). Runs on the daemon's io thread; sends nothing itself.

#include "common/auth.hpp"
#include "common/unicast/io/client.hpp"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/io/daemon_config.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist::receiver {

/// The keyrings by channel index and what goes with them.
class session_keys {
 public:
  /// Control socket reads for awaited keys per socket wake-up: blocks of a session that never
  /// gets its key cost this many extra reads, no more (an announce polls uncounted: its
  /// signature check costs far more than the read).
  static constexpr std::uint32_t max_key_polls_per_wake = 8;

  /// Loads this site's key (cfg.key_file; without one, TEMP/site.key, made when missing), makes
  /// one keyring per configured channel, logs whom each trusts, and creates TEMP/keys (0700).
  /// @throws config_error when the key file cannot be read or made
  session_keys(const daemon_config& cfg, std::shared_ptr<spdlog::logger> log);

  /// A keyring for channel `ch` as the next channel index (a reload added it).
  void add_channel(const channel_config& ch);
  /// Logs whom channel `ch` trusts (a warning when it takes unsigned sessions).
  void log_trust(const channel_config& ch) const;
  const crypto::identity& site() const noexcept { return m_site; }

  /// The keyring that holds session `s`, if any.
  auth::receiver_keys* of(session_id s);
  /// The pinned key that signed session `s` (format_public_key); "" when unsigned or unknown.
  std::string signer(session_id s) const;

  /// Checks a datagram that arrived on socket `index` from `from` with the keyring of its
  /// channel; from the control socket (an index past the channels), with the keyring of the
  /// channel that knows its session. A register reply's session keys are saved.
  /// @param h    the datagram's common header, parsed once by the daemon
  /// @param out  the version-1 view; empty when the keyring took it (a sealed announce held
  ///             before its key, the answer to a key request)
  /// @return empty, or why it was refused (counted)
  std::error_code open(std::size_t index, const wire::header& h, std::span<const std::byte> d,
                       time_point now, std::span<const std::byte>& out, const endpoint& from);
  /// True for a signed announce on channel `index` of a session whose manifest `engine` holds
  /// whole and one of whose announces verified within auth::announce_repeat_interval: a
  /// repeat, dropped without a signature check (counted).
  bool announce_repeat(std::size_t index, const wire::header& h, time_point now,
                       const receiver_engine& engine);
  /// A socket wake-up begins: the key poll budget is full again.
  void new_wake() noexcept { m_key_polls = 0; }
  /// True when a data, marker or announce datagram on channel `index` is of a session whose key
  /// this site asked for and does not have yet, and the wake-up's budget allows a read of the
  /// control socket first (the sender answers during its announce burst, so the key is likely
  /// queued there behind this channel's batch). Spends the budget for blocks and markers.
  bool poll_first(std::size_t index, const wire::header& h);
  /// After an announce of session `s` (`plain`, opened) on channel `index` (`ch`) reached
  /// `engine`: a session silent here (a silent channel, or the announce's silent_passes) is
  /// marked silent in the keyring, so no key request goes out for it and its untagged blocks
  /// pass.
  void note_silent(std::size_t index, const channel_config& ch, session_id s,
                   std::span<const std::byte> plain, const receiver_engine& engine);
  /// After a datagram was opened: hands `send` the key requests a verified announce left due
  /// (never for a silent channel or session), then hands `engine` the sealed announces held
  /// before a session key that just arrived, opened, with their arrival time.
  void after_open(receiver_engine& engine,
                  const std::function<void(std::span<const std::byte>)>& send);
  /// `datagram` of session `s` sealed when a keyring holds the session.
  /// @return the datagram to send (`datagram` itself for a session no keyring holds), or
  ///         nullopt when its keyring has no key for it yet (the engine repeats the message)
  std::optional<std::span<const std::byte>> seal(session_id s, std::span<const std::byte> datagram);
  /// The credentials of FALLBACK order `order` of session `s`: its token and, in a signed
  /// session, this site's fallback key, sealed both ways when encrypted. nullopt (with a
  /// warning) for an encrypted session whose fallback key this site does not hold yet.
  std::optional<unicast::client_credentials> unicast_credentials(session_id s,
                                                                 const unicast_order& order);

  /// Loads the keys saved for session `s` (restoring its checkpoint). `channel_now` maps the
  /// channel index they were saved under to this run's (nullopt: no longer configured).
  void restore(session_id s,
               const std::function<std::optional<std::uint32_t>(std::uint32_t)>& channel_now);
  /// Session `s` ended; with `remove_saved` its saved keys go too (else kept for a resume).
  void forget(session_id s, bool remove_saved);

  /// The keyrings' refusal counters summed; no_key also counts unicast datagrams of sessions no
  /// channel knows.
  auth::auth_stats stats() const;
  /// Signed announce repeats dropped without a signature check.
  std::uint64_t repeats_unchecked() const noexcept { return m_repeats_unchecked; }
  /// Sessions whose keys are saved under TEMP/keys.
  std::size_t saved() const noexcept { return m_saved.size(); }

 private:
  /// The keyring of one channel: its trusted senders, this site's key and id.
  std::unique_ptr<auth::receiver_keys> keyring(const channel_config& ch) const;
  /// Saves session `s`'s keys once this site has its session key.
  void save(session_id s, std::size_t channel);
  std::filesystem::path saved_file(session_id s) const;

  std::shared_ptr<spdlog::logger> m_log;
  std::string m_receiver_id;
  std::filesystem::path m_dir;  ///< TEMP/keys
  crypto::identity m_site;
  /// Per channel index: its keyring, and whether it is silent (no key request ever).
  std::vector<std::unique_ptr<auth::receiver_keys>> m_keys;
  std::vector<bool> m_silent;
  /// Sessions whose keys are saved under TEMP/keys, with what was saved (a site behind a relay
  /// that restarted gets a new relay key and session key: saved again).
  std::map<session_id, std::string> m_saved;
  std::vector<std::byte> m_buffer;      ///< sealed datagrams and key requests
  std::uint64_t m_unknown_unicast = 0;  ///< unicast datagrams of sessions no channel knows
  std::uint32_t m_key_polls = 0;        ///< in this wake-up
  std::uint64_t m_repeats_unchecked = 0;
};

}  // namespace mcdist::receiver
