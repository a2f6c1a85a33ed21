#include "receiver/io/action_runner.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace mcdist::receiver {

namespace {

/// Closes a descriptor on scope exit unless released.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

std::string errno_text(const char* call, const std::string& path, int e) {
  return fmt::format("{} {}: {}", call, path, std::strerror(e));
}

/// A unique temp name beside `target`, hidden (dot-file) so spool watchers skip it.
std::filesystem::path temp_beside(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  return target.parent_path() /
         fmt::format(".{}.mcdist-{}-{}", target.filename().string(), ::getpid(), ++counter);
}

/// link or copy `src` to `target` atomically (temp name, then rename). @return "" or the error
std::string file_op(action_kind kind, const std::string& src, const std::string& target_s) {
  const std::filesystem::path target(target_s);
  std::error_code ec;
  std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) return fmt::format("mkdir -p {}: {}", target.parent_path().string(), ec.message());
  const auto tmp = temp_beside(target);
  if (kind == action_kind::link) {
    if (::link(src.c_str(), tmp.c_str()) != 0) {
      const int e = errno;
      return errno_text("link", src + " -> " + tmp.string(), e) +
             (e == EXDEV ? " (link needs the target on the product's filesystem; use copy)" : "");
    }
  } else {
    fd_guard in{::open(src.c_str(), O_RDONLY | O_CLOEXEC)};
    if (in.fd < 0) return errno_text("open", src, errno);
    struct stat st {};
    if (::fstat(in.fd, &st) != 0) return errno_text("fstat", src, errno);
    fd_guard out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                        st.st_mode & 07777 & ~(S_ISUID | S_ISGID))};
    if (out.fd < 0) return errno_text("open", tmp.string(), errno);
    std::string err;
    off_t left = st.st_size;
    while (left > 0) {
      const ssize_t n =
          ::copy_file_range(in.fd, nullptr, out.fd, nullptr, static_cast<std::size_t>(left), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n == 0 ? "copy_file_range " + src + ": file shrank while copied"
                     : errno_text("copy_file_range", src + " -> " + tmp.string(), errno);
        break;
      }
      left -= n;
    }
    if (err.empty()) {
      const struct timespec times[2] = {{0, UTIME_NOW}, st.st_mtim};
      (void)::futimens(out.fd, times);
      if (::fsync(out.fd) != 0) err = errno_text("fsync", tmp.string(), errno);
    }
    if (!err.empty()) {
      ::unlink(tmp.c_str());
      return err;
    }
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return errno_text("rename", tmp.string() + " -> " + target.string(), e);
  }
  return {};
}

std::string session_of(const delivery_row& d) { return d.session; }

}  // namespace

struct action_runner::child {
  explicit child(boost::asio::io_context& io) : pidfd(io), out(io), timer(io), reap_timer(io) {}
  pid_t pid = -1;
  boost::asio::posix::stream_descriptor pidfd;
  boost::asio::posix::stream_descriptor out;
  boost::asio::steady_timer timer;       ///< the action's timeout
  boost::asio::steady_timer reap_timer;  ///< retries waitpid (see the exit handler)
  std::array<char, 4096> buf{};
  std::string partial;
  std::size_t lines = 0;
  bool timed_out = false;
  bool reaped = false;
  std::string name;  ///< action name, for log lines
};

action_runner::action_runner(boost::asio::io_context& io, std::vector<action_config> actions,
                             delivery_journal& journal, std::shared_ptr<spdlog::logger> log)
    : m_io(io), m_actions(std::move(actions)), m_journal(journal), m_log(std::move(log)),
      m_slots(m_actions.size()) {}

action_runner::~action_runner() {
  stop();
  m_pool.join();
  *m_alive = false;
}

std::vector<std::string> action_runner::matching(const std::string& channel,
                                                 const std::string& relpath) const {
  std::vector<std::string> out;
  for (const auto& a : m_actions) {
    if ((a.channel == "*" || a.channel == channel) && match_action(a, relpath)) {
      out.push_back(a.name);
    }
  }
  return out;
}

void action_runner::submit(std::int64_t run_id, const std::string& action,
                           const delivery_row& product, std::uint32_t attempts) {
  std::size_t i = 0;
  while (i < m_actions.size() && m_actions[i].name != action) ++i;
  if (i == m_actions.size()) {
    m_log->error("action {} on {}: no such action configured any more; run {} marked failed",
                 action, product.path, run_id);
    try {
      m_journal.run_ended(run_id, "failed", std::nullopt, "action no longer configured",
                          std::chrono::system_clock::now());
    } catch (const std::exception& e) {
      m_log->error("journal {}: {}", m_journal.file().string(), e.what());
    }
    return;
  }
  m_slots[i].queue.push_back(job{run_id, i, action, product, attempts});
  ++m_slots[i].st.queued;
  pump(i);
}

void action_runner::pump(std::size_t i) {
  auto& s = m_slots[i];
  while (!m_stopped && !m_draining && !s.queue.empty() && s.running < m_actions[i].concurrency) {
    job j = std::move(s.queue.front());
    s.queue.pop_front();
    --s.st.queued;
    ++s.running;
    ++s.st.running;
    start(std::move(j));
  }
}

void action_runner::start(job j) {
  const auto& a = m_actions[j.action];
  try {
    j.attempts = m_journal.run_started(j.run_id, std::chrono::system_clock::now());
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot record the start of action {} on {}: {}",
                 m_journal.file().string(), a.name, j.product.path, e.what());
    ++j.attempts;
  }
  placeholder_values v;
  v.path = j.product.path;
  v.relpath = j.product.relpath;
  v.channel = j.product.channel;
  v.session = session_of(j.product);
  v.sha256 = j.product.sha256;
  v.delivered = j.product.delivered_at;
  if (auto g = match_action(a, j.product.relpath)) v.groups = std::move(*g);
  if (a.kind == action_kind::exec)
    start_exec(std::move(j), v);
  else
    start_file_op(std::move(j), v);
}

void action_runner::start_file_op(job j, const placeholder_values& v) {
  const auto& a = m_actions[j.action];
  std::string target;
  try {
    target = expand_target(a.target, v);
  } catch (const template_error& e) {
    // Not worth retrying: the same product gives the same path.
    return finished(std::move(j), std::nullopt, std::string("refused: ") + e.what());
  }
  std::weak_ptr<bool> alive = m_alive;
  boost::asio::post(m_pool, [this, alive, j = std::move(j), kind = a.kind, target]() mutable {
    auto err = file_op(kind, j.product.path, target);
    if (err.empty()) err = "\n" + target;  // success: carries the target for the log line
    boost::asio::post(m_io, [this, alive, kind, j = std::move(j), err = std::move(err)]() mutable {
      if (alive.expired()) return;
      if (!err.empty() && err[0] == '\n') {
        m_log->info("action {}: {} {} -> {}", j.name,
                    kind == action_kind::link ? "linked" : "copied", j.product.path, err.substr(1));
        err.clear();
      }
      finished(std::move(j), std::nullopt, std::move(err));
    });
  });
}

void action_runner::start_exec(job j, const placeholder_values& v) {
  const auto& a = m_actions[j.action];
  std::vector<std::string> args;
  try {
    for (const auto& t : a.argv) args.push_back(expand_template(t, v, false));
  } catch (const template_error& e) {
    return finished(std::move(j), std::nullopt, std::string("refused: ") + e.what());
  }
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "MCDIST_", 7) != 0) env.emplace_back(*e);
  }
  env.push_back("MCDIST_PATH=" + v.path);
  env.push_back("MCDIST_RELPATH=" + v.relpath);
  env.push_back("MCDIST_SHA256=" + v.sha256);
  env.push_back("MCDIST_CHANNEL=" + v.channel);
  env.push_back("MCDIST_SESSION=" + v.session);
  env.push_back("MCDIST_ACTION=" + a.name);
  env.push_back("MCDIST_ATTEMPT=" + std::to_string(j.attempts));
  std::vector<char*> argv_p, env_p;
  for (auto& s : args) argv_p.push_back(s.data());
  argv_p.push_back(nullptr);
  for (auto& s : env) env_p.push_back(s.data());
  env_p.push_back(nullptr);

  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return finished(std::move(j), std::nullopt, errno_text("pipe2", "for", errno));
  }
  fd_guard rd{p[0]}, wr{p[1]};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&fa, wr.fd, 1);
  ::posix_spawn_file_actions_adddup2(&fa, wr.fd, 2);
  ::posix_spawnattr_init(&at);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, sig);
  }
  ::posix_spawnattr_setflags(
      &at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setpgroup(&at, 0);  // its own process group: a timeout kills all of it
  ::posix_spawnattr_setsigmask(&at, &none);
  ::posix_spawnattr_setsigdefault(&at, &defaults);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &fa, &at, argv_p.data(), env_p.data());
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&at);
  if (rc != 0) return finished(std::move(j), std::nullopt, errno_text("posix_spawn", args[0], rc));
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return finished(std::move(j), std::nullopt, errno_text("pidfd_open", args[0], e));
  }
  wr = {};  // only the child writes
  ::fcntl(rd.fd, F_SETFL, ::fcntl(rd.fd, F_GETFL) | O_NONBLOCK);

  auto c = std::make_shared<child>(m_io);
  c->pid = pid;
  c->name = a.name;
  c->pidfd.assign(pidfd);
  c->out.assign(rd.release());
  m_children[j.run_id] = c;
  m_log->debug("action {}: started {} (pid {}, attempt {})", a.name, args[0], pid, j.attempts);

  // Output, line by line, bounded.
  auto log_line = [this, c](std::string_view line) {
    if (c->lines++ < max_logged_lines) {
      m_log->info("action {} [{}]: {}", c->name, c->pid, line.substr(0, max_line_bytes));
    }
  };
  auto on_bytes = [c, log_line](std::string_view data) {
    c->partial.append(data);
    std::size_t nl;
    while ((nl = c->partial.find('\n')) != std::string::npos) {
      log_line(std::string_view(c->partial).substr(0, nl));
      c->partial.erase(0, nl + 1);
    }
    if (c->partial.size() > max_line_bytes) {
      log_line(c->partial);
      c->partial.clear();
    }
  };
  auto read = std::make_shared<std::function<void()>>();
  *read = [c, on_bytes, weak = std::weak_ptr<std::function<void()>>(read)] {
    c->out.async_read_some(boost::asio::buffer(c->buf),
                           [c, on_bytes, weak](const boost::system::error_code& ec, std::size_t n) {
                             if (n) on_bytes(std::string_view(c->buf.data(), n));
                             if (ec) return;
                             if (auto r = weak.lock()) (*r)();
                           });
  };
  (*read)();

  c->timer.expires_after(a.timeout);
  c->timer.async_wait([c, this](const boost::system::error_code& ec) {
    if (ec || c->reaped) return;
    c->timed_out = true;
    m_log->warn("action {}: pid {} still running at its timeout: killing its process group",
                c->name, c->pid);
    ::kill(-c->pid, SIGKILL);
  });

  std::weak_ptr<bool> alive = m_alive;
  using exit_handler = std::function<void(const boost::system::error_code&)>;
  auto on_exit = std::make_shared<exit_handler>();
  *on_exit = [this, alive, c, read, on_bytes, j = std::move(j), timeout = a.timeout,
              weak = std::weak_ptr<exit_handler>(on_exit)](
                 const boost::system::error_code& ec) mutable {
    if (ec || alive.expired()) return;
    int status = 0;
    const pid_t reaped = ::waitpid(c->pid, &status, WNOHANG);
    if (reaped == 0) {
      // The pidfd turned readable a moment before the child could be reaped (seen on a
      // loaded host, where a blocking wait took ms): never block the io thread, look again.
      if (auto self = weak.lock()) {
        c->reap_timer.expires_after(std::chrono::milliseconds(1));
        c->reap_timer.async_wait([self](const boost::system::error_code& e) { (*self)(e); });
      }
      return;
    }
    c->reaped = true;
    c->timer.cancel();
    // What the child wrote before it ended; a grandchild keeping the pipe open is cut off.
    for (;;) {
      const ssize_t n = ::read(c->out.native_handle(), c->buf.data(), c->buf.size());
      if (n <= 0) break;
      on_bytes(std::string_view(c->buf.data(), static_cast<std::size_t>(n)));
    }
    if (!c->partial.empty()) {
      if (c->lines++ < max_logged_lines) {
        m_log->info("action {} [{}]: {}", c->name, c->pid, c->partial.substr(0, max_line_bytes));
      }
      c->partial.clear();
    }
    if (c->lines > max_logged_lines) {
      m_log->info("action {} [{}]: {} more output lines not logged", c->name, c->pid,
                  c->lines - max_logged_lines);
    }
    boost::system::error_code ignored;
    c->out.close(ignored);
    c->pidfd.close(ignored);
    m_children.erase(j.run_id);
    std::optional<int> exit_status;
    std::string error;
    if (WIFEXITED(status)) {
      exit_status = WEXITSTATUS(status);
      if (*exit_status != 0) error = fmt::format("exit status {}", *exit_status);
    } else if (WIFSIGNALED(status)) {
      exit_status = -WTERMSIG(status);
      error =
          fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
    }
    if (c->timed_out) {
      error = fmt::format("timed out after {:.3g} s (process group killed)",
                          std::chrono::duration<double>(timeout).count());
    }
    finished(std::move(j), exit_status, std::move(error));
  };
  c->pidfd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                      [on_exit](const boost::system::error_code& ec) { (*on_exit)(ec); });
}

std::optional<std::size_t> action_runner::locate(job& j) const {
  if (j.action < m_actions.size() && m_actions[j.action].name == j.name) return j.action;
  for (std::size_t i = 0; i < m_actions.size(); ++i) {
    if (m_actions[i].name == j.name) {
      j.action = i;
      return i;
    }
  }
  return std::nullopt;
}

void action_runner::replace_actions(std::vector<action_config> actions) {
  std::vector<slot> slots(actions.size());
  std::vector<bool> kept(m_actions.size(), false);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    for (std::size_t k = 0; k < m_actions.size(); ++k) {
      if (kept[k] || m_actions[k].name != actions[i].name) continue;
      kept[k] = true;
      slots[i] = std::move(m_slots[k]);
      for (auto& j : slots[i].queue) j.action = i;
      break;
    }
  }
  const auto now = std::chrono::system_clock::now();
  for (std::size_t k = 0; k < m_actions.size(); ++k) {
    if (kept[k]) continue;
    m_orphans_running += m_slots[k].running;
    for (const auto& j : m_slots[k].queue) {
      try {
        m_journal.run_ended(j.run_id, "failed", std::nullopt, "action no longer configured", now);
      } catch (const std::exception& e) {
        m_log->error("journal {}: {}", m_journal.file().string(), e.what());
      }
    }
    if (!m_slots[k].queue.empty() || m_slots[k].running > 0) {
      m_log->warn(
          "action {} removed by the reload: {} queued run(s) marked failed, {} running "
          "attempt(s) left to finish",
          m_actions[k].name, m_slots[k].queue.size(), m_slots[k].running);
    }
  }
  m_actions = std::move(actions);
  m_slots = std::move(slots);
  for (std::size_t i = 0; i < m_actions.size(); ++i) pump(i);
}

void action_runner::finished(job j, std::optional<int> exit_status, std::string error) {
  const auto index = locate(j);
  if (!index) {
    // Its action went at a reload: journal how the attempt ended, no retry.
    --m_orphans_running;
    const std::string state = error.empty() ? "done" : "failed";
    m_log->info("action {} (removed by a reload) on {}: {}{}", j.name, j.product.path, state,
                error.empty() ? "" : ": " + error);
    try {
      m_journal.run_ended(j.run_id, state, exit_status, error, std::chrono::system_clock::now());
    } catch (const std::exception& e) {
      m_log->error("journal {}: {}", m_journal.file().string(), e.what());
    }
    if (m_draining && running() == 0) call_drained();
    return;
  }
  auto& s = m_slots[*index];
  const auto& a = m_actions[*index];
  --s.running;
  --s.st.running;
  const auto now = std::chrono::system_clock::now();
  std::string state;
  if (error.empty()) {
    state = "done";
    ++s.st.done;
    m_log->info("action {} on {}: done (attempt {})", a.name, j.product.path, j.attempts);
  } else if (j.attempts <= a.retries && !m_stopped) {
    state = "pending";
    ++s.st.retried;
    auto delay = a.retry_delay;
    for (std::uint32_t k = 1; k < j.attempts && delay < max_retry_delay; ++k) delay *= 2;
    delay = std::min<std::chrono::nanoseconds>(delay, max_retry_delay);
    m_log->warn("action {} on {}: attempt {} failed: {}; retrying in {:.3g} s", a.name,
                j.product.path, j.attempts, error, std::chrono::duration<double>(delay).count());
    auto t = std::make_shared<boost::asio::steady_timer>(m_io, delay);
    std::weak_ptr<bool> alive = m_alive;
    t->async_wait([this, t, alive, j](const boost::system::error_code& ec) mutable {
      if (ec || alive.expired() || m_stopped) return;
      const auto i = locate(j);
      if (!i) {
        try {
          m_journal.run_ended(j.run_id, "failed", std::nullopt, "action no longer configured",
                              std::chrono::system_clock::now());
        } catch (const std::exception& e) {
          m_log->error("journal {}: {}", m_journal.file().string(), e.what());
        }
        return;
      }
      m_slots[*i].queue.push_back(j);
      ++m_slots[*i].st.queued;
      pump(*i);
    });
  } else {
    state = "failed";
    ++s.st.failed;
    m_log->error("action {} on {}: failed after {} attempt{}: {}", a.name, j.product.path,
                 j.attempts, j.attempts == 1 ? "" : "s", error);
  }
  try {
    m_journal.run_ended(j.run_id, state, exit_status, error, now);
  } catch (const std::exception& e) {
    m_log->error("journal {}: cannot record the end of action {} on {}: {}",
                 m_journal.file().string(), a.name, j.product.path, e.what());
  }
  pump(*index);
  if (m_draining && running() == 0) call_drained();
}

std::uint32_t action_runner::running() const noexcept {
  std::uint32_t n = m_orphans_running;
  for (const auto& s : m_slots) n += s.running;
  return n;
}

void action_runner::drain(std::chrono::nanoseconds grace, std::function<void()> done) {
  m_draining = true;
  m_drained = std::move(done);
  if (running() == 0) {
    boost::asio::post(m_io, [this, alive = std::weak_ptr<bool>(m_alive)] {
      if (!alive.expired()) call_drained();
    });
    return;
  }
  m_log->info("waiting up to {:.3g} s for {} running action attempt(s) to finish",
              std::chrono::duration<double>(grace).count(), running());
  m_drain_timer.expires_after(grace);
  m_drain_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (running() > 0) {
      m_log->warn(
          "{} action attempt(s) still running at shutdown: killed, they run again at the "
          "next start",
          running());
    }
    call_drained();
  });
}

void action_runner::call_drained() {
  if (!m_drained) return;
  auto done = std::move(m_drained);
  m_drained = nullptr;
  m_drain_timer.cancel();
  done();
}

void action_runner::stop() {
  if (m_stopped) return;
  m_stopped = true;
  for (auto& [id, c] : m_children) {
    // Their runs stay 'running' in the journal: the next start runs them again.
    ::kill(-c->pid, SIGKILL);
    ::waitpid(c->pid, nullptr, 0);
    c->reaped = true;
    boost::system::error_code ignored;
    c->timer.cancel();
    c->reap_timer.cancel();
    c->out.close(ignored);
    c->pidfd.close(ignored);
  }
  m_children.clear();
}

std::vector<std::pair<std::string, action_stats>> action_runner::stats() const {
  std::vector<std::pair<std::string, action_stats>> out;
  for (std::size_t i = 0; i < m_actions.size(); ++i)
    out.emplace_back(m_actions[i].name, m_slots[i].st);
  return out;
}

}  // namespace mcdist::receiver
