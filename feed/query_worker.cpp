#include "feed/query_worker.hpp"

#include <boost/asio/post.hpp>

namespace mcdist::feed {

query_worker::query_worker(const std::filesystem::path& journal_file)
    : m_journal(open_hub_journal(journal_file.string(), /*read_only=*/true)) {}

query_worker::~query_worker() {
  m_pool.stop();  // queued jobs are not started
  m_pool.join();  // a running one ends first: it uses m_journal
}

void query_worker::post(std::function<void(hub_journal&)> job) {
  boost::asio::post(m_pool, [this, job = std::move(job)] {
    std::function<void()> hook;
    {
      std::lock_guard lock(m_hook_mutex);
      hook = m_before_job;
    }
    if (hook) hook();
    try {
      job(*m_journal);
    } catch (...) {
      // A job reports its own errors (see post()); nothing may end the worker thread.
    }
  });
}

void query_worker::set_before_job(std::function<void()> hook) {
  std::lock_guard lock(m_hook_mutex);
  m_before_job = std::move(hook);
}

}  // namespace mcdist::feed
