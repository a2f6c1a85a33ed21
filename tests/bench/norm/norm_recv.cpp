// mcdist-norm-recv: the receiver of mcdist-norm-send (tests/bench/norm/norm_send.cpp), a NORM
// (RFC 5740) file receiver against NRL's libnorm. Benchmark code, built only with
// -DMCDIST_BENCH_PEERS=ON.
//
//   mcdist-norm-recv --group ADDR:PORT [--interface IF] --id N --dest DIR --files N [options]
//
// Receives NORM_OBJECT_FILE objects into a cache directory on DEST's file system
// (NormSetCacheDirectory, DEST/.norm-cache), and on NORM_RX_OBJECT_COMPLETED renames each to
// DEST/<its NORM_INFO>, the path relative to the sender's PATH parent (NormFileRename; an info
// that is absolute or climbs with ".." is refused). It counts completed files; after --files
// of them it stays --linger seconds at most (default 3) so that the sender's watermark
// acknowledgement request, which may come after the last data, is answered (libnorm's thread
// answers it; this process only has to be alive), and exits 0 at once when the sender goes
// inactive (NORM_REMOTE_SENDER_INACTIVE). Exit 1 when --timeout passes first.
//
// Defaults and why (NORM Developer's Guide 1.5b5):
//   --buffer 64M     NormStartReceiver bufferSpace (per sender): the bandwidth*delay product
//                    and loss are what it must cover; 64 MiB is 2 Gbit/s x 250 ms.
//   --rcvbuf 32M     NormSetRxSocketBuffer: the guide says high-rate receivers need a large
//                    one; 32 MiB is what mcdistd asks for (its default) and this machine's
//                    net.core.rmem_max.
//   --cache 4096     NormSetRxCacheLimit: how many objects back the receiver tracks (default
//                    256), the sender's --cache.
//   Not silent (NormSetSilentReceiver(false)): NACKs are multicast to the group (NORM's default,
//   so that receivers suppress each other's NACKs); watermark ACKs go unicast to the sender.
//   Sync policy NORM_SYNC_CURRENT (default): the receivers start before the sender.
//
// Output: "norm-recv: N files, B bytes, ..." on stdout at exit.

#include <normApi.h>
#include <poll.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "norm_common.hpp"

namespace fs = std::filesystem;
using namespace normpeer;

namespace {

struct Options {
  std::string group_addr;
  int port = 0;
  std::string interface_name;
  NormNodeId id = 0;
  std::string dest;
  long files = -1;
  unsigned long buffer = 4ul << 20;
  unsigned rcvbuf = 32u << 20;
  unsigned cache = 4096;
  double linger = 3;
  double timeout = 600;
  bool verbose = false;
};

void usage() {
  std::fprintf(stderr,
               "usage: mcdist-norm-recv --group ADDR:PORT [--interface IF] --id N --dest DIR "
               "--files N [--buffer 64M] [--rcvbuf 32M] [--cache 4096] [--linger 3] "
               "[--timeout S]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--group")
      parse_group(val(), o.group_addr, o.port);
    else if (a == "--interface")
      o.interface_name = val();
    else if (a == "--id")
      o.id = static_cast<NormNodeId>(std::stoul(val()));
    else if (a == "--dest")
      o.dest = val();
    else if (a == "--files")
      o.files = std::stol(val());
    else if (a == "--buffer")
      o.buffer = parse_bytes(val());
    else if (a == "--rcvbuf")
      o.rcvbuf = static_cast<unsigned>(parse_bytes(val()));
    else if (a == "--cache")
      o.cache = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--linger")
      o.linger = std::stod(val());
    else if (a == "--timeout")
      o.timeout = std::stod(val());
    else if (a == "-v")
      o.verbose = true;
    else
      usage();
  }
  if (o.group_addr.empty() || o.dest.empty() || o.files < 0 || o.id == 0) usage();
  return o;
}

// The NORM_INFO as a relative path under dest, or empty when it would leave dest.
std::string safe_relative(const std::string& info) {
  fs::path p = fs::path(info).lexically_normal();
  if (p.empty() || p.is_absolute()) return {};
  for (const auto& part : p)
    if (part == "..") return {};
  return p.string();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  raise_nofile();
  double t0 = now_s();
  fs::path cache = fs::path(o.dest) / ".norm-cache";
  fs::create_directories(cache);

  NormInstanceHandle instance = NormCreateInstance();
  if (const char* level = std::getenv("NORM_DEBUG")) NormSetDebugLevel(std::atoi(level));
  NormSetCacheDirectory(instance, cache.c_str());
  NormSessionHandle session =
      NormCreateSession(instance, o.group_addr.c_str(), static_cast<UINT16>(o.port), o.id);
  if (session == NORM_SESSION_INVALID) {
    std::fprintf(stderr, "norm-recv: NormCreateSession failed\n");
    return 1;
  }
  NormSetRxPortReuse(session, true);
  NormSetMulticastLoopback(session, true);
  if (!o.interface_name.empty()) NormSetMulticastInterface(session, o.interface_name.c_str());
  NormSetSilentReceiver(session, false);
  NormSetRxCacheLimit(session, o.cache);
  if (!NormStartReceiver(session, o.buffer)) {
    std::fprintf(stderr, "norm-recv: NormStartReceiver failed\n");
    return 1;
  }
  if (!NormSetRxSocketBuffer(session, o.rcvbuf))
    std::fprintf(stderr, "norm-recv: NormSetRxSocketBuffer(%u) failed\n", o.rcvbuf);

  long done = 0, aborted = 0, refused = 0;
  unsigned long long bytes = 0;
  double first = 0, complete_at = 0;
  bool sender_gone = false;
  int fd = NormGetDescriptor(instance);
  double deadline = t0 + o.timeout;
  for (;;) {
    double now = now_s();
    if (done >= o.files && (sender_gone || now >= complete_at + o.linger)) break;
    if (now >= deadline) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    NormEvent ev;
    while (NormGetNextEvent(instance, &ev, false)) {
      if (o.verbose) std::fprintf(stderr, "norm-recv: %.3f event %d\n", now_s() - t0, ev.type);
      switch (ev.type) {
        case NORM_RX_OBJECT_NEW:
          if (first == 0) first = now_s();
          break;
        case NORM_RX_OBJECT_COMPLETED: {
          if (NormObjectGetType(ev.object) != NORM_OBJECT_FILE) break;
          char info[2048];
          UINT16 n = NormObjectGetInfo(ev.object, info, sizeof(info) - 1);
          info[n] = '\0';
          std::string rel = safe_relative(info);
          if (rel.empty()) {
            ++refused;
            break;
          }
          fs::path target = fs::path(o.dest) / rel;
          std::error_code ec;
          fs::create_directories(target.parent_path(), ec);
          if (!NormFileRename(ev.object, target.c_str())) {
            std::fprintf(stderr, "norm-recv: cannot rename to %s\n", target.c_str());
            ++refused;
            break;
          }
          bytes += static_cast<unsigned long long>(NormObjectGetSize(ev.object));
          if (++done == o.files) complete_at = now_s();
          break;
        }
        case NORM_RX_OBJECT_ABORTED: ++aborted; break;
        case NORM_REMOTE_SENDER_INACTIVE:
          if (done >= o.files) sender_gone = true;
          break;
        default: break;
      }
    }
  }
  double wall = now_s() - t0;
  NormStopReceiver(session);
  NormDestroySession(session);
  NormDestroyInstance(instance);
  std::error_code ec;
  fs::remove_all(cache, ec);
  std::printf(
      "norm-recv: %ld files, %llu bytes, %.3f s (complete %.3f s after the first object), "
      "%ld aborted, %ld refused\n",
      done, bytes, wall, done >= o.files && first > 0 ? complete_at - first : -1.0, aborted,
      refused);
  return done >= o.files ? 0 : 1;
}
