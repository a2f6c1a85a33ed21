#include "receiver/core/session_checkpoint.hpp"

#include "checkpoint.pb.h"
#include "receiver/core/sequence_book.hpp"

#include <cstring>
#include <limits>

namespace mcdist::receiver {

namespace {

/// Most blocks of one file (block indexes are u32; the top bit is left free as in the
/// engine's checks of announced entries).
constexpr std::uint64_t max_file_blocks = 0x7fffffffu;

bool known_phase(std::uint32_t p) noexcept {
  return p == 1 || p == 2 || p == 3 || p == 4 || p == 6 || p == 7;
}

}  // namespace

checkpoint_writer::checkpoint_writer(const saved_session& s)
    : m_state(std::make_unique<checkpoint::session_state>()) {
  auto& st = *m_state;
  st.set_version(checkpoint::CURRENT);
  st.set_session(s.id.value);
  st.set_sender_addr(s.sender.addr.data(), s.sender.v6 ? 16 : 4);
  st.set_sender_port(s.sender.port);
  st.set_channel(s.channel);
  auto* p = st.mutable_params();
  p->set_block_size(s.block_size);
  p->set_file_count(s.file_count);
  p->set_total_bytes(s.total_bytes);
  p->set_manifest_chunks(s.chunks);
  p->set_sender_name(s.sender_name);
  p->set_channel(s.seq_channel);
  p->set_channel_seq(s.seq);
  p->set_silent_passes(s.silent_passes);
  for (const auto& [first, last] : s.catch_up) {
    auto* r = p->add_catch_up_seqs();
    r->set_first(first);
    r->set_last(last);
  }
  st.set_sequence_source(s.seq_source);
  st.set_seen_seq(s.seen_seq);
  st.set_bytes_received(s.bytes_received);
}

checkpoint_writer::~checkpoint_writer() = default;

void checkpoint_writer::add_file(const manifest_entry& entry, saved_phase phase, bool begun,
                                 std::uint32_t digest_retries, std::string_view failure,
                                 std::span<const std::uint64_t> received) {
  auto* fs = m_state->add_files();
  to_wire(entry, *fs->mutable_entry());
  fs->set_phase(static_cast<checkpoint::file_state::phase_t>(phase));
  fs->set_begun(begun);
  fs->set_digest_retries(digest_retries);
  fs->set_failure(std::string(failure));
  if (!received.empty()) {
    fs->set_received(reinterpret_cast<const char*>(received.data()), received.size_bytes());
  }
}

std::string checkpoint_writer::finish() const { return m_state->SerializeAsString(); }

std::error_code read_checkpoint(std::string_view blob, std::uint32_t channel_count,
                                saved_session& out) {
  checkpoint::session_state st;
  if (!st.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) return errc::bad_protobuf;
  if (st.version() > checkpoint::CURRENT) return errc::bad_version;
  const auto& p = st.params();
  if (p.block_size() < wire::min_block_size || p.block_size() > wire::max_block_size ||
      p.file_count() > max_files_per_session ||
      static_cast<std::uint32_t>(st.files_size()) != p.file_count() ||
      (st.sender_addr().size() != 4 && st.sender_addr().size() != 16) ||
      (channel_count != 0 && st.channel() >= channel_count)) {
    return errc::invalid_field;
  }
  // Session numbering as an announce must have it, and a source sequence_book can key by.
  if (static_cast<std::size_t>(p.catch_up_seqs_size()) > wire::max_seq_ranges ||
      (!p.channel().empty() && !wire::valid_channel_name(p.channel())) ||
      (p.channel_seq() > 0 && p.catch_up_seqs_size() > 0) ||
      ((p.channel_seq() > 0 || p.catch_up_seqs_size() > 0) &&
       (p.channel().empty() || !sequence_book::valid_source(st.sequence_source())))) {
    return errc::invalid_field;
  }
  out = saved_session{};
  for (const auto& r : p.catch_up_seqs()) out.catch_up.emplace_back(r.first(), r.last());
  if (!wire::valid_seq_ranges(out.catch_up, std::numeric_limits<std::uint64_t>::max())) {
    return errc::invalid_field;
  }
  out.id = session_id{st.session()};
  out.sender.v6 = st.sender_addr().size() == 16;
  std::memcpy(out.sender.addr.data(), st.sender_addr().data(), st.sender_addr().size());
  out.sender.port = static_cast<std::uint16_t>(st.sender_port());
  out.channel = st.channel();
  out.block_size = p.block_size();
  out.file_count = p.file_count();
  out.chunks = p.manifest_chunks();
  out.total_bytes = p.total_bytes();
  out.sender_name = p.sender_name();
  out.seq_channel = p.channel();
  out.seq = p.channel_seq();
  out.silent_passes = p.silent_passes();
  out.seq_source = st.sequence_source();
  out.seen_seq = st.seen_seq();
  out.bytes_received = st.bytes_received();
  out.files.resize(out.file_count);
  for (std::uint32_t i = 0; i < out.file_count; ++i) {
    const auto& fs = st.files(static_cast<int>(i));
    auto& f = out.files[i];
    const auto phase = static_cast<std::uint32_t>(fs.phase());
    if (!known_phase(phase)) return errc::invalid_field;  // pending, or a phase of the future
    f.phase = static_cast<saved_phase>(phase);
    f.begun = fs.begun();
    f.digest_retries = fs.digest_retries();
    f.failure = fs.failure();
    if (from_wire(fs.entry(), f.entry)) {
      if (f.phase != saved_phase::refused) return errc::invalid_field;
      f.entry.path = fs.entry().path();
      continue;
    }
    const std::uint64_t blocks = (f.entry.size + out.block_size - 1) / out.block_size;
    if (blocks > max_file_blocks) return errc::invalid_field;
    f.blocks = static_cast<std::uint32_t>(blocks);
    if (f.phase != saved_phase::receiving && f.phase != saved_phase::awaiting_digest) continue;
    // The bitmap is exactly the file's: a damaged entry of 2^31 blocks with a short bitmap
    // must not make the engine allocate 256 MiB.
    const auto& raw = fs.received();
    const std::size_t word_count = (std::size_t{f.blocks} + 63) / 64;
    if (raw.size() != word_count * 8) return errc::invalid_field;
    f.received.resize(word_count);
    // (an empty file has no words: memcpy must not see the null pointers)
    if (!raw.empty()) std::memcpy(f.received.data(), raw.data(), raw.size());
  }
  return {};
}

}  // namespace mcdist::receiver
