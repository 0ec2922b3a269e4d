#pragma once
// Untrusted text (compiler logs that echo a kernel's bytes, HTTP bodies) on its way into JSON,
// prompts and logs. nlohmann's dump() throws on invalid UTF-8, and a byte-count cut can split a
// code point; either would take the actor that serializes it down.

#include <string>
#include <string_view>

namespace kiln {

// `s` with every byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no overlongs,
// surrogates or code points past U+10FFFF) replaced by U+FFFD.
std::string utf8_valid(std::string_view s);

// The largest n' <= n that does not fall inside a multi-byte sequence of `s`.
size_t utf8_floor(std::string_view s, size_t n);

// At most max_bytes of the start / the end of `s`, cut between code points (s is valid UTF-8).
std::string utf8_head(std::string_view s, size_t max_bytes);
std::string utf8_tail(std::string_view s, size_t max_bytes);

// `s` itself when it fits max_bytes, else its head and its tail with a line saying how much was
// cut between them: logs and tracebacks put the first error first and the reason last.
std::string utf8_middle_cut(std::string_view s, size_t max_bytes);

} // namespace kiln
