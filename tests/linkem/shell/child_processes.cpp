#include "tests/linkem/shell/child_processes.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace mcdist::linkem {
namespace {

/// Bytes read from a child's pipe per call; lines longer than this are split.
constexpr std::size_t k_relay_chunk = 16384;

/// An incomplete line is written out once it grows past this, so a child that never
/// writes a newline cannot grow our memory without bound.
constexpr std::size_t k_max_partial_line = 65536;

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void emit_line(const std::string& label, int fd, const std::string& line) {
  std::string out;
  out.reserve(label.size() + line.size() + 4);
  out += '[';
  out += label;
  out += "] ";
  out += line;
  if (out.empty() || out.back() != '\n') {
    out += '\n';
  }
  write_all(fd, out.data(), out.size());
}

}  // namespace

std::string child_exit::describe() const {
  if (exited) {
    return "exit status " + std::to_string(status);
  }
  const char* name = ::sigabbrev_np(status);
  return std::string("killed by SIG") + (name != nullptr ? name : std::to_string(status).c_str());
}

child_process start_child(const child_spec& spec) {
  child_process child;
  child.spec = spec;

  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  unique_fd log_fd;
  if (spec.log_file) {
    log_fd =
        unique_fd(::open(spec.log_file->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!log_fd) {
      throw setup_error(exit_runtime, errno_message("cannot open log file " + *spec.log_file));
    }
  } else if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw setup_error(exit_runtime, errno_message("pipe"));
  }
  unique_fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  // Everything the child needs is prepared before fork: after fork in a multi-threaded
  // process only async-signal-safe calls are allowed.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    env_strings.emplace_back(*e);
  }
  env_strings.insert(env_strings.end(), spec.env.begin(), spec.env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) {
    envp.push_back(s.data());
  }
  envp.push_back(nullptr);
  std::string sh = "/bin/sh";
  std::string dash_c = "-c";
  std::string command = spec.command;
  std::array<char*, 4> argv = {sh.data(), dash_c.data(), command.data(), nullptr};
  std::string sysfs_name = spec.netns_name;
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    throw setup_error(exit_runtime, errno_message("fork"));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) {
      ::_exit(127);  // the emulator died between fork and prctl
    }
    if (::setns(spec.netns_fd, CLONE_NEWNET) != 0) {
      const char msg[] = "mcdist-linkem: setns failed in child\n";
      write_all(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    // Private mount namespace with this network namespace's /sys, like ip-netns(8), so
    // tools reading /sys/class/net see the host's own devices. Best effort.
    if (::unshare(CLONE_NEWNS) == 0 && ::mount("", "/", "none", MS_SLAVE | MS_REC, nullptr) == 0 &&
        ::umount2("/sys", MNT_DETACH) == 0) {
      ::mount(sysfs_name.c_str(), "/sys", "sysfs", 0, nullptr);
    }
    if (devnull) {
      ::dup2(devnull.get(), 0);
    }
    if (log_fd) {
      ::dup2(log_fd.get(), 1);
      ::dup2(log_fd.get(), 2);
    } else {
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (const int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) {
      ::sigaction(sig, &dfl, nullptr);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "mcdist-linkem: cannot exec /bin/sh\n";
    write_all(2, msg, sizeof msg - 1);
    ::_exit(127);
  }

  child.pid = pid;
  // Also set the group from the parent side, so signal_child works even if the child
  // has not run yet (setpgid from both sides is the standard race-free idiom).
  ::setpgid(pid, pid);
  child.pidfd = unique_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!child.pidfd) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw setup_error(exit_runtime, errno_message("pidfd_open (needs Linux >= 5.3)"));
  }
  if (!spec.log_file) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    child.out = unique_fd(out_pipe[0]);
    child.err = unique_fd(err_pipe[0]);
    ::fcntl(child.out.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(child.err.get(), F_SETFL, O_NONBLOCK);
  }
  return child;
}

bool relay_output(child_process& child, bool fd_is_out, bool flush_all) {
  unique_fd& fd = fd_is_out ? child.out : child.err;
  std::string& partial = fd_is_out ? child.out_partial : child.err_partial;
  const int target = fd_is_out ? 1 : 2;
  if (!fd) {
    return false;
  }
  char buf[k_relay_chunk];
  bool open = true;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;  // EAGAIN: nothing more now
    }
    if (n == 0) {
      open = false;
      break;
    }
    partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl = partial.find('\n'); nl != std::string::npos;
         nl = partial.find('\n', start)) {
      emit_line(child.spec.label, target, partial.substr(start, nl - start + 1));
      start = nl + 1;
    }
    partial.erase(0, start);
    if (partial.size() > k_max_partial_line) {
      emit_line(child.spec.label, target, partial);
      partial.clear();
    }
  }
  if ((!open || flush_all) && !partial.empty()) {
    emit_line(child.spec.label, target, partial);
    partial.clear();
  }
  if (!open) {
    fd.reset();
  }
  return open;
}

bool reap_child(child_process& child) {
  if (child.exit) {
    return false;
  }
  int status = 0;
  const pid_t r = ::waitpid(child.pid, &status, WNOHANG);
  if (r != child.pid) {
    return false;
  }
  child_exit e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.status = WTERMSIG(status);
  }
  child.exit = e;
  return true;
}

void signal_child(const child_process& child, int sig) noexcept {
  if (child.pid > 0) {
    // The process group first (shell and its children); the pid itself in case it
    // changed its group.
    ::kill(-child.pid, sig);
    if (!child.exit) {
      ::kill(child.pid, sig);
    }
  }
}

}  // namespace mcdist::linkem
