// TensorBoard's event files, written to its published format with no protobuf dependency: TFRecord
// frames (uint64 length, masked CRC-32C of it, the record, masked CRC-32C of the record), each
// record an Event protobuf (wall_time, step, and a Summary of simple_value scalars). The first
// record names the format version ("brain.Event:2"). tests/tools/read_tfevents.py reads them
// back independently of this writer.
//   metrics row (JSON) --scalars(prefix, row, step)--> Event records -->
//   <dir>/events.out.tfevents.*
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

class tensorboard_events {
public:
  // Creates `dir` and a new event file in it (events.out.tfevents.<seconds>.<host>).
  static expected<tensorboard_events> open(const std::string& dir);

  void scalar(const std::string& tag, int64_t step, double value);
  // Every number of a metrics row as "<prefix>/<key>" (nested objects one level down as
  // "<prefix>/<key>.<sub>"), in one record; strings, arrays and booleans are skipped.
  void scalars(const std::string& prefix, const nlohmann::json& row, int64_t step);
  void flush() { out_.flush(); }
  const std::string& path() const { return path_; }

private:
  tensorboard_events() = default;
  void write_record(const std::string& event);
  std::ofstream out_;
  std::string path_;
};

// CRC-32C (Castagnoli) and TFRecord's mask of it; exposed for the tests.
uint32_t crc32c(const void* data, std::size_t n);
uint32_t masked_crc32c(const void* data, std::size_t n);

} // namespace kiln
