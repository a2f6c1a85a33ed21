// receiver_engine: silent sessions (docs/design-notes.md "Silent sessions").
// A silent site sends nothing, so what it could not complete is recorded here, where an
// operator and a catch-up find it: each such file goes to receiver_sink::file_finished as not
// stored (the daemon's status page, metrics and log), and a sequenced session that was not
// completed stays missing in the channel's sequence book (sequence_book.hpp) for catch-up.
#include "receiver/core/receiver_engine_parts.hpp"

namespace mcdist::receiver {

using namespace engine_detail;

namespace {
/// Paths named in the log line of a silent session that ended short; the rest are counted
/// (each is also reported on its own through file_finished).
constexpr std::size_t max_logged_paths = 10;
}  // namespace

bool receiver_engine::silent(session_id id) const noexcept {
  const session_rx* s = m_sessions.find(id);
  return s && s->silent;
}

void receiver_engine::record_incomplete(session_rx& s, const std::string& why) {
  std::uint32_t incomplete = 0;
  std::string paths;
  for (std::size_t i = 0; i < s.files.size(); ++i) {
    auto& fr = s.files[i];
    // Terminal files have their outcome; finalizing ones are renamed into place still and
    // reported then (m_late_files); an entry that never arrived has no path to record.
    if (fr.terminal() || fr.state == file_rx::state_t::finalizing ||
        fr.state == file_rx::state_t::pending) {
      continue;
    }
    const std::uint32_t have = fr.received.size() == fr.blocks ? fr.received.count() : 0;
    const std::string failure =
        fr.state == file_rx::state_t::awaiting_digest
            ? fmt::format("incomplete: all {} blocks, but no digest to verify them ({})", fr.blocks,
                          why)
            : fmt::format("incomplete: {} of {} blocks ({})", have, fr.blocks, why);
    ++incomplete;
    ++m_stats.files_incomplete;
    ++m_stats.files_failed;
    m_sink.file_finished({s.id, s.channel, fr.entry.path, fr.entry.size, false, failure,
                          fr.entry.mtime_ns, nullptr});
    if (incomplete <= max_logged_paths) {
      paths += (paths.empty() ? "" : ", ") + printable(fr.entry.path);
    }
  }
  const auto unknown = static_cast<std::uint32_t>(
      s.file_count - std::min<std::size_t>(s.file_count, s.files.size()) +
      std::count_if(s.files.begin(), s.files.end(),
                    [](const file_rx& fr) { return fr.state == file_rx::state_t::pending; }));
  if (m_log && (incomplete > 0 || unknown > 0)) {
    m_log->warn(
        "session {} (silent, channel {}{}): {} files incomplete{}{}{}; {} files never announced "
        "in full; a catch-up over another path must bring them",
        s.name(), s.channel, s.seq > 0 ? fmt::format(", {} #{}", s.seq_channel, s.seq) : "",
        incomplete, incomplete ? ": " : "", paths,
        incomplete > max_logged_paths ? fmt::format(" and {} more", incomplete - max_logged_paths)
                                      : "",
        unknown);
  }
}

}  // namespace mcdist::receiver
