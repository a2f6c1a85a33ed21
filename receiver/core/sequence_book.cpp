#include "receiver/core/sequence_book.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace mcdist::receiver {

namespace {

constexpr std::string_view header_line = "mcdist-sequences 1";

/// A decimal number as serialize() writes it: digits only, no leading zero (except "0").
bool parse_number(std::string_view text, std::uint64_t& out) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

/// Splits `line` at single spaces into exactly `n` non-empty fields.
bool split_fields(std::string_view line, std::string_view* fields, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto sp = line.find(' ');
    const bool last = i + 1 == n;
    if (last != (sp == std::string_view::npos)) return false;
    fields[i] = last ? line : line.substr(0, sp);
    if (fields[i].empty()) return false;
    if (!last) line.remove_prefix(sp + 1);
  }
  return true;
}

}  // namespace

std::string sequence_book::source_of(std::string_view signing_key, std::string_view sender_name) {
  if (!signing_key.empty()) return "key:" + std::string(signing_key);
  std::string out = "name:";
  static constexpr char hex[] = "0123456789ABCDEF";
  for (const char c : sender_name.substr(0, wire::max_receiver_id_bytes)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e || c == '%') {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

bool sequence_book::valid_source(std::string_view source) noexcept {
  if (source.size() > max_source_bytes) return false;
  if (!source.starts_with("key:") && !source.starts_with("name:")) return false;
  return std::all_of(source.begin(), source.end(), [](char c) { return c >= '!' && c <= '~'; });
}

void sequence_book::normalize(stream& st) {
  // Numbers more than `window` below the newest seen are given up.
  if (st.last_seen > window + 1) st.floor = std::max(st.floor, st.last_seen - window - 1);
  st.done.erase(st.done.begin(), st.done.upper_bound(st.floor));
  while (!st.done.empty() && *st.done.begin() == st.floor + 1) {
    ++st.floor;
    st.done.erase(st.done.begin());
  }
}

sequence_book::stream& sequence_book::create(const key& k, std::uint64_t seq) {
  if (m_streams.size() >= max_streams && !m_streams.count(k)) {
    const auto by_use = [](const auto& a, const auto& b) { return a.second.used < b.second.used; };
    m_streams.erase(std::min_element(m_streams.begin(), m_streams.end(), by_use));
  }
  stream& st = m_streams[k];
  st = stream{};
  st.floor = seq - 1;  // numbering starts here: nothing before it is asked for
  st.last_seen = seq;
  touch(st);
  return st;
}

sequence_report sequence_book::on_session(const std::string& channel, const std::string& source,
                                          std::uint64_t seq) {
  sequence_report rep;
  if (seq == 0) return rep;
  const key k{channel, source};
  ++m_changes;
  auto it = m_streams.find(k);
  if (it == m_streams.end()) {
    create(k, seq);
    rep.created = true;
    return rep;
  }
  stream& st = it->second;
  rep.previous_seen = st.last_seen;
  if (seq <= st.floor && seq != st.last_seen && st.last_completed == 0 &&
      st.floor - seq < concurrent_margin) {
    // A stream that has completed nothing yet (just created by a newer session or a
    // heartbeat) hears an older session still under way: before this site's time, not a
    // reset.
    rep.last_seq = st.last_completed;
    return rep;
  }
  if (seq <= st.floor && seq != st.last_seen) {
    // Below everything completed or given up, and not a repeat of the newest: the hub started
    // numbering again. Starting over is the only state that matches its new numbers.
    create(k, seq);
    rep.created = true;
    rep.reset = true;
    return rep;
  }
  touch(st);
  st.last_seen = std::max(st.last_seen, seq);
  normalize(st);
  rep.last_seq = st.last_completed;
  if (seq <= st.floor) return rep;
  // Gaps in (floor, seq), oldest first.
  std::uint64_t cursor = st.floor + 1;
  for (auto d = st.done.begin(); d != st.done.end() && *d < seq; ++d) {
    if (*d > cursor) {
      if (rep.missing.size() == wire::max_seq_ranges) return rep;
      rep.missing.emplace_back(cursor, *d - 1);
    }
    cursor = *d + 1;
  }
  if (cursor < seq && rep.missing.size() < wire::max_seq_ranges) {
    rep.missing.emplace_back(cursor, seq - 1);
  }
  return rep;
}

sequence_report sequence_book::on_heartbeat(const std::string& channel, const std::string& source,
                                            std::uint64_t newest,
                                            std::span<const wire::seq_span> running) {
  sequence_report rep;
  if (newest == 0) return rep;
  const key k{channel, source};
  auto it = m_streams.find(k);
  if (it == m_streams.end()) {
    ++m_changes;
    // Created past `newest`: the site starts at the next session; create() counts `seq` seen.
    stream& st = create(k, newest);
    st.floor = newest;
    rep.created = true;
    return rep;
  }
  stream& st = it->second;
  if (newest <= st.floor) {
    rep.last_seq = st.last_completed;
    return rep;
  }
  if (newest > st.last_seen) {
    ++m_changes;
    st.last_seen = newest;
    normalize(st);
  }
  touch(st);
  rep.last_seq = st.last_completed;
  // Gaps in (floor, newest], oldest first, leaving out what is done or still running.
  auto skip = [&](std::uint64_t n) {
    if (st.done.count(n)) return true;
    return std::any_of(running.begin(), running.end(),
                       [n](const wire::seq_span& r) { return n >= r.first && n <= r.second; });
  };
  std::uint64_t n = st.floor + 1;
  while (n <= newest && rep.missing.size() < wire::max_seq_ranges) {
    if (skip(n)) {
      if (n == newest) break;
      ++n;
      continue;
    }
    const std::uint64_t first = n;
    while (n < newest && !skip(n + 1)) ++n;
    rep.missing.emplace_back(first, n);
    if (n == newest) break;
    ++n;
  }
  return rep;
}

void sequence_book::on_completed(const std::string& channel, const std::string& source,
                                 std::uint64_t seq) {
  if (seq == 0) return;
  const key k{channel, source};
  ++m_changes;
  auto it = m_streams.find(k);
  stream& st = it == m_streams.end() ? create(k, seq) : it->second;
  touch(st);
  st.last_completed = std::max(st.last_completed, seq);
  st.last_seen = std::max(st.last_seen, seq);
  if (seq > st.floor) st.done.insert(seq);
  normalize(st);
}

void sequence_book::on_caught_up(const std::string& channel, const std::string& source,
                                 std::span<const wire::seq_span> ranges) {
  const auto it = m_streams.find(key{channel, source});
  if (it == m_streams.end()) return;
  stream& st = it->second;
  ++m_changes;
  touch(st);
  if (st.floor == std::numeric_limits<std::uint64_t>::max()) return;  // nothing above it
  for (const auto& [first, last] : ranges) {
    // Clamped to (floor, last_seen]: at most window + 1 numbers, whatever the sender claims.
    const std::uint64_t from = std::max(first, st.floor + 1);
    const std::uint64_t to = std::min(last, st.last_seen);
    for (std::uint64_t n = from; n <= to && n != 0; ++n) {
      st.done.insert(n);
      st.last_completed = std::max(st.last_completed, n);
      if (n == to) break;  // to may be UINT64_MAX: n + 1 would wrap
    }
  }
  normalize(st);
}

std::vector<sequence_status> sequence_book::status() const {
  std::vector<sequence_status> out;
  out.reserve(m_streams.size());
  for (const auto& [k, st] : m_streams) {
    sequence_status s;
    s.channel = k.first;
    s.source = k.second;
    s.last_seen = st.last_seen;
    s.last_completed = st.last_completed;
    if (st.last_seen > st.floor && st.last_seen - st.floor > 1) {
      const auto below = static_cast<std::uint64_t>(
          std::distance(st.done.begin(), st.done.lower_bound(st.last_seen)));
      s.missing = st.last_seen - 1 - st.floor - below;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string sequence_book::serialize() const {
  std::vector<const std::pair<const key, stream>*> order;
  order.reserve(m_streams.size());
  for (const auto& kv : m_streams) order.push_back(&kv);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->second.used < b->second.used; });
  std::string out(header_line);
  out += '\n';
  for (const auto* kv : order) {
    const stream& st = kv->second;
    out += kv->first.first + ' ' + kv->first.second + ' ' + std::to_string(st.floor) + ' ' +
           std::to_string(st.last_seen) + ' ' + std::to_string(st.last_completed) + ' ';
    if (st.done.empty()) out += '-';
    bool first = true;
    for (const auto n : st.done) {
      if (!first) out += ',';
      out += std::to_string(n);
      first = false;
    }
    out += '\n';
  }
  return out;
}

std::error_code sequence_book::parse(std::string_view text) {
  m_streams.clear();
  m_clock = 0;
  ++m_changes;
  auto fail = [this] {
    m_streams.clear();
    return std::error_code(errc::invalid_field);
  };
  if (text.empty() || text.back() != '\n') return fail();
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line_no++ == 0) {
      if (line != header_line) return fail();
      continue;
    }
    std::string_view f[6];
    if (!split_fields(line, f, 6)) return fail();
    if (!wire::valid_channel_name(f[0]) || !valid_source(f[1])) return fail();
    stream st;
    if (!parse_number(f[2], st.floor) || !parse_number(f[3], st.last_seen) ||
        !parse_number(f[4], st.last_completed)) {
      return fail();
    }
    // Invariants normalize() keeps: floor <= last_seen, within the window, last_completed seen.
    if (st.last_seen == 0 || st.floor > st.last_seen || st.last_completed > st.last_seen ||
        st.last_seen - st.floor > window + 1) {
      return fail();
    }
    if (f[5] != "-") {
      std::string_view list = f[5];
      std::uint64_t previous = st.floor;
      while (true) {
        const auto comma = list.find(',');
        std::uint64_t n = 0;
        if (!parse_number(list.substr(0, comma), n)) return fail();
        // Ascending, above the floor, not the floor's successor (normalize folds that in).
        if (n <= previous || n > st.last_seen || n == st.floor + 1) return fail();
        st.done.insert(n);
        previous = n;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    }
    if (m_streams.size() >= max_streams) return fail();
    st.used = ++m_clock;
    if (!m_streams.emplace(key{std::string(f[0]), std::string(f[1])}, std::move(st)).second) {
      return fail();  // a stream listed twice
    }
  }
  if (line_no == 0) return fail();
  return {};
}

}  // namespace mcdist::receiver
