#pragma once
/// @file
/// The release this build is, for every program's --version and the status pages.

namespace mcdist {

/// The release, "MAJOR.MINOR.PATCH" from CMake's PROJECT_VERSION (compiled into version.cpp
/// alone, so a new version rebuilds one file).
const char* version() noexcept;

}  // namespace mcdist
