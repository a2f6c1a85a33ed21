#include "tests/linkem/shell/emulator.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "tests/linkem/core/stats_report.hpp"
#include "tests/linkem/core/units.hpp"
#include "tests/linkem/shell/child_processes.hpp"
#include "tests/linkem/shell/netns.hpp"
#include "tests/linkem/shell/tun_device.hpp"
#include "tests/linkem/shell/tun_loop.hpp"

namespace mcdist::linkem {
namespace {

/// What a control-loop epoll event is about; the low 32 bits carry a child index.
enum class token_kind : std::uint64_t {
  signal = 1,
  forwarder_done,
  duration,
  timeout,
  stats,
  child_exit,
  child_out,
  child_err,
};

std::uint64_t make_token(token_kind kind, std::size_t index = 0) {
  return (static_cast<std::uint64_t>(kind) << 32U) | index;
}

void epoll_add(int epfd, int fd, std::uint64_t token) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw setup_error(exit_runtime, errno_message("epoll_ctl"));
  }
}

unique_fd make_timer(std::chrono::nanoseconds after,
                     std::optional<std::chrono::nanoseconds> every) {
  unique_fd fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!fd) {
    throw setup_error(exit_runtime, errno_message("timerfd_create"));
  }
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(after.count() / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(after.count() % 1'000'000'000);
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) {
    spec.it_value.tv_nsec = 1;  // zero would disarm
  }
  if (every) {
    spec.it_interval.tv_sec = static_cast<time_t>(every->count() / 1'000'000'000);
    spec.it_interval.tv_nsec = static_cast<long>(every->count() % 1'000'000'000);
  }
  ::timerfd_settime(fd.get(), 0, &spec, nullptr);
  return fd;
}

/// A host's namespace and device as created at set-up.
struct host_resources {
  std::string name;     // "h0"
  std::string address;  // dotted quad
  std::unique_ptr<named_netns> ns;
};

std::vector<std::pair<std::string, std::string>> environment(
    const run_options& options, const std::vector<host_resources>& hosts) {
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back("MLE_RUN_ID", options.run_id);
  env.emplace_back("MLE_HOSTS", std::to_string(options.hosts));
  env.emplace_back("MLE_PREFIX", format_ipv4(options.prefix.network) + "/" +
                                     std::to_string(options.prefix.length));
  env.emplace_back("MLE_IFNAME", options.ifname);
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string key = "MLE_H" + std::to_string(i);
    env.emplace_back(key + "_ADDR", hosts[i].address);
    env.emplace_back(key + "_NETNS", hosts[i].ns->name());
  }
  return env;
}

void write_env_file(const std::string& path, const std::string& text) {
  // Written to a temporary name and renamed, so a script waiting for the file never
  // reads it half-written.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) {
      throw setup_error(exit_runtime, "cannot write env file " + tmp);
    }
    f << text;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw setup_error(exit_runtime, errno_message("rename " + tmp));
  }
}

std::string compact(const link_params& p) {
  std::string s = p.describe();
  for (char& c : s) {
    if (c == ' ') {
      c = ',';
    }
  }
  return s;
}

std::string progress_line(const forwarder& fwd) {
  std::uint64_t in = 0;
  std::uint64_t out = 0;
  std::uint64_t lost = 0;
  std::uint64_t queue = 0;
  for (std::size_t h = 0; h < fwd.host_count(); ++h) {
    in += fwd.counters(h, direction::up).get(link_counter::packets_in);
    for (const auto dir : {direction::up, direction::down}) {
      lost += fwd.counters(h, dir).get(link_counter::dropped_loss);
      queue += fwd.counters(h, dir).get(link_counter::dropped_queue);
    }
    out += fwd.counters(h, direction::down).get(link_counter::delivered);
  }
  return "datagrams in " + std::to_string(in) + ", delivered " + std::to_string(out) + ", lost " +
         std::to_string(lost) + ", queue drops " + std::to_string(queue) + ", memory " +
         std::to_string(fwd.pool().in_use_bytes() / 1000000) + " MB";
}

}  // namespace

std::string netns_name(const run_options& options, std::size_t host) {
  return options.netns_prefix + "-" + options.run_id + "-" + host_name(host);
}

int run_emulator(const run_options& options) {
  const auto started = monotonic_now();
  // A script waiting for the env file must not pick up one left by an earlier run.
  if (options.env_file) {
    ::unlink(options.env_file->c_str());
  }
  check_environment();
  const run_lock lock(options.run_id);
  // Removed again on every exit path: the addresses in it are gone with the namespaces.
  struct env_file_remover {
    const std::optional<std::string>& path;
    ~env_file_remover() {
      if (path) {
        ::unlink(path->c_str());
      }
    }
  } remove_env_file{options.env_file};

  // --- namespaces and devices ---------------------------------------------------------
  std::vector<host_resources> hosts;
  std::vector<unique_fd> tun_fds;
  std::vector<std::unique_ptr<ingress_tap>> taps;
  tun_info offload{};
  for (std::size_t i = 0; i < options.hosts; ++i) {
    host_resources h;
    h.name = host_name(i);
    h.address = format_ipv4(options.prefix.host_address(i));
    h.ns = std::make_unique<named_netns>(netns_name(options, i));
    tun_options topt;
    topt.ifname = options.ifname;
    topt.address = options.prefix.host_address(i);
    topt.prefix_len = options.prefix.length;
    topt.mtu = options.mtu;
    topt.txqueuelen = options.txqueuelen;
    topt.offload = options.offload;
    tun_fds.push_back(create_tun(*h.ns, topt, offload));
    if (options.ingress_tap && (i == 0 || !taps.empty())) {
      try {
        taps.push_back(std::make_unique<ingress_tap>(*h.ns, options.ifname));
      } catch (const setup_error& e) {
        spdlog::warn("{}; frames are dated when read (--ingress-stamp read)", e.what());
        taps.clear();
      }
    }
    hosts.push_back(std::move(h));
  }

  forwarder_config fcfg;
  fcfg.network = options.prefix.network;
  fcfg.netmask = options.prefix.netmask();
  for (std::size_t i = 0; i < options.hosts; ++i) {
    fcfg.addresses.push_back(options.prefix.host_address(i));
  }
  fcfg.up = options.up;
  fcfg.down = options.down;
  fcfg.flood_multicast = options.flood_multicast;
  fcfg.seed = options.seed;
  fcfg.max_buffer_bytes = options.max_memory;
  const bool taps_opened = !taps.empty();
  tun_loop loop(fcfg, std::move(tun_fds), std::move(taps));

  // --- forwarding thread (running before anything is announced as ready) ----------------
  unique_fd forwarder_done(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  std::string forwarder_error;
  std::thread forwarding([&] {
    try {
      loop.run(options.realtime_priority);
    } catch (const std::exception& e) {
      forwarder_error = e.what();
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(forwarder_done.get(), &one, sizeof one);
  });
  // Whatever happens below, stop and join the thread before the loop is destroyed.
  struct joiner {
    tun_loop& loop;
    std::thread& thread;
    ~joiner() {
      if (thread.joinable()) {
        loop.stop();
        thread.join();
      }
    }
  } join_guard{loop, forwarding};

  // --- tell the operator and scripts what exists ---------------------------------------
  std::string offload_text = offload.csum_offload ? "csum" : "none";
  offload_text += offload.tso ? "+tso" : "";
  offload_text += offload.uso ? "+uso" : "";
  std::printf(
      "linkem: run-id=%s hosts=%zu prefix=%s/%u dev=%s seed=%llu offload=%s "
      "multicast=%s ingress=%s\n",
      options.run_id.c_str(), options.hosts, format_ipv4(options.prefix.network).c_str(),
      options.prefix.length, options.ifname.c_str(), static_cast<unsigned long long>(options.seed),
      offload_text.c_str(), options.flood_multicast ? "flood" : "igmp-snooping",
      taps_opened ? "tap" : "read");
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    std::printf("linkem: host=%s netns=%s addr=%s up=%s down=%s\n", hosts[i].name.c_str(),
                hosts[i].ns->name().c_str(), hosts[i].address.c_str(),
                compact(options.up[i]).c_str(), compact(options.down[i]).c_str());
  }
  const auto env = environment(options, hosts);
  std::string env_text;
  for (const auto& [k, v] : env) {
    env_text += k + "=" + v + "\n";
  }
  env_text += "MLE_READY=1\n";
  if (options.env_file) {
    write_env_file(*options.env_file, env_text);
  }
  if (options.print_env) {
    std::fputs(env_text.c_str(), stdout);
  }
  std::printf("linkem: ready\n");
  std::fflush(stdout);

  // --- control loop set-up ----------------------------------------------------------------
  unique_fd epfd(::epoll_create1(EPOLL_CLOEXEC));
  sigset_t sigs;
  ::sigemptyset(&sigs);
  for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    ::sigaddset(&sigs, s);
  }
  unique_fd sigfd(::signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!epfd || !sigfd) {
    throw setup_error(exit_runtime, errno_message("epoll/signalfd"));
  }
  epoll_add(epfd.get(), sigfd.get(), make_token(token_kind::signal));
  epoll_add(epfd.get(), forwarder_done.get(), make_token(token_kind::forwarder_done));
  unique_fd duration_timer;
  unique_fd timeout_timer;
  unique_fd stats_timer;
  if (options.duration) {
    duration_timer = make_timer(*options.duration, std::nullopt);
    epoll_add(epfd.get(), duration_timer.get(), make_token(token_kind::duration));
  }
  if (options.timeout) {
    timeout_timer = make_timer(*options.timeout, std::nullopt);
    epoll_add(epfd.get(), timeout_timer.get(), make_token(token_kind::timeout));
  }
  if (options.stats_interval) {
    stats_timer = make_timer(*options.stats_interval, *options.stats_interval);
    epoll_add(epfd.get(), stats_timer.get(), make_token(token_kind::stats));
  }

  // --- children -------------------------------------------------------------------------------
  std::vector<child_process> children;
  std::vector<std::size_t> per_host_count(options.hosts, 0);
  if (options.log_dir) {
    ::mkdir(options.log_dir->c_str(), 0755);
  }
  for (const auto& run : options.runs) {
    child_spec spec;
    const std::size_t nth = ++per_host_count[run.host];
    spec.label = host_name(run.host) + (nth > 1 ? "#" + std::to_string(nth) : "");
    spec.command = run.command;
    spec.netns_fd = hosts[run.host].ns->fd();
    spec.netns_name = hosts[run.host].ns->name();
    spec.main = options.main_host[run.host];
    for (const auto& [k, v] : env) {
      spec.env.push_back(k + "=" + v);
    }
    spec.env.push_back("MLE_HOST=" + host_name(run.host));
    spec.env.push_back("MLE_INDEX=" + std::to_string(run.host));
    spec.env.push_back("MLE_ADDR=" + hosts[run.host].address);
    spec.env.push_back("MLE_NETNS=" + hosts[run.host].ns->name());
    if (options.log_dir) {
      spec.log_file = *options.log_dir + "/" + host_name(run.host) +
                      (nth > 1 ? "-" + std::to_string(nth) : "") + ".log";
    }
    children.push_back(start_child(spec));
    const std::size_t idx = children.size() - 1;
    epoll_add(epfd.get(), children[idx].pidfd.get(), make_token(token_kind::child_exit, idx));
    if (children[idx].out) {
      epoll_add(epfd.get(), children[idx].out.get(), make_token(token_kind::child_out, idx));
      epoll_add(epfd.get(), children[idx].err.get(), make_token(token_kind::child_err, idx));
    }
    spdlog::info("started {} (pid {}{}): {}", spec.label, children[idx].pid,
                 spec.main ? ", main" : "", spec.command);
  }
  std::size_t mains_left = 0;
  for (const auto& c : children) {
    mains_left += c.spec.main ? 1 : 0;
  }

  // --- control loop -------------------------------------------------------------------------
  int result = exit_ok;
  bool running = true;
  std::array<epoll_event, 32> events{};
  while (running) {
    const int n = ::epoll_wait(epfd.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw setup_error(exit_runtime, errno_message("epoll_wait"));
    }
    for (int i = 0; i < n && running; ++i) {
      const std::uint64_t token = events[static_cast<std::size_t>(i)].data.u64;
      const auto kind = static_cast<token_kind>(token >> 32U);
      const std::size_t idx = token & 0xFFFFFFFFU;
      switch (kind) {
        case token_kind::signal: {
          signalfd_siginfo si{};
          while (::read(sigfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            const int signo = static_cast<int>(si.ssi_signo);
            if (signo == SIGCHLD) {
              continue;  // exits are seen through the pidfds
            }
            spdlog::info("received SIG{}, shutting down", ::sigabbrev_np(signo));
            running = false;
            if (mains_left > 0) {
              result = 128 + signo;
            }
          }
          break;
        }
        case token_kind::forwarder_done:
          spdlog::error("forwarding stopped: {}", forwarder_error);
          result = exit_runtime;
          running = false;
          break;
        case token_kind::duration:
          spdlog::info("--duration reached");
          running = false;
          break;
        case token_kind::timeout:
          spdlog::error("--timeout reached with {} main command(s) still running", mains_left);
          result = exit_command_failed;
          running = false;
          break;
        case token_kind::stats: {
          std::uint64_t expirations = 0;
          [[maybe_unused]] const auto r =
              ::read(stats_timer.get(), &expirations, sizeof expirations);
          spdlog::info("{}", progress_line(loop.engine()));
          break;
        }
        case token_kind::child_out:
        case token_kind::child_err: {
          const bool is_out = kind == token_kind::child_out;
          const int fd = is_out ? children[idx].out.get() : children[idx].err.get();
          if (!relay_output(children[idx], is_out)) {
            ::epoll_ctl(epfd.get(), EPOLL_CTL_DEL, fd, nullptr);
          }
          break;
        }
        case token_kind::child_exit: {
          child_process& c = children[idx];
          ::epoll_ctl(epfd.get(), EPOLL_CTL_DEL, c.pidfd.get(), nullptr);
          if (!reap_child(c)) {
            break;
          }
          // Relay what the child wrote before it exited.
          relay_output(c, true);
          relay_output(c, false);
          const child_exit e = *c.exit;
          if (c.spec.main) {
            --mains_left;
            if (e.success()) {
              spdlog::info("{} finished ({})", c.spec.label, e.describe());
            } else {
              spdlog::error("main command {} failed ({}): {}", c.spec.label, e.describe(),
                            c.spec.command);
              result = exit_command_failed;
              running = false;
            }
            if (mains_left == 0) {
              running = false;
            }
          } else {
            spdlog::log(e.success() ? spdlog::level::info : spdlog::level::warn, "{} exited ({})",
                        c.spec.label, e.describe());
          }
          break;
        }
      }
    }
  }

  // --- shutdown -------------------------------------------------------------------------------
  bool any_alive = false;
  for (auto& c : children) {
    if (!c.exit && !reap_child(c)) {
      signal_child(c, SIGTERM);
      any_alive = true;
    }
  }
  if (any_alive) {
    const auto deadline = monotonic_now() + options.kill_timeout;
    for (auto& c : children) {
      while (!c.exit) {
        if (reap_child(c)) {
          break;
        }
        const auto left = deadline - monotonic_now();
        if (left <= std::chrono::nanoseconds(0)) {
          spdlog::warn("{} did not stop within --kill-timeout, sending SIGKILL", c.spec.label);
          signal_child(c, SIGKILL);
          ::waitpid(c.pid, nullptr, 0);
          c.exit = child_exit{false, SIGKILL};
          break;
        }
        // Wait on the pidfd: readable when the child exits.
        pollfd pfd{c.pidfd.get(), POLLIN, 0};
        ::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(1, left.count() / 1'000'000)));
      }
      relay_output(c, true, true);
      relay_output(c, false, true);
    }
  }
  // Kill leftovers of process groups whose leader already exited (daemons).
  for (auto& c : children) {
    signal_child(c, SIGKILL);
  }

  loop.stop();
  forwarding.join();
  run_stats stats;
  std::vector<std::string> names;
  std::vector<std::string> ns_names;
  std::vector<std::string> addrs;
  for (const auto& h : hosts) {
    names.push_back(h.name);
    ns_names.push_back(h.ns->name());
    addrs.push_back(h.address);
  }
  stats = snapshot_stats(loop.engine(), names, ns_names, addrs, true);
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    stats.hosts[i].tun_tx_dropped = read_tx_dropped(*hosts[i].ns, options.ifname);
    if (loop.tapped()) {
      const auto& c = loop.ingress(i);
      stats.hosts[i].ingress_stamps = host_stats::ingress{
          c.tapped.value(), c.read_stamped.value(), c.skipped.value(),
          c.overflowed.value() + loop.tap_kernel_drops(i), c.max_wait_us.value()};
    }
  }
  stats.elapsed_seconds = std::chrono::duration<double>(monotonic_now() - started).count();
  if (!options.quiet) {
    std::printf("linkem: statistics\n%s", format_stats_table(stats).c_str());
  }
  if (options.stats_json) {
    std::ofstream f(*options.stats_json, std::ios::trunc);
    f << format_stats_json(stats) << "\n";
    if (!f) {
      spdlog::error("cannot write {}", *options.stats_json);
      result = result == exit_ok ? exit_runtime : result;
    }
  }
  std::fflush(stdout);
  // hosts (namespaces) and loop (TUN fds) are released by their destructors.
  return result;
}

}  // namespace mcdist::linkem
