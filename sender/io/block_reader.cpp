#include "sender/io/block_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace mcdist::sender {

namespace {
/// Files up to this size (bytes) are opened without POSIX_FADV_SEQUENTIAL (see descriptor()).
constexpr std::uint64_t small_file_bytes = 128 * 1024;
}  // namespace

block_reader::block_reader(const std::vector<source_file>& files, std::size_t chunk_bytes,
                           std::size_t chunks, std::size_t max_open)
    : m_files(files), m_chunk_bytes(chunk_bytes), m_chunks(chunks), m_max_open(max_open) {
  m_where.reserve(max_open);
  // Chunk buffers are sized on first use: a reader used only through read_into (pass data)
  // never touches them.
}

block_reader::~block_reader() {
  for (const auto& [file, fd] : m_open) ::close(fd);
  for (const auto& [path, fd] : m_dirs) ::close(fd);
}

int block_reader::open_file(const source_file& f, std::string& why) {
  const std::size_t slash = f.local.rfind('/');
  if (f.fd || slash == std::string::npos || slash == 0) return open_source(f, why);
  // A set's files share few directories: each is opened once, and its files by name in it, a
  // lookup of one component instead of the whole path (an open of a small file is several
  // microseconds of kernel time, a good part of it the path walk; docs/benchmarks.md).
  std::string parent = f.local.substr(0, slash);
  auto it = m_dirs.find(parent);
  if (it == m_dirs.end()) {
    if (m_dirs.size() >= max_open_dirs) {
      for (const auto& [path, dfd] : m_dirs) ::close(dfd);
      m_dirs.clear();
    }
    const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return open_source(f, why);  // names the file and the error
    it = m_dirs.emplace(std::move(parent), dfd).first;
  }
  const int fd = ::openat(it->second, f.local.c_str() + slash + 1, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_source(f, why);
  return fd;
}

int block_reader::descriptor(std::uint32_t file, std::string& why) {
  if (const auto w = m_where.find(file); w != m_where.end()) {
    if (w->second != m_open.begin()) m_open.splice(m_open.begin(), m_open, w->second);
    return w->second->second;
  }
  const int fd = open_file(m_files[file], why);
  if (fd < 0) return -1;
  // The hint only widens readahead past its initial window (read_ahead_kb, 128 kB by
  // default), so a file that fits in it is read the same without: one syscall saved per
  // bulletin.
  if (m_files[file].entry.size > small_file_bytes) ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (m_open.size() >= m_max_open) {
    ::close(m_open.back().second);
    m_where.erase(m_open.back().first);
    m_open.pop_back();
  }
  m_open.emplace_front(file, fd);
  m_where.emplace(file, m_open.begin());
  return fd;
}

std::error_code block_reader::read(std::uint32_t file, std::uint64_t offset, std::uint32_t length,
                                   std::span<const std::byte>& out, std::string& why) {
  for (auto& c : m_chunks) {
    if (c.file == file && offset >= c.offset && offset + length <= c.offset + c.length) {
      out = {c.data.data() + (offset - c.offset), length};
      return {};
    }
  }
  const int fd = descriptor(file, why);
  if (fd < 0) return {errno, std::generic_category()};
  auto& c = m_chunks[m_next_victim];
  m_next_victim = (m_next_victim + 1) % m_chunks.size();
  // Chunks are aligned to the chunk size so sequential blocks share them.
  const std::uint64_t start = offset - offset % m_chunk_bytes;
  const std::uint64_t size = m_files[file].entry.size;
  std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(m_chunk_bytes, size - start));
  if (offset + length > start + want) want = static_cast<std::size_t>(offset + length - start);
  if (c.data.size() < want) c.data.resize(want);
  std::size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, c.data.data() + got, want - got, static_cast<off_t>(start + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      c.file = UINT32_MAX;
      why = "cannot read " + m_files[file].local + ": " + std::strerror(errno);
      return {errno, std::generic_category()};
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  m_bytes_read += got;
  if (got < want) {
    c.file = UINT32_MAX;
    why = m_files[file].local +
          " is shorter than when it was announced: it changed "
          "while being sent";
    return std::make_error_code(std::errc::io_error);
  }
  c.file = file;
  c.offset = start;
  c.length = got;
  const iovec whole{c.data.data(), got};
  hash_read(file, start, {&whole, 1});
  out = {c.data.data() + (offset - start), length};
  return {};
}

std::error_code block_reader::read_into(std::uint32_t file, std::uint64_t offset,
                                        std::span<const iovec> pieces, std::string& why) {
  std::size_t want = 0;
  for (const auto& p : pieces) want += p.iov_len;
  if (want == 0) return {};
  const int fd = descriptor(file, why);
  if (fd < 0) return {errno, std::generic_category()};
  // preadv may stop short (a signal, the end of the file): continue from where it stopped.
  std::size_t got = 0;
  std::size_t first = 0;  // the piece the next byte goes to
  std::size_t skip = 0;   // bytes of that piece already filled
  iovec rest[IOV_MAX];
  while (got < want) {
    std::size_t n = 0;
    for (std::size_t i = first; i < pieces.size() && n < IOV_MAX; ++i, ++n) {
      rest[n] = pieces[i];
      if (i == first) {
        rest[n].iov_base = static_cast<std::byte*>(rest[n].iov_base) + skip;
        rest[n].iov_len -= skip;
      }
    }
    const ssize_t r = ::preadv(fd, rest, static_cast<int>(n), static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      why = "cannot read " + m_files[file].local + ": " + std::strerror(errno);
      return {errno, std::generic_category()};
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
    std::size_t left = static_cast<std::size_t>(r) + skip;
    while (first < pieces.size() && left >= pieces[first].iov_len) {
      left -= pieces[first].iov_len;
      ++first;
    }
    skip = left;
  }
  m_bytes_read += got;
  if (got < want) {
    why = m_files[file].local +
          " is shorter than when it was announced: it changed "
          "while being sent";
    return std::make_error_code(std::errc::io_error);
  }
  hash_read(file, offset, pieces);
  return {};
}

void block_reader::hash_read(std::uint32_t file, std::uint64_t start,
                             std::span<const iovec> parts) {
  if (file >= m_hashing.size() || !m_hashing[file]) return;
  auto& h = *m_hashing[file];
  if (start > h.prefix) {
    // A gap before these bytes (read out of order): the in-band hash cannot continue.
    m_unhashable.push_back(file);
    m_hashing[file].reset();
    return;
  }
  // Bytes below the prefix were hashed already (a repair, a revisited chunk): skip them.
  std::uint64_t pos = start;
  for (const auto& p : parts) {
    const std::uint64_t skip =
        h.prefix > pos ? std::min<std::uint64_t>(h.prefix - pos, p.iov_len) : 0;
    if (skip < p.iov_len) {
      h.hasher.update({static_cast<const std::byte*>(p.iov_base) + skip, p.iov_len - skip});
      h.prefix += p.iov_len - skip;
    }
    pos += p.iov_len;
  }
  if (h.prefix == m_files[file].entry.size) {
    m_digests.emplace_back(file, h.hasher.finish());
    m_hashing[file].reset();
  }
}

void block_reader::hash_while_reading(std::uint32_t file) {
  if (m_hashing.size() < m_files.size()) m_hashing.resize(m_files.size());
  m_hashing[file] = std::make_unique<inband_hash>();
}

std::vector<std::pair<std::uint32_t, sha256_digest>> block_reader::take_digests() {
  return std::exchange(m_digests, {});
}

std::vector<std::uint32_t> block_reader::take_unhashable() {
  return std::exchange(m_unhashable, {});
}

}  // namespace mcdist::sender
