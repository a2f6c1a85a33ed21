#include "common/unicast/range_tracker.hpp"

#include "common/error.hpp"

#include <iterator>

namespace mcdist::unicast {

std::error_code range_tracker::add(const byte_range& r) {
  if (r.length == 0 || r.offset > UINT64_MAX - r.length) return errc::invalid_field;
  const std::uint64_t start = r.offset;
  const std::uint64_t end = r.offset + r.length;
  auto& ivs = m_files[r.file];
  auto next = ivs.lower_bound(start);
  if (next != ivs.end() && next->first < end) return errc::invalid_field;
  if (next != ivs.begin()) {
    auto prev = std::prev(next);
    if (prev->second > start) return errc::invalid_field;
  }
  // Merge with adjacent neighbours so the map stays minimal.
  std::uint64_t s = start;
  std::uint64_t e = end;
  if (next != ivs.end() && next->first == end) {
    e = next->second;
    next = ivs.erase(next);
  }
  if (next != ivs.begin()) {
    auto prev = std::prev(next);
    if (prev->second == start) {
      s = prev->first;
      ivs.erase(prev);
    }
  }
  ivs.emplace(s, e);
  m_bytes += r.length;
  return {};
}

bool range_tracker::overlaps(const byte_range& r) const {
  if (r.length == 0) return false;
  const auto fit = m_files.find(r.file);
  if (fit == m_files.end()) return false;
  const auto& ivs = fit->second;
  const std::uint64_t end = r.offset > UINT64_MAX - r.length ? UINT64_MAX : r.offset + r.length;
  auto next = ivs.lower_bound(r.offset);
  if (next != ivs.end() && next->first < end) return true;
  if (next != ivs.begin() && std::prev(next)->second > r.offset) return true;
  return false;
}

std::error_code range_tracker::take(file_index file, std::uint64_t offset, std::uint64_t length,
                                    bool& file_done) {
  file_done = false;
  if (length == 0 || offset > UINT64_MAX - length) return errc::invalid_field;
  auto fit = m_files.find(file);
  if (fit == m_files.end()) return errc::invalid_field;
  auto& ivs = fit->second;
  auto it = ivs.upper_bound(offset);
  if (it == ivs.begin()) return errc::invalid_field;
  --it;
  const std::uint64_t s = it->first;
  const std::uint64_t e = it->second;
  const std::uint64_t end = offset + length;
  if (offset < s || end > e) return errc::invalid_field;
  ivs.erase(it);
  if (s < offset) ivs.emplace(s, offset);
  if (end < e) ivs.emplace(end, e);
  m_bytes -= length;
  if (ivs.empty()) {
    m_files.erase(fit);
    file_done = true;
  }
  return {};
}

std::vector<byte_range> range_tracker::outstanding() const {
  std::vector<byte_range> out;
  for (const auto& [file, ivs] : m_files)
    for (const auto& [s, e] : ivs) out.push_back({file, s, e - s});
  return out;
}

}  // namespace mcdist::unicast
