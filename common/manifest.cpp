#include "common/manifest.hpp"

#include "common/error.hpp"
#include "common/path_check.hpp"
#include "mcdist.pb.h"

namespace mcdist {

void to_wire(const manifest_entry& e, wire::file_entry& out) {
  out.set_path(e.path);
  out.set_size(e.size);
  out.set_mtime_ns(e.mtime_ns);
  out.set_mode(e.mode);
  if (e.digest) {
    out.set_sha256(e.digest->data(), e.digest->size());
  } else {
    out.clear_sha256();
  }
}

std::error_code from_wire(const wire::file_entry& in, manifest_entry& out) {
  if (auto ec = check_relative_path(in.path())) return ec;
  if (in.size() > max_file_size) return errc::file_too_large;
  if (!in.sha256().empty() && in.sha256().size() != 32) return errc::invalid_field;
  out.path = in.path();
  out.size = in.size();
  out.mtime_ns = in.mtime_ns();
  out.mode = in.mode() & 01777;
  out.digest = digest_from_bytes(in.sha256());
  return {};
}

}  // namespace mcdist
