// The two backends a pool serves: where kernels run and which code generator and runtime they use.
#pragma once

#include <optional>
#include <string>

namespace kiln {

enum class backend_kind { cpu, cuda };

inline const char* to_string(backend_kind b) { return b == backend_kind::cpu ? "cpu" : "cuda"; }

// "cpu" / "cuda"; nullopt for anything else (the caller names what it read).
inline std::optional<backend_kind> backend_from_string(const std::string& s) {
  if (s == "cpu") return backend_kind::cpu;
  if (s == "cuda") return backend_kind::cuda;
  return std::nullopt;
}

} // namespace kiln
