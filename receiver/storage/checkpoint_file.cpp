#include "receiver/storage/checkpoint_file.hpp"

#include "checkpoint.pb.h"
#include "receiver/storage/store_context.hpp"

#include <fcntl.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>

namespace mcdist::receiver {

namespace {

/// The session id a temp_dir entry name stands for: exactly 8 hex digits.
std::optional<session_id> session_of_name(const std::string& name) {
  if (name.size() != 8) return std::nullopt;
  std::uint32_t id = 0;
  auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), id, 16);
  if (perr != std::errc{} || ptr != name.data() + name.size()) return std::nullopt;
  return session_id{id};
}

}  // namespace

void save_checkpoint(const store_context& ctx, session_id session, std::string_view blob) {
  const auto dir = ctx.cfg.temp_dir / session_hex(session);
  const bool sync = ctx.cfg.sync != sync_mode::none;
  const posix_io& io = ctx.io;
  auto failed = [&](const char* call, int e) {
    ctx.log().error(
        "storage: checkpoint of session {} not saved ({} on {}): {}; the previous "
        "state stays",
        session_hex(session), call, dir.string(), std::strerror(e));
  };
  int e = 0;
  unique_fd dfd(ctx.open_session_dir(session, e));
  if (!dfd) {
    return failed(e == ELOOP || e == ENOTDIR ? "openat (a symlink, not followed)" : "mkdirat", e);
  }
  // Every write queued before the checkpoint has been pwritten (the writer handles jobs in
  // order); make it durable so the state never claims blocks a crash lost.
  if (sync && (e = io.syncfs(ctx.temp_fd.get())) != 0) return failed("syncfs", e);
  int raw = -1;
  e = io.open(dfd.get(), "state.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600,
              nullptr, raw);
  unique_fd fd(raw);
  if (e != 0) return failed("open", e);
  if ((e = io.pwrite_all(fd.get(), std::as_bytes(std::span(blob)), 0, nullptr)) != 0)
    return failed("pwrite", e);
  if (sync && (e = io.fsync(fd.get(), nullptr)) != 0) return failed("fsync", e);
  fd.reset();
  if ((e = io.rename(dfd.get(), "state.tmp", dfd.get(), "state", nullptr)) != 0)
    return failed("rename", e);
  if (sync && (e = io.dir_fsync(dfd.get())) != 0) return failed("fsync of directory", e);
}

std::vector<std::pair<session_id, std::string>> load_checkpoints(
    const std::filesystem::path& temp_dir) {
  std::vector<std::pair<session_id, std::string>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(temp_dir, ec);
  if (ec) return out;
  for (const auto& entry : it) {
    const auto id = session_of_name(entry.path().filename().string());
    if (!id) continue;
    std::error_code lec;
    if (entry.is_symlink(lec) || !entry.is_directory(lec)) continue;  // never followed
    const auto state = entry.path() / "state";
    std::error_code sec;
    const auto size = std::filesystem::file_size(state, sec);
    if (sec) continue;
    if (size > max_checkpoint_bytes) {
      spdlog::warn("storage: checkpoint {} is {} bytes, over the {} limit; ignored", state.string(),
                   size, max_checkpoint_bytes);
      continue;
    }
    std::ifstream in(state, std::ios::binary);
    std::string blob(static_cast<std::size_t>(size), '\0');
    if (!in.read(blob.data(), static_cast<std::streamsize>(size))) {
      spdlog::warn("storage: cannot read checkpoint {}; ignored", state.string());
      continue;
    }
    // The format's header (proto/checkpoint.proto): a state this build cannot read, or one
    // that names another session than its directory, is not handed to the engine; its
    // directory is swept and the session starts over when announced again.
    checkpoint::session_header head;
    if (!head.ParseFromString(blob)) {
      spdlog::warn(
          "storage: checkpoint {} is damaged (not a checkpoint); ignored, the session "
          "starts over",
          state.string());
      continue;
    }
    if (head.version() > checkpoint::CURRENT) {
      spdlog::warn(
          "storage: checkpoint {} was written by a newer mcdist (format version {}, "
          "this one reads up to {}); ignored, the session starts over",
          state.string(), head.version(), static_cast<int>(checkpoint::CURRENT));
      continue;
    }
    if (head.session() != id->value) {
      spdlog::warn(
          "storage: checkpoint {} is of session {}, not of its directory's; "
          "ignored, the session starts over",
          state.string(), session_id{head.session()});
      continue;
    }
    out.emplace_back(*id, std::move(blob));
  }
  return out;
}

std::size_t sweep_temp(const std::filesystem::path& temp_dir, const std::vector<session_id>& keep,
                       spdlog::logger& log) {
  std::size_t removed = 0;
  std::error_code ec;
  std::filesystem::directory_iterator it(temp_dir, ec);
  if (ec) return 0;
  std::vector<std::filesystem::path> doomed;
  for (const auto& entry : it) {
    const auto id = session_of_name(entry.path().filename().string());
    if (!id || std::find(keep.begin(), keep.end(), *id) != keep.end()) continue;
    doomed.push_back(entry.path());
  }
  for (const auto& p : doomed) {
    // remove_all removes a symlink itself, never what it points to.
    std::error_code rec;
    std::filesystem::remove_all(p, rec);
    if (rec) {
      log.warn("storage: cannot remove temp directory {} of an unknown session: {}", p.string(),
               rec.message());
    } else {
      ++removed;
    }
  }
  if (removed > 0) {
    log.info("storage: removed {} temp directories of sessions without usable saved state",
             removed);
  }
  return removed;
}

}  // namespace mcdist::receiver
