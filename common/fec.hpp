#pragma once
/// @file
/// Reed-Solomon erasure code over GF(2^8) for parity repairs (issue 12 item 1; RFC 5510
/// "Reed-Solomon Forward Error Correction (FEC) Schemes" gives the idea, Intel ISA-L the
/// arithmetic). One FEC block is n source blocks (n <= k) and up to max_parity parity blocks,
/// all of the same length (a short source block is zero-padded to it). Parity block p is row
/// k + p of a systematic Cauchy generator matrix (ISA-L `gf_gen_cauchy1_matrix`) restricted to
/// the first n columns: every square submatrix of a Cauchy matrix is invertible, so ANY n of the
/// n + max_parity blocks recover the n sources, whichever were lost, for every n <= k.
///
/// Decoding solves only for the e missing sources: with S the present sources and P the e parity
/// rows used, the missing sources are inv(C[P][M]) * (parity - C[P][S] * present), which costs
/// an e x e inversion (not n x n) and e x n multiply-adds per byte, done by ISA-L's
/// `ec_encode_data` (SIMD). Pure computation: no I/O, no allocation after construction except
/// the per-call decode matrix.

#include "common/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::fec {

/// Most blocks, source plus parity, of one FEC block: a Cauchy matrix over GF(2^8) needs
/// distinct row and column elements, 255 of them besides 0 (ISA-L's examples use the same
/// bound).
inline constexpr std::uint32_t max_blocks = 255;

/// One received block of a FEC block, for decode: a source block (index < n) or a parity block.
struct symbol {
  bool parity = false;
  std::uint32_t index = 0;          ///< source index (< n) or parity index (< max_parity)
  const std::byte* data = nullptr;  ///< `len` bytes
};

/// The code for FEC blocks of up to k source blocks.
class codec {
 public:
  /// @param k           most source blocks per FEC block, >= 1
  /// @param max_parity  most parity blocks per FEC block, >= 1, k + max_parity <= max_blocks
  /// @throws std::invalid_argument otherwise (a configuration error)
  codec(std::uint32_t k, std::uint32_t max_parity);

  std::uint32_t k() const noexcept { return m_k; }
  std::uint32_t max_parity() const noexcept { return m_max_parity; }

  /// Computes parity blocks of one FEC block.
  /// @param sources  the n source blocks (1 <= n <= k), each `len` bytes
  /// @param indexes  parity indexes to compute (each < max_parity)
  /// @param out      one `len`-byte buffer per index
  /// @param len      bytes per block (> 0)
  void encode(std::span<const std::byte* const> sources, std::span<const std::uint32_t> indexes,
              std::span<std::byte* const> out, std::size_t len) const;

  /// Recovers the missing source blocks of a FEC block of n sources.
  /// @param n         source blocks in the FEC block (1 <= n <= k)
  /// @param received  at least n distinct symbols (sources < n, parity < max_parity); the
  ///                  present sources and the first parity blocks needed are used
  /// @param missing   the source indexes to recover: exactly those < n absent from `received`
  /// @param out       one `len`-byte buffer per missing index, in the same order
  /// @return empty, or errc::invalid_field when the symbols are not enough, repeat a block,
  ///         name an index out of range, or `missing` does not match them
  std::error_code decode(std::uint32_t n, std::span<const symbol> received,
                         std::span<const std::uint32_t> missing, std::span<std::byte* const> out,
                         std::size_t len) const;

 private:
  /// Coefficient of source column c in parity row p.
  unsigned char coefficient(std::uint32_t p, std::uint32_t c) const noexcept {
    return m_matrix[(m_k + p) * m_k + c];
  }

  std::uint32_t m_k;
  std::uint32_t m_max_parity;
  /// (k + max_parity) x k generator, identity on top (gf_gen_cauchy1_matrix).
  std::vector<unsigned char> m_matrix;
};

}  // namespace mcdist::fec
