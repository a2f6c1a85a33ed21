#include "receiver/storage/parity_store.hpp"

#include "common/error.hpp"
#include "common/fec/fec.hpp"
#include "receiver/storage/posix_io.hpp"

#include <cerrno>
#include <new>
#include <stdexcept>

namespace mcdist::receiver {

std::uint64_t parity_store::charge_of(const parity_blocks& p) noexcept {
  std::uint64_t n = 0;
  for (const auto& [index, data] : p) n += data.size() + overhead_bytes;
  return n;
}

bool parity_store::keep(session_id session, std::uint32_t fec_block, std::uint32_t index,
                        std::span<const std::byte> data) noexcept {
  if (index >= fec::max_blocks_gf16 || data.empty() || data.size() > max_block_bytes) return false;
  const std::uint64_t charge = data.size() + overhead_bytes;
  std::lock_guard lk(m_mutex);
  // The budget first: nothing is allocated for a block that does not fit.
  if (charge > m_budget - std::min(m_budget, m_used)) return false;
  // std::map::emplace inserts nothing when the copy's allocation fails, so no empty parity
  // block is left behind for the decoder to take; the one block is refused.
  try {
    auto& blocks = m_blocks[{session.value, fec_block}];
    if (blocks.contains(index)) return false;
    blocks.emplace(index, std::vector<std::byte>(data.begin(), data.end()));
  } catch (const std::bad_alloc&) {
    return false;
  }
  m_used += charge;
  return true;
}

parity_blocks parity_store::take(session_id session, std::uint32_t fec_block) {
  std::lock_guard lk(m_mutex);
  const auto it = m_blocks.find({session.value, fec_block});
  if (it == m_blocks.end()) return {};
  parity_blocks out = std::move(it->second);
  m_blocks.erase(it);
  m_used -= std::min(m_used, charge_of(out));
  return out;
}

void parity_store::drop_session(session_id session) {
  std::lock_guard lk(m_mutex);
  auto it = m_blocks.lower_bound({session.value, 0});
  while (it != m_blocks.end() && it->first.first == session.value) {
    m_used -= std::min(m_used, charge_of(it->second));
    it = m_blocks.erase(it);
  }
}

std::uint64_t parity_store::bytes() const {
  std::lock_guard lk(m_mutex);
  return m_used;
}

std::error_code decode_fec_block(const recovery_request& req, const parity_blocks& parity,
                                 const source_reader& read, std::vector<recovered_source>& out) {
  out.clear();
  const auto n = static_cast<std::uint32_t>(req.sources.size());
  const std::size_t len = req.block_size;
  if (n == 0 || n > req.k || len == 0 || len > parity_store::max_block_bytes ||
      !fec::valid_shape(req.k, req.max_parity)) {
    return make_error_code(errc::invalid_field);
  }
  // Present sources, zero-padded to the block size (a file's last block may be short).
  std::vector<std::vector<std::byte>> present;
  std::vector<fec::symbol> rx;
  std::vector<std::uint32_t> missing;
  present.reserve(n);
  rx.reserve(n + parity.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    const fec_source& src = req.sources[i];
    if (src.length > len) return make_error_code(errc::invalid_field);
    if (!src.available) {
      missing.push_back(i);
      continue;
    }
    present.emplace_back(len);
    if (src.length > 0) {
      if (const int e = read(i, std::span(present.back()).first(src.length))) return errno_code(e);
    }
    rx.push_back({false, i, present.back().data()});
  }
  if (missing.empty()) return {};  // nothing lost: nothing to do
  for (const auto& [index, data] : parity) {
    if (data.size() != len || index >= req.max_parity) return make_error_code(errc::invalid_field);
    rx.push_back({true, index, data.data()});
  }
  if (rx.size() < n) return make_error_code(errc::invalid_field);
  out.resize(missing.size());
  std::vector<std::byte*> dst;
  dst.reserve(missing.size());
  for (std::size_t j = 0; j < missing.size(); ++j) {
    out[j].index = missing[j];
    out[j].data.assign(len, std::byte{0});
    dst.push_back(out[j].data.data());
  }
  std::error_code ec;
  try {
    const fec::codec c(req.k, req.max_parity);
    ec = c.decode(n, rx, missing, dst, len);
  } catch (const std::invalid_argument&) {
    ec = make_error_code(errc::invalid_field);
  }
  if (ec) out.clear();
  return ec;
}

}  // namespace mcdist::receiver
