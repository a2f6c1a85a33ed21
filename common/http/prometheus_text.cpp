#include "common/http/prometheus_text.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace mcdist::http {

namespace {

bool name_start(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool name_char(char c) noexcept { return name_start(c) || (c >= '0' && c <= '9'); }

}  // namespace

bool prometheus_text::valid_metric_name(std::string_view name) noexcept {
  if (name.empty() || !(name_start(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!name_char(c) && c != ':') return false;
  }
  return true;
}

bool prometheus_text::valid_label_name(std::string_view name) noexcept {
  if (name.empty() || !name_start(name[0]) || name.starts_with("__")) return false;
  for (char c : name) {
    if (!name_char(c)) return false;
  }
  return true;
}

std::string prometheus_text::escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string prometheus_text::escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string prometheus_text::format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void prometheus_text::family(std::string_view name, metric_type type, std::string_view help) {
  if (!valid_metric_name(name)) {
    throw std::invalid_argument("invalid metric name '" + std::string(name) + "'");
  }
  if (type == metric_type::counter && !name.ends_with("_total")) {
    throw std::invalid_argument("counter '" + std::string(name) + "' must end in _total");
  }
  if (!m_seen.emplace(name).second) {
    throw std::invalid_argument("metric family '" + std::string(name) + "' written twice");
  }
  m_family = name;
  m_text += "# HELP " + m_family + " " + escape_help(help) + "\n";
  m_text += "# TYPE " + m_family + (type == metric_type::counter ? " counter\n" : " gauge\n");
}

void prometheus_text::write_labels(std::initializer_list<label> labels) {
  if (m_family.empty()) throw std::invalid_argument("sample before any metric family");
  m_text += m_family;
  if (labels.size() == 0) return;
  m_text += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!valid_label_name(k))
      throw std::invalid_argument("invalid label name '" + std::string(k) + "'");
    if (!first) m_text += ',';
    first = false;
    m_text += k;
    m_text += "=\"";
    m_text += escape_label_value(v);
    m_text += '"';
  }
  m_text += '}';
}

void prometheus_text::sample(std::initializer_list<label> labels, double value) {
  write_labels(labels);
  m_text += ' ' + format_value(value) + '\n';
}

void prometheus_text::sample(std::initializer_list<label> labels, std::uint64_t value) {
  write_labels(labels);
  m_text += ' ' + std::to_string(value) + '\n';
}

}  // namespace mcdist::http
