// expected<T>: a value or an error message, the return type at every module boundary of Kiln.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kiln {

struct error {
  std::string message;
};

template <class T>
class expected {
public:
  expected(T value) : v_(std::move(value)) {}
  expected(error err) : v_(std::move(err)) {}

  explicit operator bool() const noexcept { return v_.index() == 0; }
  bool has_value() const noexcept { return v_.index() == 0; }

  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }

  const error& err() const { return std::get<1>(v_); }
  // The error's message; "" when there is a value, so diagnostics (a test's REQUIRE_MESSAGE(x,
  // x.message()) that doctest -s evaluates on success too) never throw.
  const std::string& message() const {
    static const std::string none;
    return v_.index() == 1 ? std::get<1>(v_).message : none;
  }

private:
  std::variant<T, error> v_;
};

// For operations that return nothing but may fail.
struct ok_t {};
using status = expected<ok_t>;
inline status ok() { return ok_t{}; }

} // namespace kiln
