#include "receiver/storage/held_scanner.hpp"

#include "common/path_check.hpp"
#include "common/sys/digest_xattr.hpp"
#include "common/sys/path_walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <spdlog/spdlog.h>

#include <string>
#include <unordered_map>

namespace mcdist::receiver {

held_scanner::held_scanner(store_context& ctx) : m_ctx(ctx) {}

held_scanner::~held_scanner() { stop(); }

void held_scanner::start() {
  m_thread = std::thread([this] { run(); });
}

void held_scanner::stop() {
  {
    std::lock_guard lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_one();
  if (m_thread.joinable()) m_thread.join();
}

void held_scanner::push(scan_job job) {
  {
    std::lock_guard lk(m_mutex);
    m_queue.push_back(std::move(job));
  }
  m_cv.notify_one();
}

void held_scanner::run() {
  for (;;) {
    scan_job job;
    {
      std::unique_lock lk(m_mutex);
      m_cv.wait(lk, [&] { return !m_queue.empty() || m_stop; });
      if (m_stop) return;  // queries are advisory: not worth delaying shutdown
      job = std::move(m_queue.front());
      m_queue.pop_front();
    }
    std::vector<held_answer> answers;
    try {
      answers = scan(job);
    } catch (const std::exception& e) {
      m_ctx.log().error("storage: query of held files failed: {}", e.what());
    }
    if (job.done) job.done(std::move(answers));
  }
}

std::vector<held_answer> held_scanner::scan(const scan_job& j) {
  std::vector<held_answer> out;
  if (!m_buffer) m_buffer = std::make_unique_for_overwrite<std::byte[]>(reread_buffer_bytes);
  unique_fd root(::open(j.dest_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return out;
  // The files of one query share few directories: each is opened once (a bounded cache; a
  // directory that cannot be opened is remembered as -1, its files not held).
  constexpr std::size_t dir_cache_max = 64;
  std::unordered_map<std::string, unique_fd> dirs;
  for (const auto& q : j.queries) {
    if (check_relative_path(q.relative_path)) continue;
    const std::string_view rel = q.relative_path;
    const std::size_t slash = rel.rfind('/');
    const std::string parent(slash == std::string_view::npos ? std::string_view()
                                                             : rel.substr(0, slash));
    const std::string leaf(slash == std::string_view::npos ? rel : rel.substr(slash + 1));
    auto dit = dirs.find(parent);
    if (dit == dirs.end()) {
      if (dirs.size() >= dir_cache_max) dirs.clear();
      int raw_dir = -1;
      if (open_dir_below(root.get(), parent, raw_dir) != 0) raw_dir = -1;
      dit = dirs.emplace(parent, unique_fd(raw_dir)).first;
    }
    if (!dit->second) continue;
    const int cur = dit->second.get();
    int raw = -1;
    if (m_ctx.io.open(cur, leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0, nullptr,
                      raw))
      continue;
    unique_fd fd(raw);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (static_cast<std::uint64_t>(st.st_size) != q.size || mtime_ns_of(st) != q.mtime_ns) continue;
    char xbuf[max_digest_xattr_bytes];
    const ssize_t xn = ::fgetxattr(fd.get(), digest_xattr_name, xbuf, sizeof xbuf);
    if (xn > 0) {
      if (auto d = parse_digest_xattr(std::string_view(xbuf, static_cast<std::size_t>(xn)), q.size,
                                      q.mtime_ns)) {
        out.push_back(held_answer{q.file, *d});
        continue;
      }
    }
    if (q.size > m_ctx.cfg.hash_held_max_bytes) continue;
    sha256_hasher h;
    if (m_ctx.io.read_hash(fd.get(), 0, q.size, h, {m_buffer.get(), reread_buffer_bytes}, nullptr,
                           nullptr))
      continue;
    struct stat after {};
    // Changed while being read: not a held copy we can vouch for.
    if (::fstat(fd.get(), &after) != 0 || after.st_size != st.st_size ||
        mtime_ns_of(after) != q.mtime_ns)
      continue;
    out.push_back(held_answer{q.file, h.finish()});
  }
  return out;
}

}  // namespace mcdist::receiver
