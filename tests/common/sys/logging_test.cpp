#include "common/sys/logging.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <catch2/catch.hpp>

#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace mcdist;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A register datagram whose receiver id is not UTF-8: libprotobuf refuses it and reports it.
std::vector<std::byte> bad_utf8_datagram() {
  wire::register_request r;
  r.set_receiver_id(std::string("\xff\xfe", 2));
  std::string body;
  r.SerializeToString(&body);  // serializing does not check; parsing does
  std::vector<std::byte> d(wire::header_size + body.size());
  wire::write_header(d, wire::msg_type::register_request, session_id{1});
  std::memcpy(d.data() + wire::header_size, body.data(), body.size());
  return d;
}

/// stderr (fd 2) sent to a file of a fresh directory while it lives, as a daemon's is under
/// systemd or a harness: not a terminal. The directory goes with it.
struct stderr_to_file {
  explicit stderr_to_file(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))),
        err_path(dir / "stderr"), log_path(dir / "log") {
    std::filesystem::create_directories(dir);
    std::fflush(stderr);
    saved = dup(2);
    err = std::fopen(err_path.c_str(), "w");
    REQUIRE(err != nullptr);
    dup2(fileno(err), 2);
  }
  ~stderr_to_file() {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::fclose(err);
    std::filesystem::remove_all(dir);
  }
  stderr_to_file(const stderr_to_file&) = delete;
  stderr_to_file& operator=(const stderr_to_file&) = delete;

  std::filesystem::path dir, err_path, log_path;
  int saved = -1;
  FILE* err = nullptr;
};

}  // namespace

TEST_CASE(
    "libprotobuf's complaint about a hostile datagram goes to the log at debug level, "
    "not to stderr",
    "[unit][logging]") {
  // Found by tests/fuzz: every refused string of invalid UTF-8 wrote a line to stderr.
  std::string on_stderr, in_log;
  {
    const stderr_to_file redirected("mcdist-logging-");

    log_options o;
    o.level = spdlog::level::info;
    o.file = redirected.log_path.string();
    auto log = make_logger("logging-test", o);
    const auto hostile = bad_utf8_datagram();  // (serializing it is reported too, at info)
    wire::register_request m;
    REQUIRE(wire::parse_control(hostile, m));  // refused
    log->set_level(spdlog::level::debug);
    REQUIRE(wire::parse_control(hostile, m));
    log->flush();
    spdlog::set_default_logger(nullptr);
    wire::register_request later;
    REQUIRE(wire::parse_control(hostile, later));  // no logger left: dropped, no crash

    on_stderr = slurp(redirected.err_path);
    in_log = slurp(redirected.log_path);
  }
  // At info level nothing is written; at debug level the message is in the program's log
  // (the stderr sink of the same logger shows it there too, formatted as a log line).
  REQUIRE(on_stderr.find("[libprotobuf") == std::string::npos);
  REQUIRE(in_log.find("libprotobuf") != std::string::npos);
  REQUIRE(in_log.find("invalid UTF-8 data when parsing") != std::string::npos);
  REQUIRE(std::count(in_log.begin(), in_log.end(), '\n') == 1);
}

TEST_CASE(
    "a log batch holds a non-terminal stderr's lines back until it ends, then writes them "
    "in order; without one each line is written as it is logged",
    "[unit][logging]") {
  const stderr_to_file redirected("mcdist-log-batch-");  // not a terminal: the batching sink
  const auto& err_path = redirected.err_path;
  const auto& log_path = redirected.log_path;

  log_options o;
  o.level = spdlog::level::info;
  o.file = log_path.string();
  auto log = make_logger("log-batch-test", o);
  log->info("alone");
  const std::string after_alone = slurp(err_path);
  const std::string file_after_alone = slurp(log_path);
  std::string inside, file_inside;
  {
    const log_batch batch(log.get());
    log->info("stored one");
    log->info("stored two");
    log->warn("a warning in the batch");
    inside = slurp(err_path);
    file_inside = slurp(log_path);
  }
  const std::string after_batch = slurp(err_path);
  const std::string file_after_batch = slurp(log_path);
  log->info("after");
  const std::string at_end = slurp(err_path);
  log->set_level(spdlog::level::debug);
  log->debug("a debug line");  // written at once too: it does not wait for an info line
  const std::string debug_at_end = slurp(err_path);
  const log_batch no_logger(nullptr);  // does nothing
  spdlog::set_default_logger(nullptr);

  REQUIRE(after_alone.find("info: alone\n") != std::string::npos);
  REQUIRE(file_after_alone.find("info: alone\n") != std::string::npos);
  // Held back in the batch, in both sinks.
  REQUIRE(inside == after_alone);
  REQUIRE(file_inside == file_after_alone);
  for (const auto* text : {&after_batch, &file_after_batch}) {
    const auto one = text->find("info: stored one\n");
    const auto two = text->find("info: stored two\n");
    const auto warned = text->find("warning: a warning in the batch\n");
    REQUIRE(one != std::string::npos);
    REQUIRE(two > one);
    REQUIRE(warned > two);
    REQUIRE(warned != std::string::npos);
  }
  // The flush level is back: a line after the batch is written at once.
  REQUIRE(at_end.find("info: after\n") != std::string::npos);
  REQUIRE(debug_at_end.find("debug: a debug line\n") != std::string::npos);
  REQUIRE(log->flush_level() == spdlog::level::trace);
}
