#include "common/fec.hpp"

#include <isa-l/erasure_code.h>

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

codec::codec(std::uint32_t k, std::uint32_t max_parity) : m_k(k), m_max_parity(max_parity) {
  if (k == 0 || max_parity == 0 || k + max_parity > max_blocks) {
    throw std::invalid_argument("FEC block of " + std::to_string(k) + " source and " +
                                std::to_string(max_parity) +
                                " parity blocks: need at least one of each and at most " +
                                std::to_string(max_blocks) + " in all");
  }
  m_matrix.resize(std::size_t{k + max_parity} * k);
  gf_gen_cauchy1_matrix(m_matrix.data(), static_cast<int>(k + max_parity), static_cast<int>(k));
}

void codec::encode(std::span<const std::byte* const> sources,
                   std::span<const std::uint32_t> indexes, std::span<std::byte* const> out,
                   std::size_t len) const {
  const auto n = static_cast<std::uint32_t>(sources.size());
  const auto rows = static_cast<std::uint32_t>(indexes.size());
  if (n == 0 || n > m_k || rows == 0 || out.size() != indexes.size() || len == 0) return;
  std::vector<unsigned char> a(std::size_t{rows} * n);
  for (std::uint32_t r = 0; r < rows; ++r) {
    for (std::uint32_t c = 0; c < n; ++c) a[r * n + c] = coefficient(indexes[r], c);
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

std::error_code codec::decode(std::uint32_t n, std::span<const symbol> received,
                              std::span<const std::uint32_t> missing,
                              std::span<std::byte* const> out, std::size_t len) const {
  if (n == 0 || n > m_k || len == 0 || out.size() != missing.size()) return errc::invalid_field;
  // Which sources are present, which parity blocks are available (first come first used).
  std::vector<const std::byte*> source(n, nullptr);
  std::vector<const symbol*> parity;
  std::vector<bool> parity_seen(m_max_parity, false);
  for (const auto& s : received) {
    if (s.data == nullptr) return errc::invalid_field;
    if (s.parity) {
      if (s.index >= m_max_parity || parity_seen[s.index]) return errc::invalid_field;
      parity_seen[s.index] = true;
      parity.push_back(&s);
    } else {
      if (s.index >= n || source[s.index] != nullptr) return errc::invalid_field;
      source[s.index] = s.data;
    }
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
  if (e == 0) return {};
  parity.resize(e);

  // A = C[P][M], e x e; invert it (gf_invert_matrix overwrites its input).
  std::vector<unsigned char> a(std::size_t{e} * e);
  for (std::uint32_t r = 0; r < e; ++r) {
    for (std::uint32_t c = 0; c < e; ++c) a[r * e + c] = coefficient(parity[r]->index, missing[c]);
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
        v ^= gf_mul(inv[i * e + j], coefficient(parity[j]->index, present_index[c]));
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
