#include "app/tensorboard_events.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <vector>

namespace kiln {

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protobuf's wire format, as much of it as an Event with scalar summaries needs.
void varint(std::string& o, uint64_t v) {
  while (v >= 0x80) {
    o += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  o += static_cast<char>(v);
}

void key(std::string& o, int field, int wire_type) {
  varint(o, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

template <class T>
void fixed(std::string& o, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof v); // little-endian on every machine Kiln builds for
  o.append(b, sizeof b);
}

void bytes_field(std::string& o, int field, const std::string& payload) {
  key(o, field, 2);
  varint(o, payload.size());
  o += payload;
}

// Event: wall_time (1, double), step (2, int64), file_version (3, string), summary (5).
std::string event(int64_t step, const std::string* file_version, const std::string* summary) {
  std::string e;
  key(e, 1, 1);
  fixed(e, wall_now());
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  if (file_version) bytes_field(e, 3, *file_version);
  if (summary) bytes_field(e, 5, *summary);
  return e;
}

// Summary.Value: tag (1, string), simple_value (2, float).
void summary_value(std::string& summary, const std::string& tag, double v) {
  std::string value;
  bytes_field(value, 1, tag);
  key(value, 2, 5);
  fixed(value, static_cast<float>(v));
  bytes_field(summary, 1, value);
}

const uint32_t* crc_table() {
  static uint32_t table[256];
  static bool made = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)made;
  return table;
}

} // namespace

uint32_t crc32c(const void* data, std::size_t n) {
  const uint32_t* t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, std::size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

expected<tensorboard_events> tensorboard_events::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error{dir + ": cannot create the TensorBoard folder: " + ec.message()};
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  tensorboard_events w;
  w.path_ =
      dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_now())) + "." + host;
  w.out_.open(w.path_, std::ios::binary | std::ios::trunc);
  if (!w.out_) return error{w.path_ + ": cannot write"};
  const std::string version = "brain.Event:2";
  w.write_record(event(0, &version, nullptr));
  w.out_.flush();
  return w;
}

void tensorboard_events::write_record(const std::string& record) {
  uint64_t n = record.size();
  char len[8];
  std::memcpy(len, &n, sizeof len);
  std::string frame(len, sizeof len);
  fixed(frame, masked_crc32c(len, sizeof len));
  frame += record;
  fixed(frame, masked_crc32c(record.data(), record.size()));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
}

void tensorboard_events::scalar(const std::string& tag, int64_t step, double value) {
  std::string summary;
  summary_value(summary, tag, value);
  write_record(event(step, nullptr, &summary));
}

void tensorboard_events::scalars(const std::string& prefix, const nlohmann::json& row,
                                 int64_t step) {
  std::string summary;
  for (const auto& [k, v] : row.items()) {
    if (v.is_number() && !v.is_boolean()) summary_value(summary, prefix + "/" + k, v.get<double>());
    if (v.is_object())
      for (const auto& [k2, v2] : v.items())
        if (v2.is_number()) summary_value(summary, prefix + "/" + k + "." + k2, v2.get<double>());
  }
  if (!summary.empty()) write_record(event(step, nullptr, &summary));
}

} // namespace kiln
