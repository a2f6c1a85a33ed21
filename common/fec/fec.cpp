#include "common/fec/fec.hpp"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mcdist::fec {

namespace {

/// Bytes of ISA-L's expanded multiplication tables per coefficient (ec_init_tables).
constexpr std::size_t table_bytes_per_coefficient = 32;

unsigned char* mutable_bytes(const std::byte* p) {
  // ISA-L takes its inputs as unsigned char** and only reads them.
  return reinterpret_cast<unsigned char*>(const_cast<std::byte*>(p));
}

}  // namespace

codec::codec(std::uint32_t k, std::uint32_t max_parity)
    : m_k(k), m_max_parity(max_parity), m_field(field_for(k, max_parity)) {
  if (!valid_shape(k, max_parity)) {
    throw std::invalid_argument(
        "FEC block of " + std::to_string(k) + " source and " + std::to_string(max_parity) +
        " parity blocks: need at least one of each, at most " + std::to_string(max_k) +
        " sources and at most " + std::to_string(max_blocks_gf16) + " blocks in all");
  }
  if (m_field == field::gf8) {
    m_matrix.resize(std::size_t{k + max_parity} * k);
    gf_gen_cauchy1_matrix(m_matrix.data(), static_cast<int>(k + max_parity), static_cast<int>(k));
  }
}

void codec::encode(std::span<const std::byte* const> sources,
                   std::span<const std::uint32_t> indexes, std::span<std::byte* const> out,
                   std::size_t len) const {
  const auto n = static_cast<std::uint32_t>(sources.size());
  if (n == 0 || n > m_k || indexes.empty() || out.size() != indexes.size() || len == 0 ||
      (m_field == field::gf16 && len % 2 != 0)) {
    return;
  }
  for (const auto p : indexes) {
    if (p >= m_max_parity) return;
  }
  if (m_field == field::gf8) {
    encode8(sources, indexes, out, len);
  } else {
    encode16(sources, indexes, out, len);
  }
}

bool codec::accumulate(std::uint32_t p, std::uint32_t c, std::span<const std::byte> data,
                       std::span<std::byte> row) const {
  constexpr std::size_t least = 64;  // gf_vect_mad's least length (erasure_code.h)
  if (m_field != field::gf8 || p >= m_max_parity || c >= m_k || row.size() < least ||
      data.size() > row.size()) {
    return false;
  }
  if (data.empty()) return true;
  unsigned char coefficient = coefficient8(p, c);
  unsigned char table[table_bytes_per_coefficient];
  ec_init_tables(1, 1, &coefficient, table);
  auto* dst = reinterpret_cast<unsigned char*>(row.data());
  if (data.size() >= least) {
    gf_vect_mad(static_cast<int>(data.size()), 1, 0, table, mutable_bytes(data.data()), dst);
  } else {
    unsigned char padded[least] = {};
    std::copy_n(reinterpret_cast<const unsigned char*>(data.data()), data.size(), padded);
    gf_vect_mad(static_cast<int>(least), 1, 0, table, padded, dst);
  }
  return true;
}

void codec::encode8(std::span<const std::byte* const> sources,
                    std::span<const std::uint32_t> indexes, std::span<std::byte* const> out,
                    std::size_t len) const {
  const auto n = static_cast<std::uint32_t>(sources.size());
  const auto rows = static_cast<std::uint32_t>(indexes.size());
  std::vector<unsigned char> a(std::size_t{rows} * n);
  for (std::uint32_t r = 0; r < rows; ++r) {
    for (std::uint32_t c = 0; c < n; ++c) a[r * n + c] = coefficient8(indexes[r], c);
  }
  std::vector<unsigned char> tables(a.size() * table_bytes_per_coefficient);
  ec_init_tables(static_cast<int>(n), static_cast<int>(rows), a.data(), tables.data());
  std::vector<unsigned char*> in(n);
  for (std::uint32_t c = 0; c < n; ++c) in[c] = mutable_bytes(sources[c]);
  std::vector<unsigned char*> dst(rows);
  for (std::uint32_t r = 0; r < rows; ++r) dst[r] = reinterpret_cast<unsigned char*>(out[r]);
  ec_encode_data(static_cast<int>(len), static_cast<int>(n), static_cast<int>(rows), tables.data(),
                 in.data(), dst.data());
}

std::error_code codec::check_decode(std::uint32_t n, std::span<const symbol> received,
                                    std::span<const std::uint32_t> missing,
                                    std::span<std::byte* const> out, std::size_t len,
                                    decode_inputs& in) const {
  if (n == 0 || n > m_k || len == 0 || out.size() != missing.size() ||
      (m_field == field::gf16 && len % 2 != 0)) {
    return errc::invalid_field;
  }
  // Which sources are present, which parity blocks are available (first come first used).
  auto& source = in.source;
  auto& parity = in.parity;
  source.assign(n, nullptr);
  parity.clear();
  std::vector<std::uint32_t> parity_seen;
  for (const auto& s : received) {
    if (s.data == nullptr) return errc::invalid_field;
    if (s.parity) {
      if (s.index >= m_max_parity) return errc::invalid_field;
      parity_seen.push_back(s.index);
      parity.push_back(&s);
    } else {
      if (s.index >= n || source[s.index] != nullptr) return errc::invalid_field;
      source[s.index] = s.data;
    }
  }
  std::sort(parity_seen.begin(), parity_seen.end());
  if (std::adjacent_find(parity_seen.begin(), parity_seen.end()) != parity_seen.end()) {
    return errc::invalid_field;  // a parity block twice
  }
  std::vector<bool> wanted(n, false);
  for (const auto m : missing) {
    if (m >= n || source[m] != nullptr || wanted[m]) return errc::invalid_field;
    wanted[m] = true;
  }
  const auto e = static_cast<std::uint32_t>(missing.size());
  std::uint32_t present = 0;
  for (const auto* p : source) present += p != nullptr ? 1 : 0;
  if (present + e != n || parity.size() < e) return errc::invalid_field;
  parity.resize(e);
  return {};
}

std::error_code codec::decode(std::uint32_t n, std::span<const symbol> received,
                              std::span<const std::uint32_t> missing,
                              std::span<std::byte* const> out, std::size_t len) const {
  decode_inputs in;
  if (auto ec = check_decode(n, received, missing, out, len, in)) return ec;
  if (missing.empty()) return {};
  if (m_field == field::gf16) return decode16(n, in, missing, out, len);
  return decode8(n, in, missing, out, len);
}

std::error_code codec::decode8(std::uint32_t n, const decode_inputs& inputs,
                               std::span<const std::uint32_t> missing,
                               std::span<std::byte* const> out, std::size_t len) const {
  const auto& source = inputs.source;
  const auto& parity = inputs.parity;
  const auto e = static_cast<std::uint32_t>(missing.size());
  // A = C[P][M], e x e; invert it (gf_invert_matrix overwrites its input).
  std::vector<unsigned char> a(std::size_t{e} * e);
  for (std::uint32_t r = 0; r < e; ++r) {
    for (std::uint32_t c = 0; c < e; ++c) a[r * e + c] = coefficient8(parity[r]->index, missing[c]);
  }
  std::vector<unsigned char> inv(a.size());
  if (gf_invert_matrix(a.data(), inv.data(), static_cast<int>(e)) != 0) {
    return errc::invalid_field;  // cannot happen for a Cauchy submatrix
  }
  // Inputs: the e parity blocks, then the present sources. Row i of the decode matrix gives
  // missing[i]: inv on the parity columns, inv * C[P][s] on present source s (in GF(2^8)
  // subtraction is addition, so no sign).
  std::vector<unsigned char*> in;
  in.reserve(n);
  for (const auto* p : parity) in.push_back(mutable_bytes(p->data));
  std::vector<std::uint32_t> present_index;
  present_index.reserve(n - e);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (source[s] != nullptr) {
      in.push_back(mutable_bytes(source[s]));
      present_index.push_back(s);
    }
  }
  std::vector<unsigned char> d(std::size_t{e} * n);
  for (std::uint32_t i = 0; i < e; ++i) {
    for (std::uint32_t j = 0; j < e; ++j) d[i * n + j] = inv[i * e + j];
    for (std::uint32_t c = 0; c < n - e; ++c) {
      unsigned char v = 0;
      for (std::uint32_t j = 0; j < e; ++j) {
        v ^= gf_mul(inv[i * e + j], coefficient8(parity[j]->index, present_index[c]));
      }
      d[i * n + e + c] = v;
    }
  }
  std::vector<unsigned char> tables(d.size() * table_bytes_per_coefficient);
  ec_init_tables(static_cast<int>(n), static_cast<int>(e), d.data(), tables.data());
  std::vector<unsigned char*> dst(e);
  for (std::uint32_t i = 0; i < e; ++i) dst[i] = reinterpret_cast<unsigned char*>(out[i]);
  ec_encode_data(static_cast<int>(len), static_cast<int>(n), static_cast<int>(e), tables.data(),
                 in.data(), dst.data());
  return {};
}

}  // namespace mcdist::fec
