// The [curve] keys: CurveZMQ on the ZeroMQ channels (trajectories, weights, version
// announcements). A socket that binds is a CURVE server and lets in only the public keys of
// `authorized`; a socket that connects is a CURVE client that proves `secret_key` and insists on
// `server_key`. Without keys a channel is plaintext, which is allowed on loopback (tcp to
// 127.0.0.0/8 or ::1, ipc, inproc) and refused elsewhere unless allow_plaintext says so.
#pragma once

#include <string>

namespace kiln {

struct curve_config {
  std::string secret_key; // this process's key file (`kiln keys`); empty: plaintext
  std::string server_key; // public key file of the servers this process connects to
  std::string authorized; // public key files allowed to connect: one .pub file or a folder of them
  bool allow_plaintext = false; // plaintext off loopback, knowingly (a trusted private network)
  bool enabled() const { return !secret_key.empty(); }
};

// True for endpoints that never leave this host: tcp://127.x.x.x / localhost / [::1], ipc, inproc.
bool is_loopback_endpoint(const std::string& endpoint);

} // namespace kiln
