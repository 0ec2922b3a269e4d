// kiln keys: CurveZMQ key pairs for the [curve] keys of the ZeroMQ channels. A server lists the
// NAME.pub of each peer it lets in (curve.authorized); a client names the server's NAME.pub
// (curve.server_key); each process keeps its own NAME.key (curve.secret_key) to itself.
#include "app/commands.hpp"
#include "channels/curve_keys.hpp"

#include <cstdio>
#include <spdlog/spdlog.h>

namespace kiln {

int cmd_keys(const keys_args& args) {
  for (const auto& name : args.names) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
      spdlog::error("kiln keys: '{}' is not a plain file name", name);
      return 2;
    }
    auto k = generate_curve_keypair();
    if (!k) {
      spdlog::error("kiln keys: {}", k.message());
      return 1;
    }
    if (auto st = write_curve_keypair(args.out, name, *k); !st) {
      spdlog::error("kiln keys: {}", st.message());
      return 1;
    }
    std::printf("%s/%s.key  %s/%s.pub  public %s\n", args.out.c_str(), name.c_str(),
                args.out.c_str(), name.c_str(), k->public_key.c_str());
  }
  return 0;
}

} // namespace kiln
