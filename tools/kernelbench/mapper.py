"""The mapping context: Mapper, which maps a traced graph's nodes to Kiln ops."""
import math
import re

import torch
import torch.fx as fx

import torch_baselines as tb
from kernelbench_draws import Blocked, close_enough, torch_fan_in

from .registry import FUNCS, INPLACE_FUNCS, METHODS, MODULES
from .values import C, Mask, MinMax, ParamRef, T, Unknown, _const, _show


class Mapper:
    def __init__(self, gm, meta_env, inits, model_prefix):
        self.gm, self.meta, self.inits, self.prefix = gm, meta_env, inits, model_prefix
        self.val = {}
        self.inputs, self.params, self.ops = [], [], []
        self.names, self.blockers, self.rewrites = set(), [], []
        self.param_names = {}    # id(tensor) -> kiln name
        self.param_paths = {}    # kiln name -> model path (to load Kiln's values into)
        self.const_params = {}   # kiln name -> constant tensor made in forward (ones / zeros)
        self.binary = set()      # kiln names of 0 / 1 valued tensors (masks) and their views
        self.index_values = set()
        self.node = None
        self.k = 0

    # names
    def fresh(self, base):
        base = re.sub(r"\W", "_", base) or "v"
        if base[0].isdigit():
            base = "v_" + base
        name, k = base, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def shape_of(self, node):
        v = self.meta.get(node)
        return list(v.shape) if isinstance(v, torch.Tensor) else None

    def block(self, kind, what, detail=""):
        raise Blocked(kind, what, detail)

    def rewrite(self, text):
        if text not in self.rewrites:
            self.rewrites.append(text)

    # tensors
    def tensor(self, v, what="argument"):
        """A T for an op argument (declaring a param on first use), or Unknown."""
        if isinstance(v, T):
            if v.index:
                self.block("missing_attr", "argmax/argmin result used by another op",
                           "Kiln's index tensors may only be task outputs")
            return v
        if isinstance(v, Unknown):
            return v
        if isinstance(v, ParamRef):
            return self.declare_param(v)
        if isinstance(v, C) and isinstance(v.value, torch.Tensor):
            return self.const_tensor(v.value)
        self.block("missing_attr", f"{what}: a constant where a tensor is needed",
                   f"{_show(v)}")

    def declare_param(self, ref):
        t = ref.tensor
        if id(t) in self.param_names:
            return T(self.param_names[id(t)], ref.shape)
        path = ref.path[len(self.prefix):] if ref.path.startswith(self.prefix) else ref.path
        init = self.param_init(ref, path)
        name = self.fresh(path.replace(".", "_"))
        decl = {"name": name, "shape": list(t.shape)}
        decl.update(init)
        self.params.append(decl)
        if init.get("structure") in ("triu", "tril") and init["init"] == "ones":
            self.binary.add(name)
        self.param_names[id(t)] = name
        self.param_paths[name] = path
        return T(name, ref.shape)

    def param_init(self, ref, path):
        t = ref.tensor
        if t.dtype != torch.float32:
            self.block("init", f"{str(t.dtype).replace('torch.', '')} param",
                       f"param '{path}' is {t.dtype}")
        how = self.init_of(ref)
        shape = list(t.shape)
        if how[0] == "uniform":
            lo, hi = how[1], how[2]
            if lo == 0.0 and hi == 1.0:
                init = {"init": "uniform"}
            elif close_enough(-lo, hi) and len(shape) >= 2 and close_enough(hi, 1 / math.sqrt(
                    torch_fan_in(shape))):
                init = {"init": "kaiming_uniform"}
            elif (close_enough(-lo, hi) and ref.of is not None and
                  close_enough(hi, 1 / math.sqrt(torch_fan_in(list(ref.of.shape))))):
                w = self.declare_param(ref.of)
                init = {"init": "bias_uniform", "of": w.name}
            elif hi > lo:
                init = {"init": "uniform", "scale": hi - lo}
                if lo != 0.0:
                    init["shift"] = lo
            else:
                self.block("init", "param init: uniform with empty bounds",
                           f"param '{path}': U({lo:.6g}, {hi:.6g})")
        elif how[0] == "normal":
            init = {"init": "normal"}
            if how[2] <= 0.0:
                self.block("init", "param init: normal with std <= 0",
                           f"param '{path}': N({how[1]}, {how[2]})")
            if how[2] != 1.0:
                init["scale"] = how[2]
            if how[1] != 0.0:
                init["shift"] = how[1]
        elif how[0] == "mask":
            init = {"init": "ones", "structure": how[1]}
        elif how[0] == "constant":
            if how[1] not in (0.0, 1.0):
                self.block("init", "param init: constant fill",
                           f"param '{path}' = {how[1]!r} everywhere; Kiln's constant inits "
                           "are ones and zeros")
            init = {"init": "ones" if how[1] == 1.0 else "zeros"}
        else:
            self.block("init", "param init: " + how[1], f"param '{path}': {how[2]}")
        return init

    def init_of(self, ref):
        path = ref.path[len(self.prefix):] if ref.path.startswith(self.prefix) else ref.path
        how = self.inits.get(path)
        if how is None:
            return ("other", "unknown", "not a parameter or buffer of the model")
        return how

    @staticmethod
    def sanity(t, init, path):
        """The values agree with the init recorded (catches changes no recorder saw)."""
        with torch.no_grad():
            x = t.detach().double()
            kind, ok = init["init"], True
            if kind in ("ones", "zeros"):
                want = torch.full_like(x, 1.0 if kind == "ones" else 0.0)
                if init.get("structure") in ("triu", "tril") and x.dim() >= 2:
                    want = want.triu() if init["structure"] == "triu" else want.tril()
                ok = bool((x == want).all())
            elif kind == "uniform":
                lo, width = init.get("shift", 0.0), init.get("scale", 1.0)
                slack = 1e-6 * max(1.0, abs(lo) + width)
                ok = bool(((x >= lo - slack) & (x <= lo + width + slack)).all())
            elif kind in ("kaiming_uniform", "bias_uniform"):
                ok = bool(torch.isfinite(x).all())
            elif kind == "normal":
                mean, std = init.get("shift", 0.0), init.get("scale", 1.0)
                ok = bool(torch.isfinite(x).all())
                if x.numel() >= 1000:
                    ok = ok and abs(float(x.mean()) - mean) < 0.2 * std and \
                        0.8 * std < float(x.std()) < 1.2 * std
        if not ok:
            raise Blocked("init", "param values do not match their recorded init",
                          f"param '{path}' ({kind})")

    def const_tensor(self, t):
        """A tensor constant made in forward (torch.ones(...)): a ones / zeros param."""
        if t.device.type == "meta":
            raise Blocked("missing_op", "tensor constant made in forward", "")
        if t.dtype == torch.float32 and t.numel() and bool((t == 1).all()):
            init = "ones"
        elif t.dtype == torch.float32 and t.numel() and bool((t == 0).all()):
            init = "zeros"
        else:
            self.block("missing_op", "tensor constant made in forward",
                       f"shape {list(t.shape)}, {t.dtype}")
        name = self.fresh(f"const_{init}")
        self.params.append({"name": name, "shape": list(t.shape), "init": init})
        self.const_params[name] = t
        self.rewrite(f"constant {init} tensor made in forward -> param {init}")
        return T(name, list(t.shape))

    def emit(self, op, args, attrs=None, shape=None, index=False, view=False):
        """One Kiln op; its result T. Unknown in, Unknown out. view: PyTorch's result shares its
        input's storage (reshape, transpose, slice...), so an in-place op on it is refused."""
        ts = [self.tensor(a) for a in args]
        if any(isinstance(a, Unknown) for a in ts):
            return Unknown(shape)
        if op not in tb.OPS:
            raise AssertionError(f"internal: op {op} is not in torch_baselines.OPS")
        name = self.fresh(f"y{self.k}")
        self.k += 1
        entry = {"out": name, "op": op, "args": [a.name for a in ts]}
        if attrs:
            entry["attrs"] = attrs
        self.ops.append(entry)
        if op in ("slice", "reshape", "permute", "transpose", "flatten") and \
                ts[0].name in self.binary:
            self.binary.add(name)
        if index:
            self.index_values.add(name)
        return T(name, shape, index=index, view=view)

    # ---- the graph
    def run(self, placeholders):
        for node in self.gm.graph.nodes:
            self.node = node
            try:
                if node.op == "placeholder":
                    self.val[node] = placeholders[node.target]
                elif node.op == "get_attr":
                    self.val[node] = self.get_attr(node)
                elif node.op == "output":
                    return self.outputs(node.args[0])
                else:
                    self.val[node] = self.call(node)
            except Blocked as b:
                self.blockers.append(b)
                self.val[node] = Unknown(self.shape_of(node))
        return []

    def arg(self, a):
        if isinstance(a, fx.Node):
            return self.val[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(x) for k, x in a.items()}
        if isinstance(a, slice):
            return slice(self.arg(a.start), self.arg(a.stop), self.arg(a.step))
        return C(a)

    def get_attr(self, node):
        obj = self.gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        path = node.target[len(self.prefix):] if node.target.startswith(self.prefix) else None
        if isinstance(obj, torch.Tensor) and path in self.inits:
            return ParamRef(node.target, obj)
        return C(obj)  # a constant tracing made (torch.tensor(c) in forward) or a non-tensor

    def call(self, node):
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            handler = MODULES.get(type(mod))
            if handler is None:
                self.block("missing_op", f"nn.{type(mod).__name__}",
                           f"module '{node.target[len(self.prefix):]}'")
            return handler(self, mod, node.target, args, kwargs)
        flat = list(args) + list(kwargs.values())
        if not any(self._has_tensor(a) for a in flat):
            v = self.meta.get(node)  # a constant: its value from the meta run
            if isinstance(v, torch.Tensor):
                if v.dim() == 0 and node.target in (torch.tensor, torch.as_tensor) \
                        and isinstance(_const(args[0], "tensor"), (int, float)):
                    return C(float(_const(args[0], "tensor")))
                if node.target in (torch.ones, torch.zeros):
                    return C((torch.ones if node.target is torch.ones else torch.zeros)(
                        *_const(args, "size"), **{k: _const(x, k) for k, x in kwargs.items()}))
                self.block("missing_op", "tensor constant made in forward",
                           f"{_qualname(node)}")
            return C(v)
        if node.op == "call_method":
            name = node.target
            if name.endswith("_") and not name.endswith("__") and name[:-1] in METHODS:
                out = METHODS[name[:-1]](self, args, kwargs, name[:-1])
                self.inplace(node, out)
                return out
            if name not in METHODS:
                self.block("missing_op", f"Tensor.{name}", _where(node))
            return METHODS[name](self, args, kwargs, name)
        handler = FUNCS.get(node.target)
        if handler is None:
            self.block("missing_op", _qualname(node), _where(node))
        out = handler[0](self, args, kwargs, handler[1])
        if node.target in INPLACE_FUNCS:
            self.inplace(node, out)
        return out

    def _has_tensor(self, a):
        if isinstance(a, (T, Unknown, ParamRef, MinMax, Mask)):
            return True
        if isinstance(a, (list, tuple)):
            return any(self._has_tensor(x) for x in a)
        if isinstance(a, dict):
            return any(self._has_tensor(x) for x in a.values())
        if isinstance(a, slice):
            return any(self._has_tensor(x) for x in (a.start, a.stop, a.step))
        return False

    def inplace(self, node, out):
        """x.relu_() and friends: later uses of x see the new value."""
        src = node.args[0]
        if isinstance(src, fx.Node):
            v = self.val.get(src)
            if isinstance(v, T) and v.view:
                self.block("missing_attr", "in-place op on a view",
                           f"{node.target} on the result of a view op (its base changes too)")
            if isinstance(v, ParamRef):
                self.block("missing_attr", "in-place op on a parameter", node.target)
            self.val[src] = out

    def outputs(self, out):
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        names = []
        for i, v in enumerate(outs):
            v = self.arg(v) if isinstance(v, fx.Node) else self.arg(v)
            if isinstance(v, Unknown):
                continue
            if not isinstance(v, T) or v.name not in {o["out"] for o in self.ops}:
                self.blockers.append(Blocked(
                    "missing_op", "output is not an op result",
                    f"output {i} is {'an input or param' if isinstance(v, (T, ParamRef)) else 'a constant'}"))
                continue
            if v.name in names:
                self.blockers.append(Blocked("missing_op", "the same value output twice",
                                             f"output {i}"))
                continue
            names.append(v.name)
        return names


def _qualname(node):
    t = node.target
    try:
        name = fx.node._get_qualified_name(t)
    except Exception:
        name = getattr(t, "__name__", repr(t))
    name = re.sub(r"^_operator\.", "operator.", name)
    name = re.sub(r"^torch\._C\._nn\.", "F.", name)
    name = re.sub(r"^torch\.nn\.functional\.", "F.", name)
    name = re.sub(r"^torch\._C\._special\.special_", "torch.special.", name)
    name = re.sub(r"^torch\._C\._linalg\.linalg_", "torch.linalg.", name)
    name = re.sub(r"^torch\.functional\.", "torch.", name)
    if name.startswith("operator."):
        sym = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=",
               "floordiv": "//", "mod": "%", "and_": "&", "or_": "|", "invert": "~"}
        s = sym.get(name.split(".", 1)[1])
        if s:
            return f"tensor {s} (operator.{name.split('.', 1)[1]})"
    return name


def _where(node):
    st = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    return f"node {node.name}" + (f" ({st.strip().splitlines()[-1].strip()})" if st else "")
