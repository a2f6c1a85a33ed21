#include "sender/core/announce.hpp"

#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <algorithm>
#include <stdexcept>

namespace mcdist::sender {

std::vector<std::unique_ptr<wire::announce>> build_announce_chunks(
    const announce_settings& s, const std::vector<manifest_entry>& files) {
  wire::session_params params;
  params.set_block_size(s.block_size);
  params.set_rate_bps(s.rate_bps);
  params.set_max_passes(s.max_passes);
  params.set_file_count(static_cast<std::uint32_t>(files.size()));
  std::uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  params.set_total_bytes(total);
  params.set_closed_group(s.closed_group);
  params.set_sender_name(s.sender_name.substr(0, 64));
  for (const auto& id : s.only_receivers) params.add_only_receivers(id);
  params.set_channel(s.channel);
  params.set_channel_seq(s.channel_seq);
  params.set_silent_passes(s.silent_passes);
  params.set_block_digests(s.block_digests ? 1 : 0);
  params.set_created_unix_ms(s.created_unix_ms);
  if (s.fec_k > 0) {
    params.set_fec_k(s.fec_k);
    params.set_fec_max_parity(s.fec_max_parity);
    params.set_fec_depth(s.fec_depth);
  }
  if (s.unicast_start) {
    auto* u = params.mutable_unicast_start();
    u->set_transport(s.unicast_start->transport == transport_kind::tcp ? wire::fallback::TCP
                     : s.unicast_start->transport == transport_kind::sctp_kernel
                         ? wire::fallback::SCTP_KERNEL
                         : wire::fallback::SCTP_UDP);
    const auto& e = s.unicast_start->server;
    u->set_port(e.port);
    u->set_connections(s.unicast_start->connections);
    const std::size_t len = e.v6 ? 16 : 4;
    if (!std::all_of(e.addr.begin(), e.addr.begin() + len, [](std::uint8_t b) { return b == 0; }))
      u->set_address(e.addr.data(), len);
  }
  for (const auto& [first, last] : s.catch_up_seqs) {
    auto* r = params.add_catch_up_seqs();
    r->set_first(first);
    r->set_last(last);
  }
  // Worst case for the fields filled in per send.
  params.set_manifest_chunks(0xffffffffu);
  params.set_grtt_us(0xffffffffu);
  const std::size_t params_bytes = params.ByteSizeLong();
  if (params_bytes > max_announce_params_bytes) {
    throw std::invalid_argument("session parameters too large for an announce (" +
                                std::to_string(params_bytes) + " bytes); name fewer receivers");
  }
  // header + params (tag + length + body) + chunk + first_file + timestamp, worst case
  const std::size_t fixed = wire::header_size + params_bytes + 3 + 6 + 6 + 11;
  const std::size_t budget = wire::control_budget - fixed - s.reserve_bytes;

  std::vector<std::unique_ptr<wire::announce>> chunks;
  auto chunk = std::make_unique<wire::announce>();
  std::size_t used = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    wire::file_entry e;
    to_wire(files[i], e);
    const std::size_t cost = e.ByteSizeLong() + 3;
    if (used + cost > budget && chunk->files_size() > 0) {
      chunks.push_back(std::move(chunk));
      chunk = std::make_unique<wire::announce>();
      used = 0;
    }
    if (chunk->files_size() == 0) chunk->set_first_file(static_cast<std::uint32_t>(i));
    *chunk->add_files() = std::move(e);
    used += cost;
  }
  chunks.push_back(std::move(chunk));
  params.set_manifest_chunks(static_cast<std::uint32_t>(chunks.size()));
  params.set_grtt_us(0);
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    chunks[c]->set_chunk(static_cast<std::uint32_t>(c));
    *chunks[c]->mutable_params() = params;
  }
  return chunks;
}

announcer::announcer() = default;

announcer::announcer(const announce_settings& s, const std::vector<manifest_entry>& files,
                     duration interval)
    : m_chunks(build_announce_chunks(s, files)), m_interval(interval) {}

announcer::announcer(announcer&&) noexcept = default;
announcer& announcer::operator=(announcer&&) noexcept = default;
announcer::~announcer() = default;

std::vector<std::byte> announcer::encode_next(time_point now, session_id session, duration grtt) {
  auto& chunk = *m_chunks[m_next_chunk];
  chunk.set_sender_time_us(to_wire_us(now));
  chunk.mutable_params()->set_grtt_us(static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(grtt).count()));
  std::vector<std::byte> out(wire::header_size + chunk.ByteSizeLong());
  wire::encode_control(out, wire::msg_type::announce, session, chunk);
  return out;
}

}  // namespace mcdist::sender
