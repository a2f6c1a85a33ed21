#include "common/unicast/error.hpp"

#include <string>

namespace mcdist::unicast {

namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "mcdist.unicast"; }
  std::string message(int ev) const override {
    switch (static_cast<error>(ev)) {
      case error::ok: return "success";
      case error::refused:
        return "refused by the server (token, receiver id or session not accepted)";
      case error::server_busy: return "server busy (session limit reached)";
      case error::connect_timeout: return "connect timed out";
      case error::hello_timeout: return "no hello within the hello timeout";
      case error::idle_timeout: return "idle timeout (nothing moved)";
      case error::connection_lost: return "connection lost";
      case error::protocol_violation: return "protocol violation";
      case error::request_invalid: return "request for a file not granted or past its end";
      case error::kernel_sctp_unavailable:
        return "kernel SCTP is not available on this host (protocol not supported); use sctp "
               "over UDP or tcp";
      case error::usrsctp_unavailable:
        return "the userland SCTP stack is already driven by another io_context in this process";
      case error::aborted: return "aborted";
      case error::source_failed: return "reading the file failed";
      case error::count_: break;
    }
    return "unknown mcdist.unicast error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category c;
  return c;
}

std::string_view to_string(error e) noexcept {
  switch (e) {
    case error::ok: return "ok";
    case error::refused: return "refused";
    case error::server_busy: return "server_busy";
    case error::connect_timeout: return "connect_timeout";
    case error::hello_timeout: return "hello_timeout";
    case error::idle_timeout: return "idle_timeout";
    case error::connection_lost: return "connection_lost";
    case error::protocol_violation: return "protocol_violation";
    case error::request_invalid: return "request_invalid";
    case error::kernel_sctp_unavailable: return "kernel_sctp_unavailable";
    case error::usrsctp_unavailable: return "usrsctp_unavailable";
    case error::aborted: return "aborted";
    case error::source_failed: return "source_failed";
    case error::count_: break;
  }
  return "unknown";
}

}  // namespace mcdist::unicast
