// fec::codec over GF(2^16) (common/fec/fec.hpp): FEC blocks of more than 255 blocks, with
// GF-Complete's region multiply-adds (Plank, Greenan, Miller, "Screaming fast Galois field
// arithmetic using Intel SIMD instructions", FAST 2013; Debian libgf-complete-dev).
#include "common/fec/fec.hpp"

extern "C" {
#include <gf_complete.h>
}

#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace mcdist::fec {

namespace {

static_assert(std::endian::native == std::endian::little,
              "GF(2^16) symbols are little-endian 16-bit words (common/fec/fec.hpp); a big-endian "
              "host would need to swap them around GF-Complete's region calls");

/// x^16 + x^12 + x^3 + x + 1, GF-Complete's default for w = 16 and RFC 5510 section 8.1's: set
/// explicitly, so a library default can never change the code.
constexpr std::uint64_t primitive_polynomial = 0x1100B;
/// GF-Complete's SIMD region functions want source and destination equally aligned to 16 bytes
/// (it aborts otherwise: gf.c gf_set_region_data), and a length in whole 16-bit words.
constexpr std::size_t alignment = 16;

/// One GF(2^16) per thread: GF-Complete's non-SIMD region paths write lazy tables into the
/// gf_t's scratch memory, so a gf_t is not shared between threads.
class field16 {
 public:
  field16() {
    if (gf_init_hard(&m_gf, 16, GF_MULT_DEFAULT, GF_REGION_DEFAULT, GF_DIVIDE_DEFAULT,
                     primitive_polynomial, 0, 0, nullptr, nullptr) == 0) {
      throw std::runtime_error("GF-Complete could not set up GF(2^16)");
    }
  }
  ~field16() { gf_free(&m_gf, 1); }
  field16(const field16&) = delete;
  field16& operator=(const field16&) = delete;

  std::uint32_t mul(std::uint32_t a, std::uint32_t b) { return m_gf.multiply.w32(&m_gf, a, b); }
  std::uint32_t inv(std::uint32_t a) { return m_gf.inverse.w32(&m_gf, a); }
  /// dst (+)= c * src over `bytes` (even, both pointers 16-byte aligned).
  void mul_add(const std::byte* src, std::byte* dst, std::uint32_t c, std::size_t bytes, bool add) {
    m_gf.multiply_region.w32(&m_gf, const_cast<std::byte*>(src), dst, c, static_cast<int>(bytes),
                             add ? 1 : 0);
  }

 private:
  gf_t m_gf{};
};

field16& gf() {
  thread_local field16 f;
  return f;
}

/// 1/x for every x != 0 (inverse_table()[0] is 0, never used: Cauchy elements differ).
const std::array<std::uint16_t, 65536>& inverse_table() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<std::uint16_t, 65536>>();
    (*t)[0] = 0;
    for (std::uint32_t x = 1; x < 65536; ++x) (*t)[x] = static_cast<std::uint16_t>(gf().inv(x));
    return t;
  }();
  return *table;
}

/// Aligned buffers of one block each (the block length rounded up to 16 bytes).
class scratch {
 public:
  scratch(std::size_t count, std::size_t len)
      : m_stride((len + alignment - 1) / alignment * alignment),
        m_mem(static_cast<std::byte*>(std::aligned_alloc(alignment, count * m_stride))) {
    if (!m_mem) throw std::bad_alloc();
    std::memset(m_mem.get(), 0, count * m_stride);
  }
  std::byte* at(std::size_t i) noexcept { return m_mem.get() + i * m_stride; }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::size_t m_stride;
  std::unique_ptr<std::byte, free_deleter> m_mem;
};

/// `p` as a region source: itself when aligned, else a copy in `tmp`.
const std::byte* aligned_source(const std::byte* p, std::size_t len, std::byte* tmp) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment == 0) return p;
  std::memcpy(tmp, p, len);
  return tmp;
}

/// Inverts the e x e matrix `a` (row-major) over GF(2^16) by Gauss-Jordan elimination.
/// @return false when it is singular (never for a Cauchy submatrix)
bool invert(std::vector<std::uint32_t>& a, std::vector<std::uint32_t>& inv, std::uint32_t e) {
  auto& f = gf();
  inv.assign(std::size_t{e} * e, 0);
  for (std::uint32_t i = 0; i < e; ++i) inv[i * e + i] = 1;
  for (std::uint32_t c = 0; c < e; ++c) {
    std::uint32_t pivot = c;
    while (pivot < e && a[pivot * e + c] == 0) ++pivot;
    if (pivot == e) return false;
    if (pivot != c) {
      for (std::uint32_t j = 0; j < e; ++j) {
        std::swap(a[c * e + j], a[pivot * e + j]);
        std::swap(inv[c * e + j], inv[pivot * e + j]);
      }
    }
    const std::uint32_t s = f.inv(a[c * e + c]);
    for (std::uint32_t j = 0; j < e; ++j) {
      a[c * e + j] = f.mul(a[c * e + j], s);
      inv[c * e + j] = f.mul(inv[c * e + j], s);
    }
    for (std::uint32_t r = 0; r < e; ++r) {
      const std::uint32_t m = r == c ? 0 : a[r * e + c];
      if (m == 0) continue;
      for (std::uint32_t j = 0; j < e; ++j) {
        a[r * e + j] ^= f.mul(m, a[c * e + j]);
        inv[r * e + j] ^= f.mul(m, inv[c * e + j]);
      }
    }
  }
  return true;
}

}  // namespace

void codec::encode16(std::span<const std::byte* const> sources,
                     std::span<const std::uint32_t> indexes, std::span<std::byte* const> out,
                     std::size_t len) const {
  const auto& inverse = inverse_table();
  auto& f = gf();
  const std::size_t rows = indexes.size();
  const std::size_t bytes = len;  // even (codec::encode checked it)
  // Rows accumulate in aligned buffers; the last one is where an unaligned source is copied.
  scratch buf(rows + 1, len);
  std::byte* tmp = buf.at(rows);
  for (std::uint32_t c = 0; c < sources.size(); ++c) {
    const std::byte* src = aligned_source(sources[c], len, tmp);
    for (std::size_t r = 0; r < rows; ++r) {
      f.mul_add(src, buf.at(r), inverse[(m_k + indexes[r]) ^ c], bytes, c > 0);
    }
  }
  for (std::size_t r = 0; r < rows; ++r) std::memcpy(out[r], buf.at(r), len);
}

std::error_code codec::decode16(std::uint32_t n, const decode_inputs& in,
                                std::span<const std::uint32_t> missing,
                                std::span<std::byte* const> out, std::size_t len) const {
  const auto& inverse = inverse_table();
  auto& f = gf();
  const auto e = static_cast<std::uint32_t>(missing.size());
  const std::size_t bytes = len;  // even (codec::check_decode checked it)
  // acc[j] = parity j - C[P_j][S] * present = C[P_j][M] * missing (subtraction is addition).
  scratch buf(2 * std::size_t{e} + 1, len);
  std::byte* tmp = buf.at(2 * std::size_t{e});
  for (std::uint32_t j = 0; j < e; ++j) std::memcpy(buf.at(j), in.parity[j]->data, len);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (in.source[s] == nullptr) continue;
    const std::byte* src = aligned_source(in.source[s], len, tmp);
    for (std::uint32_t j = 0; j < e; ++j) {
      f.mul_add(src, buf.at(j), inverse[(m_k + in.parity[j]->index) ^ s], bytes, true);
    }
  }
  std::vector<std::uint32_t> a(std::size_t{e} * e);
  for (std::uint32_t r = 0; r < e; ++r) {
    for (std::uint32_t c = 0; c < e; ++c) {
      a[r * e + c] = inverse[(m_k + in.parity[r]->index) ^ missing[c]];
    }
  }
  std::vector<std::uint32_t> inv;
  if (!invert(a, inv, e)) return errc::invalid_field;  // cannot happen for a Cauchy submatrix
  // missing[i] = sum over j of inv[i][j] * acc[j], built in the second half of the scratch.
  for (std::uint32_t i = 0; i < e; ++i) {
    std::byte* dst = buf.at(e + i);
    for (std::uint32_t j = 0; j < e; ++j) f.mul_add(buf.at(j), dst, inv[i * e + j], bytes, j > 0);
    std::memcpy(out[i], dst, len);
  }
  return {};
}

}  // namespace mcdist::fec
