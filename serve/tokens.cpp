#include "serve/tokens.hpp"

#include <fstream>
#include <sstream>

namespace kiln {

int priority_rank(const std::string& p) { return p == "low" ? 0 : p == "high" ? 2 : 1; }

expected<token_table> parse_tokens(const std::string& text, const std::string& origin) {
  token_table t;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream words(line);
    token_entry e;
    if (!(words >> e.token)) continue;
    auto where = origin + ":" + std::to_string(n) + ": ";
    if (!(words >> e.name)) return error{where + "a token needs a name after it"};
    if (e.token.size() < 16) return error{where + "a token must be at least 16 characters"};
    std::string opt;
    while (words >> opt) {
      auto eq = opt.find('=');
      std::string key = opt.substr(0, eq),
                  value = eq == std::string::npos ? "" : opt.substr(eq + 1);
      if (key == "priority" && (value == "low" || value == "normal" || value == "high")) {
        e.priority = priority_rank(value);
      } else if ((key == "max_pending" || key == "max_sessions") && !value.empty() &&
                 value.find_first_not_of("0123456789") == std::string::npos && value.size() < 7 &&
                 std::stoi(value) > 0) {
        (key == "max_pending" ? e.max_pending : e.max_sessions) = std::stoi(value);
      } else {
        return error{where + "'" + opt +
                     "' is not priority=low|normal|high, max_pending=N or max_sessions=N (N > 0)"};
      }
    }
    for (const auto& other : t.entries)
      if (other.token == e.token) return error{where + "this token is already listed"};
    t.entries.push_back(e);
  }
  if (t.entries.empty()) return error{origin + ": no token in the file"};
  return t;
}

expected<token_table> load_tokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error{"cannot read the tokens file " + path};
  std::ostringstream s;
  s << in.rdbuf();
  return parse_tokens(s.str(), path);
}

std::optional<token_entry> token_table::find(const std::string& authorization) const {
  const std::string prefix = "Bearer ";
  if (authorization.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string given = authorization.substr(prefix.size());
  std::optional<token_entry> hit;
  for (const auto& e : entries) {
    // Every byte compared, so the time taken says nothing about how much of a guess matched.
    unsigned diff = static_cast<unsigned>(e.token.size() ^ given.size());
    for (size_t i = 0; i < e.token.size(); ++i)
      diff |= static_cast<unsigned char>(e.token[i]) ^
              static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    if (diff == 0) hit = e;
  }
  return hit;
}

} // namespace kiln
