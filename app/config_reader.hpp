// Typed reads from a TOML config that collect every problem at once: a wrong type, a missing
// required key, or a key nobody reads (a typo) each become one message naming file:line and key.
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln {

class config_reader {
public:
  // `origin` names the file in messages; `base_dir` resolves relative paths.
  static expected<config_reader> parse(const std::string& text, const std::string& origin,
                                       const std::string& base_dir);
  static expected<config_reader> load(const std::string& path);

  config_reader(config_reader&&) noexcept;
  config_reader& operator=(config_reader&&) noexcept;
  ~config_reader();

  // Keys are dotted paths ("run.seed"). Absent keys give the fallback.
  int64_t integer(const std::string& key, int64_t fallback, int64_t min = INT64_MIN,
                  int64_t max = INT64_MAX);
  double real(const std::string& key, double fallback);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& allowed);
  std::vector<std::string> strings(const std::string& key,
                                   const std::vector<std::string>& fallback);
  // A path, resolved against the config file's directory when relative.
  std::string path(const std::string& key, const std::string& fallback);
  std::vector<std::string> paths(const std::string& key, const std::vector<std::string>& fallback);

  // Applies "key=value" overrides (value in TOML syntax) before reads. A relative path set this
  // way resolves against the working directory, as a command-line path does; one written in the
  // file resolves against the file's folder.
  status set(const std::string& assignment);

  // All problems found so far, plus every key in the file that no read asked for.
  status finish() const;
  const std::string& origin() const { return origin_; }

private:
  config_reader() = default;
  std::string where(const std::string& key) const;
  void problem(const std::string& key, const std::string& msg);

  struct tree; // the parsed toml::table, kept out of this header
  std::unique_ptr<tree> root_;
  std::string origin_, base_dir_;
  std::set<std::string> read_;
  std::set<std::string> set_keys_; // keys given by set(): their paths are the shell's
  std::string resolve(const std::string& key, const std::string& p) const;
  std::vector<std::string> problems_;
};

} // namespace kiln
