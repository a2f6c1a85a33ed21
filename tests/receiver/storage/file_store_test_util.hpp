#pragma once
/// @file
/// Shared helpers for the file_store tests: a post queue standing in for the network thread,
/// scratch directories, random file contents, block feeding.

#include "receiver/storage/file_store.hpp"
#include "tests/scratch_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mcdist::receiver::test {

/// Longest any test waits for an event before failing (not a sleep: a bound on a wait that
/// normally ends in milliseconds, so a bug fails the test instead of hanging CI).
inline constexpr std::chrono::seconds event_timeout{120};

/// The network thread of the tests: closures posted by the store's threads run here, on the
/// test thread, when run_until() is called.
class post_queue {
 public:
  std::function<void(std::function<void()>)> poster() {
    return [this](std::function<void()> f) {
      {
        std::lock_guard lk(m_mutex);
        m_queue.push_back(std::move(f));
      }
      m_cv.notify_all();
    };
  }

  /// Runs posted closures until `done()` is true. Throws if nothing arrives for event_timeout.
  template <class Pred>
  void run_until(Pred done) {
    while (!done()) {
      std::function<void()> f;
      {
        std::unique_lock lk(m_mutex);
        if (!m_cv.wait_for(lk, event_timeout, [&] { return !m_queue.empty(); }))
          throw std::runtime_error("timed out waiting for a posted closure");
        f = std::move(m_queue.front());
        m_queue.pop_front();
      }
      f();
    }
  }

  /// Runs whatever is queued now, without waiting.
  void run_ready() {
    for (;;) {
      std::function<void()> f;
      {
        std::lock_guard lk(m_mutex);
        if (m_queue.empty()) return;
        f = std::move(m_queue.front());
        m_queue.pop_front();
      }
      f();
    }
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::function<void()>> m_queue;
};

/// A one-shot event between threads.
class event {
 public:
  void set() {
    {
      std::lock_guard lk(m_mutex);
      m_set = true;
    }
    m_cv.notify_all();
  }
  /// Waits until set; throws after event_timeout.
  void wait() {
    std::unique_lock lk(m_mutex);
    if (!m_cv.wait_for(lk, event_timeout, [&] { return m_set; }))
      throw std::runtime_error("timed out waiting for an event");
  }
  bool is_set() {
    std::lock_guard lk(m_mutex);
    return m_set;
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_set = false;
};

/// A fresh directory under `base` (a file system chosen by the test: /tmp, /dev/shm),
/// removed with everything in it at the end.
struct scratch_dir : mcdist::test::scratch_dir {
  explicit scratch_dir(const std::filesystem::path& base = "/tmp")
      : mcdist::test::scratch_dir("mcdist-store", base) {}
};

inline std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  std::size_t i = 0;
  while (i + 8 <= n) {
    const std::uint64_t x = rng();
    for (int k = 0; k < 8; ++k) v[i++] = static_cast<std::byte>(x >> (8 * k));
  }
  while (i < n) v[i++] = static_cast<std::byte>(rng());
  return v;
}

inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::transform(c.begin(), c.end(), out.begin(), [](char x) { return static_cast<std::byte>(x); });
  return out;
}

inline void write_plain_file(const std::filesystem::path& p, std::span<const std::byte> data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

inline std::int64_t file_mtime_ns(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

inline std::uint32_t file_mode(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0xffffffffu;
  return st.st_mode & 07777u;
}

/// The offsets of a file's blocks in the order they are sent: in order, or shuffled with
/// about `dup_fraction` of them repeated.
inline std::vector<std::uint64_t> block_order(std::mt19937_64& rng, std::uint64_t size,
                                              std::size_t block, bool shuffle,
                                              double dup_fraction) {
  std::vector<std::uint64_t> offs;
  for (std::uint64_t o = 0; o < size; o += block) offs.push_back(o);
  if (shuffle) {
    const std::size_t n = offs.size();
    std::uniform_int_distribution<std::size_t> pick(0, n == 0 ? 0 : n - 1);
    const auto dups = static_cast<std::size_t>(static_cast<double>(n) * dup_fraction) + (n > 0);
    for (std::size_t i = 0; i < dups && n > 0; ++i) offs.push_back(offs[pick(rng)]);
    std::shuffle(offs.begin(), offs.end(), rng);
  }
  return offs;
}

/// Records results, keyed by file.
struct result_log {
  std::vector<store_result> all;

  std::function<void(store_result)> sink() {
    return [this](store_result r) { all.push_back(std::move(r)); };
  }
  std::optional<store_result> find(file_key k) const {
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (it->key == k) return *it;
    return std::nullopt;
  }
  std::size_t count(file_key k) const {
    return static_cast<std::size_t>(
        std::count_if(all.begin(), all.end(), [&](const store_result& r) { return r.key == k; }));
  }
};

inline file_key key_of(std::uint32_t session, std::uint32_t file) {
  return file_key{session_id{session}, file_index{file}};
}

}  // namespace mcdist::receiver::test
