#include "receiver/io/channel_table.hpp"

#include "checkpoint.pb.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

namespace mcdist::receiver {

void channel_table::save(const std::filesystem::path& file,
                         const std::vector<channel_config>& channels, spdlog::logger& log) {
  const auto tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (std::size_t i = 0; i < channels.size(); ++i) {
      out << i << '\t' << channels[i].name << '\t' << channels[i].dest.string() << '\n';
    }
    if (!out) {
      log.warn(
          "cannot write {}: a restart may not resume sessions of channels a reload "
          "added",
          tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) log.warn("cannot rename {} into place: {}", tmp, ec.message());
}

channel_table channel_table::load(const std::filesystem::path& file,
                                  const std::vector<channel_config>& channels) {
  channel_table t;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto t1 = line.find('\t');
    const auto t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos) continue;
    std::uint32_t old = 0;
    if (!(std::istringstream(line.substr(0, t1)) >> old)) continue;
    const auto name = line.substr(t1 + 1, t2 - t1 - 1);
    const std::filesystem::path dest = line.substr(t2 + 1);
    std::optional<std::uint32_t> now;
    for (std::size_t i = 0; i < channels.size(); ++i) {
      if (channels[i].name == name && channels[i].dest == dest) {
        now = static_cast<std::uint32_t>(i);
        break;
      }
    }
    t.m_remap[old] = now;
  }
  return t;
}

std::optional<std::uint32_t> channel_table::index_now(std::uint32_t old) const {
  const auto it = m_remap.find(old);
  return it == m_remap.end() ? std::optional(old) : it->second;
}

std::optional<std::string> channel_table::remap_checkpoint(std::string blob) const {
  if (m_remap.empty()) return blob;
  checkpoint::session_state st;
  if (!st.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) return blob;
  const auto it = m_remap.find(st.channel());
  if (it == m_remap.end()) return blob;  // not in the table: as saved
  if (!it->second) return std::nullopt;
  if (*it->second == st.channel()) return blob;
  st.set_channel(*it->second);
  return st.SerializeAsString();
}

}  // namespace mcdist::receiver
