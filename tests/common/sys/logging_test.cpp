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

}  // namespace

TEST_CASE(
    "libprotobuf's complaint about a hostile datagram goes to the log at debug level, "
    "not to stderr",
    "[unit][logging]") {
  // Found by tests/fuzz: every refused string of invalid UTF-8 wrote a line to stderr.
  const auto dir =
      std::filesystem::temp_directory_path() / ("mcdist-logging-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto err_path = dir / "stderr";
  const auto log_path = dir / "log";

  std::fflush(stderr);
  const int saved = dup(2);
  FILE* err = std::fopen(err_path.c_str(), "w");
  REQUIRE(err != nullptr);
  dup2(fileno(err), 2);

  log_options o;
  o.level = spdlog::level::info;
  o.file = log_path.string();
  auto log = make_logger("logging-test", o);
  const auto hostile = bad_utf8_datagram();  // (serializing it is reported too, at info: dropped)
  wire::register_request m;
  REQUIRE(wire::parse_control(hostile, m));  // refused
  log->set_level(spdlog::level::debug);
  REQUIRE(wire::parse_control(hostile, m));
  log->flush();

  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(err);
  spdlog::set_default_logger(nullptr);
  wire::register_request later;
  REQUIRE(wire::parse_control(hostile, later));  // no logger left: dropped, no crash

  const std::string on_stderr = slurp(err_path);
  const std::string in_log = slurp(log_path);
  std::filesystem::remove_all(dir);
  // At info level nothing is written; at debug level the message is in the program's log
  // (the stderr sink of the same logger shows it there too, formatted as a log line).
  REQUIRE(on_stderr.find("[libprotobuf") == std::string::npos);
  REQUIRE(in_log.find("libprotobuf") != std::string::npos);
  REQUIRE(in_log.find("invalid UTF-8 data when parsing") != std::string::npos);
  REQUIRE(std::count(in_log.begin(), in_log.end(), '\n') == 1);
}
