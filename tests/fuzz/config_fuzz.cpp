/// @file
/// libFuzzer target: mcdistd's TOML configuration (receiver/io/daemon_config.hpp), parsed and
/// validated as at start-up.
///
/// Input: the file's text. Every bad file must be refused with config_error (a message naming
/// the setting); any other exception escapes and is reported by libFuzzer as a crash, since
/// mcdistd would end with an unhelpful message instead of naming the setting.

#include "receiver/io/daemon_config.hpp"

#include <string_view>

using namespace mcdist::receiver;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const daemon_config cfg = load_config_string(text, "<fuzz>");
    validate(cfg);
  } catch (const config_error&) {
  }
  return 0;
}
