# The Python side of a kernel host that runs KernelBench ModelNew submissions
# (kernel_host/python_host.cpp runs this in its embedded interpreter). Before the sandbox: torch
# is imported and its thread pool started (no thread may be made once seccomp is on). At load,
# inside the sandbox: the bundle (submission/kernelbench_build.py made it) is unpacked into the
# scratch folder, load_inline / load return the extensions built at compile time (no compiler
# runs here), ModelNew is built with the problem's init inputs and given the task's params by
# their state_dict names. A call runs forward on views of the job's shared buffers and copies its
# outputs into theirs. Errors go to the C++ side as text in `status`, never as exceptions.
# On cuda the buffers are device memory (the job's region, imported by the C++ side) and the
# model runs on torch's default stream of the primary context: the legacy default stream the
# host's events time. Load ends with one untimed forward, so the libraries and kernels it uses
# are loaded before the run seccomp filter (as the cuDNN steps of a plan are warmed).
#   bundle --load--> model + views --call--> outputs written in place
import ctypes
import importlib.machinery
import importlib.util
import json
import os
import tarfile

import torch
import torch.utils.cpp_extension as _cpp

_kiln = {"device": torch.device("cpu")}


def _kiln_start(threads, cuda_device):
    torch.set_num_threads(threads)
    # A parallel op now, so OpenMP's workers exist before seccomp forbids new threads.
    a = torch.ones(256, 256)
    (a @ a).sum().item()
    # And a reduction whose inner loop asks for the thread count inside the parallel region (as
    # logsumexp's amax does): each worker then runs ATen's lazy per-thread set-up, which starts a
    # thread pool, now. Left to the first such op under seccomp, it waits forever for a thread
    # that may not start (a ModelNew with a logsumexp timed out).
    torch.ones(max(threads, 1) * 64, 4096).logsumexp(dim=1).sum().item()
    if cuda_device >= 0:
        # torch's context is the primary one the C++ side made; cuBLAS and the caching
        # allocator start here, before the sandbox.
        torch.cuda.set_device(cuda_device)
        _kiln["device"] = torch.device("cuda", cuda_device)
        a = a.to(_kiln["device"])
        (a @ a).sum().item()


def _kiln_read_paths(addr, length):
    # Folders this interpreter reads that the sandbox's system list may lack (a venv, conda, a
    # pip prefix): one per line, for landlock's read rules.
    import sys
    dirs = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(torch.__file__))}
    dirs.update(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))
    _say(addr, length, "\n".join(sorted(dirs)))


def _say(status_addr, status_len, text):
    data = text.encode("utf-8", "replace")[:status_len - 1] + b"\0"
    ctypes.memmove(status_addr, data, len(data))


class _DeviceArray:
    # CUDA's array interface over memory torch did not allocate (the job's device region).
    def __init__(self, addr, shape, dtype):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "data": (addr, False), "version": 2,
            "typestr": "<i8" if dtype == torch.int64 else "<f4"}


def _owner(model, path):
    """(module, attribute name) of a dotted attribute path of the model."""
    *mods, leaf = path.split(".")
    for part in mods:
        model = getattr(model, part)
    return model, leaf


def _view(addr, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    device = _kiln["device"]
    if n == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    if device.type == "cuda":
        return torch.as_tensor(_DeviceArray(addr, shape, dtype), device=device)
    raw = (ctypes.c_char * (n * torch.empty((), dtype=dtype).element_size())).from_address(addr)
    return torch.frombuffer(raw, dtype=dtype).view(shape)


def _prebuilt(extensions, root):
    def load(name, *args, **kwargs):
        e = extensions.get(name)
        if e is None:
            raise RuntimeError(f"extension '{name}' was not built at compile time")
        path = os.path.join(root, e["file"])
        if not e["python_module"]:
            torch.ops.load_library(path)
            return None
        spec = importlib.util.spec_from_file_location(
            name, path, loader=importlib.machinery.ExtensionFileLoader(name, path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


def _kiln_load(bundle, inputs, params, outputs, status_addr, status_len):
    try:
        root = os.path.join(os.path.dirname(bundle), "kb")
        with tarfile.open(bundle) as tar:
            for m in tar.getmembers():
                if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or
                                                                               m.isdir()):
                    raise RuntimeError(f"bundle member '{m.name}' is not a plain relative file")
            tar.extractall(root)
        spec = json.load(open(os.path.join(root, "spec.json")))
        manifest = json.load(open(os.path.join(root, "manifest.json")))
        kb = spec["kernelbench"]
        _cpp.load_inline = _cpp.load = _prebuilt(manifest["extensions"], root)
        # Kiln's reference is exact float32 (TF32 off, data/reference.cpp), and so is PyTorch in
        # here by default: with cuDNN's TF32 default an honest ModelNew that leaves a convolution
        # or an RNN to PyTorch misses the reference by TF32's rounding. A submission may turn it
        # on itself, and is judged by the task's tolerance as any other.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        source = open(os.path.join(root, "submission.py")).read()
        namespace = {"__name__": "kiln_submission", "__file__": "submission.py"}
        exec(compile(source, "submission.py", "exec"), namespace)
        device = _kiln["device"]
        model = namespace["ModelNew"](*kb["init_inputs"]).to(device)
        state = model.state_dict()
        unexpected = [k for k in state if k not in kb["model_keys"]]
        if unexpected:  # the build checked this where it could build ModelNew without the device
            raise RuntimeError(f"ModelNew's state_dict has entries the problem's Model has not: "
                               f"{unexpected}")
        with torch.no_grad():
            # Each param into ModelNew in place: by its state_dict key, or (a random plain tensor
            # the Model draws, an RNN's h0) by its attribute path; one an importer rewrite made
            # (a mask) has neither: the Model never held it.
            for d, addr in zip(spec["params"], params):
                key = kb["state_dict"].get(d["name"])
                path = kb.get("attributes", {}).get(d["name"])
                if key is not None:
                    if key not in state:
                        raise RuntimeError(f"ModelNew has no state_dict entry '{key}'")
                    held = state[key]
                elif path is not None:
                    held = getattr(*_owner(model, path), None)
                    if not isinstance(held, torch.Tensor) or list(held.shape) != d["shape"]:
                        raise RuntimeError(f"ModelNew has no tensor attribute '{path}' of shape "
                                           f"{d['shape']}")
                else:
                    continue
                held.copy_(_view(addr, d["shape"], torch.float32).view(held.shape))
        views = {d["name"]: _view(a, d["shape"], torch.float32)
                 for d, a in zip(spec["inputs"], inputs)}
        args = []
        for a in kb["forward"]:
            if "input" in a:
                v = views[a["input"]]
                if a["input"] in kb.get("bool_inputs", []):
                    args.append(lambda v=v: v != 0)
                elif a["input"] in kb.get("int64_inputs", []):  # class indices, drawn as floats
                    args.append(lambda v=v: v.long())
                else:
                    args.append(lambda v=v: v)
            else:
                args.append(lambda value=a["value"]: value)
        outs = [_view(a, d["shape"], torch.int64 if d["dtype"] == "int64" else torch.float32)
                for d, a in zip(spec["outputs"], outputs)]
        _kiln.update(model=model, args=args, outs=outs)
        if device.type == "cuda":
            try:
                _forward()
                torch.cuda.synchronize()
            except BaseException as e:
                _say(status_addr, status_len,
                     f"ModelNew's forward: {type(e).__name__}: {e} (its untimed first call, at load)")
    except BaseException as e:
        _say(status_addr, status_len, f"{type(e).__name__}: {e}")


def _flat(y):
    """The outputs in order, nested tuples and lists flattened (the task's outputs are the
    Model's, flattened the same way by the importer)."""
    return [t for e in y for t in _flat(e)] if isinstance(y, (tuple, list)) else [y]


def _forward():
    with torch.no_grad():
        y = _kiln["model"](*[a() for a in _kiln["args"]])
        ys = _flat(y)
        if len(ys) != len(_kiln["outs"]):
            raise RuntimeError(f"ModelNew returns {len(ys)} outputs; the task has "
                               f"{len(_kiln['outs'])}")
        for out, got in zip(_kiln["outs"], ys):
            if not isinstance(got, torch.Tensor):
                raise RuntimeError(f"ModelNew returns a {type(got).__name__}, not a tensor")
            if got.shape != out.shape:
                raise RuntimeError(f"ModelNew returns shape {list(got.shape)}; the task's is "
                                   f"{list(out.shape)}")
            out.copy_(got)


def _kiln_call(status_addr, status_len):
    try:
        _forward()
    except BaseException as e:
        _say(status_addr, status_len, f"{type(e).__name__}: {e}")
