#include "common/version.hpp"

#ifndef MCDIST_VERSION
#error "MCDIST_VERSION is set by common/CMakeLists.txt"
#endif

namespace mcdist {

const char* version() noexcept { return MCDIST_VERSION; }

}  // namespace mcdist
