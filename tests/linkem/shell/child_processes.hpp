// Commands run inside the emulated hosts' namespaces: started as child processes of
// the emulator, their output relayed with a "[hN] " prefix or written to per-host log
// files, stopped (SIGTERM to the process group, then SIGKILL) when the run ends.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/linkem/shell/system.hpp"

namespace mcdist::linkem {

/// One command to start.
struct child_spec {
  std::string label;                    ///< "h1" or "h1#2"; used in the output prefix
  std::string command;                  ///< run with /bin/sh -c
  int netns_fd = -1;                    ///< namespace to run in
  std::string netns_name;               ///< used to mount the namespace's own /sys
  std::vector<std::string> env;         ///< extra "KEY=VALUE" entries
  std::optional<std::string> log_file;  ///< append stdout+stderr here instead of relaying
  bool main = false;                    ///< the run ends when every main command has exited
};

/// How a child ended.
struct child_exit {
  bool exited = false;  ///< normal exit (status valid) vs killed by a signal
  int status = 0;       ///< exit status or signal number
  [[nodiscard]] bool success() const noexcept { return exited && status == 0; }
  [[nodiscard]] std::string describe() const;
};

/// A started child.
struct child_process {
  child_spec spec;
  pid_t pid = -1;
  unique_fd pidfd;          ///< readable when the child exits (pidfd_open)
  unique_fd out;            ///< read end of the child's stdout pipe (relay mode)
  unique_fd err;            ///< read end of the child's stderr pipe (relay mode)
  std::string out_partial;  ///< incomplete last line of stdout
  std::string err_partial;
  std::optional<child_exit> exit;  ///< set once reaped
};

/// Starts a child: fork; in the child, join the namespace (setns), give it a private
/// mount namespace with the namespace's own /sys (as `ip netns exec` does), make it a
/// process group leader, ask for SIGTERM if the emulator dies (PR_SET_PDEATHSIG),
/// restore default signal handling and exec /bin/sh -c COMMAND.
/// @throws setup_error if fork, pipes or pidfd_open fail
child_process start_child(const child_spec& spec);

/// Reads what is available on the child's pipes and writes complete lines, prefixed
/// "[label] ", to our stdout/stderr. At end of file (or with flush_all) the partial
/// line is written too.
/// @param fd_is_out which pipe became readable (true: stdout)
/// @return false once that pipe reached end of file (the caller stops polling it)
bool relay_output(child_process& child, bool fd_is_out, bool flush_all = false);

/// Reaps the child if it has exited (non-blocking). Returns true if it was reaped now.
bool reap_child(child_process& child);

/// Sends `sig` to the child's process group (the shell and what it started).
void signal_child(const child_process& child, int sig) noexcept;

}  // namespace mcdist::linkem
