#include "feed/feed_http.hpp"

#include "common/version.hpp"
#include "feed/feed_render.hpp"

namespace mcdist::feed {

std::string render_feed_view(const feed_daemon& daemon, wall_time started, status_view view,
                             log_summary log) {
  feed_snapshot s;
  s.version = mcdist::version();
  s.now = std::chrono::system_clock::now();
  s.started = started;
  s.cfg = &daemon.config();  // the reloaded one (channels by index, as the board)
  s.daemon = daemon.status();
  s.board = &daemon.board();
  s.log = std::move(log);
  switch (view) {
    case status_view::metrics: return render_feed_metrics(s);
    case status_view::page: return render_feed_page(s);
    case status_view::json: break;
  }
  return status_json_text(render_feed_status(s));
}

}  // namespace mcdist::feed
