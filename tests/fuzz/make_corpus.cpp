/// @file
/// Writes the seed corpora of tests/fuzz (committed under tests/fuzz/corpus/TARGET/): real
/// datagrams, frames, checkpoints and configuration files, encoded by the project's own
/// encoders, so each fuzz target starts from inputs that reach deep into its code.
///
///     make_corpus DIR     writes DIR/{wire,receiver,sender,unicast_frame,checkpoint,config,auth,
///                         sctp_probe}/*
///
/// Run by hand after a wire format change (deploy/run-fuzz.sh --seeds), then commit the files.

#include "common/auth.hpp"
#include "common/catch_up_index.hpp"
#include "common/ranges.hpp"
#include "common/unicast/frame.hpp"
#include "common/unicast/hello_proof.hpp"
#include "common/wire.hpp"
#include "mcdist.pb.h"
#include "receiver/core/receiver_engine.hpp"
#include "receiver/core/replay_guard.hpp"
#include "tests/fuzz/fuzz_script.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

using namespace mcdist;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using bytes = std::vector<std::byte>;
constexpr session_id rx_sid{0x1234};  // receiver seeds' session
constexpr session_id tx_sid{42};      // sender_fuzz's session

fs::path g_root;

void write(const std::string& target, const std::string& name, std::span<const std::byte> b) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + (g_root / target / name).string());
}
void write_text(const std::string& target, const std::string& name, std::string_view text) {
  write(target, name, std::as_bytes(std::span(text.data(), text.size())));
}

template <class Msg>
bytes datagram(wire::msg_type t, const Msg& m, session_id s = rx_sid) {
  bytes out(wire::header_size + m.ByteSizeLong());
  wire::encode_control(out, t, s, m);
  return out;
}

bytes data_dg(std::uint32_t seq, std::uint32_t file, std::uint32_t block, std::size_t len) {
  bytes d(wire::data_header_size + len, std::byte{7});
  wire::write_data_header(d, {rx_sid, seq, file_index{file}, block_index{block}});
  return d;
}

bytes be3(std::uint32_t v) { return {std::byte(v >> 16), std::byte(v >> 8), std::byte(v)}; }

// --- the receiver's side of one session: 3 files (empty, 2500 bytes, 1000 bytes) ---

wire::announce announce_msg() {
  wire::announce a;
  auto* p = a.mutable_params();
  p->set_block_size(1000);
  p->set_file_count(3);
  p->set_manifest_chunks(1);
  p->set_grtt_us(10000);
  p->set_total_bytes(3500);
  p->set_sender_name("seed");
  a.set_chunk(0);
  a.set_first_file(0);
  a.set_sender_time_us(1);
  const std::pair<const char*, std::uint64_t> files[] = {{"e", 0}, {"dir/b", 2500}, {"c", 1000}};
  for (const auto& [path, size] : files) {
    auto* e = a.add_files();
    e->set_path(path);
    e->set_size(size);
    e->set_mode(0644);
    e->set_sha256(std::string(32, '\x11'));
  }
  return a;
}
wire::register_reply reply_msg(bool accepted) {
  wire::register_reply r;
  r.set_receiver_id("site");
  r.set_accepted(accepted);
  if (!accepted) r.set_reason("closed group");
  return r;
}
wire::marker marker_msg(std::uint32_t pass, bool end, std::uint32_t seq) {
  wire::marker m;
  m.set_pass(pass);
  m.set_file(end ? 3 : 1);
  m.set_block(0);
  m.set_pass_end(end);
  m.set_seq(seq);
  m.set_grtt_us(10000);
  m.set_digests_through(3);
  m.set_nak_backoff_us(1000);
  m.set_status_request(end);
  return m;
}
wire::repair_advert advert_msg(std::uint32_t pass) {
  wire::repair_advert a;
  a.set_pass(pass);
  auto* f = a.add_files();
  f->set_file(1);
  f->add_ranges(0);  // blocks [0, 2) of file 1
  f->add_ranges(2);
  return a;
}
wire::digest_list digests_msg() {
  wire::digest_list d;
  for (std::uint32_t f = 0; f < 3; ++f) {
    auto* h = d.add_digests();
    h->set_file(f);
    h->set_sha256(std::string(32, '\x11'));
  }
  return d;
}
wire::session_end end_msg(bool aborted) {
  wire::session_end e;
  e.set_reason(aborted ? wire::session_end::ABORTED : wire::session_end::DONE);
  e.set_detail(aborted ? "operator" : "");
  return e;
}
wire::fallback fallback_msg(wire::fallback::transport_kind t) {
  wire::fallback f;
  f.set_receiver_id("site");
  f.set_transport(t);
  f.set_address(std::string("\x0a\x00\x00\x01", 4));
  f.set_port(9000);
  f.set_token(std::string("\x01\x23\x45\x67\x89\xab\xcd\xef\x10\x32\x54\x76\x98\xba\xdc\xfe", 16));
  f.set_connections(t == wire::fallback::TCP ? 4 : 0);
  f.set_reason("loss");
  return f;
}
wire::complete_ack ack_msg() {
  wire::complete_ack a;
  a.set_receiver_id("site");
  return a;
}

/// Receiver script ops (receiver_fuzz.cpp).
enum rx_op : std::uint8_t {
  dg = 0,
  dg_other = 1,
  advance = 2,
  held = 3,
  stored = 4,
  udata = 5,
  uclosed = 6,
  ckpt = 7
};

struct script {
  bytes b;
  void add(std::uint8_t op, std::span<const std::byte> p) { fuzz::append_record(b, op, p); }
  void add(std::uint8_t op) { fuzz::append_record(b, op, {}); }
};

/// Announce, no held copies, registration accepted.
script rx_start() {
  script s;
  s.add(dg, datagram(wire::msg_type::announce, announce_msg()));
  s.add(held);
  s.add(dg, datagram(wire::msg_type::register_reply, reply_msg(true)));
  return s;
}

void receiver_seeds() {
  {  // a whole session: blocks, a marker, NAK round, finalize, COMPLETE, ack, END
    auto s = rx_start();
    s.add(dg, data_dg(1, 1, 0, 1000));
    s.add(dg, data_dg(2, 1, 2, 500));
    s.add(dg, datagram(wire::msg_type::marker, marker_msg(1, true, 3)));
    s.add(dg, datagram(wire::msg_type::repair_advert, advert_msg(1)));
    s.add(advance, be3(50));
    s.add(dg, data_dg(3, 2, 0, 1000));
    s.add(dg, data_dg(4, 1, 1, 1000));
    s.add(ckpt);
    s.add(stored);
    s.add(stored);
    s.add(stored);
    s.add(advance, be3(30));
    s.add(dg, datagram(wire::msg_type::complete_ack, ack_msg()));
    s.add(dg, datagram(wire::msg_type::session_end, end_msg(false)));
    s.add(advance, be3(70000));
    write("receiver", "session_complete", s.b);
  }
  {  // encrypted-session fields reaching the core: a sealed announce, a key_only reply
    script s;
    wire::announce sealed_announce;
    sealed_announce.set_sealed(std::string(80, '\x5a'));
    s.add(dg, datagram(wire::msg_type::announce, sealed_announce));
    auto key_only = reply_msg(true);
    key_only.set_key_only(true);
    s.add(dg, datagram(wire::msg_type::register_reply, key_only));
    s.add(dg, datagram(wire::msg_type::announce, announce_msg()));
    s.add(held);
    s.add(dg, datagram(wire::msg_type::register_reply, key_only));
    s.add(dg, data_dg(1, 1, 0, 1000));
    write("receiver", "encrypted_fields", s.b);
  }
  {  // digests arrive after the data, a file fails storage, the session is aborted
    auto s = rx_start();
    s.add(dg, datagram(wire::msg_type::digest_list, digests_msg()));
    s.add(dg, data_dg(1, 2, 0, 1000));
    s.add(stored, bytes{std::byte{1}});
    s.add(dg, datagram(wire::msg_type::marker, marker_msg(2, true, 1)));
    s.add(advance, be3(100));
    s.add(dg, datagram(wire::msg_type::session_end, end_msg(true)));
    write("receiver", "failed_and_aborted", s.b);
  }
  {  // the sender orders a TCP fallback; the data comes over unicast
    auto s = rx_start();
    s.add(dg, data_dg(1, 1, 0, 1000));
    s.add(dg, datagram(wire::msg_type::fallback, fallback_msg(wire::fallback::TCP)));
    s.add(udata, bytes{std::byte{0x03}, std::byte{0xe8}, std::byte{0}});
    s.add(udata, bytes{std::byte{0x10}, std::byte{0}, std::byte{1}});
    s.add(udata, bytes{std::byte{0x10}, std::byte{0}, std::byte{2}});
    s.add(udata, bytes{std::byte{0x10}, std::byte{0}, std::byte{3}});
    s.add(uclosed, bytes{std::byte{1}});
    s.add(stored);
    s.add(stored);
    s.add(stored);
    s.add(advance, be3(20));
    s.add(dg, datagram(wire::msg_type::complete_ack, ack_msg()));
    write("receiver", "fallback_tcp", s.b);
  }
  {  // SCTP fallback that breaks, then resumes
    auto s = rx_start();
    s.add(dg, datagram(wire::msg_type::fallback, fallback_msg(wire::fallback::SCTP_UDP)));
    s.add(udata, bytes{std::byte{0x01}, std::byte{0x00}, std::byte{0}});
    s.add(uclosed);
    s.add(advance, be3(2000));
    s.add(udata, bytes{std::byte{0x10}, std::byte{0}, std::byte{1}});
    write("receiver", "fallback_sctp_broken", s.b);
  }
  {  // files already held; a refused registration; a stranger's datagrams
    script s;
    s.add(dg, datagram(wire::msg_type::announce, announce_msg()));
    bytes held_all(33, std::byte{0x11});
    held_all[32] = std::byte{0x07};
    s.add(held, held_all);
    s.add(dg_other, datagram(wire::msg_type::register_reply, reply_msg(true)));
    s.add(dg, datagram(wire::msg_type::register_reply, reply_msg(false)));
    s.add(advance, be3(1000));
    write("receiver", "held_and_refused", s.b);
  }
  {  // timeouts: the sender goes silent
    auto s = rx_start();
    s.add(dg, data_dg(1, 1, 0, 1000));
    s.add(advance, be3(5000));
    s.add(advance, be3(70000));
    s.add(dg, datagram(wire::msg_type::marker, marker_msg(1, false, 1)));
    write("receiver", "silent_sender", s.b);
  }
  {  // a manifest in two chunks, announced out of order, one file without digest
    wire::announce a = announce_msg();
    a.mutable_params()->set_manifest_chunks(2);
    a.mutable_files()->RemoveLast();
    a.mutable_files(1)->clear_sha256();
    wire::announce b = announce_msg();
    b.mutable_params()->set_manifest_chunks(2);
    b.set_chunk(1);
    b.set_first_file(2);
    b.mutable_files()->DeleteSubrange(0, 2);
    script s;
    s.add(dg, datagram(wire::msg_type::announce, b));
    s.add(dg, datagram(wire::msg_type::announce, a));
    s.add(held);
    s.add(dg, datagram(wire::msg_type::register_reply, reply_msg(true)));
    s.add(dg, data_dg(1, 1, 0, 1000));
    s.add(dg, data_dg(2, 1, 1, 1000));
    s.add(dg, data_dg(3, 1, 2, 500));
    s.add(dg, datagram(wire::msg_type::digest_list, digests_msg()));
    s.add(dg, datagram(wire::msg_type::marker, marker_msg(1, true, 3)));
    write("receiver", "chunked_manifest", s.b);
  }
}

// --- checkpoints: what the engine writes in the middle of the sessions above ---

struct capture_sink final : receiver::receiver_sink, receiver::storage_port {
  std::vector<std::string> blobs;
  void send(const endpoint&, std::span<const std::byte>) override {}
  void begin_file(receiver::file_key, std::uint32_t, const manifest_entry&, bool) override {}
  bool write(receiver::file_key, std::uint64_t, std::span<const std::byte>) override {
    return true;
  }
  void finalize(receiver::file_key, const sha256_digest&) override {}
  void discard_file(receiver::file_key) override {}
  void query_held(session_id, std::uint32_t, std::vector<receiver::held_query>) override {}
  void checkpoint(session_id, std::string blob) override { blobs.push_back(std::move(blob)); }
  void close_session(session_id, bool) override {}
  void session_closed(session_id, bool) override {}
  void start_unicast(session_id, const receiver::unicast_order&,
                     std::vector<receiver::byte_range>) override {}
  void stop_unicast(session_id) override {}
};

void checkpoint_seeds() {
  const endpoint sender = *parse_endpoint("10.0.0.1:5000");
  capture_sink sink;
  receiver::receiver_engine e(receiver::receiver_config{"site"}, sink, sink, 1, nullptr);
  time_point now{50s};
  e.on_datagram(datagram(wire::msg_type::announce, announce_msg()), sender, 0, now);
  e.on_held(rx_sid, {}, now);
  e.on_datagram(datagram(wire::msg_type::register_reply, reply_msg(true)), sender, 0, now);
  e.checkpoint_all(now);
  e.on_datagram(data_dg(1, 1, 0, 1000), sender, 0, now);
  e.on_datagram(data_dg(2, 1, 2, 500), sender, 0, now);
  e.checkpoint_all(now);
  e.on_datagram(data_dg(3, 2, 0, 1000), sender, 0, now);
  e.on_file_stored(rx_sid, file_index{2}, std::make_error_code(std::errc::io_error), "seed", now);
  e.checkpoint_all(now);
  if (sink.blobs.size() != 3) throw std::runtime_error("expected 3 checkpoints");
  for (std::size_t i = 0; i < sink.blobs.size(); ++i) {
    write_text("checkpoint", "state" + std::to_string(i), sink.blobs[i]);
  }
}

// --- the sender's side: what receivers send to session 42 (files: 0, 5000, 40000 bytes) ---

template <class Msg>
bytes tx_dg(wire::msg_type t, const Msg& m) {
  return datagram(t, m, tx_sid);
}
wire::register_request sequenced_register_msg(const std::string& id) {
  wire::register_request r;
  r.set_receiver_id(id);
  r.set_echo_time_us(100'000'000);
  r.set_last_seq(990);
  for (const auto& [first, last] :
       {std::pair<std::uint64_t, std::uint64_t>{991, 993}, {996, 999}}) {
    auto* m = r.add_missing_seqs();
    m->set_first(first);
    m->set_last(last);
  }
  return r;
}
wire::register_request register_msg(const std::string& id,
                                    std::vector<std::uint32_t> held_files = {}) {
  wire::register_request r;
  r.set_receiver_id(id);
  r.set_echo_time_us(100'000'000);
  r.set_hold_us(1000);
  for (auto f : held_files) r.add_held_files(f);  // (first, count) pairs, common/ranges.hpp
  return r;
}
wire::nak nak_msg(const std::string& id, std::uint32_t pass, std::uint32_t file,
                  std::vector<std::pair<std::uint32_t, std::uint32_t>> runs) {
  wire::nak m;
  m.set_receiver_id(id);
  m.set_pass(pass);
  m.set_seen_seq(10);
  m.set_echo_time_us(100'010'000);
  m.set_hold_us(500);
  m.set_bytes_received(3000);
  auto* fn = m.add_files();
  fn->set_file(file);
  std::vector<std::uint32_t> pairs;
  range_encoder enc(pairs);
  for (auto [f, c] : runs) enc.add(f, c);
  for (auto v : pairs) fn->add_ranges(v);
  m.add_digests_wanted(2);
  return m;
}
wire::complete complete_msg(const std::string& id, bool with_failure) {
  wire::complete m;
  m.set_receiver_id(id);
  m.set_files_stored(with_failure ? 2 : 3);
  m.set_bytes_stored(45000);
  if (with_failure) {
    auto* f = m.add_failures();
    f->set_file(2);
    f->set_reason("disk full");
  }
  return m;
}

void sender_seeds() {
  const auto id_bytes = [](std::string_view s) {
    return bytes(reinterpret_cast<const std::byte*>(s.data()),
                 reinterpret_cast<const std::byte*>(s.data()) + s.size());
  };
  {  // closed group: both register, one NAKs, both complete
    script s;
    s.add(0, tx_dg(wire::msg_type::register_request, register_msg("a")));
    s.add(1, tx_dg(wire::msg_type::register_request, register_msg("b", {0, 1})));
    s.add(2, be3(1));
    s.add(2, be3(5));
    s.add(3, bytes{std::byte{2}});
    s.add(2, be3(10));
    s.add(0, tx_dg(wire::msg_type::nak, nak_msg("a", 1, 1, {{1, 2}})));
    s.add(2, be3(10));
    s.add(0, tx_dg(wire::msg_type::complete, complete_msg("a", false)));
    s.add(1, tx_dg(wire::msg_type::complete, complete_msg("b", true)));
    s.add(2, be3(1000));
    s.add(7);
    bytes in{std::byte{0x04}};
    in.insert(in.end(), s.b.begin(), s.b.end());
    write("sender", "closed_group", in);
  }
  {  // a key request reaching the core (the shell answers them; the core must survive one)
    script s;
    auto kr = register_msg("a");
    kr.set_key_request(true);
    s.add(0, tx_dg(wire::msg_type::register_request, kr));
    s.add(0, tx_dg(wire::msg_type::register_request, register_msg("a")));
    s.add(2, be3(10));
    s.add(0, tx_dg(wire::msg_type::complete, complete_msg("a", false)));
    s.add(7);
    bytes in{std::byte{0x04}};
    in.insert(in.end(), s.b.begin(), s.b.end());
    write("sender", "key_request", in);
  }
  {  // a sequenced session (flag bit 5): both report gaps in REGISTER, both complete
    script s;
    s.add(0, tx_dg(wire::msg_type::register_request, sequenced_register_msg("a")));
    s.add(1, tx_dg(wire::msg_type::register_request, sequenced_register_msg("b")));
    s.add(2, be3(10));
    s.add(0, tx_dg(wire::msg_type::complete, complete_msg("a", false)));
    s.add(1, tx_dg(wire::msg_type::complete, complete_msg("b", true)));
    s.add(2, be3(1000));
    s.add(7);
    bytes in{std::byte{0x20}};
    in.insert(in.end(), s.b.begin(), s.b.end());
    write("sender", "sequenced", in);
  }
  {  // open group, heavy loss: fallback to TCP, unicast starts, fails, completes
    script s;
    s.add(0, tx_dg(wire::msg_type::register_request, register_msg("site-x")));
    s.add(3, bytes{std::byte{2}});
    for (int i = 0; i < 4; ++i) {
      s.add(2, be3(20));
      s.add(0, tx_dg(wire::msg_type::nak,
                     nak_msg("site-x", static_cast<std::uint32_t>(i + 1), 2, {{0, 40}})));
    }
    s.add(4, id_bytes("site-x"));
    s.add(5, id_bytes("site-x"));
    s.add(2, be3(3000));
    s.add(4, id_bytes("site-x"));
    s.add(0, tx_dg(wire::msg_type::complete, complete_msg("site-x", false)));
    s.add(2, be3(100));
    bytes in{std::byte{0x09}};
    in.insert(in.end(), s.b.begin(), s.b.end());
    write("sender", "open_fallback", in);
  }
  {  // a stranger and a spoofed id; then abort
    script s;
    s.add(1, tx_dg(wire::msg_type::register_request, register_msg("a")));
    s.add(0, tx_dg(wire::msg_type::nak, nak_msg("b", 1, 1, {{0, 5}})));
    s.add(0, tx_dg(wire::msg_type::complete, complete_msg("zz", false)));
    s.add(2, be3(40000));
    s.add(6);
    s.add(2, be3(1000));
    bytes in{std::byte{0x02}};
    in.insert(in.end(), s.b.begin(), s.b.end());
    write("sender", "strangers_abort", in);
  }
}

// --- single datagrams for the wire target ---

void wire_seeds() {
  write("wire", "announce", datagram(wire::msg_type::announce, announce_msg()));
  write("wire", "register", datagram(wire::msg_type::register_request, register_msg("a", {1, 2})));
  write("wire", "register_reply", datagram(wire::msg_type::register_reply, reply_msg(false)));
  write("wire", "marker", datagram(wire::msg_type::marker, marker_msg(1, true, 9)));
  write("wire", "nak", datagram(wire::msg_type::nak, nak_msg("a", 1, 1, {{0, 3}, {7, 1}})));
  write("wire", "digests", datagram(wire::msg_type::digest_list, digests_msg()));
  write("wire", "complete", datagram(wire::msg_type::complete, complete_msg("a", true)));
  write("wire", "complete_ack", datagram(wire::msg_type::complete_ack, ack_msg()));
  write("wire", "end", datagram(wire::msg_type::session_end, end_msg(true)));
  write("wire", "fallback", datagram(wire::msg_type::fallback, fallback_msg(wire::fallback::TCP)));
  write("wire", "repair_advert", datagram(wire::msg_type::repair_advert, advert_msg(2)));
  write("wire", "data", data_dg(5, 1, 2, 64));
  {
    bytes parity(wire::data_header_size + 64, std::byte{9});
    wire::write_parity_header(parity, {rx_sid, 6, 0, 3});
    write("wire", "parity", parity);
  }
  // Session numbering: a sequenced announce, a catch-up announce, a REGISTER with gaps.
  wire::announce sequenced = announce_msg();
  sequenced.mutable_params()->set_channel("obs");
  sequenced.mutable_params()->set_channel_seq(5);
  write("wire", "announce_sequenced", datagram(wire::msg_type::announce, sequenced));
  wire::announce catch_up = announce_msg();
  catch_up.mutable_params()->set_channel("obs");
  auto* r = catch_up.mutable_params()->add_catch_up_seqs();
  r->set_first(3);
  r->set_last(4);
  write("wire", "announce_catch_up", datagram(wire::msg_type::announce, catch_up));
  write("wire", "register_sequenced",
        datagram(wire::msg_type::register_request, sequenced_register_msg("a")));
  // Encrypted sessions' fields (mcdist-send --encrypt): a sealed announce and digest list (the
  // cores never get them sealed, but must survive them), a key request, a key_only reply.
  wire::announce sealed_announce;
  sealed_announce.set_sealed(std::string(24 + 40 + 16, '\x5a'));
  write("wire", "announce_sealed", datagram(wire::msg_type::announce, sealed_announce));
  wire::digest_list sealed_digests;
  sealed_digests.set_sealed(std::string(24 + 38 + 16, '\x33'));
  write("wire", "digests_sealed", datagram(wire::msg_type::digest_list, sealed_digests));
  wire::register_request key_request;
  key_request.set_receiver_id("a");
  key_request.set_key_request(true);
  write("wire", "key_request", datagram(wire::msg_type::register_request, key_request));
  auto key_only = reply_msg(true);
  key_only.set_key_only(true);
  write("wire", "key_only_reply", datagram(wire::msg_type::register_reply, key_only));
}

// --- a site's channel numbering (TEMP/sequences), then events ---

void sequences_seeds() {
  receiver::sequence_book b;
  b.on_session("obs", "name:hub", 1);
  b.on_completed("obs", "name:hub", 1);
  b.on_session("obs", "name:hub", 4);
  b.on_completed("obs", "name:hub", 4);
  b.on_session("warnings", "key:mcdist-ed25519:AAAA", 40);
  write_text("sequences", "book", b.serialize());
  // The book, then: session 6 announced, 6 completed, catch-up of 2.., session 7 announced.
  std::string with_events = b.serialize();
  with_events += '\0';
  const std::pair<char, std::uint64_t> events[] = {{0, 6}, {1, 6}, {2, 2}, {0, 7}};
  for (const auto& [op, n] : events) {
    with_events += op;
    for (int k = 7; k >= 0; --k) with_events += static_cast<char>(n >> (8 * k));
  }
  write_text("sequences", "book_events", with_events);
  write_text("sequences", "empty", "mcdist-sequences 1\n");
}

// --- the hub's catch-up index, as a site reads it (catch_up_index_fuzz's expectation) ---

void catch_up_index_seeds() {
  catch_up::index ix;
  ix.channel = "obs";
  ix.seq = 7;
  const std::array<std::uint8_t, catch_up::nonce_bytes> nonce = {0x6d, 0x63, 0x64, 0x69, 0x73, 0x74,
                                                                 0x20, 0x66, 0x75, 0x7a, 0x7a, 0x20,
                                                                 0x6e, 0x6f, 0x6e, 0x63};
  ix.nonce.assign(nonce.begin(), nonce.end());
  ix.hub_unix_ms = 1'796'169'600'000;
  auto text = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  const std::string empty = catch_up::encode_index(ix, nullptr);
  write("catch_up_index", "empty", text(empty));
  catch_up::product p;
  p.name = "obs/a b.bufr";
  p.size = 20000;
  p.mtime_ns = 1'700'000'000'000'000'000;
  p.mode = 0644;
  p.sha256.fill(0x5a);
  p.path = "products/12/obs/a%20b.bufr";
  ix.products.push_back(p);
  p.name = "grib/\xc3\x9cn.grib2";
  p.path = "products/13/grib/%C3%9Cn.grib2";
  ix.products.push_back(p);
  const std::string two = catch_up::encode_index(ix, nullptr);
  write("catch_up_index", "two_products", text(two));
  const auto hub = crypto::generate_identity();
  const std::string signed_two = catch_up::encode_index(ix, &hub);
  write("catch_up_index", "signed", text(signed_two));
}

// --- a site's replay cache (TEMP/replay), then new signed sessions ---

void replay_cache_seeds() {
  constexpr std::uint64_t now = 1'796'169'600'000;  // replay_cache_fuzz's clock
  receiver::replay_guard g({});
  g.raise_floor(now - 600'000);
  for (std::uint32_t i = 1; i <= 3; ++i) {
    (void)g.admit({now - i * 1000, session_id{i * 0x1111}, "mcdist-ed25519:AAAA"}, now);
  }
  write_text("replay_cache", "cache", g.encode());
  // The cache, then: a new session, a replay of an entry, one too old, one too far ahead.
  std::string with_sessions = g.encode();
  with_sessions += '\0';
  const std::pair<std::uint32_t, std::int64_t> sessions[] = {
      {0x4444, -10}, {0x1111, -1000}, {0x5555, -7'200'000}, {0x6666, 600'000}};
  for (const auto& [id, off] : sessions) {
    for (int k = 3; k >= 0; --k) with_sessions += static_cast<char>(id >> (8 * k));
    const auto u = static_cast<std::uint64_t>(off);
    for (int k = 7; k >= 0; --k) with_sessions += static_cast<char>(u >> (8 * k));
    with_sessions += '\0';
  }
  write_text("replay_cache", "cache_sessions", with_sessions);
  write_text("replay_cache", "empty", "mcdist-replay 1\nfloor 0\n");
}

// --- unicast frames: a client's stream (hello, requests, acks, bye) and a server's ---

void unicast_seeds() {
  using namespace mcdist::unicast;
  bytes client{std::byte{0}};
  hello h;
  h.token = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
             0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
  h.session = rx_sid;
  h.client_nonce = 42;
  h.connection_index = 0;
  h.connection_count = 4;
  h.receiver_id = "dwd-offenbach";
  append_frame(client, h);
  request rq;
  rq.ranges = {{file_index{1}, 0, 2500}, {file_index{2}, 1000, 64}};
  append_frame(client, rq);
  ack a;
  a.files = {file_index{1}, file_index{2}};
  append_frame(client, a);
  append_bye(client);
  write("unicast_frame", "client_stream", client);

  bytes server{std::byte{1}};
  append_frame(server, challenge{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}});
  welcome w;
  w.record_size = 65536;
  w.streams = 0;
  w.connection_count = 4;
  append_frame(server, w);
  for (std::uint64_t off : {0u, 100u}) {
    bytes rec(record_header_size + 100, std::byte{9});
    write_record_header(rec, file_index{1}, off, 100);
    server.insert(server.end(), rec.begin(), rec.end());
  }
  write("unicast_frame", "server_stream", server);

  bytes refused{std::byte{1}};
  refuse rf;
  rf.reason = refuse_reason::busy;
  rf.text = "too many sessions";
  append_frame(refused, rf);
  write("unicast_frame", "refuse", refused);

  // Sealed streams of an encrypted session (flags bit 1; unicast_frame_fuzz.cpp): a tamper
  // byte, then length-prefixed inner frames the target seals itself.
  const auto chunk = [](bytes& out, const bytes& frame) {
    out.push_back(std::byte(frame.size() >> 8));
    out.push_back(std::byte(frame.size() & 0xff));
    out.insert(out.end(), frame.begin(), frame.end());
  };
  for (const std::uint8_t tamper : {0, 77}) {
    bytes sealed_server{std::byte{3}, std::byte{tamper}};
    {
      bytes f;
      append_frame(f, w);
      chunk(sealed_server, f);
    }
    for (std::uint64_t off : {0u, 300u}) {
      bytes rec(record_header_size + 300, std::byte{5});
      write_record_header(rec, file_index{2}, off, 300);
      chunk(sealed_server, rec);
    }
    write("unicast_frame", tamper ? "sealed_server_tampered" : "sealed_server_stream",
          sealed_server);
  }
  bytes sealed_client{std::byte{2}, std::byte{0}};
  {
    bytes f;
    append_frame(f, rq);
    chunk(sealed_client, f);
    f.clear();
    append_frame(f, a);
    chunk(sealed_client, f);
    f.clear();
    append_bye(f);
    chunk(sealed_client, f);
  }
  write("unicast_frame", "sealed_client_stream", sealed_client);
}

// --- auth_fuzz: datagrams of a signed session as each side seals them, and fallback hellos ---

void auth_seeds() {
  // Keys of the seed run: auth_fuzz makes its own, so these signatures and tags do not verify
  // there; the seeds give it the exact shapes (version 2, every trailer size) to mutate.
  crypto::init();
  const auto hub = crypto::generate_identity();
  const auto site_id = crypto::generate_identity();
  auth::sender_keys tx(hub, rx_sid, {});
  auth::receiver_auth_options o;
  o.trusted_senders = {hub.public_key};
  o.site = site_id;
  auth::receiver_keys rx(o);
  const time_point now{std::chrono::seconds(1)};
  enum op : std::uint8_t {
    to_site = 0,
    to_sender = 1,
    site_seal = 2,
    sender_seal = 3,
    data_seal = 4,
    hello_proof = 5
  };
  script s;
  auto sealed = [](bytes d, auto&& seal) {
    const std::size_t len = d.size();
    d.resize(len + auth::max_trailer_bytes);
    d.resize(seal(d, len));
    return d;
  };
  std::span<const std::byte> opened;
  const auto ann =
      sealed(datagram(wire::msg_type::announce, announce_msg()),
             [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); });
  if (rx.open(ann, now, opened)) throw std::runtime_error("auth seeds: the announce does not open");
  s.add(to_site, ann);
  {
    // A burst of three announces under one tree (sender_keys::seal_announces): the second and
    // third carry authentication paths, and open by them once the first verified the root.
    std::vector<bytes> bufs(3, datagram(wire::msg_type::announce, announce_msg()));
    std::vector<auth::sender_keys::announce_slot> burst;
    for (auto& b : bufs) {
      const std::size_t len = b.size();
      b.resize(len + auth::max_trailer_bytes);
      burst.push_back({std::span<std::byte>(b), len});
    }
    tx.seal_announces(burst);
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      bufs[i].resize(burst[i].len);
      s.add(to_site, bufs[i]);
    }
  }
  wire::register_request rr;
  rr.set_receiver_id("site");
  const auto reg = sealed(datagram(wire::msg_type::register_request, rr),
                          [&](std::span<std::byte> b, std::size_t n) { return rx.seal(b, n); });
  if (tx.open(reg, opened))
    throw std::runtime_error("auth seeds: the register_request does not open");
  s.add(to_sender, reg);
  const auto reply =
      sealed(datagram(wire::msg_type::register_reply, reply_msg(true)),
             [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); });
  s.add(to_site, reply);
  s.add(to_site, sealed(data_dg(1, 1, 0, 1000),
                        [&](std::span<std::byte> b, std::size_t n) { return tx.seal_data(b, n); }));
  s.add(to_site,
        sealed(datagram(wire::msg_type::marker, marker_msg(1, true, 2)),
               [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); }));
  s.add(to_site,
        sealed(datagram(wire::msg_type::digest_list, digests_msg()),
               [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); }));
  s.add(to_site,
        sealed(datagram(wire::msg_type::fallback, fallback_msg(wire::fallback::TCP)),
               [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); }));
  s.add(to_site,
        sealed(datagram(wire::msg_type::session_end, end_msg(false)),
               [&](std::span<std::byte> b, std::size_t n) { return tx.seal_control(b, n); }));
  // A relay's hello for the session (a delegation by this run's hub key: the fuzzer's own key
  // does not verify it, so mutations reach the parser and the refusals).
  {
    auth::relay_delegation d{"relay", crypto::generate_x25519(), {}};
    d.signature = auth::sign_delegation(hub, rx_sid, d.relay_id, d.key.public_key);
    bytes hello(wire::control_budget);
    hello.resize(auth::encode_relay_hello(hello, rx_sid, d));
    s.add(to_site, hello);
  }
  wire::nak nk;
  nk.set_receiver_id("site");
  nk.set_pass(1);
  s.add(to_sender, sealed(datagram(wire::msg_type::nak, nk),
                          [&](std::span<std::byte> b, std::size_t n) { return rx.seal(b, n); }));
  // What the cores hand each side to seal.
  s.add(site_seal, datagram(wire::msg_type::nak, nk));
  s.add(sender_seal, datagram(wire::msg_type::marker, marker_msg(2, false, 9)));
  s.add(sender_seal, datagram(wire::msg_type::announce, announce_msg()));  // sealed as a burst
  s.add(sender_seal, datagram(wire::msg_type::register_reply, reply_msg(true)));
  s.add(data_seal, data_dg(3, 1, 1, 500));
  // A fallback hello with its proof over a challenge.
  unicast::challenge c{{7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  unicast::hello h;
  h.token = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  h.session = rx_sid;
  h.client_nonce = 5;
  h.connection_count = 1;
  h.receiver_id = "site";
  h.proof = unicast::hello_proof(crypto::key32{}, c, h);
  bytes hp(c.nonce.size());
  std::memcpy(hp.data(), c.nonce.data(), c.nonce.size());
  bytes frame;
  unicast::append_frame(frame, h);
  hp.insert(hp.end(), frame.begin() + unicast::frame_header_size, frame.end());
  s.add(hello_proof, hp);
  write("auth", "signed_session", s.b);

  // An encrypted session (ops 6..10 of auth_fuzz): sealed announce, key request, key_only
  // reply, encrypted data, sealed digest list; and the cores' datagrams to seal.
  enum enc_op : std::uint8_t {
    to_esite = 6,
    to_esender = 7,
    esite_seal = 8,
    esender_seal = 9,
    edata_seal = 10
  };
  auth::sender_keys etx(hub, rx_sid, {{"site", site_id.public_key}}, true);
  o.receiver_id = "site";
  auth::receiver_keys erx(o);
  script e;
  const auto eann =
      sealed(datagram(wire::msg_type::announce, announce_msg()),
             [&](std::span<std::byte> b, std::size_t n) { return etx.seal_control(b, n); });
  if (erx.open(eann, now, opened) || !opened.empty())
    throw std::runtime_error("auth seeds: the sealed announce");
  e.add(to_esite, eann);
  bytes kreq(wire::control_budget + auth::max_trailer_bytes);
  kreq.resize(erx.take_key_request(kreq));
  if (kreq.empty() || etx.open(kreq, opened))
    throw std::runtime_error("auth seeds: the key request");
  e.add(to_esender, kreq);
  bytes krep(wire::control_budget + auth::max_trailer_bytes);
  krep.resize(etx.take_key_reply(krep));
  if (krep.empty() || erx.open(krep, now, opened))
    throw std::runtime_error("auth seeds: the key reply");
  e.add(to_esite, krep);
  e.add(to_esite, eann);
  e.add(to_esite, sealed(data_dg(1, 1, 0, 1000), [&](std::span<std::byte> b, std::size_t n) {
          return etx.seal_data(b, n);
        }));
  e.add(to_esite,
        sealed(datagram(wire::msg_type::digest_list, digests_msg()),
               [&](std::span<std::byte> b, std::size_t n) { return etx.seal_control(b, n); }));
  e.add(esite_seal, datagram(wire::msg_type::register_request, rr));
  e.add(esender_seal, datagram(wire::msg_type::announce, announce_msg()));
  e.add(esender_seal, datagram(wire::msg_type::digest_list, digests_msg()));
  e.add(esender_seal, datagram(wire::msg_type::fallback, fallback_msg(wire::fallback::TCP)));
  e.add(edata_seal, data_dg(3, 1, 1, 500));
  write("auth", "encrypted_session", e.b);

  // A silent signed session with block digests (ops 11 and 12 of auth_fuzz): blocks the target
  // digests, signs and opens (op 12), a data and a parity block, and what a forger sends the
  // site (op 11): a version-3 block with no digest, a block digest chunk of another key.
  enum digest_op : std::uint8_t { to_dsite = 11, digest_block = 12 };
  script g;
  g.add(digest_block, data_dg(5, 0, 2, 1000));
  bytes parity = data_dg(6, 0, 0, 1000);
  parity[3] = std::byte{static_cast<std::uint8_t>(wire::msg_type::parity)};
  g.add(digest_block, parity);
  bytes v3 = data_dg(7, 0, 3, 1000);
  v3[2] = std::byte{wire::digest_version};
  g.add(to_dsite, v3);
  {
    const auto d = block_digests::digest_of(v3);
    bytes chunk(block_digests::chunk_body_bytes(1, 0) + auth::max_trailer_bytes);
    const std::size_t n = block_digests::write_chunk(chunk, rx_sid, 7, 1, 0, {&d, 1});
    auth::sender_keys::announce_slot slot{std::span<std::byte>(chunk), n};
    tx.seal_block_digests({&slot, 1});
    chunk.resize(slot.len);
    g.add(to_dsite, chunk);
  }
  write("auth", "block_digests", g.b);
}

void config_seeds() {
  write_text("config", "full.toml", R"(id = "site-a"
interface = "10.0.0.7"
dest = "/srv/mcdist/in"
temp = "/srv/mcdist/tmp"
sync = "batch"
buffer_pool = "16M"
socket_buffer = 33554432
checkpoint_interval = "2s"
session_timeout = "60s"
status_interval = "60s"
status_file = "/run/mcdistd/status.json"
[log]
level = "info"
file = "/var/log/mcdist/mcdistd.log"
[[channel]]
name = "products"
group = "239.192.0.1:4711"
dest = "/srv/mcdist/in/products"
[[channel]]
group = "239.192.0.2:4711"
)");
  write_text("config", "v6.toml", R"(id = "site-b"
interface = "::1"
temp = "/tmp/t"
dest = "/tmp/d"
sync = "none"
[[channel]]
group = "[ff15::1]:4711"
)");
  write_text("config", "bad.toml", "id = 7\n[[channel]]\ngroup = \"10.0.0.1:1\"\nunknown = 1\n");
}

/// sctp_probe_fuzz scripts (tests/fuzz/sctp_probe_fuzz.cpp): our INIT ACK, DATA packets sent, SACKs
/// received (a cumulative ack, gap blocks), and asks for what is due, as a tail loss and a hole.
void sctp_probe_seeds() {
  auto be16 = [](bytes& b, std::uint32_t v) {
    b.push_back(std::byte(v >> 8));
    b.push_back(std::byte(v));
  };
  auto be32 = [&](bytes& b, std::uint32_t v) {
    be16(b, v >> 16);
    be16(b, v & 0xffff);
  };
  auto event = [&](bytes& script, std::uint8_t op, std::uint8_t advance_ms, const bytes& packet) {
    script.push_back(std::byte{op});
    script.push_back(std::byte{advance_ms});
    if (op == 2) return;
    be16(script, static_cast<std::uint32_t>(packet.size()));
    script.insert(script.end(), packet.begin(), packet.end());
  };
  auto data_packet = [&](std::uint32_t tsn) {
    bytes b(12, std::byte{0});
    b.push_back(std::byte{0});
    b.push_back(std::byte{3});
    be16(b, 16 + 8);
    be32(b, tsn);
    be32(b, 0x00010000);
    be32(b, 0);
    b.insert(b.end(), 8, std::byte{0x42});
    return b;
  };
  auto sack_packet = [&](std::uint32_t cum,
                         std::vector<std::pair<std::uint16_t, std::uint16_t>> gaps) {
    bytes b(12, std::byte{0});
    b.push_back(std::byte{3});
    b.push_back(std::byte{0});
    be16(b, static_cast<std::uint32_t>(16 + 4 * gaps.size()));
    be32(b, cum);
    be32(b, 1 << 20);
    be16(b, static_cast<std::uint32_t>(gaps.size()));
    be16(b, 0);
    for (auto [s, e] : gaps) {
      be16(b, s);
      be16(b, e);
    }
    return b;
  };
  // Our INIT ACK first: it names the verification tag (0, as in these packets' headers) the
  // probe then requires of the SACKs.
  bytes init_ack(12, std::byte{0});
  init_ack.push_back(std::byte{2});
  init_ack.push_back(std::byte{0});
  be16(init_ack, 20);
  be32(init_ack, 0);
  be32(init_ack, 1 << 20);
  be32(init_ack, 0x000a000a);
  be32(init_ack, 1000);
  bytes tail, hole;
  event(tail, 0, 0, init_ack);
  event(hole, 0, 0, init_ack);
  for (std::uint32_t t = 1000; t < 1006; ++t) {
    event(tail, 0, 0, data_packet(t));
    event(hole, 0, 0, data_packet(t));
  }
  event(tail, 1, 70, sack_packet(1002, {}));
  for (int i = 0; i < 6; ++i) event(tail, 2, 50, {});
  event(hole, 1, 70, sack_packet(1000, {{2, 5}}));
  for (int i = 0; i < 6; ++i) event(hole, 2, 30, {});
  event(hole, 1, 70, sack_packet(1005, {}));
  write("sctp_probe", "tail", tail);
  write("sctp_probe", "hole", hole);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_corpus DIR\n";
    return 2;
  }
  g_root = argv[1];
  try {
    wire_seeds();
    receiver_seeds();
    checkpoint_seeds();
    sequences_seeds();
    catch_up_index_seeds();
    replay_cache_seeds();
    sender_seeds();
    unicast_seeds();
    auth_seeds();
    config_seeds();
    sctp_probe_seeds();
  } catch (const std::exception& e) {
    std::cerr << "make_corpus: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
