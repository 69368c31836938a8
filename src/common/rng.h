// Rng: the only source of randomness the pure core may use, passed in by reference.
//
// SplitMix64 is small, fast and fully determined by its seed, so a printed seed replays a run
// bit for bit. Thread-safety: none; one Rng per thread of control.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0. The modulo bias is below 2^-40 for the n we use.
  uint64_t Uniform(uint64_t n) { return Next() % n; }
  // Uniform in [0, 1).
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// An exponentially distributed draw of mean `mean` (times between failures, arrivals).
inline double Exponential(Rng& rng, double mean) {
  return -std::log(1.0 - rng.UniformDouble()) * mean;
}

}  // namespace tessera
