#pragma once
/// @file
/// The scanner thread of the storage path: answers storage_port::query_held (docs/architecture.md
/// "Register": the receiver says which files it already holds, same size and SHA-256) off the
/// network thread. A file is held when, below dest_root and through no symlink, a regular file
/// has the query's size and mtime, and its digest comes from its user.mcdist.sha256 xattr
/// (common/sys/digest_xattr.hpp) when that records the same size and mtime, else from hashing it
/// if it is at most storage_config::hash_held_max_bytes.

#include "receiver/storage/store_context.hpp"

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mcdist::receiver {

/// One query: the files to look for below `dest_root`, and where the answers go.
struct scan_job {
  std::vector<held_query> queries;
  std::filesystem::path dest_root;
  /// Receives the answers (files held only), on the scanner thread.
  std::function<void(std::vector<held_answer>)> done;
};

/// The scanner thread and its queue. Queries are advisory: at stop() the ones still queued are
/// dropped without an answer.
class held_scanner {
 public:
  /// @param ctx  shared store state; must outlive the scanner
  explicit held_scanner(store_context& ctx);
  ~held_scanner();
  held_scanner(const held_scanner&) = delete;
  held_scanner& operator=(const held_scanner&) = delete;

  void start();
  /// Finishes the query being answered, drops the rest, joins the thread. Idempotent.
  void stop();
  /// Queues a query. Any thread.
  void push(scan_job job);
  /// Answers one query now, on the calling thread (what the thread does per job).
  std::vector<held_answer> scan(const scan_job& j);

 private:
  void run();

  store_context& m_ctx;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<scan_job> m_queue;
  bool m_stop = false;
  std::unique_ptr<std::byte[]> m_buffer;
  std::thread m_thread;
};

}  // namespace mcdist::receiver
