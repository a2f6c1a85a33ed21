#pragma once
/// @file
/// An owned file descriptor: closed once, by its owner, on destruction or reset.

#include <unistd.h>

#include <utility>

namespace mcdist {

/// Owns one descriptor (or none: -1). Move-only.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : m_fd(fd) {}
  unique_fd(unique_fd&& o) noexcept : m_fd(std::exchange(o.m_fd, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.m_fd, -1));
    return *this;
  }
  ~unique_fd() { reset(); }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;

  /// Closes the descriptor held, if any, and takes `fd`.
  void reset(int fd = -1) noexcept {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = fd;
  }
  int get() const noexcept { return m_fd; }
  /// Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(m_fd, -1); }
  explicit operator bool() const noexcept { return m_fd >= 0; }

 private:
  int m_fd = -1;
};

}  // namespace mcdist
