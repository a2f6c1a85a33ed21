#include "receiver/storage/storage_config.hpp"

namespace mcdist::receiver {

std::string_view to_string(sync_mode m) noexcept {
  switch (m) {
    case sync_mode::batch: return "batch";
    case sync_mode::file: return "file";
    case sync_mode::none: return "none";
  }
  return "?";
}

}  // namespace mcdist::receiver
