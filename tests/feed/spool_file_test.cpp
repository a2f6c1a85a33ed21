#include "feed/spool_file.hpp"
#include "tests/scratch_dir.hpp"

#include "common/path_check.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

using namespace mcdist;
using namespace mcdist::feed;

namespace {

/// A fresh directory under /tmp holding a spool and a file of the hub's, removed at the end.
struct scratch {
  mcdist::test::scratch_dir root{"mcdist-spoolfile"};
  std::filesystem::path dir = root.path();
  std::filesystem::path spool = dir / "spool";
  scratch() { std::filesystem::create_directories(spool / "obs"); }
  void write(const std::filesystem::path& p, const std::string& text) const {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  expected_file expect(const std::filesystem::path& p) const {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return {static_cast<std::uint64_t>(st.st_size),
            std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
  }
};

std::string content_of(int fd) {
  std::string out(4096, '\0');
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  REQUIRE(n >= 0);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a regular spool file opens, and the descriptor reads what was queued",
          "[unit][feed][spool]") {
  scratch s;
  s.write(s.spool / "obs/a.bufr", "bulletin");
  std::string why;
  const auto o = open_product(s.spool, "obs/a.bufr", s.expect(s.spool / "obs/a.bufr"), {}, why);
  REQUIRE(o);
  REQUIRE(why.empty());
  REQUIRE(S_ISREG(o->st.st_mode));
  // A link renamed over the name afterwards changes nothing for the open descriptor.
  s.write(s.dir / "key", "SECRET!!");
  std::filesystem::create_symlink(s.dir / "key", s.spool / "obs/a.link");
  std::filesystem::rename(s.spool / "obs/a.link", s.spool / "obs/a.bufr");
  REQUIRE(content_of(o->fd->get()) == "bulletin");
}

TEST_CASE("a symbolic link, in the leaf or a directory below the spool, is never followed",
          "[unit][feed][spool]") {
  scratch s;
  s.write(s.dir / "key", "SECRET!!");
  const auto like_key = s.expect(s.dir / "key");
  std::filesystem::create_symlink(s.dir / "key", s.spool / "obs/x.bufr");
  std::string why;
  REQUIRE_FALSE(open_product(s.spool, "obs/x.bufr", like_key, {}, why));
  REQUIRE(why.find("symbolic link") != std::string::npos);
  // A directory swapped for a link to one holding the target.
  std::filesystem::create_directories(s.dir / "elsewhere");
  s.write(s.dir / "elsewhere/y.bufr", "SECRET!!");
  std::filesystem::create_directory_symlink(s.dir / "elsewhere", s.spool / "sub");
  why.clear();
  REQUIRE_FALSE(open_product(s.spool, "sub/y.bufr", like_key, {}, why));
  REQUIRE(why.find("symbolic link") != std::string::npos);
}

TEST_CASE("a FIFO opens without blocking and is refused", "[unit][feed][spool]") {
  scratch s;
  REQUIRE(::mkfifo((s.spool / "obs/f.bufr").c_str(), 0644) == 0);
  std::string why;
  // No writer: a blocking open would wait here forever.
  REQUIRE_FALSE(open_product(s.spool, "obs/f.bufr", s.expect(s.spool / "obs/f.bufr"), {}, why));
  REQUIRE(why.find("FIFO") != std::string::npos);
}

TEST_CASE("a file changed since it was queued, or one of the hub's own, is refused",
          "[unit][feed][spool]") {
  scratch s;
  s.write(s.spool / "obs/a.bufr", "v1");
  const auto queued = s.expect(s.spool / "obs/a.bufr");
  s.write(s.spool / "obs/a.bufr", "version 2");
  std::string why;
  REQUIRE_FALSE(open_product(s.spool, "obs/a.bufr", queued, {}, why));
  REQUIRE(why.find("changed") != std::string::npos);
  // A hard link to the hub's key: a regular file of the right size and mtime, but the key.
  s.write(s.dir / "hub.key", "SECRET!!");
  std::filesystem::create_hard_link(s.dir / "hub.key", s.spool / "obs/k.bufr");
  const auto key_id = identity_of(s.dir / "hub.key");
  REQUIRE(key_id);
  why.clear();
  REQUIRE_FALSE(
      open_product(s.spool, "obs/k.bufr", s.expect(s.spool / "obs/k.bufr"), {*key_id}, why));
  REQUIRE(why.find("hub's own files") != std::string::npos);
}

TEST_CASE("names that cannot be products are named as such", "[unit][feed][spool]") {
  REQUIRE(product_name_problem("obs/a.bufr").empty());
  REQUIRE(product_name_problem("Ünïcödé/名前.grib2").empty());
  REQUIRE(product_name_problem("bad\xff.bufr").find("UTF-8") != std::string::npos);
  REQUIRE(product_name_problem(std::string("ctl\x01.bufr")).find("control") != std::string::npos);
  REQUIRE(printable("bad\xff name\\.bufr") == "bad\\xff name\\x5c.bufr");
  REQUIRE(spool_root_of("/var/spool/obs/a/b.bufr", "a/b.bufr") ==
          std::filesystem::path("/var/spool/obs"));
  REQUIRE_FALSE(spool_root_of("/var/spool/obs/a/b.bufr", "b/b.bufr"));
  REQUIRE_FALSE(spool_root_of("/var/spool/obsa/b.bufr", "a/b.bufr"));
}

TEST_CASE("disposal removes or moves the spool file only while it is the file sent",
          "[unit][feed][spool]") {
  scratch s;
  s.write(s.spool / "obs/a.bufr", "v1");
  std::string why;
  const auto sent = open_product(s.spool, "obs/a.bufr", s.expect(s.spool / "obs/a.bufr"), {}, why);
  REQUIRE(sent);
  // A producer renamed a new version over it during the session: it stays for its own batch.
  s.write(s.spool / "obs/.a.new", "version 2");
  std::filesystem::rename(s.spool / "obs/.a.new", s.spool / "obs/a.bufr");
  REQUIRE(remove_if_same(s.spool, "obs/a.bufr", sent->identity()) == std::errc::file_exists);
  REQUIRE(read(s.spool / "obs/a.bufr") == "version 2");
  // The file sent goes; a second removal finds nothing.
  const auto v2 = open_product(s.spool, "obs/a.bufr", s.expect(s.spool / "obs/a.bufr"), {}, why);
  REQUIRE(v2);
  REQUIRE_FALSE(remove_if_same(s.spool, "obs/a.bufr", v2->identity()));
  REQUIRE_FALSE(std::filesystem::exists(s.spool / "obs/a.bufr"));
  REQUIRE(remove_if_same(s.spool, "obs/a.bufr", v2->identity()) ==
          std::errc::no_such_file_or_directory);
  // move: into the operator's directory, by rename.
  s.write(s.spool / "obs/m.bufr", "moved");
  const auto m = open_product(s.spool, "obs/m.bufr", s.expect(s.spool / "obs/m.bufr"), {}, why);
  REQUIRE(m);
  REQUIRE_FALSE(
      move_if_same(s.spool, "obs/m.bufr", m->identity(), m->fd->get(), s.dir / "done/obs/m.bufr"));
  REQUIRE(read(s.dir / "done/obs/m.bufr") == "moved");
  REQUIRE_FALSE(std::filesystem::exists(s.spool / "obs/m.bufr"));
}

TEST_CASE("a retained copy is the file sent, linked or copied from its descriptor",
          "[unit][feed][spool]") {
  scratch s;
  s.write(s.spool / "obs/a.bufr", "payload");
  std::string why;
  const auto o = open_product(s.spool, "obs/a.bufr", s.expect(s.spool / "obs/a.bufr"), {}, why);
  REQUIRE(o);
  // The spool name now leads elsewhere; the retained copy is still the file sent.
  std::filesystem::remove(s.spool / "obs/a.bufr");
  s.write(s.spool / "obs/a.bufr", "something else");
  REQUIRE_FALSE(link_or_copy_fd(o->fd->get(), s.dir / "retained/1/obs/a.bufr"));
  REQUIRE(read(s.dir / "retained/1/obs/a.bufr") == "payload");
  // A copy (the original is unlinked: no link to make) keeps the size and mtime it is found by.
  struct stat st {};
  REQUIRE(::stat((s.dir / "retained/1/obs/a.bufr").c_str(), &st) == 0);
  REQUIRE(st.st_mtim.tv_sec == o->st.st_mtim.tv_sec);
  REQUIRE(st.st_mtim.tv_nsec == o->st.st_mtim.tv_nsec);
}
