#pragma once
/// @file
/// Reed-Solomon erasure code for parity repairs (RFC 5510 "Reed-Solomon
/// Forward Error Correction (FEC) Schemes", which defines the code over GF(2^m) for m = 2..16).
/// One FEC block is n source blocks (n <= k) and up to max_parity parity blocks, all of the same
/// length (a short source block is zero-padded to it). Parity block p is row k + p of a
/// systematic Cauchy generator matrix restricted to the first n columns: the coefficient of
/// source c in parity p is 1 / ((k + p) XOR c), the same shape in both fields (ISA-L's
/// `gf_gen_cauchy1_matrix`). Every square submatrix of a Cauchy matrix is invertible, so ANY n
/// of the n + max_parity blocks recover the n sources, whichever were lost, for every n <= k.
///
/// Two fields, chosen by the size of the FEC block (both ends derive it from the announce's
/// fec_k and fec_max_parity; nothing else travels):
/// - **GF(2^8)** when k + max_parity <= 255 (every session of k <= 254 with the default parity
///   count): Intel ISA-L (Debian libisal-dev), SIMD dot products over all sources at once.
/// - **GF(2^16)** above, up to k + max_parity = 65,536: James Plank's GF-Complete (Debian
///   libgf-complete-dev), region multiply-adds with SSSE3 split tables, primitive polynomial
///   x^16 + x^12 + x^3 + x + 1 (0x1100B, RFC 5510 section 8.1). A symbol is a sequence of
///   16-bit little-endian words, so blocks have an even length (a parity word of a padded odd
///   block would need the pad byte on the wire too). FEC blocks of
///   thousands of sources spread the maximum of the sites' losses over more blocks: parity then
///   costs close to the largest single site's loss, not the sum of per-FEC-block maxima
///   (docs/design-notes.md "Parity repairs"). It is several times slower per multiply-add than
///   ISA-L's GF(2^8) (docs/benchmarks.md "Parity codec" has the rates).
///
/// Decoding solves only for the e missing sources: with S the present sources and P the e parity
/// rows used, the missing sources are inv(C[P][M]) * (parity - C[P][S] * present), which costs
/// an e x e inversion (not n x n) and e x n multiply-adds per symbol. Pure computation: no I/O;
/// allocation per call (decode matrices, aligned scratch of the block length).

#include "common/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace mcdist::fec {

/// Most blocks, source plus parity, of a FEC block coded over GF(2^8): a Cauchy matrix needs
/// distinct row and column elements, 255 of them besides 0 (ISA-L's examples use the same bound).
inline constexpr std::uint32_t max_blocks_gf8 = 255;
/// Most blocks of a FEC block coded over GF(2^16): rows k..k+max_parity-1 and columns 0..k-1
/// are distinct 16-bit elements.
inline constexpr std::uint32_t max_blocks_gf16 = 65536;
/// Kept for readability where the GF(2^8) bound is meant (the default parity count of k <= 254).
inline constexpr std::uint32_t max_blocks = max_blocks_gf8;
/// Largest k a sender offers and a receiver accepts: a FEC block of 4,096 blocks of 1400 bytes
/// is 5.7 MB, which the sender keeps in memory to code (8 of them, sender/io/parity_source.hpp)
/// and a receiver reads back to decode; 4,096 already brings the parity for 10,000 sites at
/// 1e-2 loss within 1.2 x the largest single site's loss (docs/benchmarks.md "Scale: parity
/// repairs").
inline constexpr std::uint32_t max_k = 4096;
/// Most work one decode may take, in block multiply-adds (missing sources x sources): 2^20 is
/// about 1.1 s of one core in GF(2^16) at 1400 bytes. A FEC block missing more than that is
/// NAKed block by block instead (a site that missed much of a large FEC block, or a sender that
/// tries to make a site burn CPU); a loss of 1 % in a FEC block of 4,096 is 41 x 4,096 (0.2 s),
/// and 2^18 turned 26 of 10,000 simulated sites to NAKs by name (docs/benchmarks.md).
inline constexpr std::uint64_t max_decode_work = std::uint64_t{1} << 20;

/// The Galois field a FEC block of k sources and max_parity parity blocks is coded over.
enum class field : std::uint8_t { gf8, gf16 };

/// GF(2^8) when k + max_parity fits max_blocks_gf8, else GF(2^16).
constexpr field field_for(std::uint32_t k, std::uint32_t max_parity) noexcept {
  return std::uint64_t{k} + max_parity <= max_blocks_gf8 ? field::gf8 : field::gf16;
}

/// Parity indexes per FEC block when the sender is not told: every GF(2^8) index left for
/// k <= 254 (255 - k), and for larger k as many as k (a site never lacks more than a whole FEC
/// block), within GF(2^16).
constexpr std::uint32_t default_max_parity(std::uint32_t k) noexcept {
  if (k < max_blocks_gf8) return max_blocks_gf8 - k;
  return k < max_blocks_gf16 / 2 ? k : max_blocks_gf16 - k;
}

/// True when (k, max_parity) is a code this codec builds: k >= 1, max_parity >= 1, k <= max_k and
/// k + max_parity <= max_blocks_gf16.
constexpr bool valid_shape(std::uint32_t k, std::uint32_t max_parity) noexcept {
  return k >= 1 && max_parity >= 1 && k <= max_k &&
         std::uint64_t{k} + max_parity <= max_blocks_gf16;
}

/// One received block of a FEC block, for decode: a source block (index < n) or a parity block.
struct symbol {
  bool parity = false;
  std::uint32_t index = 0;          ///< source index (< n) or parity index (< max_parity)
  const std::byte* data = nullptr;  ///< `len` bytes
};

/// The code for FEC blocks of up to k source blocks.
class codec {
 public:
  /// @param k           most source blocks per FEC block, 1..max_k
  /// @param max_parity  most parity blocks per FEC block, >= 1, k + max_parity <= max_blocks_gf16
  /// @throws std::invalid_argument otherwise (a configuration error)
  codec(std::uint32_t k, std::uint32_t max_parity);

  std::uint32_t k() const noexcept { return m_k; }
  std::uint32_t max_parity() const noexcept { return m_max_parity; }
  fec::field field() const noexcept { return m_field; }

  /// Computes parity blocks of one FEC block.
  /// @param sources  the n source blocks (1 <= n <= k), each `len` bytes
  /// @param indexes  parity indexes to compute (each < max_parity)
  /// @param out      one `len`-byte buffer per index
  /// @param len      bytes per block (> 0; even over GF(2^16)); nothing is written otherwise
  void encode(std::span<const std::byte* const> sources, std::span<const std::uint32_t> indexes,
              std::span<std::byte* const> out, std::size_t len) const;

  /// Adds source `c` of a FEC block to parity row `p` being built in `row`: row ^= the row's
  /// coefficient for c times `data`, zero-extended to row's length. Parity block p of a FEC
  /// block is the row once each of its sources has been added once, in any order, to a row of
  /// zeros: the sender builds index 0 of every FEC block as pass 1 sends the sources (ISA-L's
  /// gf_vect_mad, the update form of ec_encode_data).
  /// @return false, changing nothing, over GF(2^16), for p or c out of range, for a row shorter
  ///         than 64 bytes (gf_vect_mad's least length) or data longer than the row
  bool accumulate(std::uint32_t p, std::uint32_t c, std::span<const std::byte> data,
                  std::span<std::byte> row) const;

  /// Recovers the missing source blocks of a FEC block of n sources.
  /// @param n         source blocks in the FEC block (1 <= n <= k)
  /// @param received  at least n distinct symbols (sources < n, parity < max_parity); the
  ///                  present sources and the first parity blocks needed are used
  /// @param missing   the source indexes to recover: exactly those < n absent from `received`
  /// @param out       one `len`-byte buffer per missing index, in the same order
  /// @return empty, or errc::invalid_field when the symbols are not enough, repeat a block,
  ///         name an index out of range, `missing` does not match them, or `len` is odd over
  ///         GF(2^16)
  std::error_code decode(std::uint32_t n, std::span<const symbol> received,
                         std::span<const std::uint32_t> missing, std::span<std::byte* const> out,
                         std::size_t len) const;

 private:
  /// The checked inputs of a decode: a pointer per source (null when missing) and the parity
  /// symbols to use, e of them.
  struct decode_inputs {
    std::vector<const std::byte*> source;
    std::vector<const symbol*> parity;
  };
  std::error_code check_decode(std::uint32_t n, std::span<const symbol> received,
                               std::span<const std::uint32_t> missing,
                               std::span<std::byte* const> out, std::size_t len,
                               decode_inputs& in) const;

  /// Coefficient of source column c in parity row p, GF(2^8).
  unsigned char coefficient8(std::uint32_t p, std::uint32_t c) const noexcept {
    return m_matrix[(m_k + p) * m_k + c];
  }
  void encode8(std::span<const std::byte* const> sources, std::span<const std::uint32_t> indexes,
               std::span<std::byte* const> out, std::size_t len) const;
  std::error_code decode8(std::uint32_t n, const decode_inputs& in,
                          std::span<const std::uint32_t> missing, std::span<std::byte* const> out,
                          std::size_t len) const;
  // GF(2^16): common/fec/fec_gf16.cpp.
  void encode16(std::span<const std::byte* const> sources, std::span<const std::uint32_t> indexes,
                std::span<std::byte* const> out, std::size_t len) const;
  std::error_code decode16(std::uint32_t n, const decode_inputs& in,
                           std::span<const std::uint32_t> missing, std::span<std::byte* const> out,
                           std::size_t len) const;

  std::uint32_t m_k;
  std::uint32_t m_max_parity;
  fec::field m_field;
  /// GF(2^8): (k + max_parity) x k generator, identity on top (gf_gen_cauchy1_matrix). GF(2^16)
  /// computes its coefficients from a table of inverses instead (the matrix could be GBs).
  std::vector<unsigned char> m_matrix;
};

}  // namespace mcdist::fec
