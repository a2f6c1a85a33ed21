#include "feed/control_protocol.hpp"

#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <stdexcept>

namespace mcdist::feed {
namespace {

using json = nlohmann::json;

/// Nesting depth of a JSON text, counting brackets outside strings. Stops early once over
/// `limit` (the answer is then limit + 1).
std::size_t nesting_depth(std::string_view s, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return deepest;
}

/// Reads the fields of a request object, collecting the first error.
class field_reader {
 public:
  field_reader(const json& o, std::initializer_list<std::string_view> allowed) : m_o(o) {
    for (const auto& [k, v] : o.items()) {
      bool known = false;
      for (const auto a : allowed) known = known || a == k;
      if (!known) fail("unknown key \"" + k + "\"");
    }
  }

  std::optional<std::string> string(const char* key, bool required) {
    const auto it = m_o.find(key);
    if (it == m_o.end()) {
      if (required) fail(std::string("\"") + key + "\" is required");
      return std::nullopt;
    }
    if (!it->is_string()) return fail(std::string("\"") + key + "\" must be a string");
    const auto& s = it->get_ref<const std::string&>();
    if (s.empty()) return fail(std::string("\"") + key + "\" is empty");
    if (s.size() > max_name_bytes) return fail(std::string("\"") + key + "\" is too long");
    return s;
  }

  std::optional<std::uint64_t> unsigned_int(const json& v, const std::string& key) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
      return static_cast<std::uint64_t>(v.get<std::int64_t>());
    fail("\"" + key + "\" must be a non-negative integer");
    return std::nullopt;
  }

  std::optional<wall_time> time(const char* key, bool required) {
    const auto it = m_o.find(key);
    if (it == m_o.end()) {
      if (required) fail(std::string("\"") + key + "\" is required");
      return std::nullopt;
    }
    const auto v = unsigned_int(*it, key);
    if (!v) return std::nullopt;
    if (*v > static_cast<std::uint64_t>(INT64_MAX))
      return fail(std::string("\"") + key + "\" is out of range");
    return from_ns(static_cast<std::int64_t>(*v));
  }

  const std::string& error() const { return m_error; }

  std::nullopt_t fail(const std::string& what) {
    if (m_error.empty()) m_error = what;
    return std::nullopt;
  }

  const json& object() const { return m_o; }

 private:
  const json& m_o;
  std::string m_error;
};

parsed_request bad(std::string what) { return {std::nullopt, std::move(what)}; }

template <class R>
parsed_request done(field_reader& f, R r) {
  if (!f.error().empty()) return bad(f.error());
  return {control_request(std::move(r)), {}};
}

std::int64_t ns(wall_time t) { return to_ns(t); }

}  // namespace

parsed_request parse_request(std::string_view line) {
  if (line.size() > max_request_bytes) return bad("request too long (over 65536 bytes)");
  if (nesting_depth(line, max_request_depth) > max_request_depth)
    return bad("request nested too deeply");
  const auto j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return bad("request is not JSON");
  if (!j.is_object()) return bad("request is not a JSON object");
  const auto cmd_it = j.find("cmd");
  if (cmd_it == j.end() || !cmd_it->is_string()) return bad("request has no \"cmd\" string");
  const auto& cmd = cmd_it->get_ref<const std::string&>();
  try {
    if (cmd == "status") {
      field_reader f(j, {"cmd"});
      return done(f, status_request{});
    }
    if (cmd == "history") {
      field_reader f(j, {"cmd", "site", "since_ns", "product", "channel", "limit"});
      history_request r;
      r.site = f.string("site", true).value_or("");
      r.since = f.time("since_ns", true).value_or(wall_time{});
      r.glob = f.string("product", false);
      r.channel = f.string("channel", false);
      if (const auto it = j.find("limit"); it != j.end()) {
        const auto n = f.unsigned_int(*it, "limit");
        if (n && (*n == 0 || *n > max_history_rows))
          f.fail("\"limit\" must be 1.." + std::to_string(max_history_rows));
        if (n) r.limit = static_cast<std::size_t>(*n);
      }
      return done(f, std::move(r));
    }
    if (cmd == "missing") {
      field_reader f(j, {"cmd", "site", "since_ns"});
      missing_request r;
      r.site = f.string("site", true).value_or("");
      r.since = f.time("since_ns", true).value_or(wall_time{});
      return done(f, std::move(r));
    }
    if (cmd == "resend") {
      field_reader f(j, {"cmd", "site", "since_ns", "product", "seq", "channel", "unicast"});
      resend_request r;
      r.site = f.string("site", true).value_or("");
      r.since = f.time("since_ns", false);
      r.glob = f.string("product", false);
      r.channel = f.string("channel", false);
      if (const auto it = j.find("seq"); it != j.end()) {
        if (!it->is_array() || it->size() != 2) {
          f.fail("\"seq\" must be [first, last]");
        } else {
          const auto a = f.unsigned_int((*it)[0], "seq");
          const auto b = f.unsigned_int((*it)[1], "seq");
          if (a && b && (*a == 0 || *a > *b))
            f.fail("\"seq\" must be [first, last], 1 <= first <= last");
          if (a && b) r.seqs = std::pair{*a, *b};
        }
      }
      if (const auto it = j.find("unicast"); it != j.end()) {
        if (!it->is_boolean())
          f.fail("\"unicast\" must be true or false");
        else
          r.unicast = it->get<bool>();
      }
      if (!r.since && !r.glob && !r.seqs)
        f.fail("resend needs \"since_ns\", \"product\" or \"seq\" (which products to send again)");
      return done(f, std::move(r));
    }
  } catch (const json::exception& e) {
    return bad(std::string("bad request: ") + e.what());
  }
  return bad("unknown command \"" + cmd.substr(0, 64) + "\" (status, history, missing, resend)");
}

json to_json(const control_request& req) {
  return std::visit(
      [](const auto& r) -> json {
        using T = std::decay_t<decltype(r)>;
        json j;
        if constexpr (std::is_same_v<T, status_request>) {
          j["cmd"] = "status";
        } else if constexpr (std::is_same_v<T, history_request>) {
          j["cmd"] = "history";
          j["site"] = r.site;
          j["since_ns"] = ns(r.since);
          if (r.glob) j["product"] = *r.glob;
          if (r.channel) j["channel"] = *r.channel;
          j["limit"] = r.limit;
        } else if constexpr (std::is_same_v<T, missing_request>) {
          j["cmd"] = "missing";
          j["site"] = r.site;
          j["since_ns"] = ns(r.since);
        } else {
          j["cmd"] = "resend";
          j["site"] = r.site;
          if (r.since) j["since_ns"] = ns(*r.since);
          if (r.glob) j["product"] = *r.glob;
          if (r.seqs) j["seq"] = json::array({r.seqs->first, r.seqs->second});
          if (r.channel) j["channel"] = *r.channel;
          if (r.unicast) j["unicast"] = true;
        }
        return j;
      },
      req);
}

std::string format_time(wall_time t) {
  const auto n = to_ns(t);
  auto secs = n / 1'000'000'000;
  auto ms = (n % 1'000'000'000) / 1'000'000;
  if (ms < 0) {
    ms += 1000;
    --secs;
  }
  const std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

json to_json(const history_row& r) {
  return {{"product_id", r.product_id},
          {"channel", r.channel},
          {"name", r.name},
          {"size", r.size},
          {"seq", r.seq},
          {"site", r.site},
          {"outcome", to_string(r.result)},
          {"reason", r.reason},
          {"at", format_time(r.at)},
          {"at_ns", to_ns(r.at)}};
}

json to_json(const missing_row& r) {
  return {{"product_id", r.product_id},
          {"channel", r.channel},
          {"name", r.name},
          {"size", r.size},
          {"seq", r.seq},
          {"sent_at", format_time(r.sent_at)},
          {"sent_at_ns", to_ns(r.sent_at)},
          {"last_outcome", r.last ? json(to_string(*r.last)) : json(nullptr)},
          {"reason", r.reason},
          {"retained", r.retained}};
}

json to_json(const site_row& r) {
  return {{"site", r.site},
          {"channel", r.channel},
          {"last_seen", format_time(r.last_seen)},
          {"last_seen_ns", to_ns(r.last_seen)},
          {"rtt_s", r.rtt_s},
          {"nak_ratio", r.nak_ratio},
          {"last_seq", r.last_seq}};
}

json to_json(const channel_row& r) {
  return {{"channel", r.channel},
          {"last_seq", r.last_seq},
          {"queued", r.queued},
          {"sending", r.sending},
          {"sent", r.sent},
          {"failed", r.failed},
          {"last_session", r.last_session ? json(format_time(*r.last_session)) : json(nullptr)}};
}

json to_json(const session_info& s) {
  return {{"channel", s.row.channel},
          {"seq", s.row.seq},
          {"session", s.row.session_id},
          {"kind", to_string(s.row.kind)},
          {"started", format_time(s.row.started)},
          {"ended", s.ended ? json(format_time(*s.ended)) : json(nullptr)},
          {"outcome", s.result ? json(to_string(*s.result)) : json(nullptr)},
          {"products", s.products}};
}

json to_json(const product& p) {
  return {{"product_id", p.id},
          {"channel", p.channel},
          {"name", p.name},
          {"size", p.size},
          {"seq", p.seq},
          {"state", to_string(p.state)},
          {"sha256", p.sha256},
          {"queued_at", format_time(p.queued_at)},
          {"sent_at", p.sent_at ? json(format_time(*p.sent_at)) : json(nullptr)}};
}

json journal_handler::status() {
  json j;
  j["daemon"] = false;
  j["channels"] = json::array();
  for (const auto& c : m_journal.channels()) j["channels"].push_back(to_json(c));
  j["sites"] = json::array();
  for (const auto& s : m_journal.sites()) j["sites"].push_back(to_json(s));
  j["sessions"] = json::array();
  for (const auto& s : m_journal.sessions(wall_time{}, 20)) j["sessions"].push_back(to_json(s));
  return j;
}

json journal_handler::history(const history_request& r) {
  const auto limit = std::min(r.limit, max_history_rows);
  // One row more than asked tells whether the answer is truncated.
  auto rows = m_journal.history(
      r.site, r.since, r.glob ? std::optional<std::string_view>(*r.glob) : std::nullopt,
      r.channel ? std::optional<std::string_view>(*r.channel) : std::nullopt, limit + 1);
  const bool truncated = rows.size() > limit;
  if (truncated) rows.resize(limit);
  json j;
  j["site"] = r.site;
  j["since"] = format_time(r.since);
  j["rows"] = json::array();
  for (const auto& row : rows) j["rows"].push_back(to_json(row));
  j["truncated"] = truncated;
  return j;
}

json journal_handler::missing(const missing_request& r) {
  json j;
  j["site"] = r.site;
  j["since"] = format_time(r.since);
  j["rows"] = json::array();
  for (const auto& row : m_journal.missing(r.site, r.since)) j["rows"].push_back(to_json(row));
  return j;
}

json journal_handler::resend(const resend_request&) {
  throw std::runtime_error("resend needs the running mcdist-feed daemon");
}

json finish_answer(json out) {
  if (!out.is_object()) out = json{{"result", std::move(out)}};
  if (!out.contains("ok")) out["ok"] = true;
  return out;
}

json answer(control_handler& h, control_request& req) {
  try {
    json out = std::visit(
        [&](auto& r) -> json {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, status_request>)
            return h.status();
          else if constexpr (std::is_same_v<T, history_request>)
            return h.history(r);
          else if constexpr (std::is_same_v<T, missing_request>)
            return h.missing(r);
          else
            return h.resend(r);
        },
        req);
    return finish_answer(std::move(out));
  } catch (const std::exception& e) {
    return {{"ok", false}, {"error", e.what()}};
  }
}

json answer(control_handler& h, std::string_view line, std::optional<std::uint32_t> peer_uid) {
  auto parsed = parse_request(line);
  if (!parsed.request) return {{"ok", false}, {"error", parsed.error}};
  if (auto* r = std::get_if<resend_request>(&*parsed.request)) r->peer_uid = peer_uid;
  return answer(h, *parsed.request);
}

void control_handler::answer_async(control_request r, answer_callback done) {
  done(answer(*this, r));
}

void answer_async(control_handler& h, std::string_view line, std::optional<std::uint32_t> peer_uid,
                  answer_callback done) {
  auto parsed = parse_request(line);
  if (!parsed.request) {
    done({{"ok", false}, {"error", parsed.error}});
    return;
  }
  if (auto* r = std::get_if<resend_request>(&*parsed.request)) r->peer_uid = peer_uid;
  // `done` is shared: an exception thrown after answer_async handed it on must not call a
  // moved-from function, nor call it twice.
  auto once = std::make_shared<answer_callback>(std::move(done));
  try {
    h.answer_async(std::move(*parsed.request), [once](json out) {
      if (!*once) return;
      auto f = std::move(*once);
      *once = nullptr;
      f(finish_answer(std::move(out)));
    });
  } catch (const std::exception& e) {
    if (*once) {
      auto f = std::move(*once);
      *once = nullptr;
      f({{"ok", false}, {"error", e.what()}});
    }
  }
}

std::string to_line(const json& j) {
  auto s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  s += '\n';
  return s;
}

}  // namespace mcdist::feed
