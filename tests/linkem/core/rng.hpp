// Seeded randomness for the impairment models.
//
// Every random decision of the emulator comes from a std::mt19937_64 passed in by the
// caller and seeded from the run's --seed, never from a global or time-based seed, so
// that a run repeats its loss pattern exactly for the same traffic.
#pragma once

#include <cstdint>
#include <random>

namespace mcdist::linkem {

/// SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014). Used to derive independent, well-mixed seeds for each
/// link direction and each model from one user seed.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

/// Derives a seed for stream `stream` of the run seeded with `seed`.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  return splitmix64(splitmix64(seed) ^ splitmix64(stream + 0x632BE59BD9B4E019ULL));
}

/// Uniform double in [0, 1) with 53 random bits (resolution 2^-53 ≈ 1.1e-16, so rates
/// down to 1e-9 are represented without bias).
inline double uniform01(std::mt19937_64& rng) noexcept {
  return static_cast<double>(rng() >> 11U) * 0x1.0p-53;
}

/// True with probability p (p in [0, 1]). Consumes one draw.
inline bool bernoulli(std::mt19937_64& rng, double p) noexcept { return uniform01(rng) < p; }

}  // namespace mcdist::linkem
