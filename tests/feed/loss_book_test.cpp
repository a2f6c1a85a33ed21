#include "feed/loss_book.hpp"

#include "sender/io/session_profile.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using mcdist::feed::loss_book;

TEST_CASE("the loss book pools the sites of a session once they have said enough", "[unit][feed]") {
  loss_book b;
  const std::vector<std::string> group{"a", "b"};
  REQUIRE_FALSE(b.loss_of(group));
  b.note("a", 4'000, 4);
  b.note("b", 4'000, 4);
  REQUIRE_FALSE(b.loss_of(group));  // 8 losses in 8,008 datagrams: too few of either
  b.note("b", 2'000, 2);
  const auto p = b.loss_of(group);
  REQUIRE(p);
  REQUIRE(*p == Approx(10.0 / 10'010));
  // A site outside the session does not count; an open group (no list) takes every site.
  b.note("c", 10'000, 1'000);
  REQUIRE(*b.loss_of(group) == Approx(10.0 / 10'010));
  REQUIRE(*b.loss_of({}) == Approx(1'010.0 / 21'010));
  REQUIRE(b.datagrams_of(group) == 10'010);
  // Many datagrams and no loss: a clean path, known as such.
  loss_book clean;
  clean.note("a", loss_book::min_datagrams, 0);
  REQUIRE(clean.loss_of({}) == 0.0);
  // A report of nothing (a site that held every file) adds no site.
  clean.note("z", 0, 0);
  REQUIRE(clean.sites() == 1);
}

TEST_CASE("a site's history is halved past the horizon, so its loss follows its path",
          "[unit][feed]") {
  loss_book b;
  const std::vector<std::string> a{"a"};
  b.note("a", loss_book::horizon - 1'000, 0);               // a clean path for a long time
  for (int i = 0; i < 20; ++i) b.note("a", 99'000, 1'000);  // then 1 % loss
  const auto p = b.loss_of(a);
  REQUIRE(p);
  // The clean past weighs less with every halving: most of what is left is the 1 %.
  REQUIRE(*p > 0.007);
  REQUIRE(*p <= 0.01);
  REQUIRE(b.datagrams_of(a) <= loss_book::horizon);
}

TEST_CASE("the book keeps at most max_sites sites", "[unit][feed]") {
  loss_book b;
  for (std::size_t i = 0; i < loss_book::max_sites + 10; ++i) b.note(std::to_string(i), 10, 1);
  REQUIRE(b.sites() == loss_book::max_sites);
}

TEST_CASE("fec_k auto: k p = 4 within [200, 4096]", "[unit][feed]") {
  using mcdist::sender::fec_k_for_loss;
  REQUIRE(fec_k_for_loss(2e-3) == 2000);
  REQUIRE(fec_k_for_loss(1e-2) == 400);
  REQUIRE(fec_k_for_loss(0.1) == 200);    // heavy loss: the default's k, never less
  REQUIRE(fec_k_for_loss(1e-5) == 4096);  // a clean path: the largest
  REQUIRE(fec_k_for_loss(0) == 4096);
  mcdist::sender::session_profile p;
  REQUIRE(p.fec_k_auto);
  mcdist::sender::sender_config c;
  p.apply(c);
  REQUIRE(c.fec_k == 200);  // nothing measured
  p.apply(c, 2e-3);
  REQUIRE(c.fec_k == 2000);
  REQUIRE(mcdist::sender::parse_fec_k("300", p));
  REQUIRE_FALSE(p.fec_k_auto);
  p.apply(c, 1e-3);
  REQUIRE(c.fec_k == 300);  // a number is kept whatever the loss
  REQUIRE_FALSE(mcdist::sender::parse_fec_k("4097", p));
  REQUIRE_FALSE(mcdist::sender::parse_fec_k("-1", p));
  REQUIRE_FALSE(mcdist::sender::parse_fec_k("", p));
  REQUIRE(mcdist::sender::parse_fec_k("auto", p));
  REQUIRE(p.fec_k_auto);
  REQUIRE(p.describe().find("fec_k auto") != std::string::npos);
}
