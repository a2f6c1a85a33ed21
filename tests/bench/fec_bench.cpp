/// @file
/// `fec_bench`: Reed-Solomon encode and decode throughput of common/fec/fec.hpp on one core, per
/// FEC block shape, 1400-byte blocks (docs/benchmarks.md "Parity codec"). Not a test: prints a
/// table; FEC blocks over 255 blocks are coded over GF(2^16). Throughput counts source bytes
/// per second of thread CPU time:
///   encode: one parity block computed from n sources (what the sender does per parity sent)
///   decode: e missing sources recovered from n - e sources and e parity blocks
///
///   fec_bench [--seconds S]

#include "common/fec/fec.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

using namespace mcdist;

namespace {

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::strtod(argv[i + 1], nullptr);
  }
  constexpr std::size_t len = 1400;
  std::mt19937_64 rng(1);
  std::printf("%5s %5s %5s %6s %14s %14s\n", "k", "m", "e", "field", "encode MB/s", "decode MB/s");
  struct shape {
    std::uint32_t k, m, e;
  };
  for (const auto [k, m, e] :
       {shape{32, 32, 1}, shape{64, 64, 2}, shape{128, 127, 1}, shape{128, 127, 4},
        shape{128, 127, 16}, shape{200, 55, 4}, shape{200, 55, 16}, shape{300, 300, 4},
        shape{1000, 1000, 10}, shape{2860, 2860, 30}, shape{4096, 4096, 41}}) {
    const fec::codec c(k, m);
    std::vector<std::vector<std::byte>> src(k, std::vector<std::byte>(len));
    for (auto& b : src) {
      for (auto& x : b) x = static_cast<std::byte>(rng());
    }
    std::vector<const std::byte*> in;
    for (const auto& b : src) in.push_back(b.data());
    // Encode one parity block at a time, as the sender does.
    std::vector<std::vector<std::byte>> par(e, std::vector<std::byte>(len));
    std::uint64_t enc_bytes = 0;
    const double t0 = cpu_s();
    double t1 = t0;
    for (std::uint32_t p = 0; t1 - t0 < seconds; p = (p + 1) % m) {
      std::byte* dst = par[p % e].data();
      c.encode(in, std::span(&p, 1), std::span(&dst, 1), len);
      enc_bytes += std::uint64_t{k} * len;
      if ((enc_bytes / (k * len)) % 16 == 0) t1 = cpu_s();
    }
    const double enc = static_cast<double>(enc_bytes) / (t1 - t0) / 1e6;
    // Parity 0..e-1 for the decode.
    std::vector<std::uint32_t> idx(e);
    std::vector<std::byte*> dsts;
    for (std::uint32_t p = 0; p < e; ++p) {
      idx[p] = p;
      dsts.push_back(par[p].data());
    }
    c.encode(in, idx, dsts, len);
    std::vector<fec::symbol> rx;
    std::vector<std::uint32_t> missing;
    for (std::uint32_t i = 0; i < k; ++i) {
      if (i % (k / e) == 0 && missing.size() < e) {
        missing.push_back(i);
      } else {
        rx.push_back({false, i, src[i].data()});
      }
    }
    for (std::uint32_t p = 0; p < e; ++p) rx.push_back({true, p, par[p].data()});
    std::vector<std::vector<std::byte>> out(e, std::vector<std::byte>(len));
    std::vector<std::byte*> outp;
    for (auto& o : out) outp.push_back(o.data());
    std::uint64_t dec_bytes = 0;
    const double d0 = cpu_s();
    double d1 = d0;
    while (d1 - d0 < seconds) {
      if (c.decode(k, rx, missing, outp, len)) return 1;
      dec_bytes += std::uint64_t{k} * len;
      d1 = cpu_s();
    }
    for (std::uint32_t j = 0; j < e; ++j) {
      if (out[j] != src[missing[j]]) {
        std::fprintf(stderr, "decode mismatch\n");
        return 1;
      }
    }
    const double dec = static_cast<double>(dec_bytes) / (d1 - d0) / 1e6;
    std::printf("%5u %5u %5u %6s %14.0f %14.0f\n", k, m, e,
                c.field() == fec::field::gf8 ? "2^8" : "2^16", enc, dec);
  }
  return 0;
}
