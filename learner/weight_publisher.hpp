// The learner's weights on a ZeroMQ PUB socket (a CURVE server when [curve] has keys). PUB drops
// messages for subscribers not connected yet, so the newest message is kept and sent again every
// second while the learner is idle (subscribers skip a version they already have).
//   learner --publish(weight message)--> [PUB] ==> policy servers (SUB, conflated)
#pragma once

#include "channels/curve_config.hpp"
#include "data/expected.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace kiln {

class weight_publisher {
public:
  static expected<std::unique_ptr<weight_publisher>> bind(const std::string& endpoint,
                                                          const curve_config& curve);
  ~weight_publisher();
  weight_publisher(const weight_publisher&) = delete;
  weight_publisher& operator=(const weight_publisher&) = delete;

  void publish(std::string message);
  void resend_if_idle(std::chrono::milliseconds idle = std::chrono::seconds(1));
  // The channel's handshake counters ("curve: N accepted, N refused ...").
  std::string channel_summary() const;

  struct impl;

private:
  explicit weight_publisher(std::unique_ptr<impl> p);
  void send_last();
  std::unique_ptr<impl> p_;
};

} // namespace kiln
