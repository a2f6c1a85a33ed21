// What the NORM peer's sender and receiver (tests/bench/norm) share: option parsing, rates,
// the clock and a JSON-safe string. Benchmark code, not part of mcdist.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace normpeer {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "1G", "500M", "64k", "2.5G", "800000" -> a number (decimal multipliers, like mcdist's --rate).
inline double parse_si(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) {
    std::fprintf(stderr, "not a number: %s\n", text.c_str());
    std::exit(2);
  }
  switch (*end) {
    case 'k':
    case 'K': v *= 1e3; break;
    case 'm':
    case 'M': v *= 1e6; break;
    case 'g':
    case 'G': v *= 1e9; break;
    default: break;
  }
  return v;
}

// "1MiB"-style sizes are not needed: byte counts take the same k/M/G suffixes, binary here
// (buffers are sized in powers of two).
inline unsigned long parse_bytes(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  switch (*end) {
    case 'k':
    case 'K': v *= 1024; break;
    case 'm':
    case 'M': v *= 1024 * 1024; break;
    case 'g':
    case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<unsigned long>(v);
}

// "239.1.2.3:6003" -> address and port.
inline void parse_group(const std::string& text, std::string& addr, int& port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "--group wants ADDRESS:PORT, got %s\n", text.c_str());
    std::exit(2);
  }
  addr = text.substr(0, colon);
  port = std::atoi(text.c_str() + colon + 1);
}

inline std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// NORM_OBJECT_FILE keeps every object of its transmit (and receive) cache open: a cache of
// thousands of files needs more descriptors than the usual soft limit of 1024.
inline void raise_nofile() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace normpeer
