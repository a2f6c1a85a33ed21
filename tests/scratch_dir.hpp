#pragma once
/// @file
/// A fresh directory for one test, removed with everything in it when the test ends.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace mcdist::test {

/// A directory made by mkdtemp(3) under `base` (the system's temporary directory unless
/// given), named `<prefix>-XXXXXX` so that a test's leftovers after a crash say whose they
/// are. Unique across parallel test processes and across the cases of one process.
/// @throws std::runtime_error when mkdtemp fails (base missing or not writable)
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& prefix = "mcdist-test",
                       const std::filesystem::path& base = std::filesystem::temp_directory_path()) {
    std::string templ = (base / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed in " + base.string());
    m_path = templ;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path operator/(const std::filesystem::path& rel) const { return m_path / rel; }

 private:
  std::filesystem::path m_path;
};

}  // namespace mcdist::test
