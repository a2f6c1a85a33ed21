-- Wireshark dissector for mcdist, the reliable multicast file distributor.
--
-- Decodes (docs/wireshark.md has installation and use):
--   * the 8-byte common header of common/wire.hpp: magic "MD", version, type, session id;
--   * data datagrams: the 12-byte data header (sequence, file index, block index) and payload;
--   * every control message of proto/mcdist.proto, its protobuf body decoded here in Lua from
--     the schema table below (varints, length-delimited, packed repeated, nested messages),
--     field by field with the .proto's names (filter names mcdist.<message>.<field>);
--   * version 2 (authenticated) datagrams: the authentication trailer, whose length depends on
--     the type only (an announce's also on its announce tree leaf index and count, its last 4
--     bytes), split into its parts (keys, path hashes, signature, tag, nonce, counter) as laid
--     out by common/auth.hpp; the marker counter is big-endian like every other
--     integer;
--   * version 3 datagrams (silent signed sessions, docs/security.md "Block digests"): data and
--     parity blocks without a trailer, and block digest chunks (type 15: the window's first
--     sequence number, its length, the chunk's offset, its 16-byte digests; then its trailer:
--     path hashes, signature, leaf index, leaf count), laid out by common/block_digests.hpp;
--   * GSO super-packets: a capture taken on the sending host (loopback, or a NIC with UDP
--     segmentation offload) shows one UDP packet holding many equal-sized data datagrams, the
--     way the sender hands them to the kernel with UDP_SEGMENT; they are split and dissected one
--     by one.
--   * encrypted sessions (mcdist-send --encrypt): the sealed announce and digest list bodies
--     (field 15, "sealed") and the data payloads of a session whose announce was sealed are
--     shown as encrypted (filter mcdist.encrypted); key requests and key-only replies by their
--     flags. Nothing in them can be decoded without the session key.
-- Malformed datagrams (truncated, bad magic/version/type, oversized, broken protobuf, short
-- trailer, out-of-range values) raise expert info instead of Lua errors.
--
-- The dissector claims UDP datagrams heuristically (magic, version 1 to 3, known type) on any
-- port, and always on the UDP ports of the "mcdist.ports" preference (default 4711, the default
-- group port), where it also flags datagrams that are not mcdist.
--
-- Uses the Lua API of Wireshark 3.6 and later (Lua 5.2+); tested with Debian 12's tshark 4.0.17.
-- It checks no signature, tag or HMAC (it holds no keys).

local mcdist = Proto("mcdist", "mcdist reliable multicast file distribution")

-- Constants of common/wire.hpp.
local MAGIC = 0x4d44                 -- "MD"
local HEADER_SIZE = 8
local DATA_HEADER_SIZE = 20
local MAX_DATAGRAM_SIZE = 9000       -- receivers drop anything larger (wire::max_datagram_size)
local MIN_BLOCK_SIZE = 256           -- wire::min_block_size: smallest GSO segment we look for
local MAX_RECEIVER_ID_BYTES = 64     -- wire::max_receiver_id_bytes
-- Nesting depth limit for protobuf messages: the schema nests 3 deep (session_state >
-- file_state > file_entry); the limit only guards against a schema edit looping.
local MAX_DEPTH = 8

local type_names = {
  [1] = "data", [2] = "announce", [3] = "register_request", [4] = "register_reply",
  [5] = "marker", [6] = "nak", [7] = "digest_list", [8] = "complete", [9] = "complete_ack",
  [10] = "session_end", [11] = "fallback", [12] = "parity", [14] = "repair_advert",
  [15] = "block_digests", [16] = "heartbeat", [17] = "gap_report", [18] = "relay_hello",
}
local version_names = { [1] = "plain", [2] = "authenticated", [3] = "block digest" }
-- Version 3 carries only these types (common/wire.hpp digest_version); block_digests only it.
local version3_types = { [1] = true, [12] = true, [15] = true }

-- Version 2 trailers: per type, its parts in order as {field key, length}.
local trailer_layout = {
  [1] = { { "gcm_tag", 16 } },
  -- An announce's authentication path (32 bytes per level) sits between the key and the
  -- signature; announce_layout() gives its real layout, this is the one without a path.
  [2] = { { "session_public_key", 32 }, { "signature", 64 }, { "leaf_index", 2 },
          { "leaf_count", 2 } },
  [3] = { { "site_public_key", 32 }, { "hmac", 32 } },
  [4] = { { "nonce", 24 }, { "encrypted_session_key", 32 }, { "aead_tag", 16 } },
  [5] = { { "counter", 8 }, { "gcm_tag", 16 } },
  [6] = { { "hmac", 32 } },
  [7] = { { "signature", 64 } },
  [8] = { { "hmac", 32 } },
  [9] = { { "hmac", 32 } },
  [10] = { { "signature", 64 } },
  [11] = { { "hmac", 32 } },
  [12] = { { "gcm_tag", 16 } },
  [14] = { { "counter", 8 }, { "gcm_tag", 16 } },
  [16] = { { "signature", 64 } },                              -- common/beacon.hpp
  [17] = { { "site_public_key", 32 }, { "signature", 64 } },
  [18] = { { "signature", 64 } },  -- the hub's delegation of the session to the relay
}
local trailer_size = {}
for t, parts in pairs(trailer_layout) do
  local n = 0
  for _, p in ipairs(parts) do n = n + p[2] end
  trailer_size[t] = n
end

-- Announce trees (common/announce_tree.hpp): most leaves, and the length of leaf `index`'s
-- authentication path in a tree of `count` leaves (RFC 9162 section 2.1.3.1), nil when out of
-- bounds.
local ANNOUNCE_TREE_MAX_LEAVES = 64
local function announce_path_length(index, count)
  if count < 1 or count > ANNOUNCE_TREE_MAX_LEAVES or index >= count then return nil end
  local len = 0
  while count > 1 do
    local k = 1
    while k * 2 < count do k = k * 2 end
    if index < k then count = k else index = index - k; count = count - k end
    len = len + 1
  end
  return len
end

-- The trailer layout of a version 2 announce whose last 4 bytes are at tvb(off + len - 4):
-- key, path hashes, signature, leaf index, leaf count; nil when the index and count are out of
-- bounds or the datagram is too short for its path.
local function announce_layout(tvb, off, len)
  if len < trailer_size[2] then return nil end
  local index = tvb(off + len - 4, 2):uint()
  local count = tvb(off + len - 2, 2):uint()
  local k = announce_path_length(index, count)
  if not k or len < trailer_size[2] + 32 * k then return nil end
  local parts = { { "session_public_key", 32 } }
  for _ = 1, k do parts[#parts + 1] = { "path_hash", 32 } end
  parts[#parts + 1] = { "signature", 64 }
  parts[#parts + 1] = { "leaf_index", 2 }
  parts[#parts + 1] = { "leaf_count", 2 }
  return parts, trailer_size[2] + 32 * k
end

-- Block digest chunks (common/block_digests.hpp): the fields after the header, the digest size,
-- the most leaves of a window's tree, and the trailer layout of a chunk whose last 4 bytes are
-- at tvb(off + len - 4): path hashes, signature, leaf index, leaf count (nil when out of bounds).
local DIGEST_FIELDS = 8
local DIGEST_BYTES = 16
local DIGEST_MAX_CHUNKS = 16
local DIGEST_TRAILER_FIXED = 68
local function digest_layout(tvb, off, len)
  if len < DIGEST_TRAILER_FIXED then return nil end
  local index = tvb(off + len - 4, 2):uint()
  local count = tvb(off + len - 2, 2):uint()
  if count > DIGEST_MAX_CHUNKS then return nil end
  local k = announce_path_length(index, count)
  if not k or len < DIGEST_TRAILER_FIXED + 32 * k then return nil end
  local parts = {}
  for _ = 1, k do parts[#parts + 1] = { "path_hash", 32 } end
  parts[#parts + 1] = { "signature", 64 }
  parts[#parts + 1] = { "leaf_index", 2 }
  parts[#parts + 1] = { "leaf_count", 2 }
  return parts, DIGEST_TRAILER_FIXED + 32 * k
end

-- proto/mcdist.proto as a table: message -> list of {number, name, kind, options}.
-- kinds: uint32 uint64 int64 bool enum (varint), fixed64, string, bytes, message.
-- options: repeated, packed, msg (nested message), enum (value names), base, runs ({abbr, label}
-- of a generated field spelling out (gap, count) pairs as absolute ranges), sha256 (32 bytes or
-- empty), rid (receiver id), address (4 or 16 bytes or empty).
local schema = {
  file_entry = {
    { 1, "path", "string" },
    { 2, "size", "uint64" },
    { 3, "mtime_ns", "int64" },
    { 4, "mode", "uint32", { base = base.OCT } },
    { 5, "sha256", "bytes", { sha256 = true } },
  },
  session_params = {
    { 1, "block_size", "uint32" },
    { 2, "rate_bps", "uint64" },
    { 3, "max_passes", "uint32" },
    { 4, "file_count", "uint32" },
    { 5, "total_bytes", "uint64" },
    { 6, "manifest_chunks", "uint32" },
    { 7, "closed_group", "bool" },
    { 8, "grtt_us", "uint32" },
    { 9, "sender_name", "string" },
    { 10, "only_receivers", "string", { repeated = true } },
    { 11, "manifest_sha256", "bytes", { sha256 = true } },
    { 12, "channel", "string" },
    { 13, "channel_seq", "uint64" },
    { 14, "catch_up_seqs", "message", { msg = "seq_range", repeated = true } },
    { 20, "fec_k", "uint32" },
    { 21, "fec_max_parity", "uint32" },
    { 22, "fec_depth", "uint32" },
    { 23, "silent_passes", "uint32" },
    { 24, "block_digests", "uint32" },
    { 26, "created_unix_ms", "uint64" },
  },
  seq_range = {
    { 1, "first", "uint64" },
    { 2, "last", "uint64" },
  },
  announce = {
    { 1, "params", "message", { msg = "session_params" } },
    { 2, "chunk", "uint32" },
    { 3, "first_file", "uint32" },
    { 4, "files", "message", { msg = "file_entry", repeated = true } },
    { 5, "sender_time_us", "uint64" },
    { 15, "sealed", "bytes" },  -- encrypted session: the body above, XChaCha20-Poly1305
  },
  register_request = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "echo_time_us", "uint64" },
    { 3, "hold_us", "uint64" },
    { 4, "held_files", "uint32", { repeated = true, packed = true,
                                        runs = { "held_file_runs", "Held files" } } },
    { 5, "held_pending", "message", { msg = "held_digest", repeated = true } },
    { 6, "resumed", "bool" },
    { 7, "last_seq", "uint64" },
    { 8, "missing_seqs", "message", { msg = "seq_range", repeated = true } },
    { 9, "key_request", "bool" },
    { 10, "relay_public", "bytes" },  -- a relay's X25519 key for the session
    { 11, "for_origin", "bool" },  -- a nested relay's request for the hub, passed on unopened
  },
  held_digest = {
    { 1, "file", "uint32" },
    { 2, "sha256", "bytes", { sha256 = true } },
  },
  register_reply = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "accepted", "bool" },
    { 3, "reason", "string" },
    { 4, "key_only", "bool" },
    { 5, "relay_delegation", "bytes" },  -- the hub's Ed25519 signature for a relay
  },
  relay_hello = {
    { 1, "relay_id", "string", { rid = true } },
    { 2, "relay_public", "bytes" },
    { 3, "flags", "uint32" },
  },
  marker = {
    { 1, "pass", "uint32" },
    { 2, "file", "uint32" },
    { 3, "block", "uint32" },
    { 4, "pass_end", "bool" },
    { 5, "sender_time_us", "uint64" },
    { 6, "grtt_us", "uint32" },
    { 7, "seq", "uint32" },
    { 8, "digests_through", "uint32" },
    { 9, "nak_backoff_us", "uint32" },
    { 10, "status_request", "bool" },
    { 30, "group_size", "uint32" },
    { 31, "status_slices", "uint32" },
    { 32, "status_slice", "uint32" },
  },
  repair_advert = {
    { 1, "pass", "uint32" },
    { 2, "files", "message", { msg = "file_nak", repeated = true } },
  },
  nak = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "pass", "uint32" },
    { 3, "seen_seq", "uint32" },
    { 4, "echo_time_us", "uint64" },
    { 5, "hold_us", "uint64" },
    { 6, "files", "message", { msg = "file_nak", repeated = true } },
    { 7, "digests_wanted", "uint32", { repeated = true, packed = true } },
    { 8, "files_finalizing", "uint32" },
    { 9, "bytes_received", "uint64" },
    { 20, "fec_lacks", "uint32", { repeated = true, packed = true } },
  },
  file_nak = {
    { 1, "file", "uint32" },
    { 2, "ranges", "uint32", { repeated = true, packed = true,
                                  runs = { "missing_blocks", "Missing blocks" } } },
  },
  digest_list = {
    { 1, "digests", "message", { msg = "held_digest", repeated = true } },
    { 15, "sealed", "bytes" },
  },
  complete = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "echo_time_us", "uint64" },
    { 3, "hold_us", "uint64" },
    { 4, "files_stored", "uint32" },
    { 5, "bytes_stored", "uint64" },
    { 6, "files_held", "uint32" },
    { 7, "failures", "message", { msg = "file_failure", repeated = true } },
    { 8, "datagrams_received", "uint64" },
    { 9, "datagrams_lost", "uint64" },
  },
  file_failure = {
    { 1, "file", "uint32" },
    { 2, "reason", "string" },
  },
  complete_ack = {
    { 1, "receiver_id", "string", { rid = true } },
  },
  session_end = {
    { 1, "reason", "enum", { enum = { [0] = "DONE", [1] = "ABORTED" } } },
    { 2, "detail", "string" },
  },
  heartbeat = {
    { 1, "channel", "string" },
    { 2, "newest_seq", "uint64" },
    { 3, "sent_unix_ms", "uint64" },
    { 4, "running", "message", { msg = "seq_range", repeated = true } },
    { 5, "sender_name", "string" },
  },
  gap_report = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "channel", "string" },
    { 3, "last_seq", "uint64" },
    { 4, "missing", "message", { msg = "seq_range", repeated = true } },
    { 5, "heartbeat_unix_ms", "uint64" },
  },
  fallback = {
    { 1, "receiver_id", "string", { rid = true } },
    { 2, "transport", "enum", { enum = { [0] = "SCTP_UDP", [1] = "SCTP_KERNEL", [2] = "TCP" } } },
    { 3, "address", "bytes", { address = true } },
    { 4, "port", "uint32" },
    { 6, "connections", "uint32" },
    { 7, "reason", "string" },
    { 8, "token", "bytes" },  -- 128 bits (field 5, a 64-bit token, is retired)
  },
}

-- ---------------------------------------------------------------------------------------------
-- Fields

local hf = {
  magic = ProtoField.uint16("mcdist.magic", "Magic", base.HEX),
  version = ProtoField.uint8("mcdist.version", "Version", base.DEC, version_names),
  type = ProtoField.uint8("mcdist.type", "Type", base.DEC, type_names),
  session = ProtoField.uint32("mcdist.session", "Session id", base.HEX),
  data_seq = ProtoField.uint32("mcdist.data.seq", "Sequence number", base.DEC),
  data_file = ProtoField.uint32("mcdist.data.file", "File index", base.DEC),
  data_block = ProtoField.uint32("mcdist.data.block", "Block index", base.DEC),
  data_payload = ProtoField.bytes("mcdist.data.payload", "Payload"),
  parity_fec_block = ProtoField.uint32("mcdist.parity.fec_block", "FEC block", base.DEC),
  parity_index = ProtoField.uint32("mcdist.parity.index", "Parity index", base.DEC),
  digests_first_seq = ProtoField.uint32("mcdist.block_digests.first_seq",
                                        "Window's first sequence number", base.DEC),
  digests_count = ProtoField.uint16("mcdist.block_digests.count", "Datagrams in the window",
                                    base.DEC),
  digests_offset = ProtoField.uint16("mcdist.block_digests.offset", "Offset of the first digest",
                                     base.DEC),
  digest = ProtoField.bytes("mcdist.block_digests.digest", "Block digest (SHA-256, 16 bytes)"),
  encrypted = ProtoField.bool("mcdist.encrypted", "Encrypted (mcdist-send --encrypt)"),
  data_path = ProtoField.string("mcdist.data.path", "File path (from the announce)"),
  data_payload_len = ProtoField.uint32("mcdist.data.payload_length", "Payload length", base.DEC),
  body = ProtoField.none("mcdist.body", "Protobuf body"),
  gso_segment = ProtoField.uint32("mcdist.gso.segment_size", "GSO segment size", base.DEC),
  gso_count = ProtoField.uint32("mcdist.gso.segments", "GSO segments", base.DEC),
  pb_unknown = ProtoField.bytes("mcdist.pb.unknown_field", "Unknown protobuf field"),
  auth = ProtoField.none("mcdist.auth", "Authentication trailer"),
  auth_gcm_tag = ProtoField.bytes("mcdist.auth.gcm_tag", "AES-256-GCM tag"),
  auth_session_public_key = ProtoField.bytes("mcdist.auth.session_public_key",
                                             "Session public key (X25519)"),
  auth_signature = ProtoField.bytes("mcdist.auth.signature", "Signature (Ed25519)"),
  auth_path_hash = ProtoField.bytes("mcdist.auth.path_hash",
                                    "Authentication path hash (announce tree, SHA-256)"),
  auth_leaf_index = ProtoField.uint16("mcdist.auth.leaf_index", "Announce tree leaf index",
                                      base.DEC),
  auth_leaf_count = ProtoField.uint16("mcdist.auth.leaf_count", "Announce tree leaf count",
                                      base.DEC),
  auth_site_public_key = ProtoField.bytes("mcdist.auth.site_public_key",
                                          "Site public key (Ed25519)"),
  auth_hmac = ProtoField.bytes("mcdist.auth.hmac", "HMAC-SHA-512/256"),
  auth_nonce = ProtoField.bytes("mcdist.auth.nonce", "Nonce (XChaCha20-Poly1305)"),
  auth_encrypted_session_key = ProtoField.bytes("mcdist.auth.encrypted_session_key",
                                                "Encrypted session key"),
  auth_aead_tag = ProtoField.bytes("mcdist.auth.aead_tag", "Poly1305 tag"),
  auth_counter = ProtoField.uint64("mcdist.auth.counter", "Marker counter", base.DEC),
}

-- One ProtoField per (message, field): mcdist.<message>.<field>. Nested messages share their
-- fields wherever they occur (mcdist.file_entry.path inside any announce).
local pb_fields = {}    -- message -> number -> field definition
for msgname, fields in pairs(schema) do
  local by_number = {}
  for _, def in ipairs(fields) do
    local number, name, kind, opts = def[1], def[2], def[3], def[4] or {}
    local abbr = "mcdist." .. msgname .. "." .. name
    local pf
    if kind == "uint32" then
      pf = ProtoField.uint32(abbr, name, opts.base or base.DEC)
    elseif kind == "uint64" then
      pf = ProtoField.uint64(abbr, name, base.DEC)
    elseif kind == "int64" then
      pf = ProtoField.int64(abbr, name, base.DEC)
    elseif kind == "fixed64" then
      pf = ProtoField.uint64(abbr, name, opts.base or base.DEC)
    elseif kind == "bool" then
      pf = ProtoField.bool(abbr, name)
    elseif kind == "enum" then
      pf = ProtoField.uint32(abbr, name, base.DEC, opts.enum)
    elseif kind == "string" then
      pf = ProtoField.string(abbr, name)
    elseif kind == "bytes" then
      pf = ProtoField.bytes(abbr, name)
    elseif kind == "message" then
      pf = ProtoField.none(abbr, name)
    else
      error("mcdist.lua: unknown kind " .. kind)
    end
    local fd = { number = number, name = name, kind = kind, opts = opts, pf = pf }
    hf["pb_" .. msgname .. "_" .. name] = pf
    if opts.runs then
      fd.runs_pf = ProtoField.string("mcdist." .. msgname .. "." .. opts.runs[1], opts.runs[2])
      hf["pb_" .. msgname .. "_" .. opts.runs[1]] = fd.runs_pf
    end
    if opts.address then
      fd.ipv4_pf = ProtoField.ipv4(abbr .. ".ipv4", name .. " (IPv4)")
      fd.ipv6_pf = ProtoField.ipv6(abbr .. ".ipv6", name .. " (IPv6)")
      hf["pb_" .. msgname .. "_" .. name .. "_ipv4"] = fd.ipv4_pf
      hf["pb_" .. msgname .. "_" .. name .. "_ipv6"] = fd.ipv6_pf
    end
    by_number[number] = fd
  end
  pb_fields[msgname] = by_number
end

local fields_list = {}
for _, pf in pairs(hf) do fields_list[#fields_list + 1] = pf end
mcdist.fields = fields_list

-- ---------------------------------------------------------------------------------------------
-- Expert info

local ef = {
  truncated = ProtoExpert.new("mcdist.truncated", "Datagram truncated",
                              expert.group.MALFORMED, expert.severity.ERROR),
  oversized = ProtoExpert.new("mcdist.oversized", "Datagram larger than 9000 bytes",
                              expert.group.MALFORMED, expert.severity.ERROR),
  bad_magic = ProtoExpert.new("mcdist.bad_magic", "Not an mcdist datagram (magic is not 'MD')",
                              expert.group.MALFORMED, expert.severity.ERROR),
  bad_version = ProtoExpert.new("mcdist.bad_version", "Unknown mcdist version",
                                expert.group.MALFORMED, expert.severity.ERROR),
  unknown_type = ProtoExpert.new("mcdist.unknown_type", "Unknown message type",
                                 expert.group.MALFORMED, expert.severity.ERROR),
  short_trailer = ProtoExpert.new("mcdist.auth.short", "Shorter than its authentication trailer",
                                  expert.group.MALFORMED, expert.severity.ERROR),
  pb_malformed = ProtoExpert.new("mcdist.pb.malformed", "Malformed protobuf body",
                                 expert.group.MALFORMED, expert.severity.ERROR),
  pb_wire_type = ProtoExpert.new("mcdist.pb.wire_type", "Protobuf field with the wrong wire type",
                                 expert.group.MALFORMED, expert.severity.ERROR),
  pb_unknown = ProtoExpert.new("mcdist.pb.unknown", "Unknown protobuf field",
                               expert.group.UNDECODED, expert.severity.NOTE),
  value = ProtoExpert.new("mcdist.bad_value", "Value out of range",
                          expert.group.PROTOCOL, expert.severity.WARN),
  empty_payload = ProtoExpert.new("mcdist.data.empty", "Data datagram without payload",
                                  expert.group.PROTOCOL, expert.severity.NOTE),
}
mcdist.experts = { ef.truncated, ef.oversized, ef.bad_magic, ef.bad_version, ef.unknown_type,
                   ef.short_trailer, ef.pb_malformed, ef.pb_wire_type, ef.pb_unknown, ef.value,
                   ef.empty_payload }

-- ---------------------------------------------------------------------------------------------
-- Preferences

local default_ports = "4711"
mcdist.prefs.ports = Pref.range("UDP ports", default_ports,
                                "UDP ports always decoded as mcdist (besides the heuristic)", 65535)
mcdist.prefs.show_defaults = Pref.bool("Show default values", true,
                                       "Show proto3 scalar fields absent from a message (they " ..
                                       "hold 0 or false) as generated items")
mcdist.prefs.split_gso = Pref.bool("Split GSO super-packets", true,
                                   "Dissect a UDP packet holding several equal-sized data " ..
                                   "datagrams (captured before UDP segmentation offload) as " ..
                                   "its datagrams")

-- ---------------------------------------------------------------------------------------------
-- Protobuf decoding

-- Reads a base-128 varint at `off`, not past `limit`.
-- @return value (UInt64) and its length in bytes, or nil, length consumed and an error text.
local function read_varint(tvb, off, limit)
  local value = UInt64.new(0)
  local shift = 0
  local pos = off
  while pos < limit do
    local b = tvb(pos, 1):uint()
    pos = pos + 1
    value = value + UInt64.new(b % 128):lshift(shift)
    if b < 128 then return value, pos - off end
    shift = shift + 7
    if pos - off >= 10 then return nil, pos - off, "varint longer than 10 bytes" end
  end
  return nil, pos - off, "varint runs past the end"
end

local wire_names = { [0] = "varint", [1] = "64-bit", [2] = "length-delimited", [3] = "group start",
                     [4] = "group end", [5] = "32-bit" }

local function wire_type_of(fd)
  local k = fd.kind
  if k == "fixed64" then return 1 end
  if k == "string" or k == "bytes" or k == "message" then return 2 end
  return 0
end

local function u64_to_i64(u)
  return Int64.new(u:lower(), u:higher())
end

local dissect_message  -- forward

-- Defaults of proto3 scalars, per kind (strings and bytes left out: nothing to show).
local default_value = {
  uint32 = function() return 0 end,
  enum = function() return 0 end,
  uint64 = function() return UInt64.new(0) end,
  fixed64 = function() return UInt64.new(0) end,
  int64 = function() return Int64.new(0) end,
  bool = function() return false end,
}

-- Adds one varint value `u` (UInt64) of scalar field `fd` to `tree` over `range`.
-- @return the value as shown (number, UInt64, Int64 or boolean) and its tree item
local function add_varint(tree, fd, range, u)
  local item
  local k = fd.kind
  local v
  if k == "uint64" then
    item = tree:add(fd.pf, range, u)
    v = u
  elseif k == "int64" then
    v = u64_to_i64(u)
    item = tree:add(fd.pf, range, v)
  elseif k == "bool" then
    v = not (u:lower() == 0 and u:higher() == 0)
    item = tree:add(fd.pf, range, v)
  else  -- uint32, enum: proto3 keeps the low 32 bits
    v = u:lower()
    item = tree:add(fd.pf, range, v)
    if u:higher() ~= 0 then
      item:add_proto_expert_info(ef.value, fd.name .. " does not fit 32 bits")
    end
  end
  return v, item
end

-- Spells out (gap, count) pairs as absolute ranges (common/ranges.hpp: a run starts gap
-- units after the previous run's end, the first after unit 0; count > 0).
-- @return the ranges as text ("0-1,7"), and what is wrong with the list or nil
local function runs_text(list)
  local parts = {}
  local pos = 0
  local problem
  for i = 1, #list - 1, 2 do
    local first = pos + list[i]
    local stop = first + list[i + 1]
    if list[i + 1] == 0 then problem = "a run of count 0" end
    parts[#parts + 1] = list[i + 1] == 1 and tostring(first) or (first .. "-" .. (stop - 1))
    pos = stop
  end
  if #list % 2 == 1 then problem = "odd count, (gap, count) pairs expected" end
  return table.concat(parts, ","), problem
end

-- File paths per session, learnt from the announces dissected so far: session id -> file
-- index -> path. Wireshark dissects a file in order on its first pass, so a data datagram or a
-- NAK after its session's announce is shown with the file's path. Cleared per capture file.
local manifests = {}
-- Sessions whose announce was sealed (encrypted sessions): session id -> true.
local encrypted_sessions = {}
-- The manifest of the session whose datagram is being dissected, for the summaries below.
local current_manifest = {}

function mcdist.init()
  manifests = {}
  encrypted_sessions = {}
end

-- " (path)" of file index `file` in the current session, or "" when no announce gave it.
local function path_suffix(file)
  local p = file and current_manifest[file]
  return p and (" (" .. p .. ")") or ""
end

-- Per-message one-line summaries for subtrees (returned text is appended to the item).
local summaries = {
  file_entry = function(v)
    return string.format(": %s (%s bytes)", v.path or "?", tostring(v.size or 0))
  end,
  held_digest = function(v) return string.format(": file %d", v.file or 0) end,
  file_nak = function(v) return string.format(": file %d%s", v.file or 0, path_suffix(v.file)) end,
  file_failure = function(v)
    return string.format(": file %d%s: %s", v.file or 0, path_suffix(v.file), v.reason or "")
  end,
  session_params = function(v)
    local t = string.format(": %d files, %s bytes, block %d", v.file_count or 0,
                            tostring(v.total_bytes or 0), v.block_size or 0)
    if v.channel then
      t = t .. string.format(", channel %s #%s", v.channel, tostring(v.channel_seq or 0))
    end
    return t
  end,
  seq_range = function(v)
    local first, last = tostring(v.first or 0), tostring(v.last or 0)
    return ": " .. (first == last and first or (first .. "-" .. last))
  end,
}

-- Decodes the protobuf message `msgname` in tvb[off, limit) into `tree`.
-- @return vals: field name -> last value (numbers, strings, UInt64), name.."#" -> count of a
--         repeated field; and ok = false when the body was malformed (expert info added).
dissect_message = function(tvb, pinfo, tree, msgname, off, limit, depth)
  local defs = pb_fields[msgname]
  local vals = {}
  local seen = {}
  local whole_start, whole_end = off, limit
  if whole_end == whole_start then  -- an empty message: point at what precedes it
    whole_start = math.max(0, off - 1)
  end
  if depth > MAX_DEPTH then
    tree:add_proto_expert_info(ef.pb_malformed, "messages nested too deep")
    return vals, false
  end
  while off < limit do
    local start = off
    local key, n, err = read_varint(tvb, off, limit)
    if not key then
      tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, n), "field key: " .. err)
      return vals, false
    end
    off = off + n
    local keyn = key:tonumber()
    local number, wt = math.floor(keyn / 8), keyn % 8
    if number == 0 then
      tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, n), "field number 0")
      return vals, false
    end
    -- The value's extent by wire type.
    local vstart, vlen, u = off, 0, nil
    if wt == 0 then
      local m
      u, m, err = read_varint(tvb, off, limit)
      if not u then
        tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, off - start + m),
                                 string.format("field %d: %s", number, err))
        return vals, false
      end
      vlen = m
    elseif wt == 1 or wt == 5 then
      vlen = wt == 1 and 8 or 4
      if off + vlen > limit then
        tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, limit - start),
                                 string.format("field %d: fixed value runs past the end", number))
        return vals, false
      end
    elseif wt == 2 then
      local len, m
      len, m, err = read_varint(tvb, off, limit)
      if not len then
        tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, off - start + m),
                                 string.format("field %d length: %s", number, err))
        return vals, false
      end
      vstart = off + m
      if len:higher() ~= 0 or vstart + len:tonumber() > limit then
        tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, limit - start),
                                 string.format("field %d: length %s runs past the end (%d bytes left)",
                                               number, tostring(len), limit - vstart))
        return vals, false
      end
      vlen = len:tonumber()
    else
      tree:add_tvb_expert_info(ef.pb_malformed, tvb(start, n),
                               string.format("field %d: wire type %d (%s) is not used by mcdist",
                                             number, wt, wire_names[wt] or "invalid"))
      return vals, false
    end
    off = vstart + vlen
    local whole = tvb(start, off - start)
    local value_range = tvb(vstart, vlen)  -- zero-length ranges are fine for empty values

    local fd = defs[number]
    if not fd then
      local item = tree:add(hf.pb_unknown, whole)
      item:set_text(string.format("Unknown field %d (%s)", number, wire_names[wt]))
      item:add_proto_expert_info(ef.pb_unknown, string.format("%s: unknown field %d", msgname,
                                                              number))
    elseif fd.opts.packed and wt == 2 then
      -- Packed repeated varints: one item per element.
      local list = {}
      local p = vstart
      local ok = true
      while p < off do
        local e, m, perr = read_varint(tvb, p, off)
        if not e then
          tree:add_tvb_expert_info(ef.pb_malformed, tvb(p, m), fd.name .. ": " .. perr)
          ok = false
          break
        end
        local v, item = add_varint(tree, fd, tvb(p, m), e)
        list[#list + 1] = v
        if fd.runs_pf then item:append_text(#list % 2 == 1 and " (gap)" or " (count)") end
        p = p + m
      end
      if not ok then return vals, false end
      vals[fd.name .. "#"] = (vals[fd.name .. "#"] or 0) + #list
      vals[fd.name] = list
      if fd.runs_pf and #list > 0 then
        local text, problem = runs_text(list)
        local item = tree:add(fd.runs_pf, whole, text)
        item:set_generated()
        if problem then item:add_proto_expert_info(ef.value, fd.name .. ": " .. problem) end
      end
    elseif wt ~= wire_type_of(fd) then
      local item = tree:add(hf.pb_unknown, whole)
      item:set_text(string.format("%s: %s value, %s expected", fd.name, wire_names[wt],
                                  wire_names[wire_type_of(fd)]))
      item:add_proto_expert_info(ef.pb_wire_type, string.format("%s.%s: wire type %d", msgname,
                                                                fd.name, wt))
    elseif fd.kind == "message" then
      local sub = tree:add(fd.pf, whole)
      local subvals, ok = dissect_message(tvb, pinfo, sub, fd.opts.msg, vstart, off, depth + 1)
      local s = summaries[fd.opts.msg]
      if s then sub:append_text(s(subvals)) end
      if fd.opts.repeated then
        local list = vals[fd.name] or {}
        list[#list + 1] = subvals
        vals[fd.name] = list
        vals[fd.name .. "#"] = #list
      else
        vals[fd.name] = subvals
      end
      if not ok then return vals, false end
    elseif fd.kind == "string" then
      local s = vlen > 0 and tvb(vstart, vlen):string(ENC_UTF_8) or ""
      local item = tree:add(fd.pf, value_range, s)
      if fd.opts.rid and (#s == 0 or #s > MAX_RECEIVER_ID_BYTES or s:find("[^%w%-_%.:@]")) then
        item:add_proto_expert_info(ef.value, "not a valid receiver id (1-64 of letters, digits, - _ . : @)")
      end
      if fd.opts.repeated then
        vals[fd.name .. "#"] = (vals[fd.name .. "#"] or 0) + 1
      end
      vals[fd.name] = s
    elseif fd.kind == "bytes" then
      local item = tree:add(fd.pf, value_range)
      if fd.opts.sha256 and vlen ~= 0 and vlen ~= 32 then
        item:add_proto_expert_info(ef.value, string.format("SHA-256 of %d bytes, 32 expected", vlen))
      end
      if fd.opts.address then
        if vlen == 4 then
          tree:add(fd.ipv4_pf, value_range):set_generated()
        elseif vlen == 16 then
          tree:add(fd.ipv6_pf, value_range):set_generated()
        elseif vlen ~= 0 then
          item:add_proto_expert_info(ef.value, string.format("address of %d bytes, 4 or 16 expected", vlen))
        end
      end
      vals[fd.name] = vlen
    elseif fd.kind == "fixed64" then
      local v = tvb(vstart, 8):le_uint64()
      tree:add(fd.pf, value_range, v)
      vals[fd.name] = v
    else
      local v = add_varint(tree, fd, value_range, u)
      vals[fd.name] = v
      if fd.opts.repeated then vals[fd.name .. "#"] = (vals[fd.name .. "#"] or 0) + 1 end
    end
    if fd then seen[number] = true end
  end
  -- proto3 does not encode a scalar holding its default: show those as generated items, so a
  -- file_entry of an empty file still has a size (as Wireshark's protobuf dissector does with
  -- protobuf.add_default_value).
  if mcdist.prefs.show_defaults then
    for _, def in ipairs(schema[msgname]) do
      local number, kind, opts = def[1], def[3], def[4] or {}
      local fd = defs[number]
      if not seen[number] and not opts.repeated and default_value[kind] ~= nil then
        local dv = default_value[kind]()
        local item = tree:add(fd.pf, tvb(whole_start, whole_end - whole_start), dv)
        item:set_generated()
        item:append_text(" (default)")
        if kind == "bool" then
          vals[fd.name] = false
        elseif kind == "uint64" or kind == "fixed64" then
          vals[fd.name] = dv
        else
          vals[fd.name] = 0
        end
      end
    end
  end
  return vals, true
end

-- ---------------------------------------------------------------------------------------------
-- Info column text per control type

local function rid(v) return v.receiver_id or "?" end

local info = {
  announce = function(v)
    if v.sealed then return "encrypted (sealed manifest chunk)" end
    local p = v.params or {}
    local files = v["files#"] or 0
    local first = v.first_file or 0
    local t = string.format("chunk %d/%d, files %d-%d of %d", v.chunk or 0, p.manifest_chunks or 0,
                            first, first + files - 1, p.file_count or 0)
    if files == 0 then t = string.format("chunk %d/%d, no files", v.chunk or 0, p.manifest_chunks or 0) end
    return t
  end,
  register_request = function(v)
    local t = string.format("id=%s%s", rid(v), v.resumed and " resumed" or "")
    if v.last_seq or v["missing_seqs#"] then
      t = t .. string.format(" last_seq=%s missing_ranges=%d", tostring(v.last_seq or 0),
                             v["missing_seqs#"] or 0)
    end
    if v.key_request then t = t .. " key_request" end
    return t
  end,
  register_reply = function(v)
    return string.format("id=%s %s%s%s", rid(v), v.accepted and "accepted" or "refused",
                         v.reason and (": " .. v.reason) or "", v.key_only and " key_only" or "")
  end,
  marker = function(v)
    return string.format("pass=%d file=%d block=%d seq=%d%s%s", v.pass or 0, v.file or 0,
                         v.block or 0, v.seq or 0, v.pass_end and " pass_end" or "",
                         v.status_request and " status_request" or "")
  end,
  nak = function(v)
    return string.format("id=%s pass=%d seen_seq=%d files=%d", rid(v), v.pass or 0,
                         v.seen_seq or 0, v["files#"] or 0)
  end,
  digest_list = function(v)
    if v.sealed then return "encrypted (sealed digests)" end
    return string.format("%d digests", v["digests#"] or 0)
  end,
  complete = function(v)
    return string.format("id=%s stored=%d bytes=%s held=%d failed=%d", rid(v), v.files_stored or 0,
                         tostring(v.bytes_stored or 0), v.files_held or 0, v["failures#"] or 0)
  end,
  complete_ack = function(v) return "id=" .. rid(v) end,
  session_end = function(v)
    return (v.reason == 1 and "ABORTED" or "DONE") .. (v.detail and (": " .. v.detail) or "")
  end,
  repair_advert = function(v)
    return string.format("pass=%d files=%d", v.pass or 0, v["files#"] or 0)
  end,
  fallback = function(v)
    local kinds = { [0] = "SCTP_UDP", [1] = "SCTP_KERNEL", [2] = "TCP" }
    return string.format("id=%s %s port %d", rid(v), kinds[v.transport or 0] or "?", v.port or 0)
  end,
}

-- ---------------------------------------------------------------------------------------------
-- Datagram dissection

-- Dissects one mcdist datagram occupying tvb[off, off + len).
-- @return info text for the column
local function dissect_datagram(tvb, pinfo, root, off, len, label)
  local tree = root:add(mcdist, tvb(off, len))
  if label then tree:append_text(label) end
  if len < HEADER_SIZE then
    tree:add_proto_expert_info(ef.truncated, string.format("%d bytes, the header needs %d", len,
                                                           HEADER_SIZE))
    return "truncated header"
  end
  if len > MAX_DATAGRAM_SIZE then
    tree:add_proto_expert_info(ef.oversized, string.format("%d bytes", len))
  end
  local magic_item = tree:add(hf.magic, tvb(off, 2))
  local version = tvb(off + 2, 1):uint()
  local version_item = tree:add(hf.version, tvb(off + 2, 1))
  local mtype = tvb(off + 3, 1):uint()
  local type_item = tree:add(hf.type, tvb(off + 3, 1))
  local session = tvb(off + 4, 4):uint()
  tree:add(hf.session, tvb(off + 4, 4))
  local tname = type_names[mtype] or string.format("type %d", mtype)
  current_manifest = manifests[session]
  if not current_manifest then
    current_manifest = {}
    manifests[session] = current_manifest
  end
  tree:append_text(string.format(", %s, session %08x", tname, session))
  local prefix = string.format("%s [%08x]", tname, session)

  if tvb(off, 2):uint() ~= MAGIC then
    magic_item:add_proto_expert_info(ef.bad_magic)
    return "not mcdist (bad magic)"
  end
  if version ~= 1 and version ~= 2 and version ~= 3 then
    version_item:add_proto_expert_info(ef.bad_version, string.format("version %d", version))
    return prefix .. string.format(" version %d", version)
  end
  if not type_names[mtype] then
    type_item:add_proto_expert_info(ef.unknown_type, string.format("type %d", mtype))
    return prefix
  end
  if (version == 3) ~= (mtype == 15) and not (version == 3 and version3_types[mtype]) then
    version_item:add_proto_expert_info(ef.bad_version,
                                       string.format("%s in version %d", tname, version))
    return prefix .. string.format(" version %d", version)
  end

  -- The body is everything between the header(s) and the version 2 trailer.
  local body_end = off + len
  local tlen = 0
  local layout = trailer_layout[mtype]
  if version == 2 then
    tlen = trailer_size[mtype]
    if mtype == 2 then
      local parts, n = announce_layout(tvb, off, len)
      if not parts then
        tree:add_proto_expert_info(ef.short_trailer,
                                   string.format("%d bytes, no announce tree index and count " ..
                                                 "that fit (leaf count 1..%d)", len,
                                                 ANNOUNCE_TREE_MAX_LEAVES))
        return prefix .. " truncated"
      end
      layout, tlen = parts, n
    end
    local min = ((mtype == 1 or mtype == 12) and DATA_HEADER_SIZE or HEADER_SIZE) + tlen
    if len < min then
      tree:add_proto_expert_info(ef.short_trailer,
                                 string.format("%d bytes, a version 2 %s needs at least %d",
                                               len, tname, min))
      return prefix .. " truncated"
    end
    body_end = off + len - tlen
  end
  if mtype == 15 then
    local parts, n = digest_layout(tvb, off, len)
    if not parts or len < HEADER_SIZE + DIGEST_FIELDS + n then
      tree:add_proto_expert_info(ef.short_trailer,
                                 string.format("%d bytes, no digest tree index and count that " ..
                                               "fit (leaf count 1..%d)", len, DIGEST_MAX_CHUNKS))
      return prefix .. " truncated"
    end
    layout, tlen = parts, n
    body_end = off + len - tlen
  end

  local text = prefix
  if mtype == 15 then
    -- Block digests (version 3): a window of datagrams and the digests of some of them.
    local first = tvb(off + 8, 4):uint()
    local count = tvb(off + 12, 2):uint()
    local offset = tvb(off + 14, 2):uint()
    tree:add(hf.digests_first_seq, tvb(off + 8, 4))
    tree:add(hf.digests_count, tvb(off + 12, 2))
    tree:add(hf.digests_offset, tvb(off + 14, 2))
    local dlen = body_end - (off + HEADER_SIZE + DIGEST_FIELDS)
    if dlen % DIGEST_BYTES ~= 0 or count == 0 or offset >= count then
      tree:add_proto_expert_info(ef.value, string.format("%d digest bytes, count %d, offset %d",
                                                         dlen, count, offset))
    end
    local n = math.floor(dlen / DIGEST_BYTES)
    for i = 0, n - 1 do
      tree:add(hf.digest, tvb(off + HEADER_SIZE + DIGEST_FIELDS + i * DIGEST_BYTES, DIGEST_BYTES))
    end
    tree:append_text(string.format(", window %d+%d, digests %d..%d", first, count, offset,
                                   offset + n - 1))
    text = string.format("%s window=%d+%d digests=%d..%d", prefix, first, count, offset,
                         offset + n - 1)
  elseif mtype == 12 then
    -- A parity block: the data header's shape with a FEC block and a parity index.
    if len < DATA_HEADER_SIZE then
      tree:add_proto_expert_info(ef.truncated, string.format("%d bytes, the parity header needs %d",
                                                             len, DATA_HEADER_SIZE))
      return prefix .. " truncated"
    end
    local seq = tvb(off + 8, 4):uint()
    local fb = tvb(off + 12, 4):uint()
    local index = tvb(off + 16, 4):uint()
    tree:add(hf.data_seq, tvb(off + 8, 4))
    tree:add(hf.parity_fec_block, tvb(off + 12, 4))
    tree:add(hf.parity_index, tvb(off + 16, 4))
    local plen = body_end - (off + DATA_HEADER_SIZE)
    local sealed = version == 2 and encrypted_sessions[session]
    if plen > 0 then
      local item = tree:add(hf.data_payload, tvb(off + DATA_HEADER_SIZE, plen))
      if sealed then item:append_text(" (AES-256-GCM ciphertext)") end
    end
    tree:add(hf.data_payload_len, plen):set_generated()
    tree:append_text(string.format(", FEC block %d parity %d", fb, index))
    text = string.format("%s seq=%d fec_block=%d parity=%d len=%d%s", prefix, seq, fb, index, plen,
                         sealed and " encrypted" or "")
  elseif mtype == 1 then
    if len < DATA_HEADER_SIZE then
      tree:add_proto_expert_info(ef.truncated, string.format("%d bytes, the data header needs %d",
                                                             len, DATA_HEADER_SIZE))
      return prefix .. " truncated"
    end
    local seq = tvb(off + 8, 4):uint()
    local file = tvb(off + 12, 4):uint()
    local block = tvb(off + 16, 4):uint()
    tree:add(hf.data_seq, tvb(off + 8, 4))
    tree:add(hf.data_file, tvb(off + 12, 4))
    tree:add(hf.data_block, tvb(off + 16, 4))
    local path = current_manifest[file]
    if path then tree:add(hf.data_path, path):set_generated() end
    local plen = body_end - (off + DATA_HEADER_SIZE)
    local sealed = version == 2 and encrypted_sessions[session]
    if plen > 0 then
      local item = tree:add(hf.data_payload, tvb(off + DATA_HEADER_SIZE, plen))
      if sealed then item:append_text(" (AES-256-GCM ciphertext)") end
    end
    if sealed then tree:add(hf.encrypted, true):set_generated() end
    local pl = tree:add(hf.data_payload_len, plen)
    pl:set_generated()
    if plen == 0 then pl:add_proto_expert_info(ef.empty_payload) end
    tree:append_text(string.format(", file %d block %d", file, block))
    text = string.format("%s seq=%d file=%d block=%d len=%d%s", prefix, seq, file, block, plen,
                         sealed and " encrypted" or "")
  else
    local blen = body_end - (off + HEADER_SIZE)
    local body = blen > 0 and tree:add(hf.body, tvb(off + HEADER_SIZE, blen)) or
                 tree:add(hf.body, tvb(off, HEADER_SIZE))
    body:set_text(string.format("%s (%d bytes)", tname, blen))
    local vals = dissect_message(tvb, pinfo, body, tname, off + HEADER_SIZE, body_end, 1)
    if vals.sealed and (mtype == 2 or mtype == 7) then
      if mtype == 2 then encrypted_sessions[session] = true end
      tree:add(hf.encrypted, true):set_generated()
      tree:append_text(", encrypted")
    end
    if mtype == 2 and type(vals.files) == "table" then
      local first = type(vals.first_file) == "number" and vals.first_file or 0
      for i, entry in ipairs(vals.files) do
        if type(entry.path) == "string" then current_manifest[first + i - 1] = entry.path end
      end
    end
    local f = info[tname]
    if f then text = prefix .. " " .. f(vals) end
  end

  if version == 2 or mtype == 15 then
    local t = tree:add(hf.auth, tvb(body_end, tlen))
    t:set_text(string.format("Authentication trailer (%d bytes)", tlen))
    local p = body_end
    for _, part in ipairs(layout) do
      t:add(hf["auth_" .. part[1]], tvb(p, part[2]))
      p = p + part[2]
    end
    text = text .. " [auth]"
  end
  return text
end

-- Offset of the second datagram when tvb holds a GSO super-packet of data or parity datagrams,
-- else nil. A second datagram is recognised by the first one's 8 header bytes (same magic,
-- version, type and session) at an offset that leaves at least a minimum block for the first.
local function gso_segment_size(tvb)
  local len = tvb:len()
  if len < 2 * (DATA_HEADER_SIZE + 1) then return nil end
  local scan = math.min(len, MAX_DATAGRAM_SIZE + HEADER_SIZE)
  local raw = tvb:raw(0, scan)
  local hdr = raw:sub(1, HEADER_SIZE)
  -- Lua strings are 1-based; a segment of size s puts the next header at position s + 1.
  local from = DATA_HEADER_SIZE + MIN_BLOCK_SIZE + 1
  while true do
    local at = raw:find(hdr, from, true)
    if not at then return nil end
    local seg = at - 1
    -- Every full segment must start with the same header bytes.
    local ok = true
    local p = seg
    while p + HEADER_SIZE <= len and ok do
      ok = tvb:raw(p, HEADER_SIZE) == hdr
      p = p + seg
    end
    if ok then return seg end
    from = at + 1
  end
end

local function dissect(tvb, pinfo, tree)
  local len = tvb:len()
  if len == 0 then return 0 end
  pinfo.cols.protocol = "MCDIST"
  if mcdist.prefs.split_gso and len >= 2 * (DATA_HEADER_SIZE + MIN_BLOCK_SIZE) and
     tvb(0, 2):uint() == MAGIC and (tvb(3, 1):uint() == 1 or tvb(3, 1):uint() == 12) then
    local seg = gso_segment_size(tvb)
    if seg then
      local count = math.ceil(len / seg)
      local first_text
      for i = 0, count - 1 do
        local o = i * seg
        local l = math.min(seg, len - o)
        local t = dissect_datagram(tvb, pinfo, tree, o, l,
                                   string.format(" (GSO segment %d of %d)", i + 1, count))
        first_text = first_text or t
      end
      local g = tree:add(hf.gso_count, count)
      g:set_generated()
      tree:add(hf.gso_segment, seg):set_generated()
      pinfo.cols.info = string.format("%d datagrams (GSO, %d bytes each): %s ...", count, seg,
                                      first_text)
      return len
    end
  end
  pinfo.cols.info = dissect_datagram(tvb, pinfo, tree, 0, len)
  return len
end

function mcdist.dissector(tvb, pinfo, tree)
  return dissect(tvb, pinfo, tree)
end

-- Heuristic: magic, a version we know, a known type. Eight bytes of structure make false hits
-- on other UDP traffic unlikely.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < HEADER_SIZE then return false end
  if tvb(0, 2):uint() ~= MAGIC then return false end
  local v = tvb(2, 1):uint()
  if v ~= 1 and v ~= 2 and v ~= 3 then return false end
  if not type_names[tvb(3, 1):uint()] then return false end
  dissect(tvb, pinfo, tree)
  return true
end
mcdist:register_heuristic("udp", heuristic)

local registered_ports = ""
function mcdist.prefs_changed()
  local udp = DissectorTable.get("udp.port")
  local now = tostring(mcdist.prefs.ports)
  if now == registered_ports then return end
  if registered_ports ~= "" then udp:remove(registered_ports, mcdist) end
  if now ~= "" then udp:add(now, mcdist) end
  registered_ports = now
end
DissectorTable.get("udp.port"):add(default_ports, mcdist)
registered_ports = default_ports
