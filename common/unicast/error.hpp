#pragma once
/// @file
/// Error codes of the unicast fallback transports (std::error_code, category "mcdist.unicast").
/// Framing errors reuse mcdist::errc (truncated, bad_magic, bad_version, unknown_type,
/// oversized, invalid_field); these are the session-level reasons on top.

#include <cstdint>
#include <string_view>
#include <system_error>

namespace mcdist::unicast {

/// Why a unicast session or connection ended in failure.
enum class error : std::uint8_t {
  ok = 0,
  refused,             ///< the server refused our hello (token, receiver id or session unknown)
  server_busy,         ///< the server is at its session limit
  connect_timeout,     ///< no connection/association within the connect timeout
  hello_timeout,       ///< a peer connected but sent no valid hello in time
  idle_timeout,        ///< nothing moved in either direction for the idle timeout
  connection_lost,     ///< the peer closed or reset before the session was over
  protocol_violation,  ///< a well-formed frame the protocol does not allow here
  request_invalid,     ///< a request names a file not granted or bytes past its end
  kernel_sctp_unavailable,  ///< the kernel has no SCTP (socket() said protocol not supported)
  usrsctp_unavailable,      ///< the userland SCTP stack is bound to another io_context
  aborted,                  ///< the session was aborted locally (server shut down, operator)
  source_failed,            ///< the byte source could not read a file
  count_                    ///< number of codes; not an error
};

/// The category of unicast::error; name() is "mcdist.unicast".
const std::error_category& error_category() noexcept;

/// Makes unicast::error usable as std::error_code.
inline std::error_code make_error_code(error e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Short stable snake_case name, for counters and logs.
std::string_view to_string(error e) noexcept;

}  // namespace mcdist::unicast

template <>
struct std::is_error_code_enum<mcdist::unicast::error> : std::true_type {};
