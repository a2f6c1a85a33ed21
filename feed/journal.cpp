#include "feed/journal.hpp"

#include "feed/pg_journal.hpp"
#include "feed/sqlite_journal.hpp"

#include <array>

namespace mcdist::feed {
namespace {

template <class E, std::size_t N>
std::optional<E> parse_word(std::string_view s, const std::array<std::string_view, N>& words) {
  for (std::size_t i = 0; i < N; ++i)
    if (words[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

constexpr std::array<std::string_view, 4> product_state_words{"queued", "sending", "sent",
                                                              "failed"};
constexpr std::array<std::string_view, 3> session_kind_words{"batch", "catchup", "resend"};
constexpr std::array<std::string_view, 3> session_outcome_words{"complete", "partial", "aborted"};
constexpr std::array<std::string_view, 4> outcome_words{"stored", "held", "failed", "missed"};

}  // namespace

std::string_view to_string(product_state s) noexcept {
  return product_state_words[static_cast<std::size_t>(s)];
}
std::string_view to_string(session_kind k) noexcept {
  return session_kind_words[static_cast<std::size_t>(k)];
}
std::string_view to_string(session_outcome o) noexcept {
  return session_outcome_words[static_cast<std::size_t>(o)];
}
std::string_view to_string(outcome o) noexcept {
  return outcome_words[static_cast<std::size_t>(o)];
}

std::optional<product_state> parse_product_state(std::string_view s) noexcept {
  return parse_word<product_state>(s, product_state_words);
}
std::optional<session_kind> parse_session_kind(std::string_view s) noexcept {
  return parse_word<session_kind>(s, session_kind_words);
}
std::optional<session_outcome> parse_session_outcome(std::string_view s) noexcept {
  return parse_word<session_outcome>(s, session_outcome_words);
}
std::optional<outcome> parse_outcome(std::string_view s) noexcept {
  return parse_word<outcome>(s, outcome_words);
}

std::int64_t to_ns(wall_time t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

wall_time from_ns(std::int64_t ns) noexcept {
  return wall_time(std::chrono::duration_cast<wall_time::duration>(std::chrono::nanoseconds(ns)));
}

std::vector<product> hub_journal::products_of_seqs(std::string_view channel, std::uint64_t from,
                                                   std::uint64_t to) {
  product_filter f;
  f.channel = std::string(channel);
  f.seqs = {from, to};
  return find_products(f);
}

bool is_postgresql(std::string_view spec) noexcept {
  return spec.starts_with("postgresql://") || spec.starts_with("postgres://");
}

std::unique_ptr<hub_journal> open_hub_journal(const std::string& spec, bool read_only) {
  if (is_postgresql(spec)) return std::make_unique<pg_journal>(spec, read_only);
  return std::make_unique<sqlite_journal>(spec, read_only);
}

std::string describe_journal(std::string_view spec) {
  if (!is_postgresql(spec)) return std::string(spec);
  // postgresql://user:password@host/...: the password never goes to a log or a page.
  const auto scheme = spec.find("://") + 3;
  const auto at = spec.find('@', scheme);
  const auto slash = spec.find('/', scheme);
  if (at == std::string_view::npos || (slash != std::string_view::npos && at > slash)) {
    return std::string(spec);
  }
  const auto colon = spec.find(':', scheme);
  if (colon == std::string_view::npos || colon > at) return std::string(spec);
  return std::string(spec.substr(0, colon)) + ":***" + std::string(spec.substr(at));
}

}  // namespace mcdist::feed
