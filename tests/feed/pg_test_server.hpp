#pragma once
// A throw-away PostgreSQL server for tests: initdb in a temporary directory, pg_ctl start on a
// Unix socket there (no TCP port), stopped and removed at the end. PostgreSQL refuses to run as
// root, so as root the server runs as the `postgres` user (runuser). Debian's postgresql-15
// puts its programs in /usr/lib/postgresql/15/bin.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace mcdist::test {

class pg_test_server {
 public:
  /// Starts the server, or sets skip_reason when it cannot (not installed, no postgres user).
  pg_test_server() {
    namespace fs = std::filesystem;
    const fs::path bin = "/usr/lib/postgresql/15/bin";
    if (!fs::exists(bin / "initdb") || !fs::exists(bin / "pg_ctl")) {
      m_skip = "postgresql-15 is not installed (no " + (bin / "initdb").string() + ")";
      return;
    }
    const bool root = ::geteuid() == 0;
    if (root && std::system("id -u postgres >/dev/null 2>&1") != 0) {
      m_skip = "running as root and there is no postgres user to run the server as";
      return;
    }
    m_dir = fs::temp_directory_path() / ("mcdist-pgtest-" + std::to_string(::getpid()));
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
    m_as = root ? "runuser -u postgres -- " : "";
    if (root && std::system(("chown postgres " + m_dir.string()).c_str()) != 0) {
      m_skip = "cannot give " + m_dir.string() + " to the postgres user";
      return;
    }
    const auto data = (m_dir / "data").string();
    const auto init = m_as + (bin / "initdb").string() + " -D " + data +
                      " -A trust -U mcdist -E UTF8 --locale=C --no-sync >" +
                      (m_dir / "initdb.log").string() + " 2>&1";
    if (std::system(init.c_str()) != 0) {
      m_skip = "initdb failed (see " + (m_dir / "initdb.log").string() + ")";
      return;
    }
    // fsync off: a test server's durability is not under test, its speed is CI's time.
    const auto start = m_as + (bin / "pg_ctl").string() + " -D " + data + " -w -l " +
                       (m_dir / "server.log").string() + " -o \"-k " + m_dir.string() +
                       " -c listen_addresses='' -c fsync=off -c synchronous_commit=off\" start "
                       ">/dev/null 2>&1";
    if (std::system(start.c_str()) != 0) {
      m_skip = "pg_ctl start failed (see " + (m_dir / "server.log").string() + ")";
      return;
    }
    m_running = true;
  }
  ~pg_test_server() {
    if (m_running) {
      const auto stop = m_as + "/usr/lib/postgresql/15/bin/pg_ctl -D " + (m_dir / "data").string() +
                        " -m immediate stop >/dev/null 2>&1";
      (void)std::system(stop.c_str());
    }
    std::error_code ec;
    if (!m_dir.empty()) std::filesystem::remove_all(m_dir, ec);
  }
  pg_test_server(const pg_test_server&) = delete;
  pg_test_server& operator=(const pg_test_server&) = delete;

  bool running() const { return m_running; }
  const std::string& skip_reason() const { return m_skip; }
  /// The URI of database `db` (created by the caller; "postgres" exists).
  std::string uri(const std::string& db = "postgres") const {
    return "postgresql://mcdist@/" + db + "?host=" + m_dir.string();
  }

 private:
  std::filesystem::path m_dir;
  std::string m_as;
  std::string m_skip;
  bool m_running = false;
};

}  // namespace mcdist::test
