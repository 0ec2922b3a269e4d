#include "submission/submission_kind.hpp"

namespace kiln {

// Each kind's entry lives in its own file.
extern const submission_kind_info program_kind;     // kind_program.cpp
extern const submission_kind_info cpu_source_kind;  // kind_source.cpp
extern const submission_kind_info cuda_source_kind; // kind_source.cpp
extern const submission_kind_info kernelbench_kind; // kind_kernelbench.cpp

const std::vector<const submission_kind_info*>& submission_kinds() {
  static const std::vector<const submission_kind_info*> table = {
      &program_kind, &cpu_source_kind, &cuda_source_kind, &kernelbench_kind};
  return table;
}

const submission_kind_info& info(submission_kind k) {
  for (const auto* e : submission_kinds())
    if (e->kind == k) return *e;
  return program_kind;
}

const char* to_string(submission_kind k) { return info(k).name; }

std::optional<submission_kind> submission_kind_from(const std::string& name) {
  for (const auto* e : submission_kinds())
    if (name == e->name) return e->kind;
  return std::nullopt;
}

namespace {

// The first line with its runs of blanks made one space and its ends trimmed: a marker written
// "//! kiln-source   cuda \r" is still that marker.
std::string first_line_normalised(const std::string& text) {
  std::string line = text.substr(0, text.find('\n')), out;
  for (char c : line) {
    bool blank = c == ' ' || c == '\t' || c == '\r';
    if (blank && (out.empty() || out.back() == ' ')) continue;
    out += blank ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

} // namespace

const submission_kind_info& recognise(const std::string& text) {
  if (text.rfind("//!", 0) != 0 && text.rfind("#!", 0) != 0) return program_kind;
  std::string line = first_line_normalised(text);
  for (const auto* e : submission_kinds())
    if (e->marker && line == e->marker) return *e;
  return program_kind;
}

bool serves(const submission_kind_info& k, backend_kind b) { return !k.backend || *k.backend == b; }

artifact_loader loader_of(const submission_kind_info& k, backend_kind b) {
  if (!serves(k, b)) return artifact_loader::none;
  return b == backend_kind::cpu ? k.loader_cpu : k.loader_cuda;
}

std::vector<const submission_kind_info*> source_kinds_for(backend_kind b) {
  std::vector<const submission_kind_info*> out;
  for (const auto* e : submission_kinds())
    if (e->file_extension && serves(*e, b)) out.push_back(e);
  return out;
}

const submission_kind_info& default_source_kind(backend_kind b) {
  auto kinds = source_kinds_for(b);
  return kinds.empty() ? program_kind : *kinds.front();
}

std::string as_submission(const submission_kind_info& k, const std::string& source) {
  if (!k.marker || source.rfind(k.marker, 0) == 0) return source;
  return std::string(k.marker) + "\n" + source;
}

expected<compile_request> prepare_submission(const std::string& text, const task& spec,
                                             backend_kind backend) {
  const auto& k = recognise(text);
  if (!serves(k, backend))
    return error{std::string("a ") + k.name + " submission runs on the " + to_string(*k.backend) +
                 " backend; this pool serves " + to_string(backend)};
  return k.prepare(text, spec, backend);
}

expected<built_artifact> build_submission(const compile_request& r, const build_options& opts) {
  const auto& k = info(r.kind);
  if (!serves(k, r.backend))
    return error{std::string("internal: a ") + k.name + " request for the " + to_string(r.backend) +
                 " backend"};
  return k.build(r, opts);
}

} // namespace kiln
