# The build step of a KernelBench ModelNew submission (submission/kind_kernelbench.cpp), run by a
# compile worker in the compile sandbox (a folder of its own, landlock, seccomp, limits): the
# submission's module runs once, its load_inline / load calls compile their extensions into
# ext/<name>/, ModelNew is built with the problem's init inputs and checked against the task (its
# state_dict names, strictly, and one call's outputs), and everything the kernel host needs goes
# into one bundle, kernel.kb. The checks here are for clear errors only: this process runs the
# submission's code, so nothing trusted reads what it writes. For the cuda backend no device is
# used here (compile workers run beside timed trials): extensions are built for spec.json's
# cuda_arch, ModelNew is built on the cpu where it can be, and the forward check is left to the
# kernel host's load.
#   kernel.py + spec.json --run, build extensions, check--> kernel.kb (tar) | exit 1 + the reason
import json
import os
import sys
import tarfile
import traceback


# The reason for a failure is the whole log: what torch and the submission print goes nowhere
# (a compiler's errors reach us inside load_inline's exception).
_reason = os.fdopen(os.dup(1), "w")
_devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(_devnull, 1)
os.dup2(_devnull, 2)


def fail(why):
    _reason.write(why.rstrip() + "\n")
    _reason.flush()
    os._exit(1)


def short_trace(limit=6):
    lines = traceback.format_exc().strip().splitlines()
    return "\n".join(lines[-limit:])


# An error of this script's own (not the submission's, which is caught where it runs) still
# says what it was.
sys.excepthook = lambda kind, value, tb: fail(
    "ModelNew build: " + "".join(traceback.format_exception(kind, value, tb))[-1500:])

spec = json.load(open("spec.json"))
kb = spec["kernelbench"]
os.environ["TORCH_EXTENSIONS_DIR"] = os.path.abspath("ext")
cuda = spec.get("device") == "cuda"
if cuda:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TORCH_CUDA_ARCH_LIST"] = spec["cuda_arch"]

import importlib.util  # noqa: E402

import torch  # noqa: E402
import torch.utils.cpp_extension as cpp  # noqa: E402

# What a KernelBench problem may call that this machine lacks (einops.rearrange, torch 2's SDPA),
# as the importer supplied it when it traced the problem's Model (tools/kernelbench/compat.py;
# python -I keeps this folder off sys.path, so it is loaded by its file).
_compat = importlib.util.spec_from_file_location("kiln_compat", "compat.py")
compat = importlib.util.module_from_spec(_compat)
_compat.loader.exec_module(compat)
compat.provide()

built = {}  # extension name -> {"file": path in the bundle, "python_module": bool}
real = {"load_inline": cpp.load_inline, "load": cpp.load}


def build_dir(name):
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"extension name {name!r} is not a Python identifier")
    d = os.path.join("ext", name)
    os.makedirs(d, exist_ok=True)
    return os.path.abspath(d)


def building(which):
    def build(name, *args, **kwargs):
        kwargs["build_directory"] = build_dir(name)
        kwargs["verbose"] = False
        module = real[which](name, *args, **kwargs)
        built[name] = {"file": f"ext/{name}/{name}.so",
                       "python_module": kwargs.get("is_python_module", True)}
        return module
    return build


cpp.load_inline = building("load_inline")
cpp.load = building("load")

source = open("kernel.py").read()
namespace = {"__name__": "kiln_submission", "__file__": "submission.py"}
try:
    exec(compile(source, "submission.py", "exec"), namespace)
except SyntaxError as e:
    fail(f"submission.py:{e.lineno}: syntax error: {e.msg}")
except BaseException:
    fail("the submission fails when its module runs:\n" + short_trace())

model_new = namespace.get("ModelNew")
if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
    fail("the submission defines no class ModelNew(torch.nn.Module)")
try:
    model = model_new(*kb["init_inputs"])
except BaseException:
    # On cuda a ModelNew that makes device tensors in __init__ cannot be built without the
    # device: the kernel host builds it at load and says there why it fails, if it does.
    if not cuda:
        fail(f"ModelNew(*{kb['init_inputs']!r}) fails (the problem's get_init_inputs()):\n" +
             short_trace())
    model = None


def bundle():
    with open("manifest.json", "w") as f:
        json.dump({"extensions": built}, f)
    with tarfile.open("kernel.kb.tmp", "w") as tar:
        tar.add("kernel.py", "submission.py")
        tar.add("spec.json")
        tar.add("manifest.json")
        for e in built.values():
            tar.add(e["file"])
    os.rename("kernel.kb.tmp", "kernel.kb")
    sys.exit(0)


if model is None:
    bundle()

# Strict names: every param of the task must land in ModelNew by its state_dict name, and
# ModelNew may hold nothing the problem's Model does not.
keys = list(model.state_dict().keys())
missing = [k for k in kb["model_keys"] if k in kb["state_dict"].values() and k not in keys]
unexpected = [k for k in keys if k not in kb["model_keys"]]
if missing or unexpected:
    fail("ModelNew's state_dict does not match the problem's Model: " +
         (f"missing {missing}" if missing else "") + ("; " if missing and unexpected else "") +
         (f"unexpected {unexpected}" if unexpected else ""))

# A random plain tensor the Model draws in __init__ (an RNN's h0) is given by its path: ModelNew
# must hold one of the same shape there.
for name, path in kb.get("attributes", {}).items():
    held = model
    for part in path.split("."):
        held = getattr(held, part, None)
    want = next(d["shape"] for d in spec["params"] if d["name"] == name)
    if not isinstance(held, torch.Tensor) or list(held.shape) != want:
        fail(f"ModelNew has no tensor attribute '{path}' of shape {want}: the problem's Model "
             "draws it, and Kiln gives the task's draw there")

if cuda:
    bundle()

# One call on random inputs of the task's shapes: outputs of the wrong number or shape are a
# compile-stage error with the shapes, not a bare failed call later.
shapes = {d["name"]: d["shape"] for d in spec["inputs"]}
args = []
for a in kb["forward"]:
    if "input" in a:
        x = torch.rand(shapes[a["input"]])
        if a["input"] in kb.get("int64_inputs", []):  # class indices: 0 is one for any count
            x = torch.zeros(shapes[a["input"]], dtype=torch.int64)
        args.append(x < 0.5 if a["input"] in kb.get("bool_inputs", []) else x)
    else:
        args.append(a["value"])
try:
    with torch.no_grad():
        y = model(*args)
except BaseException:
    fail("ModelNew's forward fails on inputs of the task's shapes:\n" + short_trace())


def flat(v):  # nested tuples and lists in order, as the importer flattens the Model's outputs
    return [t for e in v for t in flat(e)] if isinstance(v, (tuple, list)) else [v]


ys = flat(y)
if len(ys) != len(spec["outputs"]):
    fail(f"ModelNew returns {len(ys)} outputs; the task has {len(spec['outputs'])}")
for out, got in zip(spec["outputs"], ys):
    if not isinstance(got, torch.Tensor):
        fail(f"output '{out['name']}': ModelNew returns a {type(got).__name__}, not a tensor")
    if list(got.shape) != out["shape"]:
        fail(f"output '{out['name']}': ModelNew returns shape {list(got.shape)}; the task's is "
             f"{out['shape']}")

bundle()
