// Prints validation rows as an aligned table as they arrive (progress for long runs) and,
// optionally, as JSON Lines; shared by `kiln tasks validate` and `kiln run`.
#pragma once

#include "data/task_spec.hpp"
#include "data/task_validate.hpp"

#include <chrono>
#include <fstream>
#include <string>

namespace kiln {

// A row for a task that was only parsed and shape-checked.
validation shape_only_validation(const task& t);

class task_table {
public:
  task_table(std::string json_path, bool shapes_only);
  bool open(); // false (and logs) when the JSON file cannot be written
  void row(const validation& v);
  void summary(std::size_t total, int bad, const std::string& device);

private:
  std::string json_path_;
  bool shapes_only_;
  std::ofstream json_;
  std::size_t rows_ = 0;
  double eager_total_ms_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace kiln
