#include "rollout/builtin_policies.hpp"

#include "rollout/token_space.hpp"
#include "skills/grammar.hpp"

#include <cmath>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace kiln {

namespace {

class random_policy final : public token_policy {
public:
  std::string name() const override { return "random"; }
  int64_t version() const override { return 0; }
  void step(std::vector<decode_slot>& batch, std::mt19937_64& rng) override {
    std::vector<int32_t> valid;
    for (auto& s : batch) {
      valid.clear();
      const auto& m = *s.mask;
      for (size_t i = 0; i < m.size(); ++i)
        if (m[i]) valid.push_back(static_cast<int32_t>(i));
      if (valid.empty()) { // nothing may follow: the server ends the sequence
        s.token = -1;
        s.logprob = 0;
        continue;
      }
      s.token = valid[rng() % valid.size()];
      s.logprob = -std::log(static_cast<float>(valid.size()));
    }
  }
};

class expert_policy final : public token_policy {
public:
  explicit expert_policy(backend_kind b) : backend_(b) {}
  std::string name() const override { return "expert"; }
  bool uses_mask() const override { return false; } // its programs are grammatical by design
  int64_t version() const override { return 0; }
  void step(std::vector<decode_slot>& batch, std::mt19937_64&) override {
    for (auto& s : batch) {
      auto pos = s.context->size() - static_cast<size_t>(s.turn_start);
      const auto& prog = program_of(*s.spec, pos == 0);
      int32_t tok = pos < prog.size() ? prog[pos] : -1;
      if (s.mask && (tok < 0 || static_cast<size_t>(tok) >= s.mask->size() || !(*s.mask)[tok])) {
        // The expert program should always be grammatical; if the grammar disagrees, follow
        // the grammar (the first valid token) rather than emit an invalid token.
        if (++disagreements_ <= 3)
          spdlog::warn("expert policy: token {} of task '{}' is not allowed by the grammar", pos,
                       s.spec->name);
        tok = -1;
        for (size_t i = 0; i < s.mask->size(); ++i)
          if ((*s.mask)[i]) {
            tok = static_cast<int32_t>(i);
            break;
          }
      }
      s.token = tok;
      s.logprob = 0;
    }
  }

private:
  // By task address: a small map that stays in cache (there are few tasks, many sequences).
  // Within a turn the slot's task is alive (the sequence holds it), so its address names it; at
  // a turn's first token the entry is checked against origin and name, so an address reused by
  // another task after the first one was freed cannot serve a stale program.
  struct entry {
    std::string origin, name;
    std::vector<int32_t> program;
  };
  const std::vector<int32_t>& program_of(const task& t, bool verify) {
    auto it = by_task_.find(&t);
    if (it != by_task_.end() &&
        (!verify || (it->second.name == t.name && it->second.origin == t.origin)))
      return it->second.program;
    auto ids = to_tokens(expert_program(t, backend_));
    auto& e = by_task_[&t];
    e = {t.origin, t.name, std::vector<int32_t>(ids.begin(), ids.end())};
    return e.program;
  }
  backend_kind backend_;
  std::unordered_map<const task*, entry> by_task_;
  int64_t disagreements_ = 0;
};
} // namespace

std::unique_ptr<token_policy> make_random_policy() { return std::make_unique<random_policy>(); }
std::unique_ptr<token_policy> make_expert_policy(backend_kind backend) {
  return std::make_unique<expert_policy>(backend);
}

} // namespace kiln
