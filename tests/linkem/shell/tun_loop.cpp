#include "tests/linkem/shell/tun_loop.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace mcdist::linkem {
namespace {

/// Epoll user data of the stop eventfd (host indexes are below k_max_hosts).
constexpr std::uint64_t k_stop_token = ~0ULL;

/// Timer slack of the forwarding thread, ns. The kernel may delay a timed wake-up by up
/// to the slack; 1 ns disables the coalescing (the default is 50 µs).
constexpr unsigned long k_timer_slack_ns = 1;

}  // namespace

tun_loop::tun_loop(const forwarder_config& config, std::vector<unique_fd> tun_fds,
                   std::vector<std::unique_ptr<ingress_tap>> taps)
    : m_fds(std::move(tun_fds)), m_taps(std::move(taps)), m_stampers(m_fds.size()),
      m_forwarder(config, *this), m_epoll(::epoll_create1(EPOLL_CLOEXEC)),
      m_stop_event(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      m_scratch(packet_pool::k_class_capacity.back()) {
  if (!m_epoll || !m_stop_event) {
    throw setup_error(exit_runtime, errno_message("epoll/eventfd"));
  }
  for (std::size_t i = 0; i < m_fds.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(m_epoll.get(), EPOLL_CTL_ADD, m_fds[i].get(), &ev) != 0) {
      throw setup_error(exit_runtime, errno_message("epoll_ctl TUN"));
    }
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = k_stop_token;
  if (::epoll_ctl(m_epoll.get(), EPOLL_CTL_ADD, m_stop_event.get(), &ev) != 0) {
    throw setup_error(exit_runtime, errno_message("epoll_ctl eventfd"));
  }
}

void tun_loop::stop() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(m_stop_event.get(), &one, sizeof one);
}

bool tun_loop::write_frame(std::size_t host, std::span<const std::span<const std::byte>> parts) {
  std::array<iovec, 4> iov{};
  std::size_t n = 0;
  for (const auto& p : parts) {
    iov[n].iov_base = const_cast<std::byte*>(p.data());
    iov[n].iov_len = p.size();
    ++n;
  }
  for (;;) {
    const ssize_t r = ::writev(m_fds[host].get(), iov.data(), static_cast<int>(n));
    if (r >= 0) {
      return true;
    }
    if (errno == EINTR) {
      continue;
    }
    static std::uint64_t logged = 0;
    if (logged++ < 10) {  // rate-limited: a broken frame type would otherwise flood
      spdlog::warn("TUN write to host {} failed: {}", host, std::strerror(errno));
    }
    return false;
  }
}

void tun_loop::read_device(std::size_t host) {
  const int fd = m_fds[host].get();
  for (int i = 0; i < k_read_budget; ++i) {
    if (!m_read_buffer) {
      m_read_buffer = m_forwarder.acquire_read_buffer();
    }
    if (!m_read_buffer) {
      // Memory cap reached: drain the device anyway so the host's kernel is not stuck.
      const ssize_t r = ::read(fd, m_scratch.data(), m_scratch.size());
      if (r < 0) {
        return;
      }
      m_forwarder.count_exhausted(host);
      continue;
    }
    const ssize_t r = ::read(fd, m_read_buffer->data(), m_read_buffer->capacity());
    if (r < 0) {
      if (errno != EAGAIN && errno != EINTR) {
        m_read_errors.add();
      }
      return;
    }
    m_read_buffer->length = static_cast<std::size_t>(r);
    const auto now = monotonic_now();
    if (m_taps.empty() || m_read_buffer->length < k_vnet_header_size) {
      m_forwarder.on_frame(host, m_read_buffer, now);
      continue;
    }
    // The frame's record was queued on the tap before the frame reached the device; one
    // drain per frame that finds none queued keeps the syscalls at about one per wake.
    const std::span<const std::byte> ip(m_read_buffer->data() + k_vnet_header_size,
                                        m_read_buffer->length - k_vnet_header_size);
    auto& stamper = m_stampers[host];
    auto tapped = stamper.take(ip, now.count());
    if (!tapped && m_taps[host]->drain(stamper) > 0) {
      tapped = stamper.take(ip, now.count());
    }
    m_forwarder.on_frame(host, m_read_buffer,
                         std::chrono::nanoseconds(stamper.settle(tapped, now.count())));
  }
}

std::uint64_t tun_loop::tap_kernel_drops(std::size_t host) {
  return m_taps.empty() ? 0 : m_taps[host]->kernel_drops();
}

void tun_loop::run(int realtime_priority) {
  ::prctl(PR_SET_TIMERSLACK, k_timer_slack_ns, 0, 0, 0);
  if (realtime_priority > 0) {
    sched_param param{};
    param.sched_priority = realtime_priority;
    if (const int rc = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &param); rc != 0) {
      spdlog::warn(
          "cannot run the forwarding thread with SCHED_FIFO priority {}: {}; "
          "delays may stretch under CPU load",
          realtime_priority, std::strerror(rc));
    } else {
      spdlog::debug("forwarding thread runs SCHED_FIFO priority {}", realtime_priority);
    }
  }
  std::array<epoll_event, 64> events{};
  for (;;) {
    const auto now = monotonic_now();
    m_forwarder.run_due(now);
    const auto due = m_forwarder.next_due();
    timespec timeout{};
    timespec* timeout_ptr = nullptr;
    if (due) {
      const auto wait = std::max(std::chrono::nanoseconds(0), *due - monotonic_now());
      timeout.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000);
      timeout.tv_nsec = static_cast<long>(wait.count() % 1'000'000'000);
      timeout_ptr = &timeout;
    }
    const int n = ::epoll_pwait2(m_epoll.get(), events.data(), static_cast<int>(events.size()),
                                 timeout_ptr, nullptr);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw setup_error(exit_runtime, errno_message("epoll_pwait2"));
    }
    for (int i = 0; i < n; ++i) {
      if (events[static_cast<std::size_t>(i)].data.u64 == k_stop_token) {
        return;
      }
      read_device(static_cast<std::size_t>(events[static_cast<std::size_t>(i)].data.u64));
    }
  }
}

}  // namespace mcdist::linkem
