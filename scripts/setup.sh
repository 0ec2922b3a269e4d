#!/usr/bin/env bash
# Installs everything Kiln needs on a fresh Debian (bookworm) machine. Idempotent; run as root.
set -euo pipefail
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libcaf-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev
  libspdlog-dev libfmt-dev doctest-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libssl-dev openssl libcurl4-openssl-dev libsqlite3-dev
  libseccomp-dev libblas-dev iproute2 iptables libnetfilter-queue-dev
  libtorch-dev
  python3 python3-zmq python3-msgpack python3-numpy python3-torch python3-dev pybind11-dev
  python3-websocket
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#pkgs[@]} packages present"
fi
