// temp_writer: parity repairs (recover jobs: read the available sources, decode, write the
// recovered ones). docs/design-notes.md "Parity repairs".
#include "common/error.hpp"
#include "common/sys/path_walk.hpp"
#include "receiver/storage/parity_store.hpp"
#include "receiver/storage/temp_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <string>

namespace mcdist::receiver {

int temp_writer::read_source(const recover_job& j, std::size_t i, std::span<std::byte> out,
                             unique_fd& dest_root) {
  const fec_source& src = j.request.sources[i];
  const file_key key{j.session, src.file};
  const std::uint64_t handle = j.handles[i];
  // A file being written: every write queued before the recover job has been pwritten.
  if (handle != 0) {
    if (auto it = m_files.find(handle); it != m_files.end()) {
      if (auto ec = ensure_open(handle, it->second, false, false)) return ec.value();
      return m_ctx.io.pread_all(it->second.fd, out, src.offset, &key);
    }
  }
  unique_fd fd;
  int raw = -1;
  // Handed to the finalizer: its temp file until it is renamed, then the destination.
  if (const auto dir = m_session_dirs.find(j.session.value);
      handle != 0 && dir != m_session_dirs.end() &&
      m_ctx.io.open(dir->second.get(), (std::to_string(src.file.value) + ".part").c_str(),
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0, &key, raw) == 0) {
    fd.reset(raw);
  } else {
    if (j.dest_root.empty() || src.path.empty()) return ENOENT;
    // One FEC block's sources lie in up to k different files, most of them delivered: the
    // root is opened once per job, each file in one lookup below it.
    if (!dest_root)
      dest_root.reset(::open(j.dest_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dest_root) return errno;
    if (const int e = open_below(dest_root.get(), src.path, raw)) return e;
    fd.reset(raw);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return errno;
    if (!S_ISREG(st.st_mode)) return EINVAL;
  }
  return m_ctx.io.pread_all(fd.get(), out, src.offset, &key);
}

void temp_writer::do_job(recover_job& j) {
  const recovery_request& req = j.request;
  store_counters& c = m_ctx.counters;
  const parity_blocks parity = m_ctx.parity->take(j.session, req.fec_block);
  std::vector<recovered_source> out;
  std::error_code ec = make_error_code(errc::invalid_field);
  if (!parity.empty() && j.handles.size() == req.sources.size()) {
    unique_fd dest_root;
    ec = decode_fec_block(
        req, parity,
        [&](std::size_t i, std::span<std::byte> buf) { return read_source(j, i, buf, dest_root); },
        out);
  }
  if (ec) {
    c.decode_failures.fetch_add(1, std::memory_order_relaxed);
    m_ctx.log().debug("storage: session {} FEC block {}: decode failed: {}", session_hex(j.session),
                      req.fec_block, ec.message());
  } else {
    std::uint64_t written = 0;
    for (const recovered_source& r : out) {
      const fec_source& src = req.sources[r.index];
      const std::uint64_t handle = j.handles[r.index];
      // A source not wanted (its file refused or failed) is thrown away; so is one whose file
      // failed or was discarded since.
      if (!src.wanted || handle == 0 || !m_files.contains(handle)) continue;
      write_range(handle, src.offset, std::span(r.data).first(src.length));
      if (m_files.contains(handle)) ++written;  // else the write failed the file (reported)
    }
    c.fec_blocks_recovered.fetch_add(1, std::memory_order_relaxed);
    c.blocks_recovered.fetch_add(written, std::memory_order_relaxed);
  }
  m_ctx.post_recovered(j.session, req.fec_block, ec);
}

}  // namespace mcdist::receiver
