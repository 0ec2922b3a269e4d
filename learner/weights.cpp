#include "learner/weights.hpp"

#include <cstring>

namespace kiln {

std::string encode_weight_message(const weight_blob& w) {
  std::string out = "KLNW";
  uint64_t v = static_cast<uint64_t>(w.version);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  out += w.bytes;
  return out;
}

std::optional<weight_blob> decode_weight_message(const char* data, size_t size) {
  if (size < 12 || std::memcmp(data, "KLNW", 4) != 0) return {};
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(data[4 + i])) << (8 * i);
  weight_blob w;
  w.version = static_cast<int64_t>(v);
  w.bytes.assign(data + 12, size - 12);
  return w;
}

} // namespace kiln
