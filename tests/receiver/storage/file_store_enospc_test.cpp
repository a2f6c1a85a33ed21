// A real full disk: a 2 MiB tmpfs mounted for the test. Needs root (CAP_SYS_ADMIN); prints
// "SKIPPED: ..." and exits 77 otherwise.
#include "receiver/storage/file_store.hpp"

#include "common/error.hpp"
#include "tests/receiver/storage/file_store_test_util.hpp"

#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t block = 1400;
/// Size of the test filesystem: big enough for the small files, too small for the big one.
constexpr const char* tmpfs_options = "size=2m";

/// Mounts a tiny tmpfs on a scratch directory for the test's lifetime.
class tiny_tmpfs {
 public:
  tiny_tmpfs() {
    if (::geteuid() != 0) skip("needs root to mount a tmpfs");
    m_dir.emplace();
    if (::mount("mcdist-test", m_dir->path().c_str(), "tmpfs", 0, tmpfs_options) != 0) {
      const std::string why = std::string("cannot mount a tmpfs: ") + std::strerror(errno);
      m_dir.reset();
      skip(why);
    }
  }
  ~tiny_tmpfs() { ::umount2(m_dir->path().c_str(), MNT_DETACH); }
  const fs::path& path() const { return m_dir->path(); }

 private:
  [[noreturn]] static void skip(const std::string& why) {
    std::printf("SKIPPED: %s\n", why.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  std::optional<scratch_dir> m_dir;
};

struct enospc_case {
  const char* name;
  std::uint64_t preallocate_min;
  const char* failing_call;
  bool reserve;  ///< the free-space reserve check is on (it refuses b before any allocation)
};

}  // namespace

TEST_CASE("a full filesystem fails the file that does not fit, the others are delivered",
          "[file_store][integration]") {
  const enospc_case c =
      GENERATE(enospc_case{"at fallocate", 1u << 20, "fallocate", false},
               enospc_case{"at pwrite", UINT64_MAX, "pwrite", false},
               enospc_case{"by the disk reserve", UINT64_MAX, "disk_reserve", true});
  CAPTURE(c.name);
  tiny_tmpfs mnt;
  std::mt19937_64 rng(31);
  post_queue pq;
  result_log results;
  storage_config cfg;
  cfg.temp_dir = mnt.path() / "temp";
  cfg.preallocate_min_bytes = c.preallocate_min;
  if (!c.reserve) cfg.disk_reserve_bytes = 0;  // no reserve check: let the real ENOSPC happen
  cfg.sync = sync_mode::batch;
  file_store store(cfg, pq.poster(), results.sink());

  const auto small_a = random_bytes(rng, 100'000);
  const auto big = random_bytes(rng, 3'000'000);
  const auto small_c = random_bytes(rng, 120'000);
  const auto ka = key_of(1, 0), kb = key_of(1, 1), kc = key_of(1, 2);
  auto spec = [&](std::string rel, std::uint64_t size) {
    file_spec s;
    s.dest_root = mnt.path() / "dest";
    s.relative_path = std::move(rel);
    s.size = size;
    s.mtime_ns = 0;
    s.mode = 0644;
    return s;
  };
  store.begin_file(ka, spec("a", small_a.size()));
  store.begin_file(kb, spec("b", big.size()));
  store.begin_file(kc, spec("c", small_c.size()));
  auto feed = [&](file_key k, const std::vector<std::byte>& d) {
    for (std::uint64_t off = 0; off < d.size(); off += block) {
      // Refusal is allowed for b (failed); a and c must always be taken.
      const bool took = store.write(
          k, off, std::span(d).subspan(off, std::min<std::size_t>(block, d.size() - off)));
      if (!(k == kb)) REQUIRE(took);
      // Let failure results reach the "network thread" as they happen.
      if (off % (64 * block) == 0) pq.run_ready();
    }
  };
  feed(ka, small_a);
  feed(kb, big);
  feed(kc, small_c);
  store.finalize(ka, sha256(small_a));
  store.finalize(kb, sha256(big));
  store.finalize(kc, sha256(small_c));
  store.flush();
  pq.run_until([&] { return results.count(ka) && results.count(kb) && results.count(kc); });

  const auto rb = *results.find(kb);
  CHECK(rb.ec == (c.reserve ? make_error_code(errc::disk_reserve)
                            : std::make_error_code(std::errc::no_space_on_device)));
  CHECK(rb.detail.find(c.failing_call) != std::string::npos);
  INFO(rb.detail);
  CHECK_FALSE(results.find(ka)->ec);
  CHECK_FALSE(results.find(kc)->ec);
  CHECK(read_file(mnt.path() / "dest" / "a") == small_a);
  CHECK(read_file(mnt.path() / "dest" / "c") == small_c);
  CHECK_FALSE(fs::exists(mnt.path() / "dest" / "b"));
  CHECK_FALSE(fs::exists(file_store::temp_path(cfg.temp_dir, kb)));
  CHECK(results.count(kb) == 1);
}
