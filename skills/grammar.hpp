// The grammar of the kernel language for one task: which templates fit which op spans, which knob
// values exist, and, for a token prefix, the mask of valid next tokens — so a policy sampling under
// the mask always writes a program that parses and checks.
//   task --grammar--> valid_next(prefix) --policy samples--> tokens --parse_program--> program
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "skills/program.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kiln {

// The fixed vocabulary: keywords, template names, knob names, knob values and counts.
const std::vector<std::string>& program_vocab();
int token_id(const std::string& word); // -1 when not in the vocabulary
std::vector<int> to_tokens(const program& p);
std::string tokens_to_text(const std::vector<int>& ids);

// Knobs of a template, in the order they appear; and the values a knob may take.
const std::vector<knob>& template_knobs(kernel_template t);
const std::vector<int64_t>& knob_values(knob k);
// Whether a task admits value v of knob k: tf32 / fp16 only where the task says
// tolerance.reduced_precision (a handful of verification draws can stay inside an fp32 tolerance
// while the math is not fp32: random programs found 9x that way on the H200). The grammar masks
// (grammar.hpp and rollout's incremental one) and check_program all ask this.
bool knob_value_allowed(const task& t, knob k, int64_t v);
// The safe value a knob takes when a program leaves it out.
int64_t knob_default(knob k);

constexpr int64_t max_group_ops = 8;

// Templates that can implement ops [first, first + n) of `t` as one kernel; empty if the span
// cannot be fused (the anchor is ops[first]; the rest must be an elementwise chain on it whose
// intermediates nobody else reads).
std::vector<kernel_template> fitting_templates(const task& t, int64_t first, int64_t n);

// The program covers every op exactly once with fitting templates and in-range knobs. Unsafe knob
// values are allowed here: they are the agent's risk, caught by verification.
status check_program(const program& p, const task& t);

class grammar {
public:
  explicit grammar(const task& t);

  // Token ids that may follow `prefix`; empty when the prefix is complete or invalid.
  std::vector<int> valid_next(const std::vector<int>& prefix) const;
  // Same as a 0/1 mask over the vocabulary (size program_vocab().size()).
  std::vector<uint8_t> mask(const std::vector<int>& prefix) const;
  bool complete(const std::vector<int>& prefix) const;

private:
  const task& task_;
};

// The built-in random policy: samples uniformly among valid tokens at each step.
std::vector<int> sample_program(const task& t, std::mt19937_64& rng);

} // namespace kiln
