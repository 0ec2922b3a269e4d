// Weights in flight from the learner to policy servers: a versioned blob (torch serialization of
// the model's parameters), published in-process through a slot or over ZeroMQ PUB.
//   learner --publish(version, bytes)--> weight_slot / PUB ==> SUB --> model_policy::refresh
// Wire form of one PUB message (single frame, so SUB can use ZMQ_CONFLATE): "KLNW" magic,
// int64 LE version, then the torch archive bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace kiln {

struct weight_blob {
  int64_t version = 0;
  std::string bytes;
};

class weight_slot {
public:
  void publish(std::shared_ptr<const weight_blob> w) {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = std::move(w);
  }
  std::shared_ptr<const weight_blob> latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }

private:
  mutable std::mutex mu_;
  std::shared_ptr<const weight_blob> latest_;
};

std::string encode_weight_message(const weight_blob& w);
std::optional<weight_blob> decode_weight_message(const char* data, size_t size);

} // namespace kiln
