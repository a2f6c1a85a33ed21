#include "receiver/storage/file_store.hpp"
#include "receiver/storage/finalizer.hpp"
#include "receiver/storage/group_commit.hpp"

#include "checkpoint.pb.h"
#include "common/error.hpp"
#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t block = 1400;

/// One store with its scratch tree, post queue and result log.
struct rig {
  scratch_dir dir;
  fs::path temp;
  fs::path dest;
  post_queue pq;
  result_log results;
  std::unique_ptr<file_store> store;

  explicit rig(storage_config cfg = {}, const fs::path& base = "/tmp") : dir(base) {
    temp = dir.path() / "temp";
    dest = dir.path() / "dest";
    if (cfg.temp_dir.empty()) cfg.temp_dir = temp;
    if (cfg.sync == sync_mode::batch && std::getenv("MCDIST_TEST_SYNC_NONE") != nullptr)
      cfg.sync = sync_mode::none;
    store = std::make_unique<file_store>(std::move(cfg), pq.poster(), results.sink());
  }

  file_spec spec(std::string rel, std::uint64_t size, std::uint32_t mode = 0640,
                 std::int64_t mtime = 1'700'000'000'123'456'789) const {
    file_spec s;
    s.dest_root = dest;
    s.relative_path = std::move(rel);
    s.size = size;
    s.mtime_ns = mtime;
    s.mode = mode;
    return s;
  }

  /// Writes `data` in 1400-byte blocks in `order`, requiring every write to be taken.
  void feed(file_key k, const std::vector<std::byte>& data,
            const std::vector<std::uint64_t>& order) {
    for (auto off : order) {
      const std::size_t n = std::min<std::size_t>(block, data.size() - off);
      REQUIRE(store->write(k, off, std::span(data).subspan(off, n)));
    }
  }

  void feed_in_order(file_key k, const std::vector<std::byte>& data) {
    std::mt19937_64 unused(0);
    feed(k, data, block_order(unused, data.size(), block, false, 0));
  }

  /// Runs posted closures until a result for `k` has come (the n-th one for that key).
  store_result wait_result(file_key k, std::size_t nth = 1) {
    pq.run_until([&] { return results.count(k) >= nth; });
    return *results.find(k);
  }

  /// Finalizes with the right digest and waits for the outcome.
  store_result deliver(file_key k, const std::vector<std::byte>& data) {
    const std::size_t before = results.count(k);
    store->finalize(k, sha256(data));
    store->flush();
    return wait_result(k, before + 1);
  }

  /// Waits until the writer has handled everything queued so far: a probe file's result comes
  /// only after every earlier job (the writer is in order, its finalize after the chunk).
  void barrier(std::uint32_t session = 0xfffffff0) {
    static std::uint32_t probe_no = 0;
    const auto k = key_of(session, 1'000'000 + probe_no++);
    store->begin_file(k, spec("probe-" + std::to_string(k.file.value), 0));
    store->finalize(k, sha256({}));
    store->flush();
    wait_result(k);
  }
};

bool exists_nofollow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

}  // namespace

namespace {

/// The smallest state load_checkpoints takes for session `s` (proto/checkpoint.proto header).
std::string state_blob(session_id s) {
  mcdist::checkpoint::session_header h;
  h.set_version(mcdist::checkpoint::CURRENT);
  h.set_session(s.value);
  return h.SerializeAsString();
}

}  // namespace

TEST_CASE("files of every edge size are delivered intact, in order and shuffled", "[file_store]") {
  const bool shuffle = GENERATE(false, true);
  const sync_mode mode = GENERATE(sync_mode::batch, sync_mode::none);
  CAPTURE(shuffle, to_string(mode));
  std::mt19937_64 rng(shuffle ? 11 : 7);
  storage_config cfg;
  cfg.sync = mode;
  rig r(cfg);
  const std::vector<std::size_t> sizes = {0, 1, 1399, 1400, 1401, 10'000, 5'000'000};
  std::uint32_t idx = 0;
  for (auto size : sizes) {
    CAPTURE(size);
    const auto k = key_of(0x1234abcd, idx);
    const std::string rel = "sub/dir/file" + std::to_string(idx) + ".bin";
    ++idx;
    const auto data = random_bytes(rng, size);
    const auto before = r.store->get_stats();
    r.store->begin_file(k, r.spec(rel, size, 06755, -1'500'000'000 + idx));
    r.feed(k, data, block_order(rng, size, block, shuffle, 0.1));
    r.store->flush();
    CHECK_FALSE(exists_nofollow(r.dest / rel));
    const auto res = r.deliver(k, data);
    REQUIRE_FALSE(res.ec);
    CHECK(res.digest == sha256(data));
    CHECK(res.bytes == size);
    CHECK(read_file(r.dest / rel) == data);
    CHECK(file_mode(r.dest / rel) == 0755);  // setuid and setgid never delivered
    CHECK(file_mtime_ns(r.dest / rel) == -1'500'000'000 + idx);
    CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k)));
    char x[128];
    const ssize_t xn = ::getxattr((r.dest / rel).c_str(), "user.mcdist.sha256", x, sizeof x);
    REQUIRE(xn > 0);
    CHECK(std::string(x, static_cast<std::size_t>(xn)) == to_hex(sha256(data)) + " " +
                                                              std::to_string(size) + " " +
                                                              std::to_string(-1'500'000'000 + idx));
    if (!shuffle) CHECK(r.store->get_stats().bytes_reread == before.bytes_reread);
  }
  const auto st = r.store->get_stats();
  CHECK(st.files_stored == sizes.size());
  CHECK(st.files_failed == 0);
  CHECK(st.chunks_in_flight <= 1);  // the buffer being filled
}

TEST_CASE("a gap closed late is hashed by reading back only what was not hashed", "[file_store]") {
  std::mt19937_64 rng(3);
  storage_config cfg;
  cfg.sync = sync_mode::none;
  rig r(cfg);
  const auto k = key_of(1, 0);
  const auto data = random_bytes(rng, 3'000'000);
  r.store->begin_file(k, r.spec("late-gap", data.size()));
  auto order = block_order(rng, data.size(), block, false, 0);
  order.erase(order.begin());  // block 0 comes last
  order.push_back(0);
  r.feed(k, data, order);
  const auto res = r.deliver(k, data);
  REQUIRE_FALSE(res.ec);
  CHECK(read_file(r.dest / "late-gap") == data);
  // Everything after block 0 was written before it, so it was read back once, not twice.
  CHECK(r.store->get_stats().bytes_reread == data.size() - block);
}

TEST_CASE("a digest mismatch is reported and nothing is delivered", "[file_store]") {
  std::mt19937_64 rng(5);
  rig r;
  const auto k = key_of(2, 1);
  const auto data = random_bytes(rng, 50'000);
  r.store->begin_file(k, r.spec("bad.bin", data.size()));
  r.feed_in_order(k, data);
  auto wrong = sha256(data);
  wrong[0] ^= 1;
  r.store->finalize(k, wrong);
  r.store->flush();
  const auto res = r.wait_result(k);
  CHECK(res.ec == make_error_code(errc::digest_mismatch));
  CHECK(res.digest == sha256(data));
  CHECK(res.detail.find("bad.bin") != std::string::npos);
  CHECK_FALSE(exists_nofollow(r.dest / "bad.bin"));
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k)));
  CHECK(r.store->get_stats().files_failed == 1);
  // The core may retry: begin again and deliver.
  CHECK_FALSE(r.store->write(k, 0, std::span(data).first(block)));
  r.store->begin_file(k, r.spec("bad.bin", data.size()));
  r.feed_in_order(k, data);
  CHECK_FALSE(r.deliver(k, data).ec);
  CHECK(read_file(r.dest / "bad.bin") == data);
}

TEST_CASE(
    "a delivered file has the manifest's mode whatever the umask, set at creation when it can be",
    "[file_store]") {
  struct umask_guard {
    mode_t old;
    explicit umask_guard(mode_t m) : old(::umask(m)) {}
    ~umask_guard() { ::umask(old); }
    umask_guard(const umask_guard&) = delete;
    umask_guard& operator=(const umask_guard&) = delete;
  };
  struct expect {
    std::uint32_t mode;
    mode_t umask;
    bool stale_part;  ///< a .part of an earlier run lies there (mode 0600, longer than the file)
    int fchmods;      ///< fchmod calls the delivery takes
  };
  const expect x = GENERATE(expect{0644, 022, false, 0}, expect{0640, 022, false, 0},
                            expect{0664, 022, false, 1}, expect{0644, 077, false, 1},
                            expect{0400, 022, false, 1}, expect{01755, 022, false, 1},
                            expect{0644, 022, true, 1});
  CAPTURE(x.mode, x.umask, x.stale_part);
  const umask_guard um(x.umask);  // read by the store when it is made
  auto fchmods = std::make_shared<std::atomic<int>>(0);
  storage_config cfg;
  cfg.fault = [fchmods](storage_op op, const file_key*) {
    if (op == storage_op::fchmod) fchmods->fetch_add(1);
    return 0;
  };
  rig r(cfg);
  std::mt19937_64 rng(x.mode + x.umask);
  const auto k = key_of(0x77, 3);
  const auto data = random_bytes(rng, 10'000);
  if (x.stale_part) {
    fs::create_directories(file_store::temp_path(r.temp, k).parent_path());
    const auto junk = random_bytes(rng, 20'000);
    std::ofstream(file_store::temp_path(r.temp, k), std::ios::binary)
        .write(reinterpret_cast<const char*>(junk.data()),
               static_cast<std::streamsize>(junk.size()));
    fs::permissions(file_store::temp_path(r.temp, k),
                    fs::perms::owner_read | fs::perms::owner_write);
  }
  r.store->begin_file(k, r.spec("m.bin", data.size(), x.mode));
  r.feed_in_order(k, data);
  REQUIRE_FALSE(r.deliver(k, data).ec);
  CHECK(read_file(r.dest / "m.bin") == data);
  CHECK(file_mode(r.dest / "m.bin") == x.mode);
  CHECK(fchmods->load() == x.fchmods);
}

TEST_CASE("injected failures fail only the file concerned", "[file_store]") {
  std::mt19937_64 rng(9);
  const auto a = key_of(3, 0), b = key_of(3, 1), c = key_of(3, 2);
  struct injection {
    storage_op op;
    int error;
    std::errc expect;
  };
  const injection inj =
      GENERATE(injection{storage_op::pwrite, ENOSPC, std::errc::no_space_on_device},
               injection{storage_op::fallocate, ENOSPC, std::errc::no_space_on_device},
               injection{storage_op::open, EACCES, std::errc::permission_denied},
               injection{storage_op::pread, EIO, std::errc::io_error},
               injection{storage_op::fchmod, EPERM, std::errc::operation_not_permitted},
               injection{storage_op::fsync, EIO, std::errc::io_error},
               injection{storage_op::rename, EIO, std::errc::io_error});
  CAPTURE(to_string(inj.op));
  storage_config cfg;
  cfg.preallocate_min_bytes = 1;  // every non-empty file is fallocated
  cfg.fault = fail_nth(inj.op, 1, inj.error, b);
  // fsync of one file happens in a batch of one, or as the fallback of a failed syncfs.
  if (inj.op == storage_op::fsync) {
    cfg.sync = sync_mode::syncfs;
    cfg.fault = [f1 = fail_nth(storage_op::syncfs, 1, EIO),
                 f2 = fail_nth(storage_op::fsync, 1, EIO, b)](storage_op op, const file_key* k) {
      if (int e = f1(op, k)) return e;
      return f2(op, k);
    };
  }
  rig r(cfg);
  // A temp file is created with its final mode when the umask allows: 0400 lacks the owner's
  // write the writer needs, so it always takes an fchmod, whatever the umask.
  const std::uint32_t mode = inj.op == storage_op::fchmod ? 0400 : 0640;
  std::map<std::uint32_t, std::vector<std::byte>> data;
  for (auto k : {a, b, c}) {
    data[k.file.value] = random_bytes(rng, 30'000 + k.file.value);
    r.store->begin_file(
        k, r.spec("f" + std::to_string(k.file.value), data[k.file.value].size(), mode));
  }
  // Interleaved so the three share chunks; a pread happens only when b's data is read back.
  const bool gap = inj.op == storage_op::pread;
  for (auto k : {a, b, c}) {
    auto order = block_order(rng, data[k.file.value].size(), block, false, 0);
    if (gap && k == b) std::rotate(order.begin(), order.begin() + 1, order.end());
    for (auto off : order) {
      const auto& d = data[k.file.value];
      r.store->write(k, off,
                     std::span(d).subspan(off, std::min<std::size_t>(block, d.size() - off)));
    }
  }
  for (auto k : {a, b, c}) r.store->finalize(k, sha256(data[k.file.value]));
  r.store->flush();
  r.pq.run_until([&] { return r.results.count(a) && r.results.count(b) && r.results.count(c); });
  CHECK_FALSE(r.results.find(a)->ec);
  CHECK_FALSE(r.results.find(c)->ec);
  const auto rb = *r.results.find(b);
  CHECK(rb.ec == std::make_error_code(inj.expect));
  CHECK_FALSE(rb.detail.empty());
  CHECK(rb.detail.find(std::string(
            to_string(inj.op) == std::string_view("rename") ? "renameat" : to_string(inj.op))) !=
        std::string::npos);
  CHECK(read_file(r.dest / "f0") == data[0]);
  CHECK(read_file(r.dest / "f2") == data[2]);
  CHECK_FALSE(exists_nofollow(r.dest / "f1"));
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, b)));
  CHECK(r.results.count(b) == 1);  // exactly one outcome per begin_file
  // Refused until begun again, then delivered.
  CHECK_FALSE(r.store->write(b, 0, std::span(data[1]).first(block)));
  r.store->begin_file(b, r.spec("f1", data[1].size()));
  r.feed_in_order(b, data[1]);
  CHECK_FALSE(r.deliver(b, data[1]).ec);
  CHECK(read_file(r.dest / "f1") == data[1]);
}

TEST_CASE("a failed syncfs falls back to fsync per file and still delivers", "[file_store]") {
  std::mt19937_64 rng(10);
  storage_config cfg;
  cfg.sync = sync_mode::syncfs;
  fail_nth syncfs_fails(storage_op::syncfs, 1, EIO);
  cfg.fault = syncfs_fails;
  rig r(cfg);
  std::vector<std::vector<std::byte>> data;
  for (std::uint32_t i = 0; i < 5; ++i) {
    data.push_back(random_bytes(rng, 2000 + i));
    r.store->begin_file(key_of(4, i), r.spec("g" + std::to_string(i), data[i].size()));
    r.feed_in_order(key_of(4, i), data[i]);
  }
  for (std::uint32_t i = 0; i < 5; ++i) r.store->finalize(key_of(4, i), sha256(data[i]));
  r.store->flush();
  for (std::uint32_t i = 0; i < 5; ++i) CHECK_FALSE(r.wait_result(key_of(4, i)).ec);
  CHECK(syncfs_fails.seen() == 1);  // one batch, one syncfs
}

TEST_CASE("machine_dirty_bytes reads Dirty and Writeback of /proc/meminfo", "[file_store]") {
  const auto got = machine_dirty_bytes();
  REQUIRE(got.has_value());
  // Both lines of /proc/meminfo are in KiB: the sum is a whole number of KiB, and at most
  // all of memory.
  CHECK(*got % 1024 == 0);
  struct sysinfo si {};
  REQUIRE(::sysinfo(&si) == 0);
  CHECK(*got <= std::uint64_t{si.totalram} * si.mem_unit);
}

TEST_CASE(
    "adaptive group commit takes one syncfs on a clean page cache and range behind another "
    "writer's dirty data",
    "[file_store]") {
  std::mt19937_64 rng(12);
  // What the probe reports, and the sync calls made since the files were fed.
  const std::uint64_t limit = 1u << 20;
  const auto [dirty, want_syncfs] =
      GENERATE(std::pair<std::optional<std::uint64_t>, bool>{0, true},
               // The batch's own 5 files (~10 kB) are not held against it.
               std::pair<std::optional<std::uint64_t>, bool>{(1u << 20) + 8000, true},
               std::pair<std::optional<std::uint64_t>, bool>{64u << 20, false},
               std::pair<std::optional<std::uint64_t>, bool>{std::nullopt, false});
  CAPTURE(dirty.value_or(~0ull), want_syncfs);
  std::array<std::atomic<int>, static_cast<std::size_t>(storage_op::count_)> calls{};
  std::atomic<bool> counting{false};
  storage_config cfg;
  cfg.sync = sync_mode::adaptive;
  cfg.adaptive_dirty_limit_bytes = limit;
  cfg.dirty_probe = [dirty = dirty] { return dirty; };
  cfg.fault = [&](storage_op o, const file_key*) {
    if (counting) ++calls[static_cast<std::size_t>(o)];
    return 0;
  };
  rig r(cfg);
  std::vector<std::vector<std::byte>> data;
  // Two destination directories, so the batch has two to make durable.
  auto rel = [](std::uint32_t i) { return (i % 2 ? "a/" : "b/") + std::to_string(i); };
  for (std::uint32_t i = 0; i < 5; ++i) {
    data.push_back(random_bytes(rng, 2000 + i));
    r.store->begin_file(key_of(6, i), r.spec(rel(i), data[i].size()));
    r.feed_in_order(key_of(6, i), data[i]);
  }
  counting = true;
  // All five requests ride in one chunk: one batch.
  for (std::uint32_t i = 0; i < 5; ++i) r.store->finalize(key_of(6, i), sha256(data[i]));
  r.store->flush();
  for (std::uint32_t i = 0; i < 5; ++i) {
    CHECK_FALSE(r.wait_result(key_of(6, i)).ec);
    CHECK(read_file(r.dest / rel(i)) == data[i]);
  }
  auto n = [&](storage_op o) { return calls[static_cast<std::size_t>(o)].load(); };
  const auto st = r.store->get_stats();
  CHECK(st.commit_batches == 1);
  CHECK(st.commit_batches_syncfs == (want_syncfs ? 1u : 0u));
  if (want_syncfs) {
    CHECK(n(storage_op::syncfs) == 2);  // the data, then the renames and both directories
    CHECK(n(storage_op::fdatasync) == 0);
    CHECK(n(storage_op::dir_fsync) == 0);
  } else {
    CHECK(n(storage_op::syncfs) == 0);
    CHECK(n(storage_op::fdatasync) == 5);
    CHECK(n(storage_op::dir_fsync) >= 2);
  }
}

TEST_CASE(
    "every commit method fails only the file whose sync fails and delivers the rest of "
    "its batch",
    "[file_store]") {
  std::mt19937_64 rng(11);
  const sync_mode mode = GENERATE(sync_mode::syncfs, sync_mode::fdatasync, sync_mode::range,
                                  sync_mode::uring, sync_mode::file);
  CAPTURE(to_string(mode));
  const auto a = key_of(5, 0), b = key_of(5, 1), c = key_of(5, 2);
  // The call that makes b durable: fsync per file (file; syncfs after its syncfs failed, since
  // a failed syncfs does not say whose data was lost), fdatasync for the others.
  const storage_op op = mode == sync_mode::file || mode == sync_mode::syncfs
                            ? storage_op::fsync
                            : storage_op::fdatasync;
  std::mutex m;
  std::vector<file_key> synced;  // files whose sync call was made (or failed)
  storage_config cfg;
  cfg.sync = mode;
  cfg.fault = [&, syncfs_fails = fail_nth(storage_op::syncfs, 1, EIO),
               b_fails = fail_nth(op, 1, EIO, b)](storage_op o, const file_key* k) {
    if (int e = syncfs_fails(o, k)) return e;
    if (o == op && k != nullptr) {
      std::lock_guard lk(m);
      synced.push_back(*k);
    }
    return b_fails(o, k);
  };
  rig r(cfg);
  std::map<std::uint32_t, std::vector<std::byte>> data;
  for (auto k : {a, b, c}) {
    data[k.file.value] = random_bytes(rng, 3000 + k.file.value);
    r.store->begin_file(k, r.spec("d/h" + std::to_string(k.file.value), data[k.file.value].size()));
    r.feed_in_order(k, data[k.file.value]);
  }
  // All three finalize requests ride in one chunk, so the finalizer takes them as one batch.
  for (auto k : {a, b, c}) r.store->finalize(k, sha256(data[k.file.value]));
  r.store->flush();
  r.pq.run_until([&] { return r.results.count(a) && r.results.count(b) && r.results.count(c); });
  CHECK_FALSE(r.results.find(a)->ec);
  CHECK_FALSE(r.results.find(c)->ec);
  const auto rb = *r.results.find(b);
  CHECK(rb.ec == std::errc::io_error);
  CHECK(rb.detail.find(std::string(to_string(op))) != std::string::npos);
  CHECK(rb.detail.find("durable") != std::string::npos);
  CHECK(read_file(r.dest / "d" / "h0") == data[0]);
  CHECK(read_file(r.dest / "d" / "h2") == data[2]);
  CHECK_FALSE(exists_nofollow(r.dest / "d" / "h1"));
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, b)));
  std::lock_guard lk(m);
  std::sort(synced.begin(), synced.end(),
            [](file_key x, file_key y) { return x.file.value < y.file.value; });
  CHECK(synced == std::vector<file_key>{a, b, c});  // each file of the batch asked once
}

TEST_CASE("hostile destination paths are refused without writing outside", "[file_store]") {
  std::mt19937_64 rng(12);
  rig r;
  fs::create_directories(r.dest);
  const fs::path outside = r.dir.path() / "outside";
  fs::create_directories(outside);
  fs::create_directory_symlink(outside, r.dest / "link");
  write_plain_file(r.dest / "afile", random_bytes(rng, 10));
  fs::create_directories(r.dest / "adir");
  const auto data = random_bytes(rng, 3000);

  struct hostile {
    std::string rel;
    std::error_code expect;
  };
  const hostile h = GENERATE(
      hostile{"link/f", std::make_error_code(std::errc::too_many_symbolic_link_levels)},
      hostile{"link/deeper/f", std::make_error_code(std::errc::too_many_symbolic_link_levels)},
      hostile{"afile/f", std::make_error_code(std::errc::not_a_directory)},
      hostile{"adir", std::make_error_code(std::errc::is_a_directory)},
      hostile{"../escape", make_error_code(errc::path_dot_dot)},
      hostile{"a/../../escape", make_error_code(errc::path_dot_dot)},
      hostile{"/abs", make_error_code(errc::path_absolute)});
  CAPTURE(h.rel);
  const auto k = key_of(5, 0);
  r.store->begin_file(k, r.spec(h.rel, data.size()));
  for (std::uint64_t off = 0; off < data.size(); off += block)
    r.store->write(k, off,
                   std::span(data).subspan(off, std::min<std::size_t>(block, data.size() - off)));
  r.store->finalize(k, sha256(data));
  r.store->flush();
  const auto res = r.wait_result(k);
  CHECK(res.ec == h.expect);
  CHECK_FALSE(res.detail.empty());
  CHECK(fs::is_empty(outside));
  CHECK_FALSE(exists_nofollow(r.dir.path() / "escape"));
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k)));
  CHECK(fs::is_directory(r.dest / "adir"));
  CHECK(fs::is_regular_file(r.dest / "afile"));
  CHECK(r.results.count(k) == 1);
}

TEST_CASE("delivery replaces an existing file or symlink atomically and creates parents",
          "[file_store]") {
  std::mt19937_64 rng(13);
  rig r;
  fs::create_directories(r.dest / "x");
  write_plain_file(r.dest / "x" / "old", random_bytes(rng, 100));
  const fs::path target = r.dir.path() / "target";
  const auto target_data = random_bytes(rng, 10);
  write_plain_file(target, target_data);
  fs::create_symlink(target, r.dest / "x" / "sym");
  const auto d1 = random_bytes(rng, 5000), d2 = random_bytes(rng, 5000), d3 = random_bytes(rng, 77);
  r.store->begin_file(key_of(6, 0), r.spec("x/old", d1.size()));
  r.store->begin_file(key_of(6, 1), r.spec("x/sym", d2.size()));
  r.store->begin_file(key_of(6, 2), r.spec("n1/n2/n3/new", d3.size()));
  r.feed_in_order(key_of(6, 0), d1);
  r.feed_in_order(key_of(6, 1), d2);
  r.feed_in_order(key_of(6, 2), d3);
  CHECK_FALSE(r.deliver(key_of(6, 0), d1).ec);
  CHECK_FALSE(r.deliver(key_of(6, 1), d2).ec);
  CHECK_FALSE(r.deliver(key_of(6, 2), d3).ec);
  CHECK(read_file(r.dest / "x" / "old") == d1);
  CHECK_FALSE(fs::is_symlink(r.dest / "x" / "sym"));
  CHECK(read_file(r.dest / "x" / "sym") == d2);
  CHECK(read_file(target) == target_data);  // the link's target was not written through
  CHECK(read_file(r.dest / "n1/n2/n3/new") == d3);
}

TEST_CASE("a destination on another filesystem than temp_dir fails at begin", "[file_store]") {
  if (!fs::is_directory("/dev/shm")) return;
  struct stat a {
  }, b{};
  if (::stat("/dev/shm", &a) != 0 || ::stat("/tmp", &b) != 0 || a.st_dev == b.st_dev) return;
  scratch_dir shm("/dev/shm");
  storage_config cfg;
  cfg.temp_dir = shm.path() / "temp";
  rig r(cfg);  // dest under /tmp
  const auto k = key_of(7, 0);
  r.store->begin_file(k, r.spec("f", 10));
  const auto res = r.wait_result(k);
  CHECK(res.ec == std::make_error_code(std::errc::cross_device_link));
  CHECK(res.detail.find("different filesystems") != std::string::npos);
  CHECK_FALSE(exists_nofollow(file_store::temp_path(cfg.temp_dir, k)));
}

TEST_CASE("writes are refused for unknown files, out-of-range blocks and finalizing files",
          "[file_store]") {
  std::mt19937_64 rng(14);
  rig r;
  const auto k = key_of(8, 0);
  const auto data = random_bytes(rng, 3000);
  CHECK_FALSE(r.store->write(k, 0, std::span(data).first(10)));
  r.store->begin_file(k, r.spec("f", data.size()));
  CHECK_FALSE(r.store->write(k, 2999, std::span(data).first(2)));
  CHECK_FALSE(r.store->write(k, UINT64_MAX, std::span(data).first(2)));
  CHECK(r.store->write(k, 3000, std::span(data).first(0)));
  r.feed_in_order(k, data);
  r.store->finalize(k, sha256(data));
  CHECK_FALSE(r.store->write(k, 0, std::span(data).first(10)));
  r.store->flush();
  CHECK_FALSE(r.wait_result(k).ec);
  CHECK_FALSE(r.store->write(k, 0, std::span(data).first(10)));
}

TEST_CASE("begin_file during finalize restarts the file after the result", "[file_store]") {
  std::mt19937_64 rng(15);
  rig r;
  const auto k = key_of(9, 0);
  const auto d1 = random_bytes(rng, 4000), d2 = random_bytes(rng, 6000);
  r.store->begin_file(k, r.spec("again", d1.size()));
  r.feed_in_order(k, d1);
  r.store->finalize(k, sha256(d1));
  r.store->begin_file(k, r.spec("again", d2.size()));  // deferred
  CHECK_FALSE(r.store->write(k, 0, std::span(d2).first(block)));
  r.store->flush();
  CHECK_FALSE(r.wait_result(k).ec);
  CHECK(read_file(r.dest / "again") == d1);
  r.feed_in_order(k, d2);
  CHECK_FALSE(r.deliver(k, d2).ec);
  CHECK(read_file(r.dest / "again") == d2);
}

TEST_CASE("many files through a tiny descriptor budget are reopened on demand", "[file_store]") {
  std::mt19937_64 rng(16);
  storage_config cfg;
  cfg.max_open_files = 2;
  cfg.sync = sync_mode::none;
  rig r(cfg);
  constexpr std::uint32_t n = 9;
  std::vector<std::vector<std::byte>> data;
  for (std::uint32_t i = 0; i < n; ++i) {
    data.push_back(random_bytes(rng, 20'000 + 37 * i));
    r.store->begin_file(key_of(10, i), r.spec("lru/" + std::to_string(i), data[i].size()));
  }
  // Round robin, block by block, flushing each round: every chunk mixes files.
  for (std::uint64_t off = 0; off < 21'000; off += block) {
    for (std::uint32_t i = 0; i < n; ++i) {
      if (off >= data[i].size()) continue;
      REQUIRE(r.store->write(
          key_of(10, i), off,
          std::span(data[i]).subspan(off, std::min<std::size_t>(block, data[i].size() - off))));
    }
    r.store->flush();
  }
  for (std::uint32_t i = 0; i < n; ++i) r.store->finalize(key_of(10, i), sha256(data[i]));
  r.store->flush();
  for (std::uint32_t i = 0; i < n; ++i) {
    CHECK_FALSE(r.wait_result(key_of(10, i)).ec);
    CHECK(read_file(r.dest / "lru" / std::to_string(i)) == data[i]);
  }
}

TEST_CASE("discard_file and close_session remove temp files", "[file_store]") {
  std::mt19937_64 rng(17);
  rig r;
  const auto data = random_bytes(rng, 5000);
  const auto k1 = key_of(11, 0), k2 = key_of(11, 1), k3 = key_of(12, 0);
  for (auto k : {k1, k2, k3}) {
    r.store->begin_file(
        k, r.spec("d" + std::to_string(k.session.value) + "_" + std::to_string(k.file.value),
                  data.size()));
    r.feed_in_order(k, data);
  }
  r.store->flush();
  r.barrier();
  CHECK(exists_nofollow(file_store::temp_path(r.temp, k1)));
  r.store->discard_file(k1);
  r.barrier();
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k1)));
  CHECK(exists_nofollow(file_store::temp_path(r.temp, k2)));
  CHECK_FALSE(r.store->write(k1, 0, std::span(data).first(10)));

  // close without removing keeps the .part (resume), with removing deletes the directory.
  r.store->close_session(session_id{12}, false);
  r.barrier();
  CHECK(exists_nofollow(file_store::temp_path(r.temp, k3)));
  CHECK_FALSE(r.store->write(k3, 0, std::span(data).first(10)));
  r.store->close_session(session_id{11}, true);
  r.barrier(11);  // same session id again: waits for the removal, then works
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k2)));
  CHECK(r.results.count(k1) == 0);
  CHECK(r.results.count(k2) == 0);
  CHECK(r.results.count(k3) == 0);
}

TEST_CASE("resume keeps the bytes of an existing temp file; a fresh begin does not",
          "[file_store]") {
  std::mt19937_64 rng(18);
  scratch_dir dir;
  const fs::path temp = dir.path() / "temp";
  const auto data = random_bytes(rng, 100'000);
  const auto k = key_of(0xdeadbeef, 42);
  const std::size_t half = 50 * block;
  auto make_spec = [&] {
    file_spec s;
    s.dest_root = dir.path() / "dest";
    s.relative_path = "resumed";
    s.size = data.size();
    s.mtime_ns = 1'000'000'000;
    s.mode = 0600;
    return s;
  };
  {
    post_queue pq;
    result_log results;
    storage_config cfg;
    cfg.temp_dir = temp;
    file_store store(cfg, pq.poster(), results.sink());
    store.begin_file(k, make_spec());
    for (std::uint64_t off = 0; off < half; off += block)
      REQUIRE(store.write(k, off, std::span(data).subspan(off, block)));
    store.checkpoint(k.session, state_blob(k.session));
  }  // destruction drains the writes and the checkpoint, keeps the temp file
  CHECK(fs::file_size(file_store::temp_path(temp, k)) >= half);
  const auto saved = load_checkpoints(temp);
  REQUIRE(saved.size() == 1);
  CHECK(saved[0].first == k.session);
  CHECK(saved[0].second == state_blob(k.session));

  const bool resume = GENERATE(true, false);
  CAPTURE(resume);
  post_queue pq;
  result_log results;
  storage_config cfg;
  cfg.temp_dir = temp;
  file_store store(cfg, pq.poster(), results.sink());
  store.begin_file(k, make_spec(), resume);
  for (std::uint64_t off = half; off < data.size(); off += block)
    REQUIRE(store.write(
        k, off, std::span(data).subspan(off, std::min<std::size_t>(block, data.size() - off))));
  store.finalize(k, sha256(data));
  store.flush();
  pq.run_until([&] { return results.count(k) == 1; });
  if (resume) {
    CHECK_FALSE(results.find(k)->ec);
    CHECK(read_file(dir.path() / "dest" / "resumed") == data);
  } else {
    CHECK(results.find(k)->ec == make_error_code(errc::digest_mismatch));
  }
  store.close_session(k.session, true);
}

TEST_CASE("a checkpoint is written only after the writes queued before it", "[file_store]") {
  std::mt19937_64 rng(19);
  event writer_blocked, release, state_renamed;
  std::mutex log_mutex;
  std::vector<std::pair<storage_op, bool>> ops;  // (op, concerns a file)
  storage_config cfg;
  cfg.fault = [&](storage_op op, const file_key* k) {
    {
      std::lock_guard lk(log_mutex);
      ops.emplace_back(op, k != nullptr);
    }
    if (op == storage_op::pwrite && k != nullptr && !writer_blocked.is_set()) {
      writer_blocked.set();
      release.wait();
    }
    if (op == storage_op::dir_fsync && k == nullptr) state_renamed.set();
    return 0;
  };
  rig r(cfg);
  const auto k = key_of(13, 0);
  const auto data = random_bytes(rng, 20'000);
  r.store->begin_file(k, r.spec("ck", data.size()));
  r.feed_in_order(k, data);
  r.store->checkpoint(k.session, "after 20000 bytes");
  writer_blocked.wait();
  const fs::path state = r.temp / "0000000d" / "state";
  CHECK_FALSE(exists_nofollow(state));
  release.set();
  state_renamed.wait();
  CHECK(exists_nofollow(state));
  std::ifstream in(state);
  std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(blob == "after 20000 bytes");
  const auto part = read_file(file_store::temp_path(r.temp, k));
  CHECK(std::equal(data.begin(), data.end(), part.begin()));
  // Order of system calls: every data pwrite, then syncfs, then the state's own writes.
  std::lock_guard lk(log_mutex);
  std::size_t last_data_write = 0, first_syncfs = SIZE_MAX;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].first == storage_op::pwrite && ops[i].second) last_data_write = i;
    if (ops[i].first == storage_op::syncfs && first_syncfs == SIZE_MAX) first_syncfs = i;
  }
  CHECK(last_data_write < first_syncfs);
}

TEST_CASE("query_held answers from the xattr, by hashing, and never for mismatches",
          "[file_store]") {
  std::mt19937_64 rng(20);
  storage_config cfg;
  cfg.hash_held_max_bytes = 100'000;
  rig r(cfg);
  const std::int64_t mtime = 1'650'000'000'000'000'001;
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 8; ++i) data.push_back(random_bytes(rng, i == 6 ? 200'000 : 5'000 + i));
  // 0: delivered (xattr).  1: plain copy, no xattr.  2: delivered, then xattr made stale.
  // 3: delivered, xattr says another size.  4: wrong size.  5: a symlink to a good file.
  // 6: too big to hash, no xattr.  7: missing.
  for (std::uint32_t i : {0u, 2u, 3u}) {
    const auto k = key_of(14, i);
    r.store->begin_file(k, r.spec("h/" + std::to_string(i), data[i].size(), 0644, mtime));
    r.feed_in_order(k, data[i]);
    REQUIRE_FALSE(r.deliver(k, data[i]).ec);
  }
  auto set_mtime = [&](const fs::path& p) {
    const struct timespec ts[2] = {{0, UTIME_OMIT}, {mtime / 1'000'000'000, mtime % 1'000'000'000}};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW) == 0);
  };
  write_plain_file(r.dest / "h/1", data[1]);
  set_mtime(r.dest / "h/1");
  // Stale: records a different mtime, so it must not be trusted even though its digest is junk.
  const std::string stale = std::string(64, 'a') + " " + std::to_string(data[2].size()) + " 5";
  REQUIRE(::setxattr((r.dest / "h/2").c_str(), "user.mcdist.sha256", stale.data(), stale.size(),
                     0) == 0);
  const std::string other = std::string(64, 'b') + " 1 " + std::to_string(mtime);
  REQUIRE(::setxattr((r.dest / "h/3").c_str(), "user.mcdist.sha256", other.data(), other.size(),
                     0) == 0);
  write_plain_file(r.dest / "h/4", data[4]);
  set_mtime(r.dest / "h/4");
  fs::create_symlink(r.dest / "h/1", r.dest / "h/5");
  write_plain_file(r.dest / "h/6", data[6]);
  set_mtime(r.dest / "h/6");

  std::vector<held_query> q;
  for (std::uint32_t i = 0; i < 8; ++i)
    q.push_back(held_query{file_index{i}, "h/" + std::to_string(i),
                           i == 4 ? data[i].size() + 1 : data[i].size(), mtime});
  q.push_back(held_query{file_index{99}, "../h/0", data[0].size(), mtime});
  std::optional<std::vector<held_answer>> got;
  r.store->query_held(q, r.dest, [&](std::vector<held_answer> a) { got = std::move(a); });
  r.pq.run_until([&] { return got.has_value(); });
  std::map<std::uint32_t, sha256_digest> by_file;
  for (const auto& a : *got) by_file[a.file.value] = a.digest;
  CHECK(by_file.size() == 4);
  CHECK(by_file[0] == sha256(data[0]));
  CHECK(by_file[1] == sha256(data[1]));
  CHECK(by_file[2] == sha256(data[2]));
  CHECK(by_file[3] == sha256(data[3]));
}

TEST_CASE("an exhausted pool refuses writes and recovers once the writer drains", "[file_store]") {
  std::mt19937_64 rng(21);
  event writer_blocked, release;
  storage_config cfg;
  cfg.chunk_bytes = 4096;
  cfg.buffer_pool_bytes = 2 * 4096;
  cfg.sync = sync_mode::none;
  cfg.fault = [&](storage_op op, const file_key* k) {
    if (op == storage_op::pwrite && k != nullptr && !writer_blocked.is_set()) {
      writer_blocked.set();
      release.wait();
    }
    return 0;
  };
  rig r(cfg);
  const auto k = key_of(15, 0);
  const auto data = random_bytes(rng, 64 * 1024);
  r.store->begin_file(k, r.spec("pool", data.size()));
  std::uint64_t off = 0;
  bool refused = false;
  for (; off < data.size(); off += block) {
    if (!r.store->write(
            k, off,
            std::span(data).subspan(off, std::min<std::size_t>(block, data.size() - off)))) {
      refused = true;
      break;
    }
  }
  REQUIRE(refused);
  CHECK(off == 5 * block);  // two 4096-byte buffers hold blocks 0-4 and part of block 5
  writer_blocked.wait();
  auto st = r.store->get_stats();
  CHECK(st.pool_exhausted == 1);
  CHECK(st.chunks_in_flight == 2);
  CHECK_FALSE(r.store->write(k, off, std::span(data).subspan(off, block)));
  release.set();
  r.barrier();  // every chunk queued before the probe is back in the pool
  CHECK(r.store->get_stats().chunks_in_flight == 1);  // the buffer being filled
  // The producer outruns the writer again and again; each time the writer drains, writes
  // are taken again.
  std::size_t refusals = 0;
  for (; off < data.size(); off += block) {
    const auto blk = std::span(data).subspan(off, std::min<std::size_t>(block, data.size() - off));
    if (!r.store->write(k, off, blk)) {
      ++refusals;
      r.barrier();
      REQUIRE(r.store->write(k, off, blk));
    }
  }
  CHECK(r.store->get_stats().pool_exhausted == 2 + refusals);
  CHECK_FALSE(r.deliver(k, data).ec);
  CHECK(read_file(r.dest / "pool") == data);
}

TEST_CASE("a block larger than a chunk is split across chunks", "[file_store]") {
  std::mt19937_64 rng(22);
  storage_config cfg;
  cfg.chunk_bytes = 1000;
  cfg.buffer_pool_bytes = 64 * 1000;
  cfg.sync = sync_mode::none;
  rig r(cfg);
  const auto k = key_of(16, 0);
  const auto data = random_bytes(rng, 30'000);
  r.store->begin_file(k, r.spec("big-blocks", data.size()));
  REQUIRE(r.store->write(k, 0, std::span(data).first(12'345)));
  REQUIRE(r.store->write(k, 12'345, std::span(data).subspan(12'345)));
  CHECK_FALSE(r.deliver(k, data).ec);
  CHECK(read_file(r.dest / "big-blocks") == data);
}

TEST_CASE("bad configurations are refused at construction", "[file_store]") {
  scratch_dir dir;
  post_queue pq;
  auto make = [&](storage_config cfg) { file_store s(std::move(cfg), pq.poster(), nullptr); };
  storage_config cfg;
  CHECK_THROWS_AS(make(cfg), std::invalid_argument);
  cfg.temp_dir = dir.path() / "t";
  cfg.chunk_bytes = 0;
  CHECK_THROWS_AS(make(cfg), std::invalid_argument);
  cfg.chunk_bytes = 1 << 20;
  cfg.buffer_pool_bytes = 1 << 10;
  CHECK_THROWS_AS(make(cfg), std::invalid_argument);
  cfg.buffer_pool_bytes = 1 << 20;
  write_plain_file(dir.path() / "file", {});
  cfg.temp_dir = dir.path() / "file" / "t";
  CHECK_THROWS_AS(make(cfg), std::system_error);
}

TEST_CASE("a low soft descriptor limit is raised towards the hard limit", "[file_store]") {
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 4096) return;  // nothing to show
  struct rlimit low = saved;
  low.rlim_cur = 128;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  {
    rig r;
    struct rlimit now {};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
    CHECK(now.rlim_cur > 1024);
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
}

// --- budgets and temp-dir safety -----------------------------------------------------------------

TEST_CASE("a symlink planted at temp/<session> is refused, not followed; the file fails",
          "[file_store][budget]") {
  scratch_dir elsewhere;
  storage_config cfg;
  rig r(cfg);
  const auto k = key_of(0x00c0ffee, 0);
  fs::create_symlink(elsewhere.path(), r.temp / "00c0ffee");
  std::mt19937_64 rng(5);
  const auto data = random_bytes(rng, 3000);
  r.store->begin_file(k, r.spec("x", data.size()));
  const auto res = r.wait_result(k);
  CHECK(res.ec == std::make_error_code(std::errc::too_many_symbolic_link_levels));
  CHECK(res.detail.find("symlink") != std::string::npos);
  CHECK_FALSE(r.store->write(k, 0, std::span(data).first(1400)));
  r.store->checkpoint(k.session, "state blob");
  r.barrier();
  CHECK(fs::is_empty(elsewhere.path()));  // no temp file, no state written through the link
  CHECK(fs::is_symlink(r.temp / "00c0ffee"));
  // Another session is unaffected.
  const auto k2 = key_of(0x00c0fff0, 0);
  r.store->begin_file(k2, r.spec("y", data.size()));
  r.feed_in_order(k2, data);
  CHECK_FALSE(r.deliver(k2, data).ec);
  CHECK(read_file(r.dest / "y") == data);
}

TEST_CASE(
    "a file that would eat into the disk reserve fails with disk_reserve before any "
    "allocation",
    "[file_store][budget]") {
  storage_config cfg;
  cfg.disk_reserve_bytes = UINT64_MAX;
  cfg.disk_reserve_percent = 50;  // half the temp filesystem must stay free
  rig r(cfg);
  struct statvfs sv {};
  REQUIRE(::statvfs(r.temp.c_str(), &sv) == 0);
  const std::uint64_t avail = std::uint64_t{sv.f_bavail} * sv.f_frsize;
  const std::uint64_t total = std::uint64_t{sv.f_blocks} * sv.f_frsize;
  // An announced size that would leave less than half free: refused without a byte written.
  const std::uint64_t size = avail > total / 2 ? avail - total / 2 + 1 : 1;
  const auto k = key_of(7, 0);
  r.store->begin_file(k, r.spec("huge", size));
  const auto res = r.wait_result(k);
  CHECK(res.ec == make_error_code(errc::disk_reserve));
  CHECK(res.ec.message() == "disk reserve");
  CHECK(res.detail.find("disk_reserve") != std::string::npos);
  CHECK_FALSE(exists_nofollow(file_store::temp_path(r.temp, k)));
  // A small file of the same session still fits (a real disk here has over half free, else
  // this part is skipped).
  if (avail > total / 2 + (1 << 20)) {
    std::mt19937_64 rng(6);
    const auto data = random_bytes(rng, 5000);
    const auto k2 = key_of(7, 1);
    r.store->begin_file(k2, r.spec("small", data.size()));
    r.feed_in_order(k2, data);
    CHECK_FALSE(r.deliver(k2, data).ec);
  }
}

TEST_CASE("a session's files being written are bounded by its quota; finished files free it",
          "[file_store][budget]") {
  storage_config cfg;
  cfg.session_quota_bytes = 10'000;
  rig r(cfg);
  std::mt19937_64 rng(8);
  const auto a = random_bytes(rng, 6000);
  const auto b = random_bytes(rng, 6000);
  r.store->begin_file(key_of(9, 0), r.spec("a", a.size()));
  r.store->begin_file(key_of(9, 1), r.spec("b", b.size()));   // 12,000 > 10,000
  r.store->begin_file(key_of(10, 0), r.spec("c", b.size()));  // another session: its own quota
  const auto rb = r.wait_result(key_of(9, 1));
  CHECK(rb.ec == make_error_code(errc::quota));
  CHECK(rb.ec.message() == "quota");
  r.feed_in_order(key_of(9, 0), a);
  CHECK_FALSE(r.deliver(key_of(9, 0), a).ec);
  r.feed_in_order(key_of(10, 0), b);
  CHECK_FALSE(r.deliver(key_of(10, 0), b).ec);
  // a is delivered: b fits now.
  r.store->begin_file(key_of(9, 1), r.spec("b", b.size()));
  r.feed_in_order(key_of(9, 1), b);
  CHECK_FALSE(r.deliver(key_of(9, 1), b).ec);
  CHECK(read_file(r.dest / "b") == b);
}

TEST_CASE("start-up removes temp directories of sessions without saved state, and only those",
          "[file_store][budget]") {
  scratch_dir d;
  const fs::path temp = d.path() / "temp";
  scratch_dir elsewhere;
  fs::create_directories(temp / "0000000a");  // kept: has state
  const std::string state = state_blob(session_id{0xa});
  write_plain_file(temp / "0000000a" / "state", std::as_bytes(std::span(state)));
  fs::create_directories(temp / "0000000b");  // orphan: .part only
  write_plain_file(temp / "0000000b" / "0.part", std::vector<std::byte>(100));
  fs::create_symlink(elsewhere.path(), temp / "0000000c");  // a planted link: removed, not followed
  write_plain_file(elsewhere.path() / "keep-me", std::vector<std::byte>(1));
  fs::create_directories(temp / "not-a-session");
  auto log = spdlog::default_logger();
  const auto loaded = load_checkpoints(temp);
  REQUIRE(loaded.size() == 1);
  std::vector<session_id> keep{loaded[0].first};
  CHECK(sweep_temp(temp, keep, *log) == 2);
  CHECK(fs::exists(temp / "0000000a" / "state"));
  CHECK_FALSE(fs::exists(temp / "0000000b"));
  CHECK_FALSE(fs::is_symlink(temp / "0000000c"));
  CHECK(fs::exists(elsewhere.path() / "keep-me"));
  CHECK(fs::exists(temp / "not-a-session"));
}

/// A configuration with temp_dir and two channels' destination trees (ch0, ch1) in `dir`.
static storage_config two_channels(const scratch_dir& dir) {
  storage_config cfg;
  cfg.temp_dir = dir.path() / "temp";
  cfg.dest_roots = {dir.path() / "ch0", dir.path() / "ch1"};
  return cfg;
}

TEST_CASE("storage_port calls deliver below the channel's destination tree", "[file_store]") {
  std::mt19937_64 rng(31);
  scratch_dir dir;
  post_queue pq;
  result_log results;
  storage_config cfg = two_channels(dir);
  std::optional<std::pair<session_id, std::vector<held_answer>>> held;
  file_store store(cfg, pq.poster(), results.sink(), [&](session_id s, std::vector<held_answer> a) {
    held.emplace(s, std::move(a));
  });
  storage_port& port = store;

  const auto data = random_bytes(rng, 5000);
  manifest_entry e;
  e.path = "obs/a.bin";
  e.size = data.size();
  e.mtime_ns = 1'700'000'000'000'000'000;
  e.mode = 0644;
  const file_key k = key_of(40, 0);
  port.begin_file(k, 1, e, false);
  for (std::uint64_t off = 0; off < data.size(); off += block) {
    const std::size_t n = std::min<std::size_t>(block, data.size() - off);
    REQUIRE(port.write(k, off, std::span(data).subspan(off, n)));
  }
  port.finalize(k, sha256(data));
  store.flush();
  pq.run_until([&] { return results.count(k) == 1; });
  CHECK_FALSE(results.find(k)->ec);
  CHECK(read_file(dir.path() / "ch1/obs/a.bin") == data);
  CHECK_FALSE(fs::exists(dir.path() / "ch0/obs"));

  // The delivered file is found held on channel 1, not on channel 0.
  port.query_held(session_id{41}, 1, {held_query{file_index{3}, e.path, e.size, e.mtime_ns}});
  pq.run_until([&] { return held.has_value(); });
  CHECK(held->first == session_id{41});
  REQUIRE(held->second.size() == 1);
  CHECK(held->second[0].file == file_index{3});
  CHECK(held->second[0].digest == sha256(data));
  held.reset();
  port.query_held(session_id{41}, 0, {held_query{file_index{3}, e.path, e.size, e.mtime_ns}});
  pq.run_until([&] { return held.has_value(); });
  CHECK(held->second.empty());

  // A channel without a destination fails the file instead of writing anywhere.
  const file_key bad = key_of(40, 1);
  port.begin_file(bad, 7, e, false);
  pq.run_until([&] { return results.count(bad) == 1; });
  CHECK(results.find(bad)->ec == std::errc::invalid_argument);
}

TEST_CASE(
    "the before_renames hook sees each batch after its data is durable and before any "
    "rename",
    "[file_store]") {
  std::mt19937_64 rng(32);
  std::mutex m;
  std::vector<std::string> events;  // "sync", "hook:<n files>", "rename"
  storage_config cfg;
  cfg.sync = sync_mode::batch;
  cfg.fault = [&](storage_op op, const file_key* k) {
    std::lock_guard lk(m);
    if (k != nullptr && k->session == session_id{50}) {
      if (op == storage_op::rename) events.push_back("rename");
      if (op == storage_op::fsync || op == storage_op::fdatasync) events.push_back("sync");
    }
    if (op == storage_op::syncfs) events.push_back("sync");
    return 0;
  };
  std::vector<file_key> hooked;
  cfg.before_renames = [&](std::span<const pending_rename> files) {
    std::lock_guard lk(m);
    events.push_back("hook:" + std::to_string(files.size()));
    for (const auto& f : files) {
      hooked.push_back(f.key);
      CHECK(f.spec != nullptr);
      CHECK(f.digest != sha256_digest{});
    }
  };
  rig r(cfg);
  std::vector<std::vector<std::byte>> data;
  const std::uint32_t n = 4;
  for (std::uint32_t i = 0; i < n; ++i) {
    data.push_back(random_bytes(rng, 3000 + i));
    r.store->begin_file(key_of(50, i), r.spec("b" + std::to_string(i), data[i].size()));
    r.feed_in_order(key_of(50, i), data[i]);
  }
  // One file with a wrong digest: verified out, so not offered to the hook nor renamed.
  for (std::uint32_t i = 0; i < n; ++i)
    r.store->finalize(key_of(50, i), i == 2 ? sha256_digest{} : sha256(data[i]));
  r.store->flush();
  for (std::uint32_t i = 0; i < n; ++i) r.wait_result(key_of(50, i));
  std::lock_guard lk(m);
  CHECK(std::find(hooked.begin(), hooked.end(), key_of(50, 2)) == hooked.end());
  CHECK(hooked.size() == n - 1);
  // Every hook call follows a sync of its batch and precedes that batch's renames.
  std::size_t renames = 0;
  bool synced = false;
  bool hooked_batch = false;
  for (const auto& ev : events) {
    if (ev == "sync") {
      synced = true;
    } else if (ev.rfind("hook:", 0) == 0) {
      CHECK(synced);
      hooked_batch = true;
      synced = false;
    } else {
      CHECK(hooked_batch);
      ++renames;
    }
  }
  CHECK(renames == n - 1);
}

TEST_CASE(
    "a finalize batch gathers files for its linger: a full batch goes at once, a stop ends the "
    "wait and delivers what was gathered",
    "[file_store]") {
  std::mt19937_64 rng(34);
  std::mutex m;
  std::vector<std::size_t> batches;  // files in each before_renames call
  storage_config cfg;
  cfg.sync = sync_mode::none;  // the gathering, not the sync, is under test
  // Longer than any test may run: only a full batch or the store's stop may end the wait.
  cfg.finalize_linger = std::chrono::hours(1);
  cfg.before_renames = [&](std::span<const pending_rename> files) {
    std::lock_guard lk(m);
    batches.push_back(files.size());
  };
  rig r(cfg);
  const std::uint32_t n = finalizer::batch_max;
  std::vector<std::vector<std::byte>> data;
  for (std::uint32_t i = 0; i < n + 1; ++i) data.push_back(random_bytes(rng, 100 + i));
  // One at a time, each flushed to the finalizer on its own: still one batch of batch_max.
  for (std::uint32_t i = 0; i < n; ++i) {
    r.store->begin_file(key_of(70, i), r.spec("g" + std::to_string(i), data[i].size()));
    r.feed_in_order(key_of(70, i), data[i]);
    r.store->finalize(key_of(70, i), sha256(data[i]));
    r.store->flush();
  }
  for (std::uint32_t i = 0; i < n; ++i) CHECK(r.wait_result(key_of(70, i)).ec == std::error_code{});
  {
    std::lock_guard lk(m);
    CHECK(batches == std::vector<std::size_t>{n});
  }
  // One more file: its batch would wait an hour; stopping the store delivers it now.
  const file_key last = key_of(70, n);
  r.store->begin_file(last, r.spec("last", data[n].size()));
  r.feed_in_order(last, data[n]);
  r.store->finalize(last, sha256(data[n]));
  r.store->flush();
  r.store.reset();  // the writer hands everything on, then the finalizer drains its queue
  CHECK(read_file(r.dest / "last") == data[n]);
  std::lock_guard lk(m);
  CHECK(batches == std::vector<std::size_t>{n, 1});
}

TEST_CASE(
    "after_renames hears the hooked files that did not end in place, and the hooks see each "
    "file's channel and sender key",
    "[file_store]") {
  std::mt19937_64 rng(33);
  scratch_dir dir;
  post_queue pq;
  result_log results;
  storage_config cfg = two_channels(dir);
  cfg.sender_key_of = [](session_id s) {
    return s == session_id{60} ? std::string("mcdist-ed25519:K60") : std::string();
  };
  // The second file's rename fails as a full directory would make it.
  const file_key refused = key_of(60, 1);
  cfg.fault = [&](storage_op op, const file_key* k) {
    return op == storage_op::rename && k != nullptr && *k == refused ? ENOSPC : 0;
  };
  std::mutex m;
  std::vector<std::tuple<file_key, std::uint32_t, std::string>> hooked;
  std::vector<file_key> failed;
  std::size_t after_calls = 0;
  cfg.before_renames = [&](std::span<const pending_rename> files) {
    std::lock_guard lk(m);
    for (const auto& f : files) hooked.emplace_back(f.key, f.spec->channel, f.spec->sender_key);
  };
  cfg.after_renames = [&](std::span<const pending_rename> files) {
    std::lock_guard lk(m);
    ++after_calls;
    for (const auto& f : files) failed.push_back(f.key);
  };
  file_store store(cfg, pq.poster(), results.sink());
  storage_port& port = store;

  std::vector<std::vector<std::byte>> data;
  const std::vector<file_key> keys{key_of(60, 0), refused, key_of(61, 0)};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    data.push_back(random_bytes(rng, 2000 + i));
    manifest_entry e;
    e.path = "f" + std::to_string(i);
    e.size = data[i].size();
    e.mtime_ns = 1'700'000'000'000'000'000;
    e.mode = 0644;
    port.begin_file(keys[i], 1, e, false);
    REQUIRE(port.write(keys[i], 0, data[i]));
    port.finalize(keys[i], sha256(data[i]));
  }
  store.flush();
  pq.run_until([&] { return results.all.size() == keys.size(); });
  CHECK_FALSE(results.find(keys[0])->ec);
  CHECK(results.find(refused)->ec == std::errc::no_space_on_device);
  CHECK_FALSE(results.find(keys[2])->ec);
  CHECK(fs::exists(dir.path() / "ch1" / "f0"));
  CHECK_FALSE(fs::exists(dir.path() / "ch1" / "f1"));

  std::lock_guard lk(m);
  REQUIRE(hooked.size() == 3);
  for (const auto& [k, channel, key] : hooked) {
    CHECK(channel == 1);
    CHECK(key == (k.session == session_id{60} ? "mcdist-ed25519:K60" : ""));
  }
  CHECK(failed == std::vector<file_key>{refused});
  CHECK(after_calls >= 1);
}
