#include "channels/curve_keys.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <zmq.h>

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr size_t z85_key_chars = 40;

// A valid key is 40 Z85 characters that decode to 32 bytes; surrounding whitespace is ignored.
expected<std::string> parse_key(const std::string& text, const std::string& path) {
  auto begin = text.find_first_not_of(" \t\r\n");
  auto end = text.find_last_not_of(" \t\r\n");
  std::string key = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  if (key.size() != z85_key_chars)
    return error{path + ": not a CurveZMQ key (" + std::to_string(key.size()) +
                 " characters, a Z85 key has 40; make keys with `kiln keys`)"};
  uint8_t raw[32];
  if (!zmq_z85_decode(raw, key.c_str()))
    return error{path + ": not a CurveZMQ key (characters outside Z85)"};
  return key;
}

expected<std::string> read_small_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return error{path + ": no such key file"};
  if (fs::file_size(path, ec) > 4096) return error{path + ": too large for a key file"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot read"};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

expected<curve_keypair> generate_curve_keypair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return error{std::string("this libzmq cannot make CURVE keys: ") + zmq_strerror(zmq_errno())};
  return curve_keypair{pub, sec};
}

status write_curve_keypair(const std::string& dir, const std::string& name,
                           const curve_keypair& keys) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir + ": " + ec.message()};
  auto sec = fs::path(dir) / (name + ".key");
  auto pub = fs::path(dir) / (name + ".pub");
  for (const auto& p : {sec, pub})
    if (fs::exists(p, ec)) return error{p.string() + ": exists (not overwritten)"};
  { // the secret file is private from its first byte
    mode_t old = umask(077);
    std::ofstream out(sec, std::ios::binary);
    umask(old);
    if (!(out << keys.secret_key << "\n")) return error{sec.string() + ": cannot write"};
  }
  fs::permissions(sec, fs::perms::owner_read | fs::perms::owner_write, ec);
  std::ofstream out(pub, std::ios::binary);
  if (!(out << keys.public_key << "\n")) return error{pub.string() + ": cannot write"};
  return ok();
}

expected<curve_keypair> read_secret_key(const std::string& path) {
  auto text = read_small_file(path);
  if (!text) return text.err();
  auto sec = parse_key(*text, path);
  if (!sec) return sec.err();
  char pub[41];
  if (zmq_curve_public(pub, sec->c_str()) != 0)
    return error{path + ": cannot derive the public key: " + zmq_strerror(zmq_errno())};
  return curve_keypair{pub, *sec};
}

expected<std::string> read_public_key(const std::string& path) {
  auto text = read_small_file(path);
  if (!text) return text.err();
  return parse_key(*text, path);
}

expected<std::vector<std::string>> read_authorized_keys(const std::string& path) {
  std::error_code ec;
  std::vector<std::string> keys;
  if (!fs::is_directory(path, ec)) {
    auto k = read_public_key(path);
    if (!k) return k.err();
    keys.push_back(*k);
    return keys;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".pub") files.push_back(e.path());
  if (ec) return error{path + ": " + ec.message()};
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto k = read_public_key(f.string());
    if (!k) return k.err();
    keys.push_back(*k);
  }
  if (keys.empty()) return error{path + ": no *.pub key files in the folder"};
  return keys;
}

} // namespace kiln
