#include "common/daemon/reload_diff.hpp"

#include <spdlog/spdlog.h>

namespace mcdist {

bool log_reload_refused(spdlog::logger& log, std::uint64_t& failed, const std::exception& e) {
  ++failed;
  log.error("SIGHUP: configuration not reloaded, still running on the previous one: {}", e.what());
  return false;
}

void reload_diff::log(spdlog::logger& log, std::size_t live) const {
  std::string summary;
  const auto add = [&summary](const std::string& s) {
    summary += (summary.empty() ? "" : "; ") + s;
  };
  for (const auto& c : m_changes) add(c);
  for (const auto& name : m_restart) {
    log.warn(
        "SIGHUP: {} changed in the configuration but needs a restart: keeping the running "
        "value",
        name);
    add(name + " needs a restart");
  }
  log.info("SIGHUP: configuration reloaded: {} ({} channel{} now)",
           summary.empty() ? "no change" : summary, live, live == 1 ? "" : "s");
}

}  // namespace mcdist
