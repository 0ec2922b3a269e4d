#include "data/utf8.hpp"

namespace kiln {

namespace {

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the well-formed sequence starting at s[i], or 0.
size_t sequence_length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF; // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0; // overlong
    if (c == 0xED) hi = 0x9F; // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90; // overlong
    if (c == 0xF4) hi = 0x8F; // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  auto c1 = static_cast<unsigned char>(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (!continuation(static_cast<unsigned char>(s[i + k]))) return 0;
  return n;
}

} // namespace

std::string utf8_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

size_t utf8_floor(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && continuation(static_cast<unsigned char>(s[n]))) --n;
  return n;
}

std::string utf8_head(std::string_view s, size_t max_bytes) {
  return std::string(s.substr(0, utf8_floor(s, max_bytes)));
}

std::string utf8_tail(std::string_view s, size_t max_bytes) {
  if (max_bytes >= s.size()) return std::string(s);
  size_t start = s.size() - max_bytes;
  while (start < s.size() && continuation(static_cast<unsigned char>(s[start]))) ++start;
  return std::string(s.substr(start));
}

std::string utf8_middle_cut(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  std::string head = utf8_head(s, max_bytes / 2), tail = utf8_tail(s, max_bytes / 2);
  return head + "\n[... " + std::to_string(s.size() - head.size() - tail.size()) +
         " characters cut ...]\n" + tail;
}

} // namespace kiln
