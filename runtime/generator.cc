#include "runtime/generator.h"

#include <random>

namespace kiln {

void Generator::manualSeed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seedRandomly() {
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  manualSeed(seed);
  return seed;
}

uint64_t Generator::initialSeed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

PhiloxStream Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  PhiloxStream s{seed_, offset_};
  offset_ += n;
  return s;
}

std::array<uint8_t, Generator::kStateBytes> Generator::getState() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::array<uint8_t, kStateBytes> out{};
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(seed_ >> (8 * i));
    out[8 + i] = static_cast<uint8_t>(offset_ >> (8 * i));
  }
  return out;
}

void Generator::setState(const std::array<uint8_t, kStateBytes> &state) {
  uint64_t seed = 0, offset = 0;
  for (int i = 0; i < 8; ++i) {
    seed |= static_cast<uint64_t>(state[i]) << (8 * i);
    offset |= static_cast<uint64_t>(state[8 + i]) << (8 * i);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = offset;
}

const std::shared_ptr<Generator> &Generator::defaultGenerator() {
  static const std::shared_ptr<Generator> gen = std::make_shared<Generator>();
  return gen;
}

} // namespace kiln
