"""Draws under which the check can tell a kernel from a constant, for a problem that is degenerate
under KernelBench's own: ReLU on torch.rand inputs is the identity (a copy passes), and VGG16 at
torch.nn's default init forgets its input (a memorized output passes), and a cumprod of torch.rand
inputs underflows to zeros. Such a problem is imported again with its inputs drawn from N(0, 1),
its weights by He's rule, or both (a product first tries its inputs near 1); the first that the
check accepts is written, and the task's description and the report say what was redrawn and why.
Not tried: scaling each draw by one random scalar, which would let an output that sees its
input only through a mean over many elements (a global average pool) change between draws, but
leaves every batch row the same function of that one scalar: a kernel could compute one row, or
look the scalar up in a table made offline, and pass.
The Model, its shapes and its work are unchanged: only the values Kiln draws for it.

degenerate result -> each variant: the mapper changes the declared draws -> the whole check again
-> the first variant imported, else the first result with what each variant gave
"""
import math
import re

from kernelbench_draws import Blocked

# torch.nn's kaiming_uniform_(a=sqrt(5)) draws weights of variance 1 / (3 fan_in), so a ReLU
# network's signal shrinks about sixfold per layer; He's N(0, 2 / fan_in) keeps it.
HE_GAIN = math.sqrt(2)
# Last, the params drawn again from another seed (a task's param_seed), each as the Model's own
# init: a bias torch.randn drew may push every output past a clamp (KernelBench's L2 58).
VARIANTS = ("normal_inputs", "he_weights", "normal_inputs+he_weights", "param_seed:1",
            "param_seed:2")
# A product over a long dim (cumprod) of U[0, 1) inputs underflows to zero within ~100 factors, so
# zeros pass: such a problem first tries inputs near 1, U[1 - e, 1 + e) with e = sqrt(3 / n) for
# the input's longest dim n, whose product over n factors has a log of variance about 1.
UNIT_PRODUCT = "unit_product_inputs"
_FIXED = ("ones", "zeros")  # param inits no seed changes
_PRODUCT = re.compile(r"\bcumprod\b|\bprod\(")
_PLAIN = ("scale", "shift", "random_scale", "softmax", "structure")  # modifiers: such a draw is kept as made


def _normal_inputs(inputs, skip):
    """Inputs drawn U[0, 1) with no modifier, drawn N(0, 1) instead: their names."""
    changed = []
    for d in inputs:
        if d["name"] in skip or d.get("init") != "uniform" or any(k in d for k in _PLAIN):
            continue
        d["init"] = "normal"
        changed.append(d["name"])
    return changed


def variants_for(code):
    """The variants to try, in order, for a problem of this source."""
    return ((UNIT_PRODUCT,) if _PRODUCT.search(code) else ()) + VARIANTS


def _unit_product_inputs(inputs, skip):
    """Inputs drawn U[0, 1) with no modifier, drawn U[1 - e, 1 + e) instead: [(name, e, n)]."""
    changed = []
    for d in inputs:
        if d["name"] in skip or d.get("init") != "uniform" or any(k in d for k in _PLAIN):
            continue
        n = max(d["shape"], default=1)
        e = math.sqrt(3.0 / max(n, 3))
        d["scale"], d["shift"] = 2 * e, 1 - e
        changed.append((d["name"], e, n))
    return changed


def _he_weights(params):
    """kaiming_uniform weights drawn N(0, 2 / fan_in) instead (kaiming_normal_ for ReLU, fan_in
    as torch.nn counts it: shape[1] x the kernel's size): their names."""
    changed = []
    for d in params:
        if d.get("init") == "kaiming_uniform" and len(d["shape"]) >= 2:
            fan_in = math.prod(d["shape"][1:])
            d["init"], d["scale"] = "normal", HE_GAIN / math.sqrt(fan_in)
            changed.append(d["name"])
    return changed


def apply(redraw, inputs, params, skip=()):
    """Changes the declared draws as redraw = (variant, why) says. Returns (the text the task's
    description gets, the names of the params redrawn: their values no longer follow the Model's
    own init, the task's param_seed or None); Blocked (kind "redraw") when the variant changes
    none of this problem's draws. skip: input names not to touch (bool masks, int64 indices)."""
    if not redraw:
        return "", set(), None
    variant, why = redraw
    said, weights = [], []
    if variant.startswith("param_seed:"):
        if all(d.get("init") in _FIXED for d in params):
            raise Blocked("redraw", f"{variant}: nothing to redraw", "no param drawn at random")
        seed = int(variant.split(":")[1])
        return (f"; params drawn by Kiln from seed {seed}, each as the Model's own init (under "
                f"the seed of the task's name: {why})"), set(), seed
    if variant == UNIT_PRODUCT:
        names = _unit_product_inputs(inputs, set(skip))
        if not names:
            raise Blocked("redraw", f"{variant}: nothing to redraw", "no input drawn U[0, 1)")
        said += [f"input {n} drawn U[1 - {e:.3g}, 1 + {e:.3g}), not U[0, 1) (a product of its "
                 f"{k} factors then stays near 1)" for n, e, k in names]
    if "normal_inputs" in variant:
        names = _normal_inputs(inputs, set(skip))
        if not names:
            raise Blocked("redraw", f"{variant}: nothing to redraw", "no input drawn U[0, 1)")
        said.append(f"input {', '.join(names)} drawn N(0, 1), not U[0, 1)")
    if "he_weights" in variant:
        weights = _he_weights(params)
        if not weights:
            raise Blocked("redraw", f"{variant}: nothing to redraw", "no kaiming_uniform weight")
        said.append(f"{len(weights)} weight(s) drawn N(0, 2 / fan_in) (He), not torch.nn's "
                    "kaiming_uniform")
    return "; redrawn by Kiln: " + ", ".join(said) + f" (KernelBench's own draws: {why})", \
        set(weights), None
