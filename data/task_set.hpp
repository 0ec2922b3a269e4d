// Loading many tasks at once: files, JSON Lines datasets and directories (recursively, in sorted
// order). A bad task is reported and skipped; it never stops the others from loading.
#pragma once

#include "data/expected.hpp"
#include "data/task_check.hpp"
#include "data/task_spec.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct task_set {
  std::vector<task> tasks;   // parsed and checked
  std::vector<error> errors; // one per bad task or unreadable path
};

// Paths may be .toml files, .jsonl files or directories holding them. Task names must be unique
// within one directory (or one .jsonl file); a repeated name is an error for the later task.
task_set load_tasks(const std::vector<std::string>& paths, const check_limits& limits = {});

// Parses a JSON Lines dataset from text; `origin` is its file name for messages.
task_set parse_jsonl(const std::string& text, const std::string& origin,
                     const check_limits& limits = {});

// Puts `tasks` in an order drawn from `seed` (0: leaves them as they are). The permutation depends
// only on the seed and the set of names, not on the order they came in: two lists of the same
// tasks always come out the same (run configs rely on it: tasks.shuffle_seed).
void shuffle_tasks(std::vector<task>& tasks, uint64_t seed);

} // namespace kiln
