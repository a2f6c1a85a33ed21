// mcdist-send: distribute a file set over IP multicast, reliably, at a configured rate.

#include "common/sys/descriptors.hpp"
#include "common/sys/logging.hpp"
#include "sender/io/block_reader.hpp"
#include "sender/io/file_hasher.hpp"
#include "sender/io/file_set.hpp"
#include "sender/io/sender_app.hpp"
#include "sender/io/sender_options.hpp"
#include "sender/io/summary.hpp"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <thread>
#include <variant>

namespace sender = mcdist::sender;

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  // Before any thread: pass 1 keeps up to default_open_files files open, and a table grown
  // under threads waits for an RCU grace period each time (common/sys/descriptors.hpp). As many
  // again for sockets, unicast connections and logs.
  mcdist::reserve_descriptors(2 * sender::default_open_files);
  auto parsed = sender::parse_sender_options(argc, argv);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  auto& o = std::get<sender::sender_options>(parsed);

  auto usage_error = [](const std::string& msg) {
    std::cerr << "mcdist-send: " << msg << "\n";
    return sender::exit_usage;
  };
  mcdist::log_options lo;
  lo.level = o.log_level;
  o.app.progress = !o.quiet && !o.no_progress && ::isatty(STDERR_FILENO);
  lo.clear_progress_line = o.app.progress;
  auto log = mcdist::make_logger("mcdist-send", lo);

  std::vector<sender::source_file> files;
  try {
    files = sender::collect_files(o.paths, [&](const std::string& w) { log->warn("{}", w); });
    if (files.empty()) return usage_error("no files to send in " + o.paths.front());
    // Without a multicast pass there is no in-band hashing: hash everything first.
    const bool all_first = o.session.force_unicast;
    sender::prehash(files, all_first ? UINT64_MAX : o.prehash_max,
                    all_first ? UINT64_MAX : std::uint64_t{1} << 30,
                    std::max(1u, std::thread::hardware_concurrency()), o.app.digest_cache);
  } catch (const sender::file_set_error& e) {
    return usage_error(e.what());
  }

  // Pacing wakes the network thread every few hundred microseconds; the default 50 us timer
  // slack would make each wake-up late by that much.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  try {
    boost::asio::io_context io(1);
    sender::sender_app app(io, o.app, o.session, std::move(files), log, started);
    const auto result = app.run();
    std::cout << sender::format_summary(result) << std::flush;
    if (o.app.summary_json) {
      std::ofstream out(*o.app.summary_json);
      out << sender::summary_json(result);
      if (!out) {
        log->error("cannot write the summary to {}", *o.app.summary_json);
        return sender::exit_runtime;
      }
    }
    if (!result.error.empty()) {
      std::cerr << "mcdist-send: session did not complete: " << result.error << "\n";
      return sender::exit_runtime;
    }
    if (!result.succeeded) {
      std::cerr << "mcdist-send: " << sender::incomplete_receivers(result) << "\n";
      return sender::exit_incomplete;
    }
    return sender::exit_ok;
  } catch (const std::system_error& e) {
    log->error("{}", e.what());
    return sender::exit_runtime;
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  }
}
