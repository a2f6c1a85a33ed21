#include "common/sys/logging.hpp"

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>

#include <google/protobuf/stubs/logging.h>

#include <unistd.h>

#include <cerrno>
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

/// stderr sink for a stderr that is not a terminal (journald, a file, a pipe): lines are
/// formatted into a buffer and written at each flush, with one write(2) for all the lines since
/// the last. The logger flushes after every line (make_logger), so a line leaves as soon as
/// it is logged, unless a log_batch holds the flushes back for the lines of one handler.
class batching_stderr_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ~batching_stderr_sink() override {
    std::lock_guard lock(mutex_);
    write_out();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    formatter_->format(msg, m_buffer);
    if (m_buffer.size() >= batching_stderr_bytes) write_out();
  }
  void flush_() override { write_out(); }

 private:
  /// Past this many bytes the lines go out before the flush: a batch's memory stays bounded.
  static constexpr std::size_t batching_stderr_bytes = 64 * 1024;

  void write_out() {
    const char* p = m_buffer.data();
    std::size_t left = m_buffer.size();
    while (left > 0) {
      const ssize_t n = ::write(STDERR_FILENO, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // stderr closed or full: the lines are dropped, as fwrite would
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    m_buffer.clear();
  }

  spdlog::memory_buf_t m_buffer;
};

/// Size-rotated file sink whose file can be reopened (SIGHUP). spdlog's rotating_file_sink
/// cannot, so it is held inside and replaced under this sink's lock.
class reopenable_file_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  reopenable_file_sink(std::string path, std::size_t bytes, std::size_t files)
      : m_path(std::move(path)), m_bytes(bytes), m_files(files), m_inner(open()) {}

  /// Replaces the open file by a fresh open of the path. @throws spdlog::spdlog_ex
  void reopen() {
    auto fresh = open();  // outside the lock: a failure leaves the old file in place
    std::lock_guard lock(mutex_);
    m_inner->flush();
    m_inner = std::move(fresh);
    m_inner->set_formatter(formatter_->clone());
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override { m_inner->log(msg); }
  void flush_() override { m_inner->flush(); }
  void set_pattern_(const std::string& pattern) override {
    spdlog::sinks::base_sink<std::mutex>::set_pattern_(pattern);
    m_inner->set_pattern(pattern);
  }
  void set_formatter_(std::unique_ptr<spdlog::formatter> f) override {
    m_inner->set_formatter(f->clone());
    spdlog::sinks::base_sink<std::mutex>::set_formatter_(std::move(f));
  }

 private:
  std::unique_ptr<spdlog::sinks::rotating_file_sink_st> open() const {
    return std::make_unique<spdlog::sinks::rotating_file_sink_st>(m_path, m_bytes, m_files);
  }

  std::string m_path;
  std::size_t m_bytes;
  std::size_t m_files;
  std::unique_ptr<spdlog::sinks::rotating_file_sink_st> m_inner;
};

/// libprotobuf's messages, into the default logger. Its default handler writes a line to
/// stderr for every refused string field of invalid UTF-8: one line per hostile datagram, which
/// the caller already counts as bad_protobuf (found by tests/fuzz). Debug level, then.
void protobuf_log(google::protobuf::LogLevel level, const char* file, int line,
                  const std::string& message) {
  const auto l =
      level == google::protobuf::LOGLEVEL_FATAL ? spdlog::level::critical : spdlog::level::debug;
  if (auto* log = spdlog::default_logger_raw())
    log->log(l, "libprotobuf {}:{}: {}", file, line, message);
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
  } else if (::isatty(STDERR_FILENO) == 1) {
    sinks.push_back(std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>());
  } else {
    sinks.push_back(std::make_shared<batching_stderr_sink>());
  }
  if (o.file) {
    sinks.push_back(
        std::make_shared<reopenable_file_sink>(*o.file, o.rotate_bytes, o.rotate_files));
  }
  auto log = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  log->set_level(o.level);
  log->set_pattern("%Y-%m-%d %H:%M:%S.%e %n %^%l%$: %v");
  // Every line is flushed as it is logged, at whatever level the logger is set to now or
  // later: the stderr sink writes at its flushes (batching_stderr_sink), so a debug line must
  // not wait in its buffer for the next info line. A log_batch holds the flushes back.
  log->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(log);
  google::protobuf::SetLogHandler(&protobuf_log);
  return log;
}

log_batch::log_batch(spdlog::logger* log) : m_log(log) {
  if (!m_log) return;
  m_flush_level = m_log->flush_level();
  m_log->flush_on(spdlog::level::off);
}

log_batch::~log_batch() {
  if (!m_log) return;
  m_log->flush_on(m_flush_level);
  m_log->flush();
}

bool reopen_log_files(spdlog::logger& log, std::string& error) {
  for (auto& sink : log.sinks()) {
    auto* f = dynamic_cast<reopenable_file_sink*>(sink.get());
    if (!f) continue;
    try {
      f->reopen();
    } catch (const std::exception& e) {
      error = e.what();
      return false;
    }
  }
  return true;
}

}  // namespace mcdist
