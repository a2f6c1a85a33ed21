#pragma once
/// @file
/// mcdist-feed's status port: /metrics, /status and the status page (feed_render.hpp), served
/// by common/daemon/status_port.hpp in the daemon's io_context, as mcdistd does
/// (receiver/io/daemon_http.cpp). Each request renders from the daemon's memory
/// (feed_daemon::status() and its feed_board): no journal query, no I/O on the io thread.

#include "common/daemon/status_port.hpp"
#include "feed/feed_daemon.hpp"

#include <string>

namespace mcdist::feed {

/// The body of one view of the running `daemon`'s status port.
/// @param started  when the feed started (status_port::started)
/// @param log      the recent warnings and errors (status_port's log ring)
std::string render_feed_view(const feed_daemon& daemon, wall_time started, status_view view,
                             log_summary log);

}  // namespace mcdist::feed
