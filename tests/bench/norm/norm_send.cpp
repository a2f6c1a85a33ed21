// mcdist-norm-send: a NORM (RFC 5740) file sender written against NRL's libnorm (Debian
// libnorm-dev 1.5.9), the peer that tests/bench/*.py run beside mcdist-send. Benchmark code: it
// is built only with -DMCDIST_BENCH_PEERS=ON, outside `all`, and mcdist never links libnorm.
//
//   mcdist-norm-send --group ADDR:PORT [--interface IF] [--tx-port P] (--rate BPS | --cc
//   [--rate-max BPS])
//                    --ack ID[,ID...] [options] PATH
//
// PATH is a file or a directory. Each file is one NORM_OBJECT_FILE; its NORM_INFO is its path
// relative to PATH's parent (for a directory "DIR/sub/file", for a file its name), so the
// receiver (mcdist-norm-recv) lays the set out as mcdistd does: DEST/<basename of PATH>/...
//
// Completion: positive acknowledgement. The receivers' node ids (--ack) go into NORM's acking
// node list; after the last object is enqueued, NormSetWatermark(last object, overrideFlush)
// asks each of them to acknowledge everything up to the end of that object. The watermark is
// only acknowledged by a receiver that has every earlier object complete (NACK repair fills the
// gaps first), so NORM_TX_WATERMARK_COMPLETED with NormGetAckingStatus() == NORM_ACK_SUCCESS
// means every listed receiver has every file: the sender exits 0 then. A watermark that
// completes with a receiver missing (NORM_ACK_FAILURE: it did not answer within NORM's robust
// factor of flush rounds) is re-armed (NormResetWatermark) until --timeout; exit 1 then.
// overrideFlush skips NORM's usual end-of-transmission flush once all listed nodes have
// acknowledged: the list is the complete receiver set (a closed group, like mcdist-send
// --receivers), which is what the developer's guide says the option is for.
//
// Defaults and why (NORM Developer's Guide 1.5b5, normApi.h):
//   --segment 1400     NormStartSender segmentSize: payload per NORM_DATA message, the same as
//                      mcdist's block (1400 bytes of file per datagram). NORM's header adds
//                      ~32 bytes for a file object: 1432-byte UDP payloads, under a 1500 MTU.
//   --block 64         source segments per FEC block (RS(n,k) "k"), and
//   --parity 16        parity segments the sender may compute per block ("n - k"): the values of
//                      NRL's own examples (normFileSend, NormStreamSend) and of the norm tool's
//                      defaults; 64 + 16 <= 255 as the 8-bit Reed-Solomon code requires. Parity
//                      is sent only on NACK (repair), not proactively:
//   --auto-parity 0    NormSetAutoParity: NORM's default (proactive parity off). mcdist by
//                      default sends no proactive parity either.
//   --buffer 64M       NormStartSender bufferSpace (FEC and repair state): the guide asks for
//                      at least the bandwidth*delay product; 64 MiB covers 2 Gbit/s x 250 ms.
//   --sndbuf 8M        NormSetTxSocketBuffer: the guide recommends a large one at high rates
//                      (NORM paces from user space and sends in bursts when late).
//   --grtt S           NormSetGrttEstimate: the initial group RTT. NORM's default is 0.5 s; the
//                      guide says to set it when the application knows better. The benches
//                      pass the path's RTT (loopback: 1 ms; the matrix: the scenario's RTT).
//                      NORM measures and adapts the GRTT while it runs either way.
//   --cache 4096       NormSetTxCacheBounds countMax (default 256): objects NORM keeps for
//                      repair. A larger set is fed as the cache drains (NORM_TX_QUEUE_VACANCY),
//                      NORM's timer-based flow control (factor 2.0, default) keeping an object
//                      that was NACKed recently.
//   --cc               NormSetCongestionControl(true): NORM-CC (RFC 5740 section 5.5), with
//                      NormSetTxRateBounds(--rate-min, --rate-max); without it the rate is the
//                      fixed --rate (NormSetTxRate), which counts NORM messages (UDP payloads):
//                      the guide leaves NORM's header overhead to the application.
//   Receivers are not silent (NormSetSilentReceiver(false), NORM's default): they NACK.
//   NormSetMulticastLoopback(true) so that a receiver on the same host (the loopback benches)
//   gets the datagrams; NormSetLoopback stays false (the sender ignores its own messages).
//   NormSetRxPortReuse(true): sender and receiver bind the session port on one host; the
//   sender sends from a port of its own (--tx-port, default the session port + 1,
//   NormSetTxPort), where the receivers' unicast watermark ACKs come back.
//   Robust factor (20), backoff factor (4), group size (1000), GRTT probing: NORM's defaults.
//
// Output: one line on stdout at the end ("norm-send: N files, B bytes, W s, ..."), and with
// --summary-json FILE a JSON object (files, bytes, seconds, acked, watermark_rounds, rate_bps).
// Exit status: 0 every receiver acknowledged, 1 timeout or NORM failure, 2 usage.

#include <normApi.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "norm_common.hpp"

namespace fs = std::filesystem;
using namespace normpeer;

namespace {

struct Options {
  std::string group_addr;
  int port = 0;
  int tx_port = 0;  // 0: session port + 1
  std::string interface_name;
  double rate = 0;  // bit/s, fixed rate (no --cc)
  bool cc = false;
  double rate_min = -1, rate_max = -1;
  unsigned segment = 1400, block = 64, parity = 16, auto_parity = 0;
  unsigned long buffer = 4ul << 20;
  unsigned sndbuf = 8u << 20;
  double grtt = -1;  // NORM's default 0.5 s
  unsigned cache = 4096;
  std::vector<NormNodeId> ack;
  NormNodeId id = 1;
  double timeout = 600;
  std::string summary_json;
  bool quiet = false;
  bool verbose = false;
  std::string path;
};

void usage() {
  std::fprintf(
      stderr,
      "usage: mcdist-norm-send --group ADDR:PORT [--interface IF] [--tx-port P] (--rate BPS | --cc "
      "[--rate-min BPS] [--rate-max BPS]) --ack ID[,ID..] [--id N] [--segment 1400] "
      "[--block 64] [--parity 16] [--auto-parity 0] [--buffer 64M] [--sndbuf 8M] "
      "[--grtt S] [--cache 4096] [--timeout S] [--summary-json FILE] [-q] PATH\n");
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
    else if (a == "--tx-port")
      o.tx_port = std::stoi(val());
    else if (a == "--rate")
      o.rate = parse_si(val());
    else if (a == "--cc")
      o.cc = true;
    else if (a == "--rate-min")
      o.rate_min = parse_si(val());
    else if (a == "--rate-max")
      o.rate_max = parse_si(val());
    else if (a == "--segment")
      o.segment = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--block")
      o.block = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--parity")
      o.parity = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--auto-parity")
      o.auto_parity = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--buffer")
      o.buffer = parse_bytes(val());
    else if (a == "--sndbuf")
      o.sndbuf = static_cast<unsigned>(parse_bytes(val()));
    else if (a == "--grtt")
      o.grtt = std::stod(val());
    else if (a == "--cache")
      o.cache = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--ack") {
      for (const auto& s : split(val(), ','))
        o.ack.push_back(static_cast<NormNodeId>(std::stoul(s)));
    } else if (a == "--id")
      o.id = static_cast<NormNodeId>(std::stoul(val()));
    else if (a == "--timeout")
      o.timeout = std::stod(val());
    else if (a == "--summary-json")
      o.summary_json = val();
    else if (a == "-q")
      o.quiet = true;
    else if (a == "-v")
      o.verbose = true;
    else if (!a.empty() && a[0] == '-')
      usage();
    else
      o.path = a;
  }
  if (o.group_addr.empty() || o.path.empty() || o.ack.empty() || (!o.cc && o.rate <= 0)) usage();
  if (o.block + o.parity > 255) {
    std::fprintf(stderr, "--block + --parity must be <= 255 (8-bit Reed-Solomon)\n");
    std::exit(2);
  }
  return o;
}

struct Item {
  std::string path;  // on disk
  std::string info;  // NORM_INFO: the path the receiver stores it under
  std::uintmax_t size;
};

std::vector<Item> walk(const std::string& root) {
  std::vector<Item> items;
  fs::path top = fs::absolute(root).lexically_normal();
  if (top.has_filename() == false) top = top.parent_path();
  if (fs::is_regular_file(top)) {
    items.push_back({top.string(), top.filename().string(), fs::file_size(top)});
    return items;
  }
  fs::path base = top.parent_path();
  for (const auto& e : fs::recursive_directory_iterator(top)) {
    if (!e.is_regular_file()) continue;
    items.push_back({e.path().string(), e.path().lexically_relative(base).string(), e.file_size()});
  }
  std::sort(items.begin(), items.end(),
            [](const Item& x, const Item& y) { return x.info < y.info; });
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  raise_nofile();
  double t0 = now_s();
  std::vector<Item> items = walk(o.path);
  std::uintmax_t total = 0;
  for (const auto& it : items) total += it.size;
  if (items.empty()) {
    std::fprintf(stderr, "norm-send: no files under %s\n", o.path.c_str());
    return 2;
  }

  NormInstanceHandle instance = NormCreateInstance();
  if (const char* level = std::getenv("NORM_DEBUG")) NormSetDebugLevel(std::atoi(level));
  NormSessionHandle session =
      NormCreateSession(instance, o.group_addr.c_str(), static_cast<UINT16>(o.port), o.id);
  if (session == NORM_SESSION_INVALID) {
    std::fprintf(stderr, "norm-send: NormCreateSession failed\n");
    return 1;
  }
  NormSetRxPortReuse(session, true);
  // The sender's own transmit port: receivers answer the watermark with unicast ACKs to the
  // source port of the sender's messages, and a receiver on the same host shares the session
  // port (port reuse), so an ACK to that port could reach the receiver's socket instead.
  NormSetTxPort(session, static_cast<UINT16>(o.tx_port ? o.tx_port : o.port + 1));
  NormSetMulticastLoopback(session, true);
  if (!o.interface_name.empty()) NormSetMulticastInterface(session, o.interface_name.c_str());
  if (o.grtt > 0) NormSetGrttEstimate(session, o.grtt);
  if (o.cc) {
    NormSetCongestionControl(session, true);
    NormSetTxRateBounds(session, o.rate_min, o.rate_max);
    if (o.rate > 0) NormSetTxRate(session, o.rate);
  } else {
    NormSetTxRate(session, o.rate);
  }
  // sizeMax: the whole set, so that only countMax bounds the cache.
  NormSetTxCacheBounds(session, static_cast<NormSize>(total) + 1, std::min(o.cache, 8u), o.cache);
  for (NormNodeId n : o.ack) NormAddAckingNode(session, n);
  if (!NormStartSender(session, NormGetRandomSessionId(), o.buffer, static_cast<UINT16>(o.segment),
                       static_cast<UINT16>(o.block), static_cast<UINT16>(o.parity))) {
    std::fprintf(stderr, "norm-send: NormStartSender failed\n");
    return 1;
  }
  NormSetTxSocketBuffer(session, o.sndbuf);
  NormSetAutoParity(session, static_cast<unsigned char>(o.auto_parity));

  std::size_t next = 0;
  NormObjectHandle last = NORM_OBJECT_INVALID;
  bool watermark = false, acked = false, failed = false;
  int rounds = 0;
  double rate_now = o.rate;
  auto fill = [&]() {
    while (next < items.size()) {
      const Item& it = items[next];
      NormObjectHandle h = NormFileEnqueue(session, it.path.c_str(), it.info.c_str(),
                                           static_cast<unsigned>(it.info.size()));
      if (h == NORM_OBJECT_INVALID) break;  // cache full: again on NORM_TX_QUEUE_VACANCY
      last = h;
      ++next;
    }
    if (next == items.size() && !watermark) {
      NormSetWatermark(session, last, true);
      watermark = true;
      rounds = 1;
    }
  };
  fill();

  int fd = NormGetDescriptor(instance);
  double deadline = t0 + o.timeout;
  while (!acked && !failed) {
    double left = deadline - now_s();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min(left, 0.2) * 1000) + 1);
    if (r <= 0) continue;
    NormEvent ev;
    while (NormGetNextEvent(instance, &ev, false)) {
      if (o.verbose) std::fprintf(stderr, "norm-send: %.3f event %d\n", now_s() - t0, ev.type);
      switch (ev.type) {
        case NORM_TX_QUEUE_VACANCY:
        case NORM_TX_QUEUE_EMPTY: fill(); break;
        case NORM_TX_RATE_CHANGED: rate_now = NormGetTxRate(session); break;
        case NORM_TX_WATERMARK_COMPLETED:
          if (NormGetAckingStatus(session) == NORM_ACK_SUCCESS) {
            acked = true;
          } else {
            NormNodeId node = NORM_NODE_NONE;
            NormAckingStatus st;
            while (NormGetNextAckingNode(session, &node, &st)) {
              if (st != NORM_ACK_SUCCESS && !o.quiet)
                std::fprintf(stderr, "norm-send: receiver %u has not acknowledged (round %d)\n",
                             static_cast<unsigned>(node), rounds);
            }
            NormResetWatermark(session);
            ++rounds;
          }
          break;
        case NORM_EVENT_INVALID: failed = true; break;
        default: break;
      }
      if (acked) break;
    }
  }
  double wall = now_s() - t0;
  NormStopSender(session);
  NormDestroySession(session);
  NormDestroyInstance(instance);

  std::printf(
      "norm-send: %zu files, %ju bytes, %.3f s, %s after %d watermark round(s), rate %.0f "
      "bit/s\n",
      items.size(), total, wall, acked ? "acknowledged" : "NOT ACKNOWLEDGED", rounds, rate_now);
  if (!o.summary_json.empty()) {
    if (FILE* f = std::fopen(o.summary_json.c_str(), "w")) {
      std::fprintf(f,
                   "{\"files\": %zu, \"bytes\": %ju, \"seconds\": %.6f, \"acked\": %s, "
                   "\"watermark_rounds\": %d, \"rate_bps\": %.0f, \"path\": \"%s\"}\n",
                   items.size(), total, wall, acked ? "true" : "false", rounds, rate_now,
                   json_escape(o.path).c_str());
      std::fclose(f);
    }
  }
  return acked ? 0 : 1;
}
