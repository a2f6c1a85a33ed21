#include "sender/core/receiver_table.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

using namespace mcdist::sender;

namespace {

struct entry {
  std::uint32_t index = 0;
  std::string note;
};

}  // namespace

TEST_CASE("receiver_table: an id is one entry, created once, found by id and by index") {
  receiver_table<entry> t;
  CHECK(t.empty());
  CHECK(t.find("site-a") == nullptr);

  auto [a, created_a] = t.emplace("site-a");
  a.note = "first";
  CHECK(created_a);
  auto [b, created_b] = t.emplace("site-b");
  CHECK(created_b);
  CHECK(a.index == 0);
  CHECK(b.index == 1);
  REQUIRE(t.size() == 2);

  // Emplacing a known id returns its entry, unchanged, and creates nothing.
  auto [again, created_again] = t.emplace("site-a");
  CHECK_FALSE(created_again);
  CHECK(&again == &a);
  CHECK(again.note == "first");
  CHECK(t.size() == 2);

  // Found by a string_view without an owning copy, and by index.
  const std::string_view id = "site-b";
  CHECK(t.find(id) == &b);
  CHECK(t.contains("site-a"));
  CHECK_FALSE(t.contains("site-c"));
  CHECK(&t[0] == &a);
  CHECK(&t[1] == &b);
}

TEST_CASE("receiver_table: entries keep their address and index as the table grows") {
  receiver_table<entry> t;
  entry* first = &t.emplace("r0").first;
  for (int i = 1; i < 1000; ++i) t.emplace("r" + std::to_string(i));
  REQUIRE(t.size() == 1000);
  CHECK(t.find("r0") == first);
  CHECK(first->index == 0);
  CHECK(t.find("r999")->index == 999);
  // Iteration is in index order.
  std::uint32_t expected = 0;
  for (const auto& e : t) CHECK(e->index == expected++);
  CHECK(expected == 1000);
  const auto& ct = t;
  CHECK(ct.find("r500") == &t[500]);
}
