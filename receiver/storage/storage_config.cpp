#include "receiver/storage/storage_config.hpp"

namespace mcdist::receiver {

std::string_view to_string(sync_mode m) noexcept {
  switch (m) {
    case sync_mode::syncfs: return "syncfs";
    case sync_mode::fdatasync: return "fdatasync";
    case sync_mode::range: return "range";
    case sync_mode::uring: return "uring";
    case sync_mode::file: return "file";
    case sync_mode::none: return "none";
    case sync_mode::adaptive: return "adaptive";
  }
  return "?";
}

std::optional<sync_mode> parse_sync_mode(std::string_view name) noexcept {
  if (name == "batch") return sync_mode::batch;
  for (auto m : {sync_mode::adaptive, sync_mode::syncfs, sync_mode::fdatasync, sync_mode::range,
                 sync_mode::uring, sync_mode::file, sync_mode::none})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

}  // namespace mcdist::receiver
