#include "receiver/io/action_config.hpp"

#include <ctime>

namespace mcdist::receiver {

std::string_view to_string(action_kind k) noexcept {
  switch (k) {
    case action_kind::exec: return "exec";
    case action_kind::link: return "link";
    case action_kind::copy: return "copy";
  }
  return "?";
}

namespace {

/// The value of placeholder `name`, or nullptr when there is no such placeholder.
const std::string* placeholder(std::string_view name, const placeholder_values* v) {
  static const std::string empty;
  if (name.size() == 1 && name[0] >= '0' && name[0] <= '9') {
    if (!v) return &empty;
    const auto i = static_cast<std::size_t>(name[0] - '0');
    return i < v->groups.size() ? &v->groups[i] : &empty;
  }
  struct entry {
    std::string_view name;
    std::string placeholder_values::*field;
  };
  static const entry table[] = {{"path", &placeholder_values::path},
                                {"relpath", &placeholder_values::relpath},
                                {"channel", &placeholder_values::channel},
                                {"session", &placeholder_values::session},
                                {"sha256", &placeholder_values::sha256}};
  for (const auto& e : table) {
    if (e.name == name) return v ? &(v->*(e.field)) : &empty;
  }
  return nullptr;
}

/// One pass over the template: checks it (v == nullptr) or expands it.
std::string run_template(std::string_view t, const placeholder_values* v, bool dates) {
  std::string out;
  std::tm tm{};
  if (v && dates) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(v->delivered);
    ::gmtime_r(&secs, &tm);
  }
  auto bad = [&](std::size_t at, const std::string& why) {
    return template_error("template \"" + std::string(t) + "\": " + why + " at character " +
                          std::to_string(at + 1));
  };
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '{') {
      if (i + 1 < t.size() && t[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      const auto close = t.find('}', i + 1);
      if (close == std::string_view::npos) throw bad(i, "'{' without '}' (write {{ for a brace)");
      const auto name = t.substr(i + 1, close - i - 1);
      const std::string* val = placeholder(name, v);
      if (!val) {
        throw bad(i, "unknown placeholder {" + std::string(name) +
                         "} (known: {path} {relpath} {channel} {session} {sha256} {0}..{9})");
      }
      out += *val;
      i = close;
    } else if (c == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw bad(i, "'}' without '{' (write }} for a brace)");
    } else if (c == '%' && dates) {
      if (i + 1 >= t.size()) throw bad(i, "'%' at the end (write %% for a percent sign)");
      const char f = t[++i];
      char buf[8];
      int n = 0;
      switch (f) {
        case 'Y': n = std::snprintf(buf, sizeof buf, "%04d", tm.tm_year + 1900); break;
        case 'm': n = std::snprintf(buf, sizeof buf, "%02d", tm.tm_mon + 1); break;
        case 'd': n = std::snprintf(buf, sizeof buf, "%02d", tm.tm_mday); break;
        case 'H': n = std::snprintf(buf, sizeof buf, "%02d", tm.tm_hour); break;
        case 'M': n = std::snprintf(buf, sizeof buf, "%02d", tm.tm_min); break;
        case 'S': n = std::snprintf(buf, sizeof buf, "%02d", tm.tm_sec); break;
        case 'j': n = std::snprintf(buf, sizeof buf, "%03d", tm.tm_yday + 1); break;
        case '%': n = std::snprintf(buf, sizeof buf, "%%"); break;
        default:
          throw bad(i - 1, std::string("unknown date field %") + f +
                               " (known: %Y %m %d %H %M %S %j, %% for a percent sign)");
      }
      out.append(buf, static_cast<std::size_t>(n));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void check_template(std::string_view tmpl, bool dates) { (void)run_template(tmpl, nullptr, dates); }

std::string expand_template(std::string_view tmpl, const placeholder_values& v, bool dates) {
  return run_template(tmpl, &v, dates);
}

std::string expand_target(std::string_view tmpl, const placeholder_values& v) {
  std::string p = run_template(tmpl, &v, true);
  if (p.empty() || p[0] != '/') {
    throw template_error("target \"" + p + "\" (from \"" + std::string(tmpl) +
                         "\") is not an absolute path");
  }
  if (p.find('\0') != std::string::npos) throw template_error("target contains a NUL byte");
  std::size_t start = 1;
  while (start <= p.size()) {
    auto end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string_view comp(p.data() + start, end - start);
    if (comp.empty() || comp == "." || comp == "..") {
      throw template_error("target \"" + p + "\" (from \"" + std::string(tmpl) +
                           "\") has an empty, '.' or '..' component: refused");
    }
    start = end + 1;
  }
  return p;
}

void check_action(const action_config& a) {
  if (a.name.empty()) throw std::invalid_argument("needs name = \"...\"");
  if (a.channel.empty()) throw std::invalid_argument("needs channel = \"NAME\" or \"*\"");
  if (a.concurrency < 1 || a.concurrency > 1024) {
    throw std::invalid_argument("concurrency must be 1 to 1024");
  }
  if (a.retries > 100) throw std::invalid_argument("retries must be 0 to 100");
  if (a.timeout <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("timeout must be positive");
  }
  if (a.retry_delay < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("retry_delay must not be negative");
  }
  try {
    if (a.kind == action_kind::exec) {
      if (a.argv.empty()) throw std::invalid_argument("exec = [] has no program");
      if (a.argv[0].empty() || a.argv[0][0] != '/') {
        throw std::invalid_argument("exec[0] = \"" + a.argv[0] +
                                    "\" must be an absolute path (no shell, no PATH search)");
      }
      for (const auto& arg : a.argv) check_template(arg, false);
    } else {
      check_template(a.target, true);
      if (a.target.empty() || a.target[0] != '/') {
        throw std::invalid_argument(std::string(to_string(a.kind)) + " = \"" + a.target +
                                    "\" must be an absolute path template");
      }
    }
  } catch (const template_error& e) {
    throw std::invalid_argument(e.what());
  }
}

std::optional<std::vector<std::string>> match_action(const action_config& a,
                                                     const std::string& relpath) {
  std::smatch m;
  if (!std::regex_search(relpath, m, a.re)) return std::nullopt;
  std::vector<std::string> groups(10);
  for (std::size_t i = 0; i < m.size() && i < groups.size(); ++i) {
    if (m[i].matched) groups[i] = m[i].str();
  }
  return groups;
}

}  // namespace mcdist::receiver
