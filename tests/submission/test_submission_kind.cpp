// The kind of a submission: one table decides recognition, backends, loaders and file names.
#include "skills/grammar.hpp"
#include "skills/program.hpp"
#include "submission/submission_kind.hpp"

#include <doctest/doctest.h>
#include <set>

using namespace kiln;

namespace {

// Source kinds never read the task; the program kind fails on a bad marker before it does.
task relu_task() {
  task t;
  t.name = "relu";
  return t;
}

} // namespace

TEST_CASE("the marker line picks the kind and keeps the text whole") {
  CHECK(recognise("//! kiln-source cpu\nint x;\n").kind == submission_kind::cpu_source);
  CHECK(recognise("//! kiln-source   cuda \r\n__global__ void k() {}").kind ==
        submission_kind::cuda_source);
  CHECK(recognise("kernel ops 1 elementwise end").kind == submission_kind::program);
  CHECK(recognise(" //! kiln-source cpu\n").kind == submission_kind::program); // must open it
  CHECK(recognise("//! kiln-source cpux\n").kind == submission_kind::program);
  auto r = prepare_submission("//! kiln-source cpu\nint x;\n", relu_task(), backend_kind::cpu);
  REQUIRE(r);
  CHECK(r->kind == submission_kind::cpu_source);
  CHECK(r->source == "//! kiln-source cpu\nint x;\n");
}

TEST_CASE("a marker that names no kind is an error that lists the markers") {
  auto bad = prepare_submission("//! kiln-source rocm\n", relu_task(), backend_kind::cpu);
  REQUIRE_FALSE(bad);
  CHECK(bad.message().find("'//! kiln-source rocm'") != std::string::npos);
  CHECK(bad.message().find("'//! kiln-source cpu'") != std::string::npos);
  CHECK(bad.message().find("'//! kiln-source cuda'") != std::string::npos);
  CHECK_FALSE(prepare_submission("//! kiln-source\n", relu_task(), backend_kind::cpu));
}

TEST_CASE("a kind runs only on its backend, and the error names both") {
  auto other = prepare_submission("//! kiln-source cuda\nint x;\n", relu_task(), backend_kind::cpu);
  REQUIRE_FALSE(other);
  CHECK(other.message().find("cuda-source submission runs on the cuda backend; this pool serves "
                             "cpu") != std::string::npos);
  CHECK(loader_of(info(submission_kind::cuda_source), backend_kind::cpu) == artifact_loader::none);
  CHECK(loader_of(info(submission_kind::cpu_source), backend_kind::cpu) ==
        artifact_loader::cpu_shared_object);
  CHECK(loader_of(info(submission_kind::program), backend_kind::cuda) ==
        artifact_loader::cuda_cubin_plan);
  CHECK(loader_of(info(submission_kind::cuda_source), backend_kind::cuda) ==
        artifact_loader::cuda_shared_object);
}

TEST_CASE("kernel-language programs are never taken for source, and the marker is added once") {
  CHECK_FALSE(parse_program("//! kiln-source cpu\nkernel ops 1 elementwise end"));
  const auto& cuda = default_source_kind(backend_kind::cuda);
  std::string s = as_submission(cuda, "int x;\n");
  CHECK(s == "//! kiln-source cuda\nint x;\n");
  CHECK(as_submission(cuda, s) == s);
  CHECK(recognise(s).kind == submission_kind::cuda_source);
}

TEST_CASE("the table is consistent: names, markers and file names are unique, loaders match") {
  std::set<std::string> names, markers, files;
  for (const auto* k : submission_kinds()) {
    CHECK(names.insert(k->name).second);
    CHECK(submission_kind_from(k->name) == k->kind);
    CHECK(&info(k->kind) == k);
    CHECK(static_cast<bool>(k->prepare));
    CHECK(static_cast<bool>(k->build));
    if (k->marker) {
      CHECK(markers.insert(k->marker).second);
      CHECK(&recognise(std::string(k->marker) + "\nbody") == k);
    }
    for (auto b : {backend_kind::cpu, backend_kind::cuda}) {
      auto l = loader_of(*k, b);
      CHECK((l == artifact_loader::none) == !serves(*k, b));
      if (l != artifact_loader::none) {
        CHECK(needs_cuda(l) == (b == backend_kind::cuda));
        CHECK(artifact_loader_from(to_string(l)) == l);
        if (k->file_extension)
          CHECK(files.insert(std::string(to_string(b)) + k->file_extension).second);
      }
    }
  }
  CHECK(submission_kinds().front()->kind == submission_kind::program);
  CHECK_FALSE(submission_kind_from("triton"));
}

TEST_CASE("a ModelNew module is the kernelbench kind, only for tasks with a [kernelbench] table") {
  const auto& kb = info(submission_kind::kernelbench);
  std::string module = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n";
  std::string text = as_submission(kb, module);
  CHECK(text == "#! kiln-source kernelbench\n" + module);
  CHECK(recognise(text).kind == submission_kind::kernelbench);
  CHECK(recognise(module).kind == submission_kind::program); // no marker, no guessing
  auto unknown = prepare_submission("#! kiln-source triton\n", relu_task(), backend_kind::cpu);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.message().find("'#! kiln-source kernelbench'") != std::string::npos);

  task t = relu_task();
  auto none = prepare_submission(text, t, backend_kind::cpu);
  REQUIRE_FALSE(none);
  CHECK(none.message().find("needs a task imported from KernelBench") != std::string::npos);
  tensor_decl x;
  x.name = "x";
  x.shape = {4, 8};
  t.inputs.push_back(x);
  t.ops.push_back({"y", "relu", {"x"}, {}, {4, 8}});
  t.outputs = {"y"};
  t.kernelbench_json = R"({"source":"class Model: pass","init_inputs":[],)"
                       R"("forward":[{"input":"x"}],"state_dict":{},"model_keys":[]})";
  auto r = prepare_submission(text, t, backend_kind::cpu);
  REQUIRE_MESSAGE(r, r.message());
  CHECK(r->kind == submission_kind::kernelbench);
  CHECK(r->source == module); // the marker is not Python's: line numbers stay the file's
  CHECK(r->plan_json.find(R"("outputs":[{"dtype":"float32","name":"y","shape":[4,8]}])") !=
        std::string::npos);
  CHECK(r->plan_json.find(R"("device":"cpu")") != std::string::npos);
  CHECK(loader_of(kb, backend_kind::cpu) == artifact_loader::kernelbench_module);
  CHECK(needs_python(artifact_loader::kernelbench_module));
  CHECK_FALSE(needs_cuda(artifact_loader::kernelbench_module));
  // On cuda the same kind, its own loader: a Python host on the device.
  auto rc = prepare_submission(text, t, backend_kind::cuda);
  REQUIRE_MESSAGE(rc, rc.message());
  CHECK(rc->plan_json.find(R"("device":"cuda")") != std::string::npos);
  CHECK(loader_of(kb, backend_kind::cuda) == artifact_loader::kernelbench_module_cuda);
  CHECK(needs_python(artifact_loader::kernelbench_module_cuda));
  CHECK(needs_cuda(artifact_loader::kernelbench_module_cuda));
  CHECK(artifact_loader_from("kernelbench-module-cuda") ==
        artifact_loader::kernelbench_module_cuda);
  CHECK(&default_source_kind(backend_kind::cuda) == &info(submission_kind::cuda_source));
}
