#include "feed/daemon_handler.hpp"

#include <boost/asio/post.hpp>

namespace mcdist::feed {

namespace {

resend_order order_of(const resend_request& r) {
  resend_order o;
  o.sites = {r.site};
  o.filter.channel = r.channel;
  o.filter.since = r.since;
  o.filter.glob = r.glob;
  o.filter.seqs = r.seqs;
  o.unicast = r.unicast;
  return o;
}

nlohmann::json error_answer(const std::exception& e) {
  return {{"ok", false}, {"error", e.what()}};
}

}  // namespace

daemon_handler::daemon_handler(feed_daemon& d, boost::asio::io_context& io)
    : journal_handler(d.journal()), m_daemon(d), m_io(io),
      m_queries(std::make_unique<query_worker>(d.journal_path())),
      m_status(std::make_unique<query_worker>(d.journal_path())) {}

// The workers join first (members go in reverse order); a job they still run uses only its own
// connection, and what it posts to the io thread runs only while the io_context runs.
daemon_handler::~daemon_handler() = default;

nlohmann::json daemon_handler::status() {
  auto j = journal_handler::status();
  j["daemon"] = true;
  j["feed"] = m_daemon.status();
  return j;
}

nlohmann::json daemon_handler::resend(const resend_request& r) {
  auto j = m_daemon.resend(order_of(r));
  j["site"] = r.site;
  return j;
}

void daemon_handler::set_query_hook(std::function<void()> hook) {
  m_queries->set_before_job(std::move(hook));
}

void daemon_handler::on_worker(query_worker& w, std::function<nlohmann::json(hub_journal&)> query,
                               std::function<nlohmann::json(nlohmann::json)> then,
                               answer_callback done) {
  w.post([this, query = std::move(query), then = std::move(then),
          done = std::move(done)](hub_journal& j) mutable {
    nlohmann::json result;
    bool ok = true;
    try {
      result = query(j);
    } catch (const std::exception& e) {
      result = error_answer(e);
      ok = false;
    }
    boost::asio::post(m_io, [ok, result = std::move(result), then = std::move(then),
                             done = std::move(done)]() mutable {
      if (!ok || !then) {
        done(std::move(result));
        return;
      }
      try {
        done(then(std::move(result)));
      } catch (const std::exception& e) {
        done(error_answer(e));
      }
    });
  });
}

void daemon_handler::answer_async(control_request req, answer_callback done) {
  if (std::holds_alternative<status_request>(req)) {
    on_worker(
        *m_status, [](hub_journal& j) { return journal_handler(j).status(); },
        [this](nlohmann::json j) {
          j["daemon"] = true;
          j["feed"] = m_daemon.status();
          return j;
        },
        std::move(done));
  } else if (auto* h = std::get_if<history_request>(&req)) {
    on_worker(
        *m_queries, [r = *h](hub_journal& j) { return journal_handler(j).history(r); }, nullptr,
        std::move(done));
  } else if (auto* m = std::get_if<missing_request>(&req)) {
    on_worker(
        *m_queries, [r = *m](hub_journal& j) { return journal_handler(j).missing(r); }, nullptr,
        std::move(done));
  } else {
    const auto& rs = std::get<resend_request>(req);
    const auto order = order_of(rs);
    // The lookup's products go to the io thread in `found` (the worker's JSON answer is empty).
    auto found = std::make_shared<resend_products>();
    on_worker(
        *m_queries,
        [order, found](hub_journal& j) {
          *found = feed_daemon::find_resend(j, order);
          return nlohmann::json::object();
        },
        [this, order, found, site = rs.site](nlohmann::json) {
          auto j = m_daemon.queue_resend(order, std::move(*found));
          j["site"] = site;
          return j;
        },
        std::move(done));
  }
}

}  // namespace mcdist::feed
