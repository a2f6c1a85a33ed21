#include "sender/io/session_profile.hpp"

#include "common/fec/fec.hpp"
#include "common/fec/fec_layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace mcdist::sender {

std::uint32_t fec_k_for_loss(double p) noexcept {
  if (!(p > 0)) return fec::max_k;
  const double k = std::round(auto_fec_lack / p);
  return static_cast<std::uint32_t>(
      std::clamp(k, static_cast<double>(default_fec_k), static_cast<double>(fec::max_k)));
}

bool parse_fec_k(std::string_view text, session_profile& p) {
  if (text == "auto") {
    p.fec_k = default_fec_k;
    p.fec_k_auto = true;
    return true;
  }
  std::uint32_t k = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty() || k > fec::max_k) {
    return false;
  }
  p.fec_k = k;
  p.fec_k_auto = false;
  return true;
}

void session_profile::apply(sender_config& c, std::optional<double> loss) const {
  const std::uint32_t k = fec_k_auto && loss ? fec_k_for_loss(*loss) : fec_k;
  c.fec_k = k;
  c.fec_depth = k > 0 ? fec_depth : 1;
  c.fec_overhead = k > 0 ? fec_overhead : 0;
  c.silent_passes = silent_passes;
  c.fallback = fallback;
  c.register_window = register_window;
}

std::string session_profile::describe() const {
  std::string out = fec_k == 0
                        ? std::string("no parity")
                        : fmt::format("fec_k {}, fec_depth {}, fec_overhead {:g} %",
                                      fec_k_auto ? std::string("auto") : std::to_string(fec_k),
                                      fec_depth, fec_overhead * 100);
  if (silent_passes > 0) out += fmt::format(", silent_passes {}", silent_passes);
  out += fmt::format(", fallback {}, register_window {:g} s", to_string(fallback),
                     std::chrono::duration<double>(register_window).count());
  return out;
}

std::optional<double> parse_share(std::string_view text) {
  std::string v(text);
  const bool percent = !v.empty() && v.back() == '%';
  if (percent) v.pop_back();
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size()) return std::nullopt;
  const double share = percent ? x / 100 : x;
  if (!(share >= 0 && share <= 1)) return std::nullopt;
  return share;
}

std::optional<fallback_mode> parse_fallback_mode(std::string_view text) {
  if (text == "auto") return fallback_mode::automatic;
  if (text == "sctp") return fallback_mode::sctp;
  if (text == "tcp") return fallback_mode::tcp;
  if (text == "sctp-kernel") return fallback_mode::sctp_kernel;
  if (text == "off") return fallback_mode::off;
  return std::nullopt;
}

std::string_view to_string(fallback_mode m) noexcept {
  switch (m) {
    case fallback_mode::automatic: return "auto";
    case fallback_mode::sctp: return "sctp";
    case fallback_mode::tcp: return "tcp";
    case fallback_mode::sctp_kernel: return "sctp-kernel";
    case fallback_mode::off: return "off";
  }
  return "auto";
}

std::string profile_problem(const session_profile& p, bool closed_group, bool encrypted,
                            bool rate_auto, setting_names names) {
  const bool cli = names == setting_names::options;
  const char* k = cli ? "--fec-k" : "fec_k";
  if (p.fec_k > 0 && !fec::valid_shape(p.fec_k, fec::default_max_parity(p.fec_k))) {
    return fmt::format("{} {} is not 1 to {} (0: no parity)", k, p.fec_k, fec::max_k);
  }
  if (p.fec_k > 0 && (p.fec_depth < 1 || p.fec_depth > fec::max_depth)) {
    return fmt::format("{} {} is not 1 to {}", cli ? "--fec-depth" : "fec_depth", p.fec_depth,
                       fec::max_depth);
  }
  if (p.fec_overhead > 0 && p.fec_k == 0) {
    return fmt::format("{} needs {} (parity)", cli ? "--fec-overhead" : "fec_overhead", k);
  }
  if (p.silent_passes > 0) {
    const char* silent = cli ? "--silent-passes" : "silent_passes";
    if (closed_group) {
      return fmt::format("{} takes no {}: the sites of a silent session never register", silent,
                         cli ? "--receivers" : "receivers");
    }
    if (encrypted) {
      return fmt::format(
          "{} and {}: the session key of an encrypted session is handed out at registration, "
          "which a silent site never does",
          silent, cli ? "--encrypt" : "encrypt = true");
    }
    if (rate_auto) {
      return fmt::format(
          "{} and {}: a silent session's rate cannot follow reports its sites never send", silent,
          cli ? "--rate auto" : "rate = \"auto\"");
    }
  }
  return {};
}

}  // namespace mcdist::sender
