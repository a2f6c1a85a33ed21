#include "common/wis2/http_download.hpp"

#include "common/sys/path_walk.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace mcdist {

namespace {

/// Longest connect (DNS, TCP and TLS handshakes) of one attempt: a server that does not
/// answer at all is given up well before the whole download's timeout.
constexpr long connect_timeout_ms = 30'000;
/// Redirects followed (a data server behind a load balancer or moved to HTTPS).
constexpr long max_redirects = 5;
/// Longest wait of the transfer thread when nothing happens, ms: a bound on how long a
/// submission could go unnoticed should a wakeup be lost.
constexpr int poll_timeout_ms = 1000;

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct evp_free {
  void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
};

bool retryable_status(long status) { return status == 408 || status == 429 || status >= 500; }

bool retryable_errno(int e) {
  // A full or failing disk may come back; a name in the way or a link will not.
  return e == ENOSPC || e == EDQUOT || e == EIO || e == EMFILE || e == ENFILE || e == ENOMEM;
}

/// Creates the directories of `target` below `root` (mkdirat, never following a link) and
/// opens its parent. @return the parent's descriptor, or -1 with errno set
int open_parent(int root, std::string_view target) {
  auto comps = split_path(target);
  comps.pop_back();
  unique_fd cur(::dup(root));
  if (!cur) return -1;
  for (auto c : comps) {
    const std::string comp(c);
    if (::mkdirat(cur.get(), comp.c_str(), 0755) != 0 && errno != EEXIST) return -1;
    const int next =
        ::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    cur.reset(next);
  }
  return cur.release();
}

}  // namespace

std::string_view to_string(download_error e) noexcept {
  static constexpr std::array<std::string_view, 11> words{
      "none",   "http_status", "timeout", "connect",  "tls",     "too_big",
      "length", "integrity",   "bad_url", "transfer", "local_io"};
  return words[static_cast<std::size_t>(e)];
}

/// One running download.
struct http_downloader::transfer {
  download_job job;
  CURL* easy = nullptr;
  unique_fd file;
  std::string temp_name;  ///< below job.temp_dir
  std::unique_ptr<EVP_MD_CTX, evp_free> md;
  std::uint64_t bytes = 0;
  bool cut_too_big = false;  ///< the write callback stopped it: above max_bytes
  bool cut_length = false;   ///< ... above the declared length
  int write_errno = 0;       ///< ... the temp file could not be written
  std::array<char, CURL_ERROR_SIZE> errbuf{};
  download_result result;

  ~transfer() {
    if (easy) curl_easy_cleanup(easy);
  }

  static std::size_t on_data(char* data, std::size_t size, std::size_t n, void* self) {
    auto* t = static_cast<transfer*>(self);
    const std::size_t len = size * n;
    if (t->bytes + len > t->job.max_bytes) {
      t->cut_too_big = true;
      return 0;  // anything but len aborts the transfer (CURLE_WRITE_ERROR)
    }
    if (t->job.expected_length && t->bytes + len > *t->job.expected_length) {
      t->cut_length = true;
      return 0;
    }
    for (std::size_t off = 0; off < len;) {
      const auto w = ::write(t->file.get(), data + off, len - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        t->write_errno = errno;
        return 0;
      }
      off += static_cast<std::size_t>(w);
    }
    if (t->md) EVP_DigestUpdate(t->md.get(), data, len);
    t->bytes += len;
    return len;
  }
};

http_downloader::http_downloader(download_options options, completion done)
    : m_options(std::move(options)), m_done(std::move(done)) {
  curl_init_once();
  m_multi = curl_multi_init();
  if (!m_multi) throw std::runtime_error("libcurl cannot create a multi handle");
  m_transfer_thread = std::thread([this] { run_transfers(); });
  m_finisher_thread = std::thread([this] { run_finisher(); });
}

http_downloader::~http_downloader() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  curl_multi_wakeup(static_cast<CURLM*>(m_multi));
  m_finish_cv.notify_all();
  m_transfer_thread.join();
  m_finisher_thread.join();
  for (auto& t : m_finished) {
    if (t->job.temp_dir && !t->temp_name.empty()) {
      ::unlinkat(t->job.temp_dir->get(), t->temp_name.c_str(), 0);
    }
  }
  curl_multi_cleanup(static_cast<CURLM*>(m_multi));
}

void http_downloader::submit(download_job job) {
  {
    std::lock_guard lock(m_mutex);
    m_submitted.push_back(std::move(job));
  }
  curl_multi_wakeup(static_cast<CURLM*>(m_multi));
}

void http_downloader::run_transfers() {
  auto* multi = static_cast<CURLM*>(m_multi);
  std::deque<download_job> waiting;
  std::vector<std::unique_ptr<transfer>> running;
  const auto fail_now = [this](std::unique_ptr<transfer> t, download_error e, bool retry,
                               std::string detail) {
    t->result.error = e;
    t->result.retryable = retry;
    t->result.detail = std::move(detail);
    finish(std::move(t));
  };
  while (true) {
    {
      std::lock_guard lock(m_mutex);
      if (m_stop) break;
      while (!m_submitted.empty()) {
        waiting.push_back(std::move(m_submitted.front()));
        m_submitted.pop_front();
      }
    }
    while (running.size() < m_options.concurrency && !waiting.empty()) {
      auto t = std::make_unique<transfer>();
      t->job = std::move(waiting.front());
      waiting.pop_front();
      t->result.id = t->job.id;
      t->temp_name = std::to_string(t->job.id) + "-" + std::to_string(++m_temp_counter) + ".part";
      t->file.reset(::openat(t->job.temp_dir->get(), t->temp_name.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
      if (!t->file) {
        const int e = errno;
        t->temp_name.clear();
        fail_now(std::move(t), download_error::local_io, retryable_errno(e),
                 std::string("cannot create a temp file: ") + std::strerror(e));
        continue;
      }
      if (t->job.integrity) {
        t->md.reset(EVP_MD_CTX_new());
        const EVP_MD* md = EVP_get_digestbyname(openssl_digest_name(t->job.integrity->method));
        if (!t->md || !md || EVP_DigestInit_ex(t->md.get(), md, nullptr) != 1) {
          fail_now(std::move(t), download_error::local_io, false,
                   std::string("OpenSSL has no ") + openssl_digest_name(t->job.integrity->method));
          continue;
        }
      }
      t->easy = curl_easy_init();
      if (!t->easy) {
        fail_now(std::move(t), download_error::local_io, true, "libcurl cannot create a transfer");
        continue;
      }
      CURL* e = t->easy;
      curl_easy_setopt(e, CURLOPT_URL, t->job.url.c_str());
      curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(e, CURLOPT_MAXREDIRS, max_redirects);
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_FAILONERROR, 1L);
      curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                       std::min<long>(connect_timeout_ms,
                                      static_cast<long>(m_options.timeout.count() / 1'000'000)));
      curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(m_options.timeout.count() / 1'000'000));
      curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
                       static_cast<curl_off_t>(std::min<std::uint64_t>(
                           t->job.max_bytes, static_cast<std::uint64_t>(INT64_MAX))));
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &transfer::on_data);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
      curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
      curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf.data());
      if (!m_options.user_agent.empty()) {
        curl_easy_setopt(e, CURLOPT_USERAGENT, m_options.user_agent.c_str());
      }
      if (!m_options.ca_file.empty()) {
        curl_easy_setopt(e, CURLOPT_CAINFO, m_options.ca_file.c_str());
      }
      if (m_options.tls_insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
      }
      if (curl_multi_add_handle(multi, e) != CURLM_OK) {
        fail_now(std::move(t), download_error::local_io, true, "libcurl refused the transfer");
        continue;
      }
      running.push_back(std::move(t));
      m_active.store(running.size(), std::memory_order_relaxed);
    }

    int still = 0;
    curl_multi_perform(multi, &still);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      const CURLcode rc = msg->data.result;
      curl_multi_remove_handle(multi, easy);
      const auto it = std::find_if(running.begin(), running.end(),
                                   [&](const auto& p) { return p->easy == easy; });
      if (it == running.end()) continue;
      auto t = std::move(*it);
      running.erase(it);
      m_active.store(running.size(), std::memory_order_relaxed);
      auto& r = t->result;
      r.bytes = t->bytes;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r.http_status);
      const std::string curl_text = t->errbuf[0] ? t->errbuf.data() : curl_easy_strerror(rc);
      if (rc == CURLE_OK) {
        if (t->job.expected_length && t->bytes != *t->job.expected_length) {
          r.error = download_error::length;
          r.detail = std::to_string(t->bytes) + " bytes, the notification says " +
                     std::to_string(*t->job.expected_length);
        } else if (t->md) {
          std::array<unsigned char, EVP_MAX_MD_SIZE> got{};
          unsigned int got_len = 0;
          EVP_DigestFinal_ex(t->md.get(), got.data(), &got_len);
          const auto& want = t->job.integrity->digest;
          if (got_len != want.size() || CRYPTO_memcmp(got.data(), want.data(), got_len) != 0) {
            r.error = download_error::integrity;
            r.detail = std::string(to_string(t->job.integrity->method)) + " of the " +
                       std::to_string(t->bytes) + " bytes is not the notification's";
          }
        }
      } else if (t->cut_too_big || rc == CURLE_FILESIZE_EXCEEDED) {
        r.error = download_error::too_big;
        r.detail = "larger than max_bytes (" + std::to_string(t->job.max_bytes) + ")";
      } else if (t->cut_length) {
        r.error = download_error::length;
        r.detail =
            "longer than the notification's length " + std::to_string(*t->job.expected_length);
      } else if (t->write_errno) {
        r.error = download_error::local_io;
        r.retryable = retryable_errno(t->write_errno);
        r.detail = std::string("writing the temp file: ") + std::strerror(t->write_errno);
      } else if (rc == CURLE_HTTP_RETURNED_ERROR) {
        r.error = download_error::http_status;
        r.retryable = retryable_status(r.http_status);
        r.detail = "HTTP " + std::to_string(r.http_status);
      } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        r.error = download_error::timeout;
        r.retryable = true;
        r.detail = curl_text;
      } else if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT ||
                 rc == CURLE_COULDNT_RESOLVE_PROXY) {
        r.error = download_error::connect;
        r.retryable = true;
        r.detail = curl_text;
      } else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CONNECT_ERROR ||
                 rc == CURLE_SSL_CERTPROBLEM || rc == CURLE_SSL_CACERT_BADFILE ||
                 rc == CURLE_SSL_CIPHER || rc == CURLE_SSL_ISSUER_ERROR) {
        r.error = download_error::tls;
        r.retryable = true;
        r.detail = curl_text;
      } else if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
                 rc == CURLE_TOO_MANY_REDIRECTS) {
        r.error = download_error::bad_url;
        r.detail = curl_text;
      } else {
        r.error = download_error::transfer;
        r.retryable = true;
        r.detail = curl_text;
      }
      curl_easy_cleanup(easy);
      t->easy = nullptr;
      finish(std::move(t));
    }
    if (!waiting.empty() && running.size() < m_options.concurrency) continue;
    curl_multi_poll(multi, nullptr, 0, poll_timeout_ms, nullptr);
  }
  for (auto& t : running) {
    curl_multi_remove_handle(multi, t->easy);
    t->file.reset();
    ::unlinkat(t->job.temp_dir->get(), t->temp_name.c_str(), 0);
  }
  m_active.store(0, std::memory_order_relaxed);
}

void http_downloader::finish(std::unique_ptr<transfer> t) {
  {
    std::lock_guard lock(m_mutex);
    m_finished.push_back(std::move(t));
  }
  m_finish_cv.notify_one();
}

void http_downloader::run_finisher() {
  while (true) {
    std::unique_ptr<transfer> t;
    {
      std::unique_lock lock(m_mutex);
      m_finish_cv.wait(lock, [&] { return m_stop || !m_finished.empty(); });
      if (m_stop) return;  // the destructor removes what is left
      t = std::move(m_finished.front());
      m_finished.pop_front();
    }
    auto& r = t->result;
    const int temp_dir = t->job.temp_dir->get();
    if (r.error == download_error::none) {
      // Durable before it is renamed into the spool: the journal records the notification
      // done once it is there, so the product must survive a crash from then on.
      int fail = 0;
      const char* what = "";
      const struct timespec times[2] = {{0, UTIME_OMIT},
                                        {static_cast<time_t>(t->job.mtime_ns / 1'000'000'000),
                                         static_cast<long>(t->job.mtime_ns % 1'000'000'000)}};
      if (::futimens(t->file.get(), times) != 0) {
        fail = errno;
        what = "setting its mtime";
      } else if (::fdatasync(t->file.get()) != 0) {
        fail = errno;
        what = "fdatasync";
      }
      t->file.reset();
      if (!fail) {
        unique_fd parent(open_parent(t->job.root->get(), t->job.target));
        const auto comps = split_path(t->job.target);
        const std::string leaf(comps.back());
        if (!parent) {
          fail = errno;
          what = "creating its directory below the spool";
        } else if (::renameat(temp_dir, t->temp_name.c_str(), parent.get(), leaf.c_str()) != 0) {
          fail = errno;
          what = "renaming it into the spool";
        } else {
          t->temp_name.clear();  // in place
        }
      }
      if (fail) {
        r.error = download_error::local_io;
        r.retryable = retryable_errno(fail);
        r.detail = std::string(what) + ": " + std::strerror(fail);
      }
    }
    t->file.reset();
    if (!t->temp_name.empty()) ::unlinkat(temp_dir, t->temp_name.c_str(), 0);
    m_done(std::move(r));
  }
}

}  // namespace mcdist
