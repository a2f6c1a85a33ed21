#include "receiver/io/catch_up_client.hpp"

#include "common/sha256.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/path_walk.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace mcdist::receiver {

namespace {

/// Name of the directory below TEMP.
constexpr const char* dir_name = "catch-up";
/// Bytes read per step when hashing a destination file to see whether it is held.
constexpr std::size_t hash_buffer_bytes = 1 << 20;

std::string curl_error(CURLcode c, const char* detail) {
  std::string s = curl_easy_strerror(c);
  if (detail && *detail) s += std::string(": ") + detail;
  return s;
}

/// The index's body, at most catch_up::max_index_bytes.
struct index_sink {
  std::string data;
  bool too_big = false;
};

std::size_t on_index_bytes(char* p, std::size_t size, std::size_t n, void* user) {
  auto& s = *static_cast<index_sink*>(user);
  const std::size_t len = size * n;
  if (s.data.size() + len > catch_up::max_index_bytes) {
    s.too_big = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  s.data.append(p, len);
  return len;
}

/// A download into an open temp file, bounded by the declared size and hashed as it arrives.
struct file_sink {
  int fd = -1;
  std::uint64_t declared = 0;
  std::uint64_t written = 0;
  bool too_long = false;
  int write_errno = 0;
  sha256_hasher hasher;
};

std::size_t on_file_bytes(char* p, std::size_t size, std::size_t n, void* user) {
  auto& s = *static_cast<file_sink*>(user);
  const std::size_t len = size * n;
  if (len > s.declared - s.written) {
    s.too_long = true;
    return 0;
  }
  std::size_t done = 0;
  while (done < len) {
    const ssize_t w = ::write(s.fd, p + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s.write_errno = w < 0 ? errno : ENOSPC;
      return 0;
    }
    done += static_cast<std::size_t>(w);
  }
  s.hasher.update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), len));
  s.written += len;
  return len;
}

/// Aborts a transfer when the client is being destroyed.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(user)->load() ? 1 : 0;
}

/// Options every request of a job shares.
void set_common(CURL* c, const catch_up_job& job, const std::atomic<bool>& stop) {
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT,
                   static_cast<long>(catch_up_client::connect_timeout.count()));
  // Idle timeout: below 1 byte/s for this long ends the transfer; a slow one goes on.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(catch_up_client::idle_timeout.count()));
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!job.ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, job.ca.c_str());
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(&stop));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "mcdistd");
}

/// Whether `dest`/`p.name` is already this product, or a version not older than it.
void check_held(const catch_up_job& job, catch_up_file& f) {
  const int root = ::open(job.dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return;
  int fd = -1;
  const int e = open_below(root, f.product.name, fd);
  ::close(root);
  if (e != 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    if (static_cast<std::uint64_t>(st.st_size) == f.product.size) {
      auto d = read_digest_xattr(fd, f.product.size, mtime_ns_of(st));
      if (!d) {
        sha256_hasher h;
        std::vector<std::byte> buf(hash_buffer_bytes);
        bool ok = true;
        for (;;) {
          const ssize_t n = ::read(fd, buf.data(), buf.size());
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) ok = false;
          if (n <= 0) break;
          h.update(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
        }
        if (ok) d = h.finish();
      }
      f.held = d && *d == f.product.sha256;
    }
    if (!f.held && mtime_ns_of(st) >= f.product.mtime_ns) f.newer_held = true;
  }
  ::close(fd);
}

}  // namespace

std::string_view to_string(file_refusal r) noexcept {
  switch (r) {
    case file_refusal::too_long: return "too_long";
    case file_refusal::too_short: return "too_short";
    case file_refusal::sha256_mismatch: return "sha256_mismatch";
  }
  return "unknown";
}

catch_up_client::catch_up_client(const std::filesystem::path& temp_dir,
                                 std::function<void(std::function<void()>)> post,
                                 std::shared_ptr<spdlog::logger> log)
    : m_dir(temp_dir / dir_name), m_post(std::move(post)), m_log(std::move(log)) {
  // Before any thread: curl_global_init is not thread-safe with every TLS back end.
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const int tfd = ::open(temp_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tfd < 0) throw std::system_error(errno, std::generic_category(), temp_dir.string());
  if (::mkdirat(tfd, dir_name, 0700) != 0 && errno != EEXIST) {
    const int e = errno;
    ::close(tfd);
    throw std::system_error(e, std::generic_category(), m_dir.string());
  }
  m_dir_fd = ::openat(tfd, dir_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int e = errno;
  ::close(tfd);
  if (m_dir_fd < 0) throw std::system_error(e, std::generic_category(), m_dir.string());
  // Downloads an earlier run left (it stopped mid-transfer or before delivering them).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(m_dir, ec)) {
    ::unlinkat(m_dir_fd, entry.path().filename().c_str(), 0);
  }
  for (std::size_t i = 0; i < workers; ++i) m_threads.emplace_back([this] { run(); });
}

catch_up_client::~catch_up_client() {
  {
    std::lock_guard lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_all();
  for (auto& t : m_threads) t.join();
  if (m_dir_fd >= 0) ::close(m_dir_fd);
}

bool catch_up_client::submit(catch_up_job job, std::function<void(catch_up_outcome)> done) {
  {
    std::lock_guard lk(m_mutex);
    if (m_queue.size() >= max_queued) return false;
    m_queue.push_back({std::move(job), std::move(done)});
  }
  m_cv.notify_one();
  return true;
}

std::size_t catch_up_client::busy() const {
  std::lock_guard lk(m_mutex);
  return m_queue.size() + m_running;
}

void catch_up_client::run() {
  CURL* curl = curl_easy_init();
  for (;;) {
    queued q;
    {
      std::unique_lock lk(m_mutex);
      m_cv.wait(lk, [&] { return m_stop || !m_queue.empty(); });
      if (m_stop) break;
      q = std::move(m_queue.front());
      m_queue.pop_front();
      ++m_running;
    }
    catch_up_outcome o;
    if (!curl) {
      o.job = q.job;
      o.error = "libcurl could not make a handle";
    } else {
      try {
        o = fetch(q.job, curl);
      } catch (const std::exception& e) {
        o.job = q.job;
        o.error = e.what();
      }
    }
    if (!o.error.empty()) {
      m_counters.failures.fetch_add(1, std::memory_order_relaxed);
      for (const auto& f : o.files) {
        if (!f.temp_path.empty()) ::unlink(f.temp_path.c_str());
      }
      o.files.clear();
    }
    {
      std::lock_guard lk(m_mutex);
      --m_running;
      if (m_stop) {
        for (const auto& f : o.files) {
          if (!f.temp_path.empty()) ::unlink(f.temp_path.c_str());
        }
        break;
      }
    }
    m_post([done = std::move(q.done), o = std::move(o)]() mutable { done(std::move(o)); });
  }
  if (curl) curl_easy_cleanup(curl);
}

catch_up_outcome catch_up_client::fetch(const catch_up_job& job, void* handle) {
  CURL* c = static_cast<CURL*>(handle);
  auto count_refusal = [this](file_refusal r) {
    m_counters.file_refusals[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  };
  catch_up_outcome o;
  o.job = job;
  char errbuf[CURL_ERROR_SIZE] = {};
  // 1. The index, with a nonce of our own: an answer recorded earlier carries another.
  std::array<std::uint8_t, catch_up::nonce_bytes> nonce{};
  crypto::random_bytes(nonce);
  char* esc =
      curl_easy_escape(c, job.channel_name.data(), static_cast<int>(job.channel_name.size()));
  const std::string url = job.base_url + "catch-up/" + (esc ? esc : "") + "/" +
                          std::to_string(job.seq) + "?nonce=" + catch_up::hex(nonce);
  curl_free(esc);
  curl_easy_reset(c);
  set_common(c, job, m_stop);
  index_sink body;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_index_bytes);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE,
                   static_cast<curl_off_t>(catch_up::max_index_bytes));
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (rc != CURLE_OK) {
    o.error =
        url + ": " +
        (body.too_big ? std::string("the index is larger than the limit") : curl_error(rc, errbuf));
    return o;
  }
  if (status != 200) {
    o.not_found = status == 404;
    o.error = url + ": HTTP " + std::to_string(status);
    return o;
  }
  catch_up::index ix;
  catch_up::expectation want;
  want.channel = job.channel_name;
  want.seq = job.seq;
  want.nonce = nonce;
  want.trusted = job.trusted;
  want.signer = job.signer;
  const auto r = catch_up::open_index(std::as_bytes(std::span(body.data)), want, ix, o.signer);
  if (r != catch_up::refusal::none) {
    m_counters.indexes_refused.fetch_add(1, std::memory_order_relaxed);
    m_counters.index_refusals[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
    o.error = url + ": index refused (" + std::string(catch_up::to_string(r)) + ")";
    return o;
  }
  m_counters.indexes.fetch_add(1, std::memory_order_relaxed);
  // 2. Each product not held, into TEMP/catch-up, checked as it arrives.
  for (auto& p : ix.products) {
    catch_up_file f;
    f.product = std::move(p);
    check_held(job, f);
    if (f.held) m_counters.held.fetch_add(1, std::memory_order_relaxed);
    if (f.held || f.newer_held) {
      o.files.push_back(std::move(f));
      continue;
    }
    struct statvfs vfs {};
    if (::fstatvfs(m_dir_fd, &vfs) == 0) {
      const auto free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
      if (free_bytes < f.product.size || free_bytes - f.product.size < job.disk_reserve_bytes) {
        o.error = "catch-up of " + job.channel_name + " " + std::to_string(job.seq) + ": " +
                  f.product.name + " (" + std::to_string(f.product.size) +
                  " bytes) would eat into the disk reserve";
        return o;
      }
    }
    const std::string leaf =
        std::to_string(job.seq) + "-" + std::to_string(m_next_file++) + ".part";
    const int fd = ::openat(m_dir_fd, leaf.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      o.error = (m_dir / leaf).string() + ": " + std::strerror(errno);
      return o;
    }
    f.temp_path = (m_dir / leaf).string();
    const std::string purl = job.base_url + f.product.path;
    file_sink sink;
    sink.fd = fd;
    sink.declared = f.product.size;
    curl_easy_reset(c);
    set_common(c, job, m_stop);
    errbuf[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, purl.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_file_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    // A Content-Length beyond the declared size ends the transfer before any byte.
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(f.product.size));
    rc = curl_easy_perform(c);
    status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    ::close(fd);
    o.files.push_back(f);  // its temp file is removed with the others on failure
    if (rc != CURLE_OK || status != 200) {
      std::string why;
      if (sink.too_long || rc == CURLE_FILESIZE_EXCEEDED) {
        count_refusal(file_refusal::too_long);
        why = "refused (too_long): longer than the " + std::to_string(f.product.size) +
              " bytes the index declares";
      } else if (sink.write_errno != 0) {
        why = std::string("cannot write ") + f.temp_path + ": " + std::strerror(sink.write_errno);
      } else if (rc != CURLE_OK) {
        why = curl_error(rc, errbuf);
      } else {
        why = "HTTP " + std::to_string(status);
      }
      o.error = purl + ": " + why;
      return o;
    }
    if (sink.written != f.product.size) {
      count_refusal(file_refusal::too_short);
      o.error = purl + ": refused (too_short): " + std::to_string(sink.written) +
                " bytes, the index declares " + std::to_string(f.product.size);
      return o;
    }
    if (sink.hasher.finish() != f.product.sha256) {
      count_refusal(file_refusal::sha256_mismatch);
      o.error = purl +
                ": refused (sha256_mismatch): the download does not hash to the index's "
                "SHA-256";
      return o;
    }
    o.bytes += sink.written;
    m_counters.downloads.fetch_add(1, std::memory_order_relaxed);
    m_counters.bytes.fetch_add(sink.written, std::memory_order_relaxed);
  }
  return o;
}

}  // namespace mcdist::receiver
