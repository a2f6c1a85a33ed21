/// @file
/// libFuzzer target: the hub's catch-up index as a site reads it over HTTP(S)
/// (common/catch_up_index.hpp, catch_up::open_index), the bytes of one answer.
///
/// Each input is opened twice: as the answer to a request for channel "obs", number 7 and a
/// fixed nonce on an unsigned channel (so the body's checks are reached) and on a channel that
/// trusts one fixed key (the envelope's and signature's checks). Invariants (abort on
/// failure): an index taken holds at most max_products products, each with a name
/// check_relative_path accepts, a size within max_product_bytes, permission bits only and a
/// download path valid_download_path accepts, no two of the same name; encoded again (unsigned)
/// it opens to the same index; nothing is ever taken on the signed channel (no input carries
/// a valid signature by a key nobody holds).

#include "common/catch_up_index.hpp"
#include "common/path_check.hpp"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <cstdlib>
#include <set>
#include <string>

using namespace mcdist;
using namespace mcdist::catch_up;

namespace {

constexpr std::array<std::uint8_t, nonce_bytes> fuzz_nonce = {
    0x6d, 0x63, 0x64, 0x69, 0x73, 0x74, 0x20, 0x66, 0x75, 0x7a, 0x7a, 0x20, 0x6e, 0x6f, 0x6e, 0x63};

void check_index(const catch_up::index& ix, const expectation& want) {
  if (ix.products.size() > max_products) std::abort();
  std::set<std::string> names;
  for (const auto& p : ix.products) {
    if (check_relative_path(p.name) || p.size > max_product_bytes || p.mode > 07777 ||
        !valid_download_path(p.path) || !names.insert(p.name).second) {
      std::abort();
    }
  }
  const auto again = encode_index(ix, nullptr);
  catch_up::index back;
  std::optional<crypto::key32> signer;
  if (open_index(std::as_bytes(std::span(again.data(), again.size())), want, back, signer) !=
          refusal::none ||
      back.products.size() != ix.products.size() || back.seq != ix.seq ||
      back.channel != ix.channel || back.hub_unix_ms != ix.hub_unix_ms) {
    std::abort();
  }
  for (std::size_t i = 0; i < ix.products.size(); ++i) {
    const auto &a = ix.products[i], &b = back.products[i];
    if (a.name != b.name || a.size != b.size || a.mtime_ns != b.mtime_ns || a.mode != b.mode ||
        a.sha256 != b.sha256 || a.path != b.path) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  expectation want;
  want.channel = "obs";
  want.seq = 7;
  want.nonce = fuzz_nonce;
  catch_up::index ix;
  std::optional<crypto::key32> signer;
  if (open_index(bytes, want, ix, signer) == refusal::none) {
    if (signer) std::abort();
    check_index(ix, want);
  }
  crypto::key32 key{};
  key.fill(0x42);
  const std::array<crypto::key32, 1> trusted{key};
  want.trusted = trusted;
  if (open_index(bytes, want, ix, signer) == refusal::none) std::abort();
  return 0;
}
