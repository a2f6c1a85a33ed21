/// @file
/// libFuzzer target: a receiver's resume state (receiver_engine::restore), as mcdistd reads it
/// from a checkpoint file in its temp directory at start-up. The file may be truncated by a
/// crash, damaged on disk, or left by another version.
///
/// Input: the blob. After a restore that succeeds the session runs: timers over a minute,
/// a checkpoint (which must restore again into a fresh engine), every finalize answered, and
/// the sender's END.

#include "checkpoint.pb.h"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/receiver_engine.hpp"
#include "tests/fuzz/quiet_protobuf.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <vector>

using namespace mcdist;
using namespace mcdist::receiver;
using namespace std::chrono_literals;

namespace {

struct sink final : receiver_sink, storage_port {
  std::vector<std::string> blobs;
  std::vector<std::pair<session_id, file_index>> finalizing;
  void send(const endpoint&, std::span<const std::byte> d) override {
    wire::header h;
    if (wire::parse_header(d, h)) std::abort();
  }
  void begin_file(file_key, std::uint32_t, const manifest_entry&, bool) override {}
  bool write(file_key, std::uint64_t, std::span<const std::byte>) override { return true; }
  void finalize(file_key k, const sha256_digest&) override {
    finalizing.emplace_back(k.session, k.file);
  }
  void discard_file(file_key) override {}
  void query_held(session_id, std::uint32_t, std::vector<held_query>) override {}
  void checkpoint(session_id, std::string blob) override { blobs.push_back(std::move(blob)); }
  void close_session(session_id, bool) override {}
  void session_closed(session_id, bool) override {}
  void start_unicast(session_id, const unicast_order&, std::vector<byte_range>) override {}
  void stop_unicast(session_id) override {}
};

std::shared_ptr<spdlog::logger> null_logger() {
  static auto log = [] {
    auto l =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return log;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view blob(reinterpret_cast<const char*>(data), size);
  sink out;
  receiver_engine engine(receiver_config{"site"}, out, out, 1, null_logger());
  time_point now{50s};
  if (engine.restore(blob, now)) return 0;
  checkpoint::session_state st;
  if (!st.ParseFromArray(data, static_cast<int>(size))) std::abort();  // restore accepted it
  const session_id sid{st.session()};
  for (int i = 0; i < 4; ++i) {
    now += 400ms;
    engine.on_timer(now);
  }
  out.blobs.clear();
  engine.checkpoint_all(now);
  for (const auto& b : out.blobs) {
    sink other_out;
    receiver_engine other(receiver_config{"site"}, other_out, other_out, 2, null_logger());
    if (other.restore(b, now)) std::abort();
  }
  for (const auto& [s, f] : out.finalizing) engine.on_file_stored(s, f, {}, "", now);
  wire::session_end end;
  std::vector<std::byte> d(wire::header_size + end.ByteSizeLong());
  wire::encode_control(d, wire::msg_type::session_end, sid, end);
  endpoint from;
  from.v6 = st.sender_addr().size() == 16;
  std::memcpy(from.addr.data(), st.sender_addr().data(), st.sender_addr().size());
  from.port = static_cast<std::uint16_t>(st.sender_port());
  engine.on_datagram(d, from, st.channel(), now);
  for (int i = 0; i < 4; ++i) {
    now += 20s;
    engine.on_timer(now);
  }
  return 0;
}
