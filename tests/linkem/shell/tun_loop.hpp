// The forwarding thread: reads frames from every host's TUN device, drives the pure
// forwarder with CLOCK_MONOTONIC, and writes what it releases back to TUN devices.
//
// Timer strategy: one epoll set holds all TUN descriptors and a stop eventfd; the wait
// timeout is the forwarder's next due time with nanosecond resolution (epoll_pwait2),
// and the thread's timer slack is set to 1 µs (PR_SET_TIMERSLACK) instead of the
// default 50 µs, so releases are late by the wake-up latency only (tens of µs: < 0.1 %
// of a 70 ms delay). Reads are non-blocking, at most k_read_budget per device per wake,
// so one busy host cannot starve the others or the release of due frames. With ingress
// taps a frame enters its link at the time its host queued it, not when it was read, so a
// held-up thread does not turn what queued meanwhile into a burst.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tests/linkem/core/forwarder.hpp"
#include "tests/linkem/core/ingress_stamper.hpp"
#include "tests/linkem/shell/ingress_tap.hpp"
#include "tests/linkem/shell/system.hpp"

namespace mcdist::linkem {

class tun_loop final : public packet_sink {
 public:
  /// Frames read from one device before the loop releases due frames and polls again.
  static constexpr int k_read_budget = 64;

  /// @param config forwarder configuration (one host per descriptor)
  /// @param tun_fds non-blocking TUN descriptors, index = host
  /// @param taps one ingress tap per host (index = host), each frame then entering its link
  ///        at the time its host handed it to the device (ingress_tap.hpp); empty: at the
  ///        time the thread read it
  tun_loop(const forwarder_config& config, std::vector<unique_fd> tun_fds,
           std::vector<std::unique_ptr<ingress_tap>> taps = {});

  /// Runs until stop() is called. Forwarding thread.
  /// @param realtime_priority if > 0, the thread switches itself to SCHED_FIFO with this
  ///        priority (1-99) so that other processes on the machine (the emulated hosts'
  ///        programs, a compiler) cannot delay packet releases; like netem, which runs in
  ///        softirq context, the emulator then only yields to the kernel. Falls back to
  ///        normal scheduling with a warning if not permitted.
  void run(int realtime_priority = 0);
  /// Asks run() to return; callable from any thread.
  void stop() noexcept;

  /// The engine; counters may be read from any thread, the rest only from the
  /// forwarding thread or after run() returned.
  [[nodiscard]] const forwarder& engine() const noexcept { return m_forwarder; }

  bool write_frame(std::size_t host, std::span<const std::span<const std::byte>> parts) override;

  /// Read errors other than EAGAIN (should stay 0).
  [[nodiscard]] std::uint64_t read_errors() const noexcept { return m_read_errors.value(); }

  /// True when frames are dated by ingress taps.
  [[nodiscard]] bool tapped() const noexcept { return !m_taps.empty(); }
  /// Host `host`'s ingress counters (all zero without taps); any thread.
  [[nodiscard]] const ingress_counters& ingress(std::size_t host) const noexcept {
    return m_stampers[host].counters();
  }
  /// Records host `host`'s tap socket lost (buffer full); after run() returned.
  [[nodiscard]] std::uint64_t tap_kernel_drops(std::size_t host);

 private:
  void read_device(std::size_t host);

  std::vector<unique_fd> m_fds;
  std::vector<std::unique_ptr<ingress_tap>> m_taps;
  std::vector<ingress_stamper> m_stampers;
  forwarder m_forwarder;
  unique_fd m_epoll;
  unique_fd m_stop_event;
  buffer_handle m_read_buffer;
  std::vector<std::byte> m_scratch;  ///< read target when the pool is exhausted
  counter m_read_errors;
};

}  // namespace mcdist::linkem
