// Benchmark (not a test): pushes one file in 1400-byte blocks through file_store, as the
// network thread would, on /dev/shm (tmpfs, sync none) and on /tmp (disk, sync batch), and
// prints throughput and peak RSS. Usage: file_store_bench [bytes] [dir...]
//
// The producer retries a refused block at once (the real network thread would drop it and have
// it NAKed); refusals are counted and printed, they mean the writer was the bottleneck.
#include "receiver/storage/file_store.hpp"

#include "tests/receiver/storage/file_store_test_util.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace mcdist::receiver::test;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t block = 1400;
/// Blocks per "receive batch" between flush() calls (a recvmmsg batch of 64 datagrams).
constexpr std::size_t blocks_per_batch = 64;
/// Period of the repeating content: 1 MiB + 1 so blocks never line up with it.
constexpr std::size_t pattern_bytes = (1u << 20) + 1;

std::uint64_t peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_maxrss);
}

void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // resets VmHWM to the current RSS (Linux >= 4.0)
}

struct content {
  std::vector<std::byte> pattern;
  std::uint64_t size;
  sha256_digest digest;
  std::span<const std::byte> at(std::uint64_t off, std::size_t n,
                                std::vector<std::byte>& tmp) const {
    const std::size_t p = static_cast<std::size_t>(off % pattern_bytes);
    if (p + n <= pattern.size()) return std::span(pattern).subspan(p, n);
    tmp.resize(n);
    for (std::size_t i = 0; i < n; ++i) tmp[i] = pattern[(p + i) % pattern_bytes];
    return tmp;
  }
};

/// @param loss  fraction of blocks missing from pass 1 and sent in pass 2 (exercises the
///              hash catch-up: everything after the first gap is read back once)
void run(const fs::path& base, sync_mode mode, const content& c, double loss) {
  scratch_dir dir(base);
  post_queue pq;
  result_log results;
  storage_config cfg;
  cfg.temp_dir = dir.path() / "temp";
  cfg.sync = mode;
  reset_peak_rss();
  const auto rss_before = peak_rss_kib();
  std::uint64_t refused = 0;
  double t_written = 0, t_delivered = 0;
  {
    file_store store(cfg, pq.poster(), results.sink());
    const file_key k{session_id{0xbe0c}, file_index{0}};
    file_spec s;
    s.dest_root = dir.path() / "dest";
    s.relative_path = "model/field.grib";
    s.size = c.size;
    s.mtime_ns = 1'700'000'000'000'000'000;
    s.mode = 0644;
    std::vector<std::byte> tmp;
    const auto t0 = std::chrono::steady_clock::now();
    store.begin_file(k, s);
    std::size_t in_batch = 0;
    std::mt19937_64 rng(2);
    std::bernoulli_distribution lost(loss);
    std::vector<std::uint64_t> missed;
    auto send = [&](std::uint64_t off) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block, c.size - off));
      const auto data = c.at(off, n, tmp);
      while (!store.write(k, off, data)) {
        ++refused;
        store.flush();
        std::this_thread::yield();
      }
      if (++in_batch == blocks_per_batch) {
        store.flush();
        in_batch = 0;
      }
    };
    for (std::uint64_t off = 0; off < c.size; off += block) {
      if (loss > 0 && lost(rng))
        missed.push_back(off);
      else
        send(off);
    }
    for (auto off : missed) send(off);
    store.finalize(k, c.digest);
    store.flush();
    t_written = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pq.run_until([&] { return !results.all.empty(); });
    t_delivered = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (results.all[0].ec) {
      std::printf("  FAILED: %s\n", results.all[0].detail.c_str());
      return;
    }
  }
  const double bits = static_cast<double>(c.size) * 8;
  std::printf(
      "%-10s sync=%-5s loss=%g %.2f GB: blocks taken at %.2f Gbit/s, delivered (verified, %s, "
      "renamed) at %.2f Gbit/s in %.2f s; refused-and-retried blocks %llu; peak RSS "
      "%.1f MiB (%.1f MiB before)\n",
      base.c_str(), std::string(to_string(mode)).c_str(), loss, static_cast<double>(c.size) / 1e9,
      bits / t_written / 1e9, mode == sync_mode::none ? "no sync" : "synced",
      bits / t_delivered / 1e9, t_delivered, static_cast<unsigned long long>(refused),
      static_cast<double>(peak_rss_kib()) / 1024, static_cast<double>(rss_before) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t size = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000'000ull;
  std::vector<std::pair<fs::path, sync_mode>> targets;
  for (int i = 2; i < argc; ++i) targets.emplace_back(argv[i], sync_mode::batch);
  if (targets.empty()) targets = {{"/dev/shm", sync_mode::none}, {"/tmp", sync_mode::batch}};

  std::mt19937_64 rng(1);
  content c{random_bytes(rng, pattern_bytes), size, {}};
  {
    sha256_hasher h;
    std::vector<std::byte> tmp;
    for (std::uint64_t off = 0; off < size; off += pattern_bytes) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(pattern_bytes, size - off));
      h.update(c.at(off, n, tmp));
    }
    c.digest = h.finish();
  }
  for (const auto& [dir, mode] : targets) run(dir, mode, c, 0);
  // Pass 1 with 1e-3 loss, then the missed blocks (as a satellite receiver sees it).
  run(targets.front().first, targets.front().second, c, 1e-3);
  return 0;
}
