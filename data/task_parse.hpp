// Task spec v1 readers and writers: TOML files (one task each) and JSON Lines datasets (one task
// per line, same fields). Readers check field names and types; check_task() does the rest.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace kiln {

// Parses one task from a JSON object; `origin` prefixes every error ("file.jsonl:12").
expected<task> task_from_json(const nlohmann::json& j, const std::string& origin);
// Parses one task from TOML text; syntax errors carry line and column.
expected<task> task_from_toml(const std::string& text, const std::string& origin);
// Reads and parses a .toml task file.
expected<task> read_task_file(const std::string& path);

// The task as a JSON object (the JSON Lines record form) and as TOML text.
nlohmann::json task_to_json(const task& t);
std::string task_to_toml(const task& t);

} // namespace kiln
