// Who may call `kiln serve`: bearer tokens from a file, one per line,
//   TOKEN NAME [priority=low|normal|high] [max_pending=N] [max_sessions=N]
// ('#' starts a comment). NAME is what logs and the journal show, never the token. A token's
// priority is the most its requests may ask for; max_pending bounds its accepted, unfinished work,
// max_sessions its open episodes (within the server's --max-sessions).
#pragma once

#include "data/expected.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct token_entry {
  std::string token, name;
  int priority = 1; // 0 low, 1 normal, 2 high
  int max_pending = 64;
  int max_sessions = 1000000; // no limit of its own
};

struct token_table {
  std::vector<token_entry> entries;
  // The entry whose token the header "Bearer <token>" carries (compared in constant time).
  std::optional<token_entry> find(const std::string& authorization) const;
};

// The error names the file and line.
expected<token_table> load_tokens(const std::string& path);
expected<token_table> parse_tokens(const std::string& text, const std::string& origin);

int priority_rank(const std::string& p); // "low" 0, "normal" 1, "high" 2

} // namespace kiln
