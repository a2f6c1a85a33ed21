#pragma once
/// @file
/// What mcdistd's and mcdist-feed's reloads at SIGHUP share: the refusal of an invalid
/// configuration, channels matched by name, and one account of what changed (changes applied,
/// settings that need a restart, one summary line). Each daemon says which settings are which.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}

namespace mcdist {

/// A reload refused: counts it in `failed` and logs "SIGHUP: configuration not reloaded,
/// still running on the previous one: WHY".
/// @return false, for `return log_reload_refused(...)` in a reload that reports success
bool log_reload_refused(spdlog::logger& log, std::uint64_t& failed, const std::exception& e);

/// The running channels paired with the next configuration's, by name.
struct channel_match {
  /// Per running channel index: the index of its namesake in the next configuration;
  /// std::nullopt for one removed, or not live.
  std::vector<std::optional<std::size_t>> next_of;
  /// Indexes of next channels that no live running channel names: added.
  std::vector<std::size_t> added;
};

/// Pairs `now` (running channels; `live(i)`: not retired by an earlier reload) with `next` by
/// their `name` members.
template <class Now, class Next, class Live>
channel_match match_channels(const std::vector<Now>& now, const std::vector<Next>& next,
                             Live live) {
  channel_match m{std::vector<std::optional<std::size_t>>(now.size()), {}};
  std::vector<bool> matched(next.size(), false);
  for (std::size_t i = 0; i < now.size(); ++i) {
    const auto same = [&](const Next& c) { return c.name == now[i].name; };
    const auto it = std::find_if(next.begin(), next.end(), same);
    if (!live(i) || it == next.end()) continue;
    m.next_of[i] = static_cast<std::size_t>(it - next.begin());
    matched[*m.next_of[i]] = true;
  }
  for (std::size_t j = 0; j < next.size(); ++j) {
    if (!matched[j]) m.added.push_back(j);
  }
  return m;
}

/// What one reload changed, in the order found.
class reload_diff {
 public:
  /// An applied change, as the summary names it ("channel b added").
  void note(std::string change) { m_changes.push_back(std::move(change)); }
  /// Takes `next` into `now` when they differ, noting `change`.
  template <class T>
  void take(T& now, const T& next, std::string_view change) {
    if (now == next) return;
    now = next;
    note(std::string(change));
  }
  /// A setting bound at start (sockets, files, threads, budgets): when `same` is false it keeps
  /// its running value and needs a restart.
  void restart_only(bool same, std::string_view name) {
    if (!same) m_restart.emplace_back(name);
  }
  /// Logs a warning per setting that needs a restart, then "SIGHUP: configuration reloaded:
  /// CHANGE; ...; NAME needs a restart (N channels now)" ("no change" when none).
  /// @param live  channels in force after the reload
  void log(spdlog::logger& log, std::size_t live) const;

 private:
  std::vector<std::string> m_changes;
  std::vector<std::string> m_restart;
};

}  // namespace mcdist
