#include "skills/source_program.hpp"

#include <cstring>

namespace kiln {

bool is_source_program(const std::string& text) { return text.rfind(source_marker, 0) == 0; }

expected<source_program> parse_source_program(const std::string& text) {
  if (!is_source_program(text))
    return error{std::string("free-form source: the first line must be '") + source_marker +
                 " cpu' or '" + source_marker + " cuda'"};
  std::string line = text.substr(0, text.find('\n'));
  std::string rest = line.substr(std::strlen(source_marker));
  auto first = rest.find_first_not_of(" \t");
  auto last = rest.find_last_not_of(" \t\r");
  std::string word = first == std::string::npos ? "" : rest.substr(first, last - first + 1);
  source_program p;
  if (word == "cpu")
    p.backend = backend_kind::cpu;
  else if (word == "cuda")
    p.backend = backend_kind::cuda;
  else
    return error{"free-form source: marker line '" + line + "' names backend '" + word +
                 "', expected cpu or cuda"};
  p.source = text;
  return p;
}

std::string make_source_program(backend_kind backend, const std::string& source) {
  if (is_source_program(source)) return source;
  return std::string(source_marker) + " " + to_string(backend) + "\n" + source;
}

} // namespace kiln
