// Canonical graph hashes: task -> canonical text (values renamed i0.., p0.., o0..) -> FNV-1a 64.
// Stable across runs, machines and standard libraries (no std::hash), so hashes may be stored.
#pragma once

#include "data/task_spec.hpp"

#include <cstdint>
#include <string>

namespace kiln {

// The op graph without concrete sizes: op names, attrs, wiring, dtype, outputs, init kinds and the
// ranks of inputs and params. Tasks that differ only in sizes share it; the synthesis pipeline uses
// it to reject a graph already in a suite or already generated. Attrs that are sizes in disguise
// (layer_norm / rms_norm normalized_shape, reshape shape) contribute their length only.
uint64_t structure_hash(const task& t);

// Everything that changes the numbers or the cost: the structure plus shapes, randint bounds,
// tolerance and every attr verbatim. Not the name, level or origin. This keys stored
// torch.compile / eager baselines: equal content_hash means the same computation on inputs of the
// same shapes, so a baseline measured once is valid for every task that shares it. Caveat: param
// values are drawn from a seed derived from the task name unless the task gives a param_seed
// (default_param_seed; a param_seed is hashed), so two tasks with one content_hash may hold
// different param values — same cost, different outputs.
uint64_t content_hash(const task& t);

// 16 lowercase hex digits, zero-padded.
std::string hash_hex(uint64_t h);

// The canonical text each hash is computed over (for tests and debugging).
std::string structure_text(const task& t);
std::string content_text(const task& t);

// FNV-1a 64 of bytes; the primitive under both hashes.
uint64_t fnv1a64(const std::string& bytes);

} // namespace kiln
