#include "receiver/core/file_table.hpp"

#include "common/ranges.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

namespace mcdist::receiver {

std::uint32_t file_table::refused() const noexcept {
  return static_cast<std::uint32_t>(
      std::count_if(m_files.begin(), m_files.end(),
                    [](const file_rx& fr) { return fr.state == file_rx::state_t::refused; }));
}

void file_table::grow(std::size_t capacity, std::size_t size) {
  m_files.reserve(capacity);
  m_files.resize(size);
}

bool file_table::take(taken_entry t) {
  auto& fr = m_files[t.index];
  fr.entry = std::move(t.entry);
  if (t.refused != errc::ok) {
    fr.state = file_rx::state_t::refused;
    fr.failure = std::string(to_string(t.refused));
    return true;
  }
  fr.blocks = t.blocks;
  fr.state = file_rx::state_t::receiving;
  return false;
}

std::vector<std::pair<std::uint32_t, bool>> file_table::close_manifest() {
  std::vector<std::pair<std::uint32_t, bool>> refused;
  std::unordered_set<std::string_view> paths;
  std::unordered_set<std::string_view> dirs;
  for (std::uint32_t i = 0; i < m_files.size(); ++i) {
    auto& fr = m_files[i];
    if (fr.state == file_rx::state_t::refused) continue;
    const std::string_view path = fr.entry.path;
    if (fr.state == file_rx::state_t::failed) {
      // Failed while the manifest was assembled (storage, budget): its path still counts.
      paths.insert(path);
      continue;
    }
    bool conflict = paths.count(path) > 0 || dirs.count(path) > 0;
    for (std::size_t pos = path.find('/'); !conflict && pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      conflict = paths.count(path.substr(0, pos)) > 0;
    }
    if (conflict) {
      refused.emplace_back(i, fr.begun);
      fr.begun = false;
      fr.state = file_rx::state_t::refused;
      fr.failure = "path_conflict";
      continue;
    }
    paths.insert(path);
    for (std::size_t pos = path.find('/'); pos != std::string_view::npos;
         pos = path.find('/', pos + 1)) {
      dirs.insert(path.substr(0, pos));
    }
    ++m_open;
  }
  m_counting = true;
  return refused;
}

bool file_table::hold(std::uint32_t f) noexcept {
  auto& fr = m_files[f];
  const bool begun = fr.begun;
  fr.begun = false;
  fr.state = file_rx::state_t::held;
  --m_open;
  ++m_held;
  return begun;
}

void file_table::finalize(std::uint32_t f) noexcept {
  m_files[f].state = file_rx::state_t::finalizing;
  ++m_finalizing;
}

bool file_table::fail(std::uint32_t f, std::string failure) {
  auto& fr = m_files[f];
  if (fr.terminal()) return false;
  if (fr.state == file_rx::state_t::finalizing) --m_finalizing;
  const bool begun = fr.begun;
  fr.begun = false;
  fr.resume = false;
  fr.state = file_rx::state_t::failed;
  fr.failure = std::move(failure);
  // open counts the files left to do from the manifest's completion on.
  if (m_counting) --m_open;
  ++m_failed;
  return begun;
}

file_rx& file_table::leave_finalizing(std::uint32_t f) noexcept {
  auto& fr = m_files[f];
  --m_finalizing;
  fr.begun = false;
  fr.resume = false;
  return fr;
}

void file_table::on_stored(std::uint32_t f) noexcept {
  auto& fr = leave_finalizing(f);
  fr.state = file_rx::state_t::stored;
  --m_open;
  ++m_stored;
  m_bytes_stored += fr.entry.size;
}

void file_table::on_store_failed(std::uint32_t f, std::string failure) {
  auto& fr = leave_finalizing(f);
  fr.state = file_rx::state_t::failed;
  fr.failure = std::move(failure);
  --m_open;
  ++m_failed;
}

void file_table::refetch(std::uint32_t f) noexcept {
  auto& fr = leave_finalizing(f);
  ++fr.digest_retries;
  fr.received.clear_all();
  fr.state = file_rx::state_t::receiving;
}

void file_table::add_held(wire::register_request& m) const {
  const auto n = static_cast<std::uint32_t>(m_files.size());
  std::vector<std::uint32_t> held;
  range_encoder enc(held);
  std::size_t budget = wire::control_budget - wire::header_size - 100;
  budget -= std::min(budget, m.ByteSizeLong());
  for (std::uint32_t i = 0; i < n && budget > 40;) {
    if (m_files[i].state != file_rx::state_t::held) {
      ++i;
      continue;
    }
    std::uint32_t j = i;
    while (j < n && m_files[j].state == file_rx::state_t::held) ++j;
    budget -= std::min(budget, enc.cost(i, j - i));
    enc.add(i, j - i);
    i = j;
  }
  for (const auto v : held) m.add_held_files(v);
  for (std::uint32_t i = 0; i < n && budget > 40; ++i) {
    const auto& fr = m_files[i];
    if (fr.held_digest && fr.state == file_rx::state_t::receiving) {
      auto* hd = m.add_held_pending();
      hd->set_file(i);
      hd->set_sha256(fr.held_digest->data(), 32);
      budget -= 40;
    }
  }
}

void file_table::save(checkpoint_writer& w) const {
  for (const auto& fr : m_files) {
    // A file being finalized is saved as fully received: on resume it is finalized again.
    // (No file is pending once the session receives.)
    saved_phase phase = saved_phase::receiving;
    switch (fr.state) {
      case file_rx::state_t::refused: phase = saved_phase::refused; break;
      case file_rx::state_t::held: phase = saved_phase::held; break;
      case file_rx::state_t::stored: phase = saved_phase::stored; break;
      case file_rx::state_t::failed: phase = saved_phase::failed; break;
      case file_rx::state_t::awaiting_digest: phase = saved_phase::awaiting_digest; break;
      case file_rx::state_t::pending:
      case file_rx::state_t::receiving:
      case file_rx::state_t::finalizing: break;
    }
    const bool partial = phase == saved_phase::receiving || phase == saved_phase::awaiting_digest;
    w.add_file(fr.entry, phase, fr.begun || fr.resume, fr.digest_retries, fr.failure,
               partial ? fr.received.words() : std::span<const std::uint64_t>{});
  }
}

bool file_table::restore(std::vector<saved_file>& saved, memory_budget& budget, session_id id) {
  m_files.resize(saved.size());
  m_counting = true;
  for (std::uint32_t i = 0; i < saved.size(); ++i) {
    auto& sf = saved[i];
    auto& fr = m_files[i];
    fr.entry = std::move(sf.entry);
    fr.failure = std::move(sf.failure);
    fr.digest_retries = sf.digest_retries;
    fr.blocks = sf.blocks;
    switch (sf.phase) {
      case saved_phase::refused: fr.state = file_rx::state_t::refused; break;
      case saved_phase::held:
        fr.state = file_rx::state_t::held;
        ++m_held;
        break;
      case saved_phase::stored:
        fr.state = file_rx::state_t::stored;
        ++m_stored;
        m_bytes_stored += fr.entry.size;
        break;
      case saved_phase::failed:
        fr.state = file_rx::state_t::failed;
        ++m_failed;
        break;
      case saved_phase::receiving:
      case saved_phase::awaiting_digest:
        // read_checkpoint sized the bitmap by the blob; charged before it is copied again.
        if (!budget.charge(id, bitmap_bytes(fr.blocks))) return false;
        fr.received = block_map(fr.blocks);
        fr.received.assign_words(sf.received);
        sf.received = {};
        fr.state = file_rx::state_t::receiving;
        fr.resume = sf.begun;
        ++m_open;
        break;
    }
  }
  return true;
}

}  // namespace mcdist::receiver
