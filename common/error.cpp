#include "common/error.hpp"

#include <numeric>
#include <string>

namespace mcdist {

namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "mcdist"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "success";
      case errc::truncated: return "datagram truncated";
      case errc::bad_magic: return "bad magic number";
      case errc::bad_version: return "unsupported protocol version";
      case errc::unknown_type: return "unknown message type";
      case errc::oversized: return "message too large";
      case errc::bad_protobuf: return "malformed control message";
      case errc::invalid_field: return "field value out of range";
      case errc::unknown_session: return "unknown session";
      case errc::wrong_source: return "datagram from unexpected source";
      case errc::not_registered: return "receiver not registered";
      case errc::stale: return "stale message";
      case errc::duplicate: return "duplicate block";
      case errc::path_empty: return "empty path";
      case errc::path_absolute: return "absolute path";
      case errc::path_dot_dot: return "path contains '..' or '.'";
      case errc::path_empty_component: return "path contains an empty component";
      case errc::path_control_char: return "path contains NUL or a control character";
      case errc::path_too_long: return "path too long";
      case errc::path_component_too_long: return "path component too long";
      case errc::path_too_deep: return "path has too many components";
      case errc::path_conflict: return "path conflicts with another manifest entry";
      case errc::path_not_utf8: return "path is not valid UTF-8";
      case errc::replayed: return "session already seen (a replay)";
      case errc::expired: return "session stamped longer ago than max_session_age";
      case errc::clock_skew:
        return "session stamped ahead of this host's clock beyond max_clock_skew";
      case errc::unstamped: return "signed session without a timestamp (sender too old)";
      case errc::replay_cache_unwritable: return "the replay cache cannot be written";
      case errc::file_too_large: return "file too large";
      case errc::digest_mismatch: return "SHA-256 mismatch";
      case errc::storage_full: return "write buffers full";
      case errc::registration_closed: return "registration closed";
      case errc::not_in_group: return "receiver not in the closed group";
      case errc::cancelled: return "cancelled";
      case errc::over_budget: return "memory budget exceeded";
      case errc::too_many_sessions: return "session limit reached";
      case errc::wrong_socket: return "announce on the unicast socket";
      case errc::out_of_memory: return "allocation failed";
      case errc::disk_reserve: return "disk reserve";
      case errc::quota: return "quota";
      case errc::unauthenticated: return "not authenticated";
      case errc::count_: break;
    }
    return "unknown mcdist error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category c;
  return c;
}

std::string_view to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::truncated: return "truncated";
    case errc::bad_magic: return "bad_magic";
    case errc::bad_version: return "bad_version";
    case errc::unknown_type: return "unknown_type";
    case errc::oversized: return "oversized";
    case errc::bad_protobuf: return "bad_protobuf";
    case errc::invalid_field: return "invalid_field";
    case errc::unknown_session: return "unknown_session";
    case errc::wrong_source: return "wrong_source";
    case errc::not_registered: return "not_registered";
    case errc::stale: return "stale";
    case errc::duplicate: return "duplicate";
    case errc::path_empty: return "path_empty";
    case errc::path_absolute: return "path_absolute";
    case errc::path_dot_dot: return "path_dot_dot";
    case errc::path_empty_component: return "path_empty_component";
    case errc::path_control_char: return "path_control_char";
    case errc::path_too_long: return "path_too_long";
    case errc::path_component_too_long: return "path_component_too_long";
    case errc::path_too_deep: return "path_too_deep";
    case errc::path_conflict: return "path_conflict";
    case errc::file_too_large: return "file_too_large";
    case errc::digest_mismatch: return "digest_mismatch";
    case errc::storage_full: return "storage_full";
    case errc::registration_closed: return "registration_closed";
    case errc::not_in_group: return "not_in_group";
    case errc::cancelled: return "cancelled";
    case errc::over_budget: return "over_budget";
    case errc::too_many_sessions: return "too_many_sessions";
    case errc::wrong_socket: return "wrong_socket";
    case errc::out_of_memory: return "out_of_memory";
    case errc::disk_reserve: return "disk_reserve";
    case errc::quota: return "quota";
    case errc::unauthenticated: return "unauthenticated";
    case errc::path_not_utf8: return "path_not_utf8";
    case errc::replayed: return "replayed";
    case errc::expired: return "expired";
    case errc::clock_skew: return "clock_skew";
    case errc::unstamped: return "unstamped";
    case errc::replay_cache_unwritable: return "replay_cache_unwritable";
    case errc::count_: break;
  }
  return "unknown";
}

std::uint64_t drop_counters::total() const noexcept {
  return std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
}

}  // namespace mcdist
