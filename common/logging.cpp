#include "common/logging.hpp"

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>

#include <google/protobuf/stubs/logging.h>

#include <cstdio>
#include <mutex>
#include <stdexcept>

namespace mcdist {

namespace {

/// stderr sink that first erases a progress line drawn with '\r'.
class clearing_stderr_sink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t out;
    formatter_->format(msg, out);
    std::fputs("\r\033[K", stderr);
    std::fwrite(out.data(), 1, out.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

/// libprotobuf's messages, into the default logger. Its default handler writes a line to
/// stderr for every refused string field of invalid UTF-8: one line per hostile datagram, which
/// the caller already counts as bad_protobuf (found by tests/fuzz). Debug level, then.
void protobuf_log(google::protobuf::LogLevel level, const char* file, int line,
                  const std::string& message) {
  const auto l = level == google::protobuf::LOGLEVEL_FATAL ? spdlog::level::critical
                                                           : spdlog::level::debug;
  if (auto* log = spdlog::default_logger_raw()) log->log(l, "libprotobuf {}:{}: {}", file, line, message);
}

}  // namespace

spdlog::level::level_enum parse_log_level(const std::string& text) {
  const auto l = spdlog::level::from_str(text);
  if (l == spdlog::level::off && text != "off") {
    throw std::invalid_argument("unknown log level '" + text +
                                "' (trace, debug, info, warn, error, off)");
  }
  return l;
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& name, const log_options& o) {
  std::vector<spdlog::sink_ptr> sinks;
  if (o.clear_progress_line) {
    sinks.push_back(std::make_shared<clearing_stderr_sink>());
  } else {
    sinks.push_back(std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>());
  }
  if (o.file) {
    sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
        *o.file, o.rotate_bytes, o.rotate_files));
  }
  auto log = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  log->set_level(o.level);
  log->set_pattern("%Y-%m-%d %H:%M:%S.%e %n %^%l%$: %v");
  log->flush_on(spdlog::level::info);
  spdlog::set_default_logger(log);
  google::protobuf::SetLogHandler(&protobuf_log);
  return log;
}

}  // namespace mcdist
