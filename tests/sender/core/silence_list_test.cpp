#include "sender/core/silence_list.hpp"

#include <catch2/catch.hpp>

#include <vector>

using mcdist::sender::silence_list;

namespace {

std::vector<std::uint32_t> order(const silence_list& l) {
  std::vector<std::uint32_t> out;
  for (auto i = l.front(); i != silence_list::none; i = l.next(i)) out.push_back(i);
  return out;
}

}  // namespace

TEST_CASE("the silence list keeps receivers least recently heard first", "[unit][sender]") {
  silence_list l;
  REQUIRE(l.empty());
  REQUIRE(l.front() == silence_list::none);
  l.touch(3);
  l.touch(0);
  l.touch(7);
  REQUIRE(order(l) == std::vector<std::uint32_t>{3, 0, 7});
  l.touch(3);  // heard again: to the back
  REQUIRE(order(l) == std::vector<std::uint32_t>{0, 7, 3});
  l.touch(3);  // already last
  REQUIRE(order(l) == std::vector<std::uint32_t>{0, 7, 3});
  l.remove(7);  // completed
  REQUIRE(order(l) == std::vector<std::uint32_t>{0, 3});
  REQUIRE_FALSE(l.contains(7));
  l.remove(7);   // twice: no effect
  l.remove(99);  // never seen: no effect
  l.remove(0);
  l.remove(3);
  REQUIRE(l.empty());
  l.touch(7);  // back again (a unicast connection arrived)
  REQUIRE(order(l) == std::vector<std::uint32_t>{7});
}

TEST_CASE("the silence list's operations do not depend on its length", "[unit][sender]") {
  silence_list l;
  for (std::uint32_t i = 0; i < 10000; ++i) l.touch(i);
  for (std::uint32_t i = 0; i < 10000; i += 2) l.touch(i);
  REQUIRE(l.front() == 1);
  std::uint32_t n = 0;
  std::uint32_t prev = 0;
  bool odd_first = true;
  for (auto i = l.front(); i != silence_list::none; i = l.next(i), ++n) {
    if (n == 5000) odd_first = prev % 2 == 1 && i % 2 == 0;
    prev = i;
  }
  REQUIRE(n == 10000);
  REQUIRE(odd_first);
}
