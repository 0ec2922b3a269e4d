// CurveZMQ key files: a key is 40 characters of Z85 (32 bytes) on one line. NAME.key holds the
// secret key (mode 0600; its public half is derived), NAME.pub the public key that peers list.
#pragma once

#include "data/expected.hpp"

#include <string>
#include <vector>

namespace kiln {

struct curve_keypair {
  std::string public_key; // Z85, 40 characters
  std::string secret_key;
};

expected<curve_keypair> generate_curve_keypair();

// Writes DIR/NAME.key (0600) and DIR/NAME.pub; an existing file is not overwritten.
status write_curve_keypair(const std::string& dir, const std::string& name,
                           const curve_keypair& keys);

// A secret key file, with its public half derived from it.
expected<curve_keypair> read_secret_key(const std::string& path);
expected<std::string> read_public_key(const std::string& path);

// `path` is one .pub file or a folder whose *.pub files are read (at least one).
expected<std::vector<std::string>> read_authorized_keys(const std::string& path);

} // namespace kiln
