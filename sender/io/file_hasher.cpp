#include "sender/io/file_hasher.hpp"

#include "common/error.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/unique_fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace mcdist::sender {

namespace {
/// Read size for hashing: large enough that syscalls cost nothing next to SHA-256.
constexpr std::size_t hash_read_bytes = 1 << 20;
}  // namespace

namespace {

/// Hashes the open file `fd` (closed here) named `name` in messages; see hash_file.
std::error_code hash_descriptor(int fd, const std::string& name, std::uint64_t expected_size,
                                sha256_digest& out, std::string& why) {
  const unique_fd owned(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<std::byte> buf(hash_read_bytes);
  sha256_hasher h;
  std::uint64_t off = 0;
  while (true) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      why = "cannot read " + name + ": " + std::strerror(errno);
      return {errno, std::generic_category()};
    }
    if (n == 0) break;
    h.update({buf.data(), static_cast<std::size_t>(n)});
    off += static_cast<std::uint64_t>(n);
    if (off > expected_size) break;
  }
  if (off != expected_size) {
    why = name + " changed size while being sent (" + std::to_string(expected_size) +
          " bytes when scanned, " + std::to_string(off) + " now)";
    return errc::invalid_field;
  }
  out = h.finish();
  return {};
}

}  // namespace

std::error_code hash_file(const std::filesystem::path& p, std::uint64_t expected_size,
                          sha256_digest& out, std::string& why) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = "cannot open " + p.string() + ": " + std::strerror(errno);
    return {errno, std::generic_category()};
  }
  return hash_descriptor(fd, p.string(), expected_size, out, why);
}

std::error_code hash_file(const source_file& f, sha256_digest& out, std::string& why) {
  const int fd = open_source(f, why);
  if (fd < 0) return {errno, std::generic_category()};
  return hash_descriptor(fd, f.local, f.entry.size, out, why);
}

void remember_digest(const source_file& f, const sha256_digest& d) {
  std::string why;
  const int fd = open_source(f, why);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == f.entry.size &&
      std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec == f.entry.mtime_ns) {
    write_digest_xattr(fd, d, f.entry.size, f.entry.mtime_ns);
  }
  ::close(fd);
}

void read_cached_digests(std::vector<source_file>& files, unsigned threads) {
  struct shared_work {
    source_file* files;
    std::size_t count;
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> done{0};
  };
  auto work = [](shared_work& w) {
    for (std::size_t k = w.next++; k < w.count; k = w.next++) {
      auto& f = w.files[k];
      // A file that cannot be read is reported when it is hashed or sent.
      f.entry.digest = f.fd ? read_digest_xattr(f.fd->get(), f.entry.size, f.entry.mtime_ns)
                            : read_digest_xattr(f.local.c_str(), f.entry.size, f.entry.mtime_ns);
      if (w.done.fetch_add(1) + 1 == w.count) w.done.notify_all();
    }
  };
  auto w = std::make_shared<shared_work>();
  w->files = files.data();
  w->count = files.size();
  const std::size_t wanted = std::min<std::size_t>(threads, files.size() / xattr_reads_per_thread);
  for (std::size_t t = 1; t < wanted; ++t) {
    try {
      std::thread([w, work] { work(*w); }).detach();
    } catch (const std::system_error&) {
      break;  // no thread to be had: the caller reads them all
    }
  }
  work(*w);
  // A helper that took a file finishes it within microseconds; one that never ran takes none.
  for (std::size_t d = w->done.load(); d != w->count; d = w->done.load()) w->done.wait(d);
}

void prehash(std::vector<source_file>& files, std::uint64_t per_file_max,
             std::uint64_t total_budget, unsigned threads, bool use_cache) {
  if (use_cache) read_cached_digests(files, threads);
  std::vector<std::size_t> todo;
  std::uint64_t budget = total_budget;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (files[i].entry.digest) continue;
    if (files[i].entry.size <= per_file_max && files[i].entry.size <= budget) {
      todo.push_back(i);
      budget -= files[i].entry.size;
    }
  }
  const std::uint64_t to_hash = total_budget - budget;
  threads = static_cast<unsigned>(
      std::min<std::uint64_t>(threads, 1 + to_hash / prehash_bytes_per_thread));
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::string first_error;
  auto work = [&] {
    for (std::size_t k = next++; k < todo.size(); k = next++) {
      auto& f = files[todo[k]];
      sha256_digest d;
      std::string why;
      if (hash_file(f, d, why)) {
        std::lock_guard lock(mu);
        if (first_error.empty()) first_error = why;
        continue;
      }
      f.entry.digest = d;
      if (use_cache) remember_digest(f, d);
    }
  };
  std::vector<std::thread> pool;
  const unsigned n = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(todo.size())));
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (!first_error.empty()) throw file_set_error(first_error);
}

background_hasher::background_hasher(const std::vector<source_file>& files, post_fn post,
                                     digest_fn on_digest, error_fn on_error)
    : m_post(std::move(post)), m_on_digest(std::move(on_digest)), m_on_error(std::move(on_error)) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!files[i].entry.digest) m_todo.emplace_back(static_cast<std::uint32_t>(i), files[i]);
  }
  if (!m_todo.empty()) m_thread = std::thread([this] { run(); });
}

background_hasher::~background_hasher() {
  m_stop = true;
  if (m_thread.joinable()) m_thread.join();
}

void background_hasher::run() {
  for (const auto& [index, f] : m_todo) {
    if (m_stop) return;
    sha256_digest d;
    std::string why;
    const file_index fi{index};
    if (hash_file(f, d, why)) {
      m_post([this, fi, why] { m_on_error(fi, why); });
      continue;
    }
    m_post([this, fi, d] { m_on_digest(fi, d); });
  }
}

}  // namespace mcdist::sender
