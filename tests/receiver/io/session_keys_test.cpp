#include "receiver/io/session_keys.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "tests/scratch_dir.hpp"

#include <catch2/catch.hpp>
#include <spdlog/logger.h>
#include <sys/stat.h>

#include <limits>

using namespace mcdist;
using namespace mcdist::receiver;

namespace {

const session_id sid{0x1234};
const time_point t0{std::chrono::seconds(100)};
const endpoint hub = *parse_endpoint("10.0.0.1:4711");
/// The index of a datagram from the control socket: past every channel.
constexpr std::size_t control = std::numeric_limits<std::size_t>::max();

std::shared_ptr<spdlog::logger> quiet() { return std::make_shared<spdlog::logger>("test"); }

channel_config channel(std::string name, std::vector<crypto::key32> trusted) {
  channel_config ch;
  ch.name = std::move(name);
  ch.trusted_senders = std::move(trusted);
  return ch;
}

daemon_config config(const std::filesystem::path& temp, std::vector<channel_config> channels) {
  daemon_config cfg;
  cfg.id = "site-a";
  cfg.temp = temp;
  cfg.channels = std::move(channels);
  return cfg;
}

/// A control datagram of session `s` with `msg` as its body, sealed by `seal(buf, len)` when
/// given.
template <class Msg>
std::vector<std::byte> control_datagram(wire::msg_type type, const Msg& msg,
                                        auth::sender_keys* sealer = nullptr) {
  std::vector<std::byte> out(wire::header_size + msg.ByteSizeLong() + auth::max_trailer_bytes);
  std::size_t n = wire::encode_control(out, type, sid, msg);
  REQUIRE(n > 0);
  if (sealer) n = sealer->seal_control(out, n);
  REQUIRE(n > 0);
  out.resize(n);
  return out;
}

std::vector<std::byte> announce(auth::sender_keys& sender) {
  wire::announce a;
  a.mutable_params()->set_block_size(1400);
  a.mutable_params()->set_file_count(1);
  auto* f = a.add_files();
  f->set_path("obs/x.bufr");
  f->set_size(100);
  return control_datagram(wire::msg_type::announce, a, &sender);
}

wire::header header_of(std::span<const std::byte> d) {
  wire::header h;
  REQUIRE_FALSE(wire::parse_header(d, h));
  return h;
}

/// The header of a block of session `s` (the poll decision reads only the header).
wire::header block_header(session_id s = sid) {
  wire::header h;
  h.type = wire::msg_type::data;
  h.session = s;
  h.version = wire::authenticated_version;
  return h;
}

std::size_t files_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the site's key is made once and kept; saved keys go to a private directory",
          "[unit][receiver][session_keys]") {
  const mcdist::test::scratch_dir d("mcdist-session-keys");
  const auto cfg = config(d.path(), {channel("obs", {})});
  const session_keys first(cfg, quiet());
  REQUIRE(std::filesystem::exists(d.path() / "site.key"));
  struct stat st {};
  REQUIRE(::stat((d.path() / "keys").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  const session_keys again(cfg, quiet());
  CHECK(again.site().public_key == first.site().public_key);
  // A key_file that cannot be read is the operator's error.
  auto bad = cfg;
  bad.key_file = d.path() / "missing.key";
  CHECK_THROWS_AS(session_keys(bad, quiet()), config_error);
}

TEST_CASE("a session no channel knows passes only as version 1 where no channel signs",
          "[unit][receiver][session_keys]") {
  const mcdist::test::scratch_dir d("mcdist-session-keys");
  wire::complete_ack ack;
  const auto plain = control_datagram(wire::msg_type::complete_ack, ack);
  std::span<const std::byte> out;
  {
    session_keys k(config(d.path(), {channel("open", {})}), quiet());
    REQUIRE_FALSE(k.open(control, header_of(plain), plain, t0, out, hub));
    CHECK(out.data() == plain.data());
    CHECK(k.stats().no_key == 0);
    // Nothing to seal it with: sent as it is; no keyring, so no fallback key either.
    const auto sealed = k.seal(sid, plain);
    REQUIRE(sealed);
    CHECK(sealed->data() == plain.data());
    const auto creds = k.unicast_credentials(sid, unicast_order{});
    REQUIRE(creds);
    CHECK_FALSE(creds->proof_key);
    CHECK_FALSE(creds->seal_records);
  }
  crypto::init();
  const auto sender = crypto::generate_identity();
  session_keys k(config(d.path(), {channel("open", {}), channel("signed", {sender.public_key})}),
                 quiet());
  CHECK(k.open(control, header_of(plain), plain, t0, out, hub) == errc::unauthenticated);
  CHECK(k.stats().no_key == 1);
}

TEST_CASE(
    "blocks of a session whose key is awaited poll the control socket a bounded number of "
    "times a wake-up; announces always do",
    "[unit][receiver][session_keys]") {
  const mcdist::test::scratch_dir d("mcdist-session-keys");
  crypto::init();
  const auto sender_id = crypto::generate_identity();
  session_keys k(config(d.path(), {channel("obs", {sender_id.public_key})}), quiet());
  auth::sender_keys sender(sender_id, sid, {{"site-a", k.site().public_key}});
  // Nothing awaited yet.
  CHECK_FALSE(k.poll_first(0, block_header()));
  const auto ann = announce(sender);
  std::span<const std::byte> out;
  REQUIRE_FALSE(k.open(0, header_of(ann), ann, t0, out, hub));
  REQUIRE_FALSE(out.empty());
  // The announce left its key awaited: blocks poll first, max_key_polls_per_wake times.
  for (std::uint32_t i = 0; i < session_keys::max_key_polls_per_wake; ++i) {
    REQUIRE(k.poll_first(0, block_header()));
  }
  CHECK_FALSE(k.poll_first(0, block_header()));
  CHECK(k.poll_first(0, header_of(ann)));  // an announce is not counted
  // Not on another channel, the control socket, another session or another type.
  k.new_wake();
  CHECK_FALSE(k.poll_first(1, block_header()));
  CHECK_FALSE(k.poll_first(control, block_header()));
  CHECK_FALSE(k.poll_first(0, block_header(session_id{0x99})));
  auto nak = block_header();
  nak.type = wire::msg_type::nak;
  CHECK_FALSE(k.poll_first(0, nak));
  CHECK(k.poll_first(0, block_header()));
}

TEST_CASE(
    "a registered session's keys are saved, restored under the channel's new index, and "
    "removed when it ends",
    "[unit][receiver][session_keys]") {
  const mcdist::test::scratch_dir d("mcdist-session-keys");
  crypto::init();
  const auto sender_id = crypto::generate_identity();
  const auto obs = channel("obs", {sender_id.public_key});
  crypto::identity site;
  {
    session_keys k(config(d.path(), {obs}), quiet());
    site = k.site();
    auth::sender_keys sender(sender_id, sid, {{"site-a", site.public_key}});
    const auto ann = announce(sender);
    std::span<const std::byte> out;
    REQUIRE_FALSE(k.open(0, header_of(ann), ann, t0, out, hub));
    wire::register_request r;
    r.set_receiver_id("site-a");
    auto reg = control_datagram(wire::msg_type::register_request, r);
    reg.resize(reg.size() + auth::max_trailer_bytes);
    const auto sealed =
        k.seal(sid, std::span<const std::byte>(reg).first(reg.size() - auth::max_trailer_bytes));
    REQUIRE(sealed);
    REQUIRE_FALSE(sender.open(*sealed, out));
    wire::register_reply rr;
    rr.set_receiver_id("site-a");
    rr.set_accepted(true);
    const auto reply = control_datagram(wire::msg_type::register_reply, rr, &sender);
    // The reply comes to the control socket: the keyring that knows the session opens it.
    REQUIRE_FALSE(k.open(control, header_of(reply), reply, t0, out, hub));
    CHECK(k.saved() == 1);
    CHECK(files_in(d.path() / "keys") == 1);
    CHECK(k.signer(sid) == crypto::format_public_key(sender_id.public_key));
  }
  {
    // Restarted with another channel before it: the saved index 0 is now 1.
    session_keys k(config(d.path(), {channel("new", {}), obs}), quiet());
    REQUIRE(k.site().public_key == site.public_key);
    k.restore(sid, [](std::uint32_t old) { return std::optional<std::uint32_t>(old + 1); });
    CHECK(k.saved() == 1);
    REQUIRE(k.of(sid) != nullptr);
    CHECK(k.of(sid)->has_session_key(sid));
    k.forget(sid, false);  // kept for a resume
    CHECK(files_in(d.path() / "keys") == 1);
  }
  {
    // Its channel is no longer configured: nothing is restored.
    session_keys k(config(d.path(), {obs}), quiet());
    k.restore(sid, [](std::uint32_t) { return std::optional<std::uint32_t>(); });
    CHECK(k.saved() == 0);
    CHECK(k.of(sid) == nullptr);
    // Restored as saved, then the session ends for good: its file goes.
    k.restore(sid, [](std::uint32_t old) { return std::optional<std::uint32_t>(old); });
    REQUIRE(k.saved() == 1);
    k.forget(sid, true);
    CHECK(k.saved() == 0);
    CHECK(k.of(sid) == nullptr);
    CHECK(files_in(d.path() / "keys") == 0);
  }
}
