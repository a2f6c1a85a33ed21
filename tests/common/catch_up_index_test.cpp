#include "common/catch_up_index.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace mcdist;
using namespace mcdist::catch_up;

namespace {

const std::array<std::uint8_t, nonce_bytes> the_nonce = {1, 2,  3,  4,  5,  6,  7,  8,
                                                         9, 10, 11, 12, 13, 14, 15, 16};

catch_up::index sample() {
  catch_up::index ix;
  ix.channel = "obs";
  ix.seq = 7;
  ix.nonce.assign(the_nonce.begin(), the_nonce.end());
  ix.hub_unix_ms = 1'796'169'600'000;
  product p;
  p.name = "obs/a b.bufr";
  p.size = 1234;
  p.mtime_ns = 1'700'000'000'123'456'789;
  p.mode = 0640;
  p.sha256.fill(0xab);
  p.path = "products/42/obs/a%20b.bufr";
  ix.products.push_back(p);
  p.name = "obs/c.bufr";
  p.path = "products/43/obs/c.bufr";
  p.sha256.fill(0xcd);
  ix.products.push_back(p);
  return ix;
}

refusal open(const std::string& bytes, const expectation& want, catch_up::index& out,
             std::optional<crypto::key32>& signer) {
  return open_index(std::as_bytes(std::span(bytes.data(), bytes.size())), want, out, signer);
}

expectation expect(std::span<const crypto::key32> trusted) {
  expectation e;
  e.channel = "obs";
  e.seq = 7;
  e.nonce = the_nonce;
  e.trusted = trusted;
  return e;
}

}  // namespace

TEST_CASE("a signed index opens with its signer and every product", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  const auto bytes = encode_index(sample(), &hub);
  catch_up::index got;
  std::optional<crypto::key32> signer;
  REQUIRE(open(bytes, expect(trusted), got, signer) == refusal::none);
  REQUIRE(signer == hub.public_key);
  REQUIRE(got.channel == "obs");
  REQUIRE(got.seq == 7);
  REQUIRE(got.hub_unix_ms == 1'796'169'600'000);
  REQUIRE(got.products.size() == 2);
  CHECK(got.products[0].name == "obs/a b.bufr");
  CHECK(got.products[0].size == 1234);
  CHECK(got.products[0].mtime_ns == 1'700'000'000'123'456'789);
  CHECK(got.products[0].mode == 0640);
  CHECK(got.products[0].sha256[0] == 0xab);
  CHECK(got.products[0].path == "products/42/obs/a%20b.bufr");
  // The same key given as the expected signer (the heartbeat's).
  auto e = expect(trusted);
  e.signer = hub.public_key;
  CHECK(open(bytes, e, got, signer) == refusal::none);
}

TEST_CASE("an index signed by another key, or altered, is refused", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const auto other = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  catch_up::index got;
  std::optional<crypto::key32> signer;
  // A man in the middle with a key of its own.
  CHECK(open(encode_index(sample(), &other), expect(trusted), got, signer) ==
        refusal::untrusted_key);
  CHECK(!signer);
  // Another trusted key than the one whose heartbeats numbered the stream.
  const std::vector<crypto::key32> both{hub.public_key, other.public_key};
  auto e = expect(both);
  e.signer = hub.public_key;
  CHECK(open(encode_index(sample(), &other), e, got, signer) == refusal::untrusted_key);
  // The hub's key named as signer, a signature by another key: bad signature.
  wire::signed_catch_up_index env;
  REQUIRE(env.ParseFromString(encode_index(sample(), &other)));
  env.set_signer(hub.public_key.data(), hub.public_key.size());
  CHECK(open(env.SerializeAsString(), expect(trusted), got, signer) == refusal::bad_signature);
  // One byte of the body changed after signing.
  REQUIRE(env.ParseFromString(encode_index(sample(), &hub)));
  std::string body = env.body();
  body[body.size() / 2] ^= 1;
  env.set_body(body);
  CHECK(open(env.SerializeAsString(), expect(trusted), got, signer) == refusal::bad_signature);
  // A signature cut short.
  REQUIRE(env.ParseFromString(encode_index(sample(), &hub)));
  env.set_signature(env.signature().substr(0, 63));
  CHECK(open(env.SerializeAsString(), expect(trusted), got, signer) == refusal::bad_signature);
}

TEST_CASE("an unsigned index is taken only by a channel without trusted senders", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  catch_up::index got;
  std::optional<crypto::key32> signer;
  const auto plain = encode_index(sample(), nullptr);
  CHECK(open(plain, expect(trusted), got, signer) == refusal::unsigned_index);
  CHECK(open(plain, expect({}), got, signer) == refusal::none);
  CHECK(!signer);
  CHECK(got.products.size() == 2);
  // A signed index on an unsigned channel: nothing to check it against.
  CHECK(open(encode_index(sample(), &hub), expect({}), got, signer) == refusal::untrusted_key);
}

TEST_CASE("an index for another nonce, number or channel is refused", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  const auto bytes = encode_index(sample(), &hub);
  catch_up::index got;
  std::optional<crypto::key32> signer;
  auto e = expect(trusted);
  auto nonce = the_nonce;
  nonce[15] ^= 0xff;  // a replay of an answer to an earlier request
  e.nonce = nonce;
  CHECK(open(bytes, e, got, signer) == refusal::wrong_nonce);
  CHECK(!signer);
  e = expect(trusted);
  e.nonce = std::span(the_nonce).first(8);
  CHECK(open(bytes, e, got, signer) == refusal::wrong_nonce);
  e = expect(trusted);
  e.seq = 8;
  CHECK(open(bytes, e, got, signer) == refusal::wrong_seq);
  e = expect(trusted);
  e.channel = "grib";
  CHECK(open(bytes, e, got, signer) == refusal::wrong_channel);
}

TEST_CASE("a truncated or oversized index is refused", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  const auto bytes = encode_index(sample(), &hub);
  catch_up::index got;
  std::optional<crypto::key32> signer;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const auto r = open(bytes.substr(0, n), expect(trusted), got, signer);
    INFO("cut at " << n);
    CHECK(r != refusal::none);
  }
  CHECK(open(std::string(max_index_bytes + 1, '\0'), expect(trusted), got, signer) ==
        refusal::oversized);
}

TEST_CASE("products with bad names, digests, sizes or paths are refused", "[catch_up]") {
  crypto::init();
  const auto hub = crypto::generate_identity();
  const std::vector<crypto::key32> trusted{hub.public_key};
  catch_up::index got;
  std::optional<crypto::key32> signer;
  auto with = [&](auto change) {
    auto ix = sample();
    change(ix.products[0]);
    return open(encode_index(ix, &hub), expect(trusted), got, signer);
  };
  CHECK(with([](product& p) { p.name = "../etc/passwd"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.name = "/abs"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.name = ""; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.size = max_product_bytes + 1; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.mode = 010000; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "http://elsewhere/x"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "products/../../x"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "products/%2e%2E/x"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "products/1//x"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "products/1/a b"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.path = "products/1/%zz"; }) == refusal::invalid_product);
  CHECK(with([](product& p) { p.name = "obs/c.bufr"; }) == refusal::duplicate_name);
  // A digest of the wrong length (built by hand: encode_index always writes 32 bytes).
  wire::catch_up_index m;
  m.set_channel("obs");
  m.set_seq(7);
  m.set_nonce(the_nonce.data(), the_nonce.size());
  auto* e = m.add_products();
  e->set_name("x");
  e->set_sha256(std::string(31, 'a'));
  e->set_path("products/1/x");
  wire::signed_catch_up_index env;
  env.set_body(m.SerializeAsString());
  CHECK(open(env.SerializeAsString(), expect({}), got, signer) == refusal::invalid_product);
}

TEST_CASE("download paths and hex", "[catch_up]") {
  CHECK(valid_download_path("products/1/a"));
  CHECK(valid_download_path("products/12/%C3%9Cn/a%20b.bufr"));
  CHECK(!valid_download_path("products/"));
  CHECK(!valid_download_path("data/x"));
  CHECK(!valid_download_path("products/1/a?b"));
  CHECK(!valid_download_path("products/1/a#b"));
  CHECK(!valid_download_path("products/1/."));
  CHECK(!valid_download_path("products/1/a%2"));
  CHECK(!valid_download_path(std::string("products/") + std::string(max_path_bytes, 'a')));
  CHECK(hex(std::array<std::uint8_t, 2>{0x0f, 0xa0}) == "0fa0");
  CHECK(parse_hex("0FA0") == std::vector<std::uint8_t>{0x0f, 0xa0});
  CHECK(!parse_hex("0"));
  CHECK(!parse_hex("zz"));
}
