#!/usr/bin/env python3
"""Tests of tools/kernelbench_import.py (issue #15) on hand-written KernelBench-format problems
(tests/data/kernelbench/; none is copied from KernelBench).

    /usr/bin/python3 -m unittest tests/tools/test_kernelbench_import.py      # from the checkout
    /usr/bin/python3 /path/to/tests/tools/test_kernelbench_import.py [-v] [TestName...]

Needs a Python with torch (Debian's python3-torch) and a built kiln: $KILN, else build/kiln.
The tests that need kiln skip, visibly, without one. About a minute on 2 cores.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "kernelbench_import.py")
DATA = os.path.join(ROOT, "tests", "data", "kernelbench")
KILN = os.environ.get("KILN") or os.path.join(ROOT, "build", "kiln")
HAVE_KILN = os.path.isfile(KILN) and os.access(KILN, os.X_OK)

try:
    import torch  # noqa: F401
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import kernelbench_import as ki
    TORCH_ERROR = None
except (ImportError, SystemExit) as e:  # torch_baselines exits when torch is missing
    ki, TORCH_ERROR = None, e


def run_tool(*args, timeout=600):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=timeout)


def _read(path):
    with open(path) as f:
        return f.read()


def need_kiln(test):
    return unittest.skipUnless(HAVE_KILN, f"no kiln binary at {KILN} (set KILN=...)")(test)


def by_stem(report):
    return {os.path.splitext(os.path.basename(p["source"]))[0]: p for p in report["problems"]}


def ops_of(spec):
    return [o["op"] for o in spec["ops"]]


def attrs_of(spec, op):
    return [o.get("attrs", {}) for o in spec["ops"] if o["op"] == op]


def params_of(spec):
    return {p["name"]: p for p in spec["params"]}


def import_once(cls, paths, *args):
    """One importer run for a test class: cls.tmp, out, report_path, proc, report, p (by stem)."""
    if not HAVE_KILN:
        raise unittest.SkipTest(f"no kiln binary at {KILN} (set KILN=...)")
    cls.tmp = tempfile.mkdtemp(prefix="kb_import_test_")
    cls.out = os.path.join(cls.tmp, "out")
    cls.report_path = os.path.join(cls.tmp, "report.json")
    cls.proc = run_tool(*paths, "--out", cls.out, "--report", cls.report_path, "--kiln", KILN,
                        "--jobs", "2", *args)
    with open(cls.report_path) as f:
        cls.report = json.load(f)
    cls.p = by_stem(cls.report)


@unittest.skipIf(ki is None, f"needs torch: {TORCH_ERROR}")
class MainRun(unittest.TestCase):
    """One importer run over every hand-written problem (levels 1-4), with the numerical check, in
    spec v1 only (--form spec: what spec v1 says and refuses; ModuleForm has the other form)."""

    @classmethod
    def setUpClass(cls):
        import_once(cls, [os.path.join(DATA, f"level{n}") for n in (1, 2, 3, 4)],
                    "--scale-batch", "0.25", "--form", "spec", "--keep-draws")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def spec(self, stem):
        p = self.p[stem]
        self.assertEqual(p["status"], "imported", f"{stem}: {p['blockers']}")
        with open(p["out"], "rb") as f:
            return tomllib.load(f)

    def blockers(self, stem):
        p = self.p[stem]
        self.assertEqual(p["status"], "rejected", stem)
        self.assertFalse(os.path.exists(os.path.join(self.out, f"level{p['level']}",
                                                     p["name"] + ".toml")), stem)
        return {(b["kind"], b["what"]) for b in p["blockers"]}, p["blockers"]

    def test_exit_status_progress_and_summary(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-2000:])
        self.assertRegex(self.proc.stderr, r"\[ *1/39\] ")  # progress lines on stderr
        s = self.report["summary"]
        self.assertEqual(s["1"]["problems"], 19)
        self.assertEqual(s["2"]["problems"], 15)
        self.assertEqual((s["3"]["problems"], s["3"]["rejected"]), (4, 1))
        self.assertEqual((s["4"]["problems"], s["4"]["rejected"]), (1, 1))
        self.assertEqual((s["1"]["imported"], s["1"]["degenerate"], s["1"]["rejected"]),
                         (8, 2, 9))
        self.assertEqual((s["2"]["imported"], s["2"]["rejected"]), (7, 8))
        self.assertIn("level  problems  imported", self.proc.stdout)

    def test_every_import_passed_the_check_and_shapes_only(self):
        imported = [p for p in self.report["problems"] if p["status"] == "imported"]
        self.assertEqual(len(imported), 18)
        for p in imported:
            self.assertEqual(p["check"], "ok", p["name"])
            self.assertTrue(os.path.isfile(p["out"]), p["name"])
        v = self.report["shapes_only_validate"]
        self.assertEqual((v["exit"], v["tasks"]), (0, 18))
        rc = subprocess.run([KILN, "tasks", "validate", "--shapes-only", self.out],
                            capture_output=True, text=True)
        self.assertEqual(rc.returncode, 0, rc.stdout + rc.stderr)

    def test_torch_baselines_translate_every_import(self):
        # the PyTorch code torch.compile baselines time must compute what Kiln's reference does
        # (pad, ceil_mode, attention's pieces, ... as imported here)
        suites = [a for lv in ("level1", "level2", "level3")
                  for a in ("--suite", os.path.join(self.out, lv))
                  if os.path.isdir(os.path.join(self.out, lv))]
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "torch_baselines.py"),
                               "--fidelity-only", "--device", "cpu", "--threads", "2",
                               "--kiln", KILN, *suites,
                               "--report", os.path.join(self.tmp, "fidelity.json")],
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("18 tasks: fidelity 18 ok, 0 mismatch, 0 error", proc.stdout)

    def test_modules_map_with_their_attributes_and_inits(self):
        spec = self.spec("modules_conv_norm_pool")
        self.assertEqual(spec["level"], 2)
        self.assertEqual(ops_of(spec), [
            "conv2d", "batch_norm", "leaky_relu", "max_pool2d", "group_norm", "hardtanh",
            "conv_transpose2d", "instance_norm", "hardtanh", "avg_pool2d", "adaptive_avg_pool2d",
            "flatten", "linear", "layer_norm", "gelu", "elu", "softplus", "softmax"])
        self.assertEqual(attrs_of(spec, "conv2d"),
                         [{"stride": 2, "padding": 1, "dilation": 1, "groups": 2}])
        self.assertEqual(attrs_of(spec, "batch_norm"), [{"eps": 0.001, "momentum": 0.2}])
        self.assertEqual(attrs_of(spec, "leaky_relu"), [{"negative_slope": 0.2}])
        self.assertEqual(attrs_of(spec, "max_pool2d"),
                         [{"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 1}])
        self.assertEqual(attrs_of(spec, "group_norm"), [{"num_groups": 2, "eps": 0.0001}])
        self.assertEqual(attrs_of(spec, "hardtanh"), [{"min_val": -0.5, "max_val": 0.5},
                                                      {"min_val": 0, "max_val": 6}])
        self.assertEqual(attrs_of(spec, "conv_transpose2d"), [
            {"stride": 2, "padding": 1, "dilation": 1, "groups": 1, "output_padding": 1}])
        self.assertEqual(attrs_of(spec, "avg_pool2d"),
                         [{"kernel_size": 2, "stride": 2, "padding": 0}])
        self.assertEqual(attrs_of(spec, "adaptive_avg_pool2d"), [{"output_size": 1}])
        self.assertEqual(attrs_of(spec, "flatten"), [{"start_dim": 1, "end_dim": -1}])
        self.assertEqual(attrs_of(spec, "layer_norm"), [{"normalized_shape": 6, "eps": 1e-05}])
        self.assertEqual(attrs_of(spec, "gelu"), [{"approximate": "tanh"}])
        self.assertEqual(attrs_of(spec, "elu"), [{"alpha": 0.5}])
        self.assertEqual(attrs_of(spec, "softplus"), [{"beta": 2, "threshold": 10}])
        self.assertEqual(attrs_of(spec, "softmax"), [{"dim": 1}])
        ps = params_of(spec)
        self.assertEqual(ps["conv_weight"], {"name": "conv_weight", "shape": [8, 2, 3, 3],
                                             "init": "kaiming_uniform"})
        self.assertEqual(ps["conv_bias"]["init"], "bias_uniform")
        self.assertEqual(ps["conv_bias"]["of"], "conv_weight")
        self.assertEqual((ps["bn_weight"]["init"], ps["bn_bias"]["init"]), ("ones", "zeros"))
        self.assertEqual(ps["up_weight"]["shape"], [8, 4, 3, 3])  # ConvTranspose: [in, out, k..]
        self.assertNotIn("up_bias", ps)  # bias=False: two args
        self.assertEqual(len(spec["ops"][ops_of(spec).index("conv_transpose2d")]["args"]), 2)
        self.assertEqual((ps["fc_bias"]["init"], ps["fc_bias"]["of"]), ("bias_uniform",
                                                                        "fc_weight"))
        self.assertEqual(len(spec["ops"][ops_of(spec).index("instance_norm")]["args"]), 3)
        self.assertEqual(spec["inputs"], [{"name": "x", "shape": [1, 4, 16, 16],
                                           "init": "normal"}])
        self.assertIn("level2/modules_conv_norm_pool.py", spec["description"])
        self.assertIn("nn.ReLU6 -> hardtanh(0, 6)", self.p["modules_conv_norm_pool"]["rewrites"])
        self.assertIn("nn.Dropout(p=0.0) -> identity",
                      self.p["modules_conv_norm_pool"]["rewrites"])

    def test_functions_operators_and_parameters(self):
        spec = self.spec("functions_elementwise")
        ops = ops_of(spec)
        self.assertEqual(ops[:4], ["leaky_relu", "add", "mul", "clamp"])
        self.assertEqual(attrs_of(spec, "leaky_relu"), [{"negative_slope": 0.1}])
        self.assertEqual(attrs_of(spec, "clamp"), [{"min": -1, "max": 1.5}])
        self.assertIn({"scalar": 2}, attrs_of(spec, "mul"))    # 2 * a
        self.assertIn({"scalar": 0.5}, attrs_of(spec, "mul"))  # * nn.Parameter(torch.tensor(0.5))
        self.assertIn({"scalar": 1}, attrs_of(spec, "add"))    # 1 - b -> neg(b) + 1
        self.assertIn("neg", ops)
        self.assertIn({"scalar": -1}, attrs_of(spec, "pow"))   # 1 / (...)
        self.assertIn({"scalar": 2}, attrs_of(spec, "pow"))    # c ** 2
        self.assertEqual(attrs_of(spec, "minimum"), [{"scalar": 0.75}])  # min(d, tensor(0.75))
        self.assertEqual(attrs_of(spec, "maximum"), [{}])      # two tensors
        self.assertIn({"scalar": 3}, attrs_of(spec, "div"))
        self.assertEqual(ops.count("relu"), 1)                 # f.relu_()
        ps = params_of(spec)
        self.assertEqual((ps["bias"]["init"], ps["gain"]["init"]), ("normal", "ones"))
        self.assertNotIn("scale", ps)
        self.assertEqual([d["init"] for d in spec["inputs"]], ["normal", "uniform"])
        rw = self.p["functions_elementwise"]["rewrites"]
        self.assertIn("c - x -> neg(x) + c", rw)
        self.assertIn("1 / x -> pow(x, -1)", rw)
        self.assertIn("constant param 'scale' (0.5) -> scalar attr", rw)

    def test_reductions_views_and_two_outputs(self):
        spec = self.spec("functions_reduce_shape")
        ops = ops_of(spec)
        self.assertEqual(len(spec["outputs"]), 2)
        self.assertEqual(spec["ops"][-1]["op"], "argmax")
        self.assertEqual(spec["ops"][-1]["attrs"], {"keepdim": False, "dim": 2})
        self.assertEqual(spec["outputs"][1], spec["ops"][-1]["out"])
        self.assertIn({"dim": 1, "keepdim": True}, attrs_of(spec, "sum"))
        self.assertIn({"dim": [2, 3], "keepdim": True}, attrs_of(spec, "mean"))
        self.assertIn({"dim": 2, "keepdim": False}, attrs_of(spec, "amax"))  # max(s, 2)[0]
        self.assertIn({"dim": 2, "keepdim": False}, attrs_of(spec, "amin"))  # .values
        self.assertIn({"dim": 1, "keepdim": True}, attrs_of(spec, "amax"))
        self.assertIn({"shape": [1, -1]}, attrs_of(spec, "reshape"))  # view(x.size(0), -1)
        self.assertEqual(attrs_of(spec, "permute"), [{"dims": [0, 2, 3, 1]}])
        self.assertEqual(attrs_of(spec, "logsumexp"), [{"dim": -1, "keepdim": False}])
        self.assertIn({"dim0": 0, "dim1": 1}, attrs_of(spec, "transpose"))  # w.T, .t()
        self.assertEqual(attrs_of(spec, "cumsum"), [{"dim": 0}])
        self.assertIn("matmul", ops)
        self.assertIn("sqrt", ops)   # F.normalize and torch.norm, rewritten
        self.assertIn("F.normalize(p=2) -> x / max(norm(x, dim, keepdim), eps)",
                      self.p["functions_reduce_shape"]["rewrites"])
        self.assertIn({"scalar": 1e-12}, attrs_of(spec, "maximum"))

    def test_inputs_scaled_batch_and_baked_constants(self):
        spec = self.spec("inputs_and_constants")
        self.assertEqual([(d["name"], d["shape"], d["init"]) for d in spec["inputs"]], [
            ("a", [16, 8], "uniform"), ("b", [16, 8], "normal"), ("c", [16, 8], "randint:0:5")])
        self.assertEqual(ops_of(spec), ["mul", "add", "sum"])
        self.assertEqual(attrs_of(spec, "sum"), [{"dim": 1, "keepdim": False}])
        self.assertEqual(self.p["inputs_and_constants"]["scaling"]["batch_size"],
                         {"from": 64, "to": 16})
        self.assertIn("batch_size 64 -> 16 (--scale-batch 0.25)", spec["description"])
        self.assertEqual(spec["level"], 1)

    def test_inputs_drawn_with_modifiers(self):
        # The numerical check ran the Model on Kiln's draws of these: the modifiers are exact.
        spec = self.spec("inputs_modified_draws")
        mods = [{k: v for k, v in d.items() if k not in ("name", "shape")}
                for d in spec["inputs"]]
        self.assertEqual(mods, [
            {"init": "uniform", "structure": "symmetric"},
            {"init": "uniform", "structure": "triu"},
            {"init": "uniform", "structure": "tril"},
            {"init": "uniform", "random_scale": True},
            {"init": "randint:0:2", "scale": 2.0, "shift": -1.0},
            {"init": "uniform", "scale": -1.0, "shift": 1.0},
            {"init": "uniform", "random_scale": True, "softmax": True},
            {"init": "uniform", "softmax": True}])

    def test_losses_as_elementwise_ops(self):
        # Checked against PyTorch's own losses on Kiln's draws (both branches of smooth_l1 /
        # huber occur: x is N(0, 4) against N(0, 1)).
        spec = self.spec("losses")
        self.assertEqual(len(spec["outputs"]), 6)
        self.assertIn("minimum", ops_of(spec))
        self.assertIn("relu", ops_of(spec))
        rw = self.p["losses"]["rewrites"]
        self.assertTrue(any(r.startswith("smooth_l1_loss -> ") for r in rw), rw)
        self.assertTrue(any(r.startswith("huber_loss -> ") for r in rw), rw)
        self.assertTrue(any(r.startswith("triplet_margin_loss -> ") for r in rw), rw)

    def test_triangular_outputs_multiply_by_a_mask(self):
        spec = self.spec("triangular_outputs")
        masks = [(d["init"], d["structure"], d["shape"]) for d in spec["params"]]
        self.assertEqual(masks, [("ones", "triu", [16, 16]), ("ones", "tril", [16, 16])])
        self.assertEqual(ops_of(spec).count("mul"), 2)
        self.assertEqual([d.get("structure") for d in spec["inputs"]], ["triu", "tril"])
        # the masks are the rewrite's params, not the Model's: no state_dict key loads them
        self.assertEqual(set(params_of(spec)), {"triu_mask", "tril_mask"})
        self.assertEqual(spec["kernelbench"]["state_dict"], {})
        self.assertEqual(self.p["triangular_outputs"]["rewrites"],
                         ["triu(x) -> x * triu(ones)", "tril(x) -> x * tril(ones)"])

    def test_causal_mask_buffer_and_masked_fill(self):
        # Checked against PyTorch's softmax over -inf fills and relu over a finite fill.
        spec = self.spec("causal_attention")
        mask = params_of(spec)["bias"]
        self.assertEqual((mask["init"], mask["structure"], mask["shape"]),
                         ("ones", "tril", [1, 1, 16, 16]))
        rw = self.p["causal_attention"]["rewrites"]
        self.assertIn("masked_fill(k == 0, v) -> x * k + (k - 1) * -v (v = -inf as "
                      "-3.4028235e+38)", rw)
        self.assertIn("masked_fill(k == 0, v) -> x * k + (k - 1) * -v", rw)
        self.assertEqual(ops_of(spec).count("softmax"), 1)

    def test_masked_fill_needs_a_constant_mask(self):
        keys, bl = self.blockers("reject_masked_fill_input_mask")
        self.assertEqual(keys, {("missing_op", "tensor == (comparison)"),
                                ("missing_op", "Tensor.masked_fill")})

    def test_a_problem_that_scaling_breaks_keeps_its_sizes(self):
        spec = self.spec("hinge_batch_is_a_feature")
        self.assertEqual([d["shape"] for d in spec["inputs"]], [[64, 64], [64]])
        self.assertEqual(spec["inputs"][1]["init"], "randint:0:2")
        notes = self.p["hinge_batch_is_a_feature"]["notes"]
        self.assertTrue(any("at --scale-batch 0.25 its shapes disagree" in n for n in notes),
                        notes)

    def test_shared_draws_and_lookalike_transposes_are_refused(self):
        keys, bl = self.blockers("reject_shared_draw")
        self.assertEqual(keys, {("input", "inputs share a draw")})
        self.assertIn("input 0 ('A')", bl[0]["detail"])
        keys, bl = self.blockers("reject_not_a_transpose")
        self.assertEqual(keys, {("input", "input drawn by an expression")})
        self.assertIn("__get__", bl[0]["detail"])

    def test_params_with_affine_inits(self):
        spec = self.spec("params_scaled_inits")
        p = {d["name"]: d for d in spec["params"]}
        self.assertEqual(sorted(p), ["conv_bias", "conv_weight", "fc_bias", "fc_weight", "gain",
                                     "offset"])
        self.assertEqual(p["fc_weight"]["init"], "normal")
        self.assertAlmostEqual(p["fc_weight"]["scale"], math.sqrt(2.0 / (64 + 32)))
        self.assertAlmostEqual(p["conv_weight"]["scale"], math.sqrt(2.0) / math.sqrt(8 * 9))
        self.assertEqual(p["conv_bias"]["init"], "bias_uniform")
        self.assertEqual((p["offset"]["init"], p["offset"]["scale"]), ("normal", 0.02))
        self.assertEqual((p["gain"]["init"], p["gain"]["scale"], p["gain"]["shift"]),
                         ("uniform", 5.0, -2.0))
        self.assertNotIn("shift", p["fc_weight"])

    def test_ceil_mode_without_effect_imports(self):
        spec = self.spec("ceil_mode_exact")
        self.assertEqual(ops_of(spec), ["max_pool2d", "flatten", "bmm", "amax"])
        self.assertIn("nn.MaxPool2d ceil_mode=True -> False (same windows at these sizes)",
                      self.p["ceil_mode_exact"]["rewrites"])

    def test_constant_pad_and_max_pool_ceil_mode(self):
        spec = self.spec("pad_ceil_pool")
        self.assertEqual(ops_of(spec), ["pad", "max_pool2d", "pad", "flatten", "max_pool1d",
                                        "pad", "mul"])
        pads = [o["attrs"] for o in spec["ops"] if o["op"] == "pad"]
        self.assertEqual(pads, [{"pad": [1, 1, 2, 0], "value": -0.5}, {"pad": [1, 2, 0, 1]},
                                {"pad": [0, 3]}])
        pools = [o["attrs"] for o in spec["ops"] if o["op"].startswith("max_pool")]
        self.assertEqual([p.get("ceil_mode") for p in pools], [True, True])
        self.assertEqual(self.p["pad_ceil_pool"]["check"], "ok")

    def test_multihead_attention_as_its_math(self):
        spec = self.spec("attention_block")
        ops = ops_of(spec)
        self.assertEqual((ops.count("softmax"), ops.count("bmm"), ops.count("linear")), (2, 4, 8))
        p = params_of(spec)
        self.assertEqual(p["attn_in_proj_weight"]["init"], "uniform")  # xavier_uniform_
        bound = math.sqrt(6.0 / (16 + 48))
        self.assertAlmostEqual(p["attn_in_proj_weight"]["scale"], 2 * bound)
        self.assertIn("nn.MultiheadAttention -> linear, bmm, softmax, linear (its math)",
                      self.p["attention_block"]["rewrites"])
        self.assertEqual(self.p["attention_block"]["check"], "ok")

    def test_a_long_stack_becomes_a_cat_of_cats(self):
        spec = self.spec("rnn_steps")
        self.assertGreater(len(spec["ops"]), 256)
        cats = [o for o in spec["ops"] if o["op"] == "cat" and o["attrs"]["dim"] == 0]
        self.assertTrue(cats and all(len(o["args"]) <= 64 for o in cats))
        self.assertIn("cat of more than 64 tensors -> cat of cats",
                      self.p["rnn_steps"]["rewrites"])

    def test_float32_rounding_sets_the_tolerance(self):
        # float32 rounds (x * 3 + 1e4) - 1e4 by ~5e-4: the default 1e-4 would fail a correct
        # float32 kernel, so the importer measures float32 against float64 and writes 1e-3
        p = self.p["rounding_tolerance"]
        spec = self.spec("rounding_tolerance")
        self.assertEqual(spec["tolerance"], {"atol": 1e-3, "rtol": 1e-3})
        self.assertGreater(p["float32_gap"], 1e-4)
        self.assertLess(p["float32_gap"], 5e-4)
        self.assertTrue(any(r.startswith("tolerance 1e-4 -> 0.001: output") for r in p["rewrites"]),
                        p["rewrites"])
        # a well-conditioned problem keeps Kiln's default (no [tolerance] written)
        self.assertNotIn("tolerance", self.spec("losses"))
        self.assertLess(self.p["losses"]["float32_gap"], 1e-4)

    def test_ill_conditioned_in_float32_is_refused(self):
        keys, bl = self.blockers("reject_ill_conditioned")
        self.assertEqual(keys, {("check", "ill-conditioned in float32")})
        self.assertIn("past 1e-2", bl[0]["detail"])

    def test_degenerate_copy_input_and_mostly_zero(self):
        relu, zero = self.p["relu_uniform"], self.p["mostly_zero"]
        self.assertEqual(relu["status"], "degenerate")
        self.assertTrue(any("copying input 'x' passes" in f for f in relu["degenerate"]))
        self.assertEqual(zero["status"], "degenerate")
        # Kiln's validate has the same rule (data/degeneracy.cpp) and names the atol it would need.
        self.assertIn("all-zeros output is within tolerance on 99.", zero["kiln_verdict"])
        self.assertIn("would need atol below", zero["kiln_verdict"])
        self.assertTrue(any("within tolerance on 99." in f for f in zero["degenerate"]),
                        zero["degenerate"])
        for p in (relu, zero):
            self.assertNotIn("out", p)
            self.assertFalse(os.path.exists(os.path.join(self.out, "level1",
                                                         p["name"] + ".toml")))

    def test_a_tighter_atol_where_float32_allows_it(self):
        # outputs all below the default atol: zeros would pass; float32 rounding is far smaller
        p = self.p["small_outputs"]
        spec = self.spec("small_outputs")
        # the loosest 1-2-5 atol at which zeros still miss (|y| ~ 1e-5): a kernel summing in
        # another order is not held to float32's own rounding
        self.assertEqual(spec["tolerance"], {"atol": 2e-6, "rtol": 1e-4})
        self.assertTrue(any(r.startswith("tolerance atol 0.0001 -> ") and "all-zeros" in r
                            for r in p["rewrites"]), p["rewrites"])
        # where no atol helps (zeros are right on 99.5%, or the task is the identity) it stays
        self.assertIn("zeros pass unless atol <= 0", " ".join(self.p["mostly_zero"]["notes"]))
        self.assertIn("still: output 'y0': copying input 'x' passes",
                      " ".join(self.p["relu_uniform"]["notes"]))

    def test_missing_op(self):
        keys, bl = self.blockers("reject_missing_op_cumprod")
        self.assertEqual(keys, {("missing_op", "torch.cumprod")})

    def test_cat_and_slices(self):
        spec = self.spec("functions_cat_slice")
        ops = [o for o in spec["ops"]]
        slices = [o["attrs"] for o in ops if o["op"] == "slice"]
        # x[:, 2:10:2], x[..., -3:] (normalized), narrow, x[:, 0], split, chunk
        for want in ({"dim": 1, "start": 2, "end": 10, "step": 2},
                     {"dim": 2, "start": 9, "end": 12, "step": 1},
                     {"dim": 2, "start": 1, "end": 5, "step": 1},
                     {"dim": 1, "start": 0, "end": 1, "step": 1},
                     {"dim": 1, "start": 5, "end": 16, "step": 1},
                     {"dim": 2, "start": 6, "end": 12, "step": 1}):
            self.assertIn(want, slices)
        cats = [o for o in ops if o["op"] == "cat"]
        self.assertEqual([len(o["args"]) for o in cats], [2, 3, 3, 3])  # stack, rows, cols, out
        self.assertEqual([o["attrs"]["dim"] for o in cats], [1, 1, -1, 1])
        self.assertEqual(self.p["functions_cat_slice"]["check"], "ok")

    def test_einsum_flip_zeros_like_and_a_bool_mask(self):
        spec = self.spec("functions_einsum_flip_mask")
        # y[:, :1] only gives zeros_like its shape: pruned
        self.assertEqual(ops_of(spec), ["mul", "matmul", "flip", "cat", "cumsum"])
        self.assertEqual([d["init"] for d in spec["inputs"]], ["normal", "randint:0:2"])
        self.assertEqual({d["init"] for d in spec["params"]}, {"normal", "zeros"})
        # zeros_like(...) became a zeros param the Model does not hold: left out of state_dict
        sd = spec["kernelbench"]["state_dict"]
        self.assertIn("const_zeros", params_of(spec))
        self.assertNotIn("const_zeros", sd)
        self.assertEqual(set(sd), set(params_of(spec)) - {"const_zeros"})
        p = self.p["functions_einsum_flip_mask"]
        self.assertIn("einsum bij,jk->bik -> matmul", p["rewrites"])
        self.assertIn("bool mask input -> float 0 / 1 input", p["rewrites"])
        self.assertIn("constant zeros tensor made in forward -> param zeros", p["rewrites"])
        self.assertEqual(p["check"], "ok")

    def test_kernelbench_table_with_a_non_tensor_argument(self):
        spec = self.spec("inputs_and_constants")
        kb = spec["kernelbench"]
        self.assertEqual(list(kb), ["source", "init_inputs", "forward", "bool_inputs",
                                    "state_dict", "model_keys"])
        # the source as run: batch_size scaled (64 -> 16), the rest as written
        code = _read(os.path.join(DATA, "level1", "inputs_and_constants.py"))
        self.assertEqual(kb["source"], code.replace("batch_size = 64", "batch_size = 16"))
        self.assertEqual(kb["forward"], [{"input": "a"}, {"input": "b"}, {"input": "c"},
                                         {"value": 1}])  # forward(a, b, c, dim)
        self.assertEqual((kb["init_inputs"], kb["bool_inputs"], kb["state_dict"],
                          kb["model_keys"]), ([], [], {}, []))
        # a problem that scaling breaks is mapped at its own sizes: its source as written
        self.assertEqual(self.spec("hinge_batch_is_a_feature")["kernelbench"]["source"],
                         _read(os.path.join(DATA, "level1", "hinge_batch_is_a_feature.py")))
        # every written task has one, its params each loaded into a real key of the Model, but
        # for those a rewrite made (no key: a ModelNew makes its own)
        made = {"triangular_outputs": {"triu_mask", "tril_mask"},
                "functions_einsum_flip_mask": {"const_zeros"}}
        for p in self.report["problems"]:
            if p["status"] == "imported":
                stem = os.path.splitext(os.path.basename(p["source"]))[0]
                spec = self.spec(stem)
                kb = spec["kernelbench"]
                self.assertIn("class Model", kb["source"], p["name"])
                kept = {d["name"] for d in spec.get("params", [])} - made.get(stem, set())
                self.assertEqual(set(kb["state_dict"]), kept, p["name"])
                self.assertLessEqual(set(kb["state_dict"].values()), set(kb["model_keys"]))

    def test_a_mask_used_as_bool_fails_the_check(self):
        keys, bl = self.blockers("reject_bool_mask_or")
        self.assertEqual(keys, {("check", "numerical mismatch")})

    def test_missing_attributes(self):
        keys, bl = self.blockers("reject_missing_attr")
        self.assertEqual(keys, {("missing_attr", "avg_pool ceil_mode=True"),
                                ("missing_attr", "dropout p > 0 in training mode (random)"),
                                ("missing_attr", "F.pad mode=reflect"),
                                ("missing_attr", "torch.add alpha")})
        self.assertIn("alpha=2", [b["detail"] for b in bl if "alpha" in b["what"]][0])
        keys, _ = self.blockers("reject_index_used")
        self.assertEqual(keys, {("missing_attr", "argmax/argmin result used by another op")})

    def test_param_inits(self):
        keys, bl = self.blockers("reject_init_expression")
        self.assertEqual(keys, {("init", "param init: expression")})
        self.assertIn("param 'bias'", bl[0]["detail"])
        self.assertEqual(self.blockers("reject_init_constant")[0],
                         {("init", "param init: constant fill")})
        self.assertEqual(self.blockers("reject_init_modified")[0],
                         {("init", "param init: modified in place after its init")})

    def test_inputs(self):
        self.assertEqual(self.blockers("reject_input_int64")[0],
                         {("input", "int64 input tensor")})
        keys, bl = self.blockers("reject_input_expression")
        self.assertEqual(keys, {("input", "input drawn by an expression")})
        self.assertIn("input 0 ('x') = exp(rand(4, 8))", bl[0]["detail"])

    def test_trace_load_format_level_limit_crash(self):
        self.assertEqual(self.blockers("reject_trace")[0],
                         {("trace", "torch.fx cannot trace Model.forward")})
        keys, bl = self.blockers("reject_load")
        self.assertEqual(keys, {("load", "problem code fails here")})
        self.assertIn("kiln_no_such_module", bl[0]["detail"])
        self.assertEqual(self.blockers("reject_format")[0], {("format", "no get_inputs")})
        self.assertEqual(self.blockers("out_of_range")[0], {("level", "level 4")})
        keys, bl = self.blockers("reject_limit")
        self.assertEqual(keys, {("limit", "more than 4096 ops")})
        self.assertIn("4200 ops", bl[0]["detail"])
        self.assertEqual(self.blockers("reject_crash")[0], {("crash", "crash")})

    def test_missing_ranking(self):
        rank = {(e["kind"], e["what"]): e for e in self.report["missing"]}
        self.assertEqual((rank[("missing_op", "torch.cumprod")]["problems"],
                          rank[("missing_op", "torch.cumprod")]["alone"]), (1, 1))
        alpha = rank[("missing_attr", "torch.add alpha")]
        self.assertEqual((alpha["problems"], alpha["alone"]), (1, 0))  # with two others
        self.assertNotIn(("trace", "torch.fx cannot trace Model.forward"), rank)  # not ranked
        counts = [e["problems"] for e in self.report["missing"]]
        self.assertEqual(counts, sorted(counts, reverse=True))


# nn.Linear + ReLU in a Sequential (dotted state_dict keys), sizes from get_init_inputs(), a float
# forward argument between the tensors and a bool mask
LINEAR_RELU_MASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, out_features), nn.ReLU())

    def forward(self, x, scale, mask):
        return self.net(x) * scale * mask


batch_size = 32
in_features = 12
out_features = 6


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x, 0.5, torch.randint(0, 2, (batch_size, out_features)).bool()]


def get_init_inputs():
    return [in_features, out_features]
"""


@unittest.skipIf(ki is None, f"needs torch: {TORCH_ERROR}")
class SmallRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kb_import_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def report(self, *args):
        path = os.path.join(self.tmp, "r.json")
        proc = run_tool(*args, "--report", path)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        with open(path) as f:
            return json.load(f)

    @need_kiln
    def test_kiln_tasks_import_runs_this_importer_with_itself_as_kiln(self):
        path = os.path.join(self.tmp, "r.json")
        proc = subprocess.run([KILN, "tasks", "import",
                               os.path.join(DATA, "level2", "functions_cat_slice.py"),
                               "--no-check", "--report", path],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        with open(path) as f:
            r = json.load(f)
        self.assertEqual(r["args"]["kiln"], os.path.realpath(KILN))
        self.assertEqual(r["problems"][0]["status"], "mappable")
        bad = subprocess.run([KILN, "tasks", "import", "x.py", "--no-such-option"],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(bad.returncode, 2)  # argparse's usage error, through kiln
        self.assertIn("--no-such-option", bad.stderr)

    @need_kiln
    def test_max_ops_admits_a_longer_task_that_kiln_accepts_with_the_same_limit(self):
        out = os.path.join(self.tmp, "out")
        r = self.report(os.path.join(DATA, "level3", "reject_limit.py"), "--out", out,
                        "--kiln", KILN, "--max-ops", "4300")
        p = r["problems"][0]
        self.assertEqual((p["status"], p["check"]), ("imported", "ok"), p["blockers"])
        self.assertEqual(r["shapes_only_validate"]["exit"], 0)
        plain = subprocess.run([KILN, "tasks", "validate", "--shapes-only", p["out"]],
                               capture_output=True, text=True)
        self.assertEqual(plain.returncode, 1)  # kiln's default limit, 4096 ops
        self.assertIn("4096", plain.stdout + plain.stderr)

    @need_kiln
    def test_allow_degenerate_writes_and_flags(self):
        out = os.path.join(self.tmp, "out")
        r = self.report(os.path.join(DATA, "level1", "relu_uniform.py"), "--out", out,
                        "--kiln", KILN, "--allow-degenerate")
        p = r["problems"][0]
        self.assertEqual(p["status"], "imported")
        self.assertTrue(p["degenerate"])
        self.assertTrue(os.path.isfile(os.path.join(out, "level1", "kb_l1_relu_uniform.toml")))
        self.assertEqual(r["summary"]["1"]["degenerate_flagged"], 1)

    def redrawn(self, r, stem, variant):
        """The problem imported under the redraw `variant`: (its result, its task)."""
        p = by_stem(r)[stem]
        self.assertEqual((p["status"], p.get("redrawn", {}).get("variant")),
                         ("imported", variant), p["notes"])
        with open(p["out"], "rb") as f:
            return p, tomllib.load(f)

    @need_kiln
    def test_degenerate_under_kernelbenchs_draws_is_redrawn(self):
        out = os.path.join(self.tmp, "out")
        r = self.report(os.path.join(DATA, "level1", "relu_uniform.py"),
                        os.path.join(DATA, "redraw", "deep_narrow_relu.py"),
                        "--out", out, "--kiln", KILN, "--jobs", "2")
        # relu on U[0, 1) is the identity: its input is drawn N(0, 1) instead
        relu, spec = self.redrawn(r, "relu_uniform", "normal_inputs")
        self.assertIn("copying input 'x' passes", relu["redrawn"]["why"])
        self.assertEqual(spec["inputs"][0]["init"], "normal")
        self.assertIn("redrawn by Kiln: input x drawn N(0, 1), not U[0, 1)", spec["description"])
        # twelve layers at torch.nn's init forget the input; N(0, 1) inputs do not help, He does
        deep, spec = self.redrawn(r, "deep_narrow_relu", "he_weights")
        self.assertIn("does not change with the inputs", deep["redrawn"]["why"])
        self.assertIn("normal_inputs: degenerate", " ".join(deep["notes"]))
        weights = [p for p in spec["params"] if p["name"].endswith("weight")]
        self.assertEqual(len(weights), 13)
        for w in weights:  # N(0, 2 / fan_in); the biases keep torch.nn's rule
            self.assertEqual(w["init"], "normal")
            self.assertAlmostEqual(w["scale"], math.sqrt(2 / 32))
        self.assertTrue(all(p["init"] == "bias_uniform" for p in spec["params"]
                            if p["name"].endswith("bias")))
        self.assertEqual((r["summary"]["1"]["redrawn"], r["summary"]["2"]["redrawn"]), (1, 1))
        self.assertEqual(r["shapes_only_validate"]["exit"], 0)

    @need_kiln
    def test_batchnorm_degenerate_on_a_scaled_batch_of_one_is_checked_at_two(self):
        out = os.path.join(self.tmp, "out_bn")
        r = self.report(os.path.join(DATA, "sizes", "bn_spatial_mean.py"), "--out", out,
                        "--kiln", KILN, "--scale-batch", "0.015625")
        (p,) = r["problems"]
        self.assertEqual(p["status"], "imported", p["notes"])
        self.assertEqual(p["scaling"]["batch_size"], {"from": 64, "to": 2, "least": 2})
        self.assertIn("at batch 1 degenerate (BatchNorm normalizes each sample by its own "
                      "statistics", " ".join(p["notes"]))
        self.assertNotIn("redrawn", p)
        with open(p["out"], "rb") as f:
            spec = tomllib.load(f)
        self.assertEqual(spec["inputs"][0]["shape"], [2, 3, 16, 16])
        self.assertIn("batch_size 64 -> 2 (--scale-batch 0.015625, at least 2 for BatchNorm)",
                      spec["description"])

    @need_kiln
    def test_too_large_with_its_batch_scaled_is_tried_with_its_sizes_scaled(self):
        out = os.path.join(self.tmp, "out_wide")
        r = self.report(os.path.join(DATA, "sizes", "wide_linear.py"), "--out", out,
                        "--kiln", KILN, "--scale-batch", "0.015625", "--max-mib", "2")
        (p,) = r["problems"]
        self.assertEqual(p["status"], "imported", p["notes"])
        self.assertEqual(p["scaling"]["batch_size"], {"from": 64, "to": 1})
        self.assertEqual(p["scaling"]["sizes"], {"n": {"from": 1024, "to": 128}})

    @need_kiln
    def test_a_product_draws_near_one_and_a_clamped_bias_another_param_seed(self):
        out = os.path.join(self.tmp, "out_seed")
        r = self.report(os.path.join(DATA, "redraw", "cumprod_long.py"),
                        os.path.join(DATA, "redraw", "clamped_bias.py"),
                        "--out", out, "--kiln", KILN, "--jobs", "2")
        # cumprod of U[0, 1) is zeros past ~100 columns: inputs U[1 - e, 1 + e), e = sqrt(3 / 4096)
        prod, spec = self.redrawn(r, "cumprod_long", "unit_product_inputs")
        self.assertIn("all-zeros output is within tolerance", prod["redrawn"]["why"])
        e = math.sqrt(3 / 4096)
        self.assertAlmostEqual(spec["inputs"][0]["scale"], 2 * e)
        self.assertAlmostEqual(spec["inputs"][0]["shift"], 1 - e)
        self.assertIn("input x drawn U[1 - 0.0271, 1 + 0.0271)", spec["description"])
        self.assertNotIn("param_seed", spec)
        # the name's seed draws the bias past the clamp; seed 1 does not, and the task says so
        clamp, spec = self.redrawn(r, "clamped_bias", "param_seed:1")
        self.assertIn("does not change with the inputs", clamp["redrawn"]["why"])
        self.assertEqual(spec["param_seed"], 1)
        self.assertEqual(spec["params"], [{"name": "bias", "shape": [1], "init": "normal"}])
        self.assertIn("params drawn by Kiln from seed 1", spec["description"])
        # Kiln draws from it too: the importer's check compared Kiln's param digests with
        # torch_baselines' redraw, and Kiln validates the file as written
        self.assertEqual(clamp["check"], "ok")
        v = subprocess.run([KILN, "tasks", "validate", clamp["out"]], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # --keep-draws refuses it as before
        r = self.report(os.path.join(DATA, "level1", "relu_uniform.py"), "--kiln", KILN,
                        "--out", os.path.join(self.tmp, "kept"), "--keep-draws")
        self.assertEqual(r["problems"][0]["status"], "degenerate")
        self.assertNotIn("redrawn", r["problems"][0])

    @need_kiln
    def test_jsonl_records_level_and_too_large(self):
        out = os.path.join(self.tmp, "out")
        r = self.report(os.path.join(DATA, "records.jsonl"), "--out", out, "--kiln", KILN,
                        "--max-gflop", "1e-9")
        a, b = r["problems"]
        self.assertEqual((a["name"], a["status"]), ("kb_l2_jsonl_sigmoid", "imported"))
        self.assertIn("level inferred (2) from the op count", a["notes"])
        self.assertTrue(a["source"].endswith("records.jsonl:1"))
        self.assertEqual((b["name"], b["status"], b["level"]), ("kb_l2_7", "too_large", 2))
        self.assertIn("--max-gflop", b["blockers"][0]["detail"])
        with open(os.path.join(out, "level2", "kb_l2_jsonl_sigmoid.toml"), "rb") as f:
            self.assertIn("records.jsonl:1", tomllib.load(f)["description"])
        r = self.report(os.path.join(DATA, "records.jsonl"), "--no-check", "--level", "1",
                        "--max-mib", "1e-6")
        self.assertEqual([p["status"] for p in r["problems"]], ["mappable", "mappable"])
        self.assertEqual(r["problems"][0]["name"], "kb_l1_jsonl_sigmoid")
        self.assertEqual(r["problems"][1]["level"], 1)

    @need_kiln
    def test_kernelbench_table_of_a_module_with_params(self):
        problem = os.path.join(self.tmp, "level2", "linear_relu_mask.py")
        os.makedirs(os.path.dirname(problem))
        with open(problem, "w") as f:
            f.write(LINEAR_RELU_MASK)
        out = os.path.join(self.tmp, "out")
        r = self.report(problem, "--out", out, "--kiln", KILN, "--scale-batch", "0.25")
        p = r["problems"][0]
        self.assertEqual((p["status"], p["check"]), ("imported", "ok"), p["blockers"])
        with open(p["out"], "rb") as f:
            spec = tomllib.load(f)
        with open(p["out"]) as f:
            self.assertTrue(f.read().rstrip().split("\n")[-1].startswith("model_keys = "))
        kb = spec["kernelbench"]
        self.assertIn("class Model", kb["source"])
        self.assertIn("batch_size = 8\n", kb["source"])  # 32 scaled by 0.25
        self.assertEqual(kb["init_inputs"], [12, 6])
        self.assertEqual([d["name"] for d in spec["inputs"]], ["x", "mask"])
        self.assertEqual(kb["forward"], [{"input": "x"}, {"value": 0.5}, {"input": "mask"}])
        self.assertEqual(kb["bool_inputs"], ["mask"])
        self.assertEqual(kb["state_dict"], {"net_0_weight": "net.0.weight",
                                            "net_0_bias": "net.0.bias"})
        self.assertEqual(set(kb["state_dict"]), set(params_of(spec)))
        # the source builds the Model the task describes: its keys, the task's shapes
        ns = {"__name__": "kernelbench_problem"}
        exec(compile(kb["source"], "problem.py", "exec"), ns)
        model = ns["Model"](*kb["init_inputs"])
        sd = model.state_dict()
        self.assertEqual(kb["model_keys"], list(sd))
        for name, key in kb["state_dict"].items():
            self.assertEqual(list(sd[key].shape), params_of(spec)[name]["shape"], name)
        self.assertEqual(spec["inputs"][0]["shape"], [8, 12])
        self.assertEqual([list(t.shape) for t in ns["get_inputs"]() if isinstance(t, torch.Tensor)],
                         [d["shape"] for d in spec["inputs"]])

    def test_dry_run_writes_nothing(self):
        out = os.path.join(self.tmp, "out")
        r = self.report(os.path.join(DATA, "level2", "modules_conv_norm_pool.py"), "--no-check",
                        "--out", out, "--kiln", "/nonexistent/kiln")
        self.assertEqual(r["problems"][0]["status"], "mappable")
        self.assertEqual(r["problems"][0]["ops"], 18)
        self.assertFalse(os.path.exists(os.path.join(out, "level2")))

    def test_kiln_rejection_is_reported(self):
        fake = os.path.join(self.tmp, "fake_kiln")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho \"$@\" > /dev/null\n"
                    "echo \"12:00:00.000 error x.toml: task 'n': ops[0]: over a limit\" >&2\n"
                    "exit 1\n")
        os.chmod(fake, 0o755)
        r = self.report(os.path.join(DATA, "level1", "relu_uniform.py"), "--out",
                        os.path.join(self.tmp, "out"), "--kiln", fake)
        p = r["problems"][0]
        self.assertEqual(p["status"], "rejected")
        self.assertEqual(p["blockers"][0]["kind"], "kiln")
        self.assertIn("over a limit", p["blockers"][0]["detail"])

    def test_usage_errors_exit_2(self):
        cases = [
            (["/nonexistent/problem.py", "--no-check"], "no such file or directory"),
            ([os.path.join(DATA, "level1"), "--no-check", "--scale-batch", "0"],
             "--scale-batch 0.0: expected 0 < F <= 1"),
            ([os.path.join(DATA, "level1")], "--out DIR is required"),
            ([os.path.join(DATA, "level1"), "--out", self.tmp, "--kiln", "/nonexistent/kiln"],
             "--kiln /nonexistent/kiln: no such executable"),
            ([os.path.join(DATA, "level1"), "--no-check", "--from", "other"],
             "only 'kernelbench'"),
            ([os.path.join(DATA, "level1"), "--no-check", "--device", "gpu"],
             "--device gpu: expected cpu, cuda or cuda:N"),
        ]
        bad = os.path.join(self.tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"code": "x = 1"}\n{"code": \n')
        cases.append(([bad, "--no-check"], f"{bad}:2: not JSON Lines"))
        nocode = os.path.join(self.tmp, "nocode.jsonl")
        with open(nocode, "w") as f:
            f.write('{"text": "x"}\n')
        cases.append(([nocode, "--no-check"], f"{nocode}:1: expected an object with a \"code\""))
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        cases.append(([empty, "--no-check"], "no .py problem files"))
        for args, msg in cases:
            proc = run_tool(*args)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertIn(msg, proc.stderr, args)


MODULE_DATA = os.path.join(ROOT, "tests", "data", "module")


if ki is not None:
    class OnCuda(torch.nn.Module):
        """A module whose forward makes a tensor on cuda:0 (a device constant in TorchScript)."""

        def forward(self, x):
            return x * 2 + torch.ones(4, device=torch.device("cuda:0"))


@unittest.skipIf(ki is None, f"needs torch: {TORCH_ERROR}")
class ModuleForm(unittest.TestCase):
    """Problems spec v1 cannot say, imported as their own Model (op pytorch_module), or refused
    with the reason; --form picks the form."""

    @classmethod
    def setUpClass(cls):
        import_once(cls, [os.path.join(MODULE_DATA, "problems"),
                          os.path.join(MODULE_DATA, "level3", "lstm_module.py")])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def task(self, stem):
        p = self.p[stem]
        self.assertEqual((p["status"], p["form"]), ("imported", "pytorch_module"),
                         f"{stem}: {p['blockers']}")
        with open(p["out"], "rb") as f:
            return p, tomllib.load(f)

    def test_an_lstm_is_its_own_model_checked_against_kiln(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-2000:])
        p, spec = self.task("lstm_module")
        self.assertEqual(p["check"], "ok")
        self.assertIn(("missing_op", "nn.LSTM"),
                      {(b["kind"], b["what"]) for b in p["not_spec_v1"]})
        self.assertIn("its Model, traced: spec v1 cannot say nn.LSTM", self.proc.stderr)
        self.assertEqual([d["name"] for d in spec["inputs"]], ["x", "h0", "c0"])
        (op,) = spec["ops"]
        self.assertEqual(op["op"], "pytorch_module")
        keys = op["attrs"]["state_dict"].split()
        self.assertEqual(keys[0], "m.lstm.weight_ih_l0")
        self.assertEqual(op["args"][:3], ["x", "h0", "c0"])
        self.assertEqual(len(op["args"]), 3 + len(keys))
        kb = spec["kernelbench"]
        self.assertEqual(kb["state_dict"]["fc_bias"], "fc.bias")  # loaded by the Model's key
        self.assertEqual(params_of(spec)["fc_bias"]["init"], "bias_uniform")
        # weights are not in the file: 0-dim placeholders, a few KB of TorchScript
        self.assertLess(p["torchscript_bytes"], 40000)
        self.assertIn("as module", self.proc.stdout)

    def test_nested_outputs_are_flattened_in_order(self):
        p, spec = self.task("lstm_nested_outputs")
        self.assertEqual(spec["outputs"], ["y0", "y1", "y2"])
        self.assertEqual([o["attrs"]["output"] for o in spec["ops"]], [0, 1, 2])
        self.assertEqual([o["attrs"]["shape"] for o in spec["ops"]],
                         [[4, 6, 12], [1, 4, 12], [1, 4, 12]])

    def test_random_forward_and_random_attribute_are_refused(self):
        p = self.p["dropout_in_training"]
        self.assertEqual((p["status"], p["form"]), ("rejected", "pytorch_module"))
        self.assertEqual([b["kind"] for b in p["blockers"]], ["random"])
        self.assertIn("dropout", p["blockers"][0]["detail"])
        p = self.p["stateful_hidden"]  # forward replaces self.hidden: two calls, two outputs
        self.assertEqual((p["status"], p["refused_for"]), ("rejected", "nature"))
        self.assertEqual(p["blockers"][0]["what"], "forward reads state an earlier call left")
        self.assertIn("Model.hidden is another tensor after a call", p["blockers"][0]["detail"])
        self.assertNotIn("out", p)
        p, spec = self.task("state_overwritten")  # replaces self.hidden, never reads it
        self.assertIn("forward replaces Model.hidden, but its output does not read what an "
                      "earlier call left there", " ".join(p["notes"]))
        self.assertEqual([d["name"] for d in spec["inputs"]], ["x", "initial_hidden"])
        # its state is copied at each call: Kiln's hidden param is the same after its reference
        # ran (the check compares Kiln's digest, taken after a call, with the draw)
        self.assertEqual(p["check"], "ok")
        self.model_as_modelnew_is_correct(p)  # the pool calls it many times, on fresh inputs
        p = self.p["value_dependent_branch"]  # right on the example only
        self.assertEqual(p["status"], "rejected")
        self.assertEqual(p["blockers"][0]["what"], "torch.jit.trace does not follow the Model")

    def test_a_random_plain_attribute_is_a_param_given_by_its_path(self):
        p, spec = self.task("random_hidden_attribute")
        h0 = [d for d in spec["params"] if d["name"] == "h0"]
        self.assertEqual(h0, [{"name": "h0", "shape": [1, 4, 16], "init": "normal"}])
        self.assertEqual(spec["kernelbench"]["attributes"], {"h0": "h0"})
        self.assertNotIn("h0", spec["kernelbench"]["state_dict"])
        self.assertTrue(spec["ops"][0]["attrs"]["state_dict"].endswith(" m.h0"))
        # the Model as a ModelNew, through the pool: given the task's h0 by its path, it is right
        self.model_as_modelnew_is_correct(p)

    def judge(self, p, tag, edit=lambda source: source):
        """The problem's own Model as a ModelNew source (tools/modelnew_from_model.py), changed by
        edit(source), judged through the cpu pool against the task: its eval row."""
        work = os.path.join(self.tmp, "as_modelnew", p["name"], tag)
        subs, only = os.path.join(work, "subs"), os.path.join(work, "suite")
        os.makedirs(only, exist_ok=True)
        shutil.copy(p["out"], only)
        run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "modelnew_from_model.py"),
                              only, "--out", subs], capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        path = os.path.join(subs, p["name"] + ".py")
        with open(path) as f:
            changed = edit(f.read())
        with open(path, "w") as f:
            f.write(changed)
        ev = subprocess.run([KILN, "eval", "--backend", "cpu", "--policy", f"sources:{subs}",
                             "--suite", only, "--json", os.path.join(work, "eval.json")],
                            capture_output=True, text=True, timeout=600)
        self.assertEqual(ev.returncode, 0, ev.stderr[-3000:])
        with open(os.path.join(work, "eval.json")) as f:
            (row,) = json.load(f)[0]["tasks"]
        return row

    def model_as_modelnew_is_correct(self, p):
        row = self.judge(p, "as_is")
        self.assertEqual(row["outcome"], "correct", json.dumps(row)[:1500])

    def test_a_modelnew_must_hold_the_attribute_the_task_gives(self):
        p, _ = self.task("random_hidden_attribute")
        # its own zero state under another name: the task's h0 has nowhere to go
        row = self.judge(p, "renamed", lambda s: s.replace("self.h0", "self.state0").replace(
            "torch.randn(1, batch, n)", "torch.zeros(1, batch, n)"))
        self.assertNotEqual(row["outcome"], "correct")
        self.assertIn("no tensor attribute 'h0' of shape [1, 4, 16]", json.dumps(row))
        # h0 of another shape (the first batch row only)
        row = self.judge(p, "reshaped", lambda s: s.replace(
            "self.h0 = torch.randn(1, batch, n)", "self.h0 = torch.randn(1, 1, n)").replace(
            "self.gru(x, self.h0)", "self.gru(x, self.h0.expand(1, x.shape[0], -1).contiguous())"))
        self.assertNotEqual(row["outcome"], "correct")
        self.assertIn("no tensor attribute 'h0' of shape [1, 4, 16]", json.dumps(row))

    def test_a_modelnew_with_a_threaded_reduction_runs_in_the_sandboxed_host(self):
        p = self.p["logsumexp_rows"]  # spec v1 says it; ModelNew runs against any import
        self.assertEqual(p["status"], "imported", p["blockers"])
        self.model_as_modelnew_is_correct(p)

    def test_the_shims_reach_a_modelnew_too(self):
        # einops.rearrange and torch 2's SDPA, missing here: supplied to the import, the ModelNew
        # build and the kernel host alike
        p, spec = self.task("einops_attention")
        self.assertEqual(p["check"], "ok")
        self.model_as_modelnew_is_correct(p)

    def test_int64_and_bool_inputs_drawn_as_floats_given_as_their_type(self):
        p, spec = self.task("int64_and_bool_inputs")
        inits = {d["name"]: d["init"] for d in spec["inputs"]}
        self.assertEqual(inits, {"x": "normal", "mask": "randint:0:2", "targets": "randint:0:10"})
        kb = spec["kernelbench"]
        self.assertEqual((kb["bool_inputs"], kb["int64_inputs"]), (["mask"], ["targets"]))
        self.assertEqual(p["check"], "ok")  # Kiln's module reference casts as the Model takes

    def test_batchnorm_buffers_stay_in_the_module(self):
        p, spec = self.task("gru_batchnorm")
        sd = spec["kernelbench"]["state_dict"].values()
        self.assertIn("bn.weight", sd)
        for buf in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
            self.assertNotIn(buf, sd)
            self.assertNotIn("m." + buf, spec["ops"][0]["attrs"]["state_dict"].split())
        self.assertEqual(p["check"], "ok")  # Kiln's params unchanged by its reference's calls

    def test_constant_tensors_stay_in_the_module(self):
        p, spec = self.task("constant_attribute")
        self.assertNotIn("gate", spec["kernelbench"]["state_dict"].values())
        self.assertIn("gate", spec["kernelbench"]["model_keys"])
        self.assertTrue(any("kept in the module" in n and "gate" in n for n in p["notes"]))

    def test_torch_baselines_run_the_model_on_kilns_draws(self):
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "torch_baselines.py"),
                               "--fidelity-only", "--device", "cpu", "--threads", "2",
                               "--kiln", KILN, "--suite", self.out],
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        self.assertIn("9 tasks: fidelity 9 ok, 0 mismatch, 0 error", proc.stdout)

    def test_a_module_made_for_another_device_runs_on_this_one(self):
        # torch.jit.trace keeps the device of tensors a forward makes as constants (an RNN's
        # zero state): Kiln sets them to the call's device, so a task imported on a GPU runs on
        # cpu and the other way round. Here a module made for cuda:0 runs on this cpu.
        import base64
        import io
        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(OnCuda()), buf)
        blob = base64.b64encode(buf.getvalue()).decode()
        path = os.path.join(self.tmp, "device_constant.toml")
        with open(path, "w") as f:
            f.write('name = "device_constant"\nlevel = 1\noutputs = ["y"]\n\n[[inputs]]\n'
                    'name = "x"\nshape = [4]\ninit = "normal"\n\n[[ops]]\nout = "y"\n'
                    'op = "pytorch_module"\nargs = ["x"]\nattrs = { inputs = 1, state_dict = '
                    f'"", output = 0, shape = [4], torchscript = "{blob}" }}\n')
        proc = subprocess.run([KILN, "tasks", "validate", path], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("1 ok, 0 bad", proc.stdout + proc.stderr)

    def test_form_flag(self):
        out = os.path.join(self.tmp, "forms")
        lstm = os.path.join(MODULE_DATA, "level3", "lstm_module.py")
        relu = os.path.join(DATA, "level1", "inputs_and_constants.py")  # non-tensor arguments too
        path = os.path.join(self.tmp, "forms.json")
        proc = run_tool(lstm, "--form", "spec", "--out", out, "--report", path, "--kiln", KILN)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        with open(path) as f:
            (p,) = json.load(f)["problems"]
        self.assertEqual((p["status"], p["form"]), ("rejected", "spec_v1"))
        proc = run_tool(relu, "--form", "module", "--out", out, "--report", path, "--kiln", KILN)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        with open(path) as f:
            (p,) = json.load(f)["problems"]
        self.assertEqual((p["status"], p["form"]), ("imported", "pytorch_module"), p["blockers"])
        self.assertEqual(p["not_spec_v1"][0]["what"], "--form module")
        bad = run_tool(relu, "--form", "graph", "--no-check")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--form", bad.stderr)


@unittest.skipIf(ki is None, f"needs torch: {TORCH_ERROR}")
class InProcess(unittest.TestCase):
    CONF = {"scale_batch": 1.0, "kiln": KILN, "threads": 2, "allow_degenerate": False,
            "max_mib": 2048, "max_gflop": 16, "max_ops": 256, "timeout": 600, "no_check": False,
            "jobs": 1, "device": "cpu", "form": "auto"}

    def test_prepare_device_and_the_size_rule(self):
        from kernelbench.worker import prepare_device, size_verdict
        cpu = dict(self.CONF, max_mib=None, max_gflop=None, jobs=4)
        self.assertEqual(prepare_device(cpu), (2048.0, 2048.0, 16.0))  # per problem, any jobs
        self.assertEqual(prepare_device(dict(cpu, max_mib=100, max_gflop=2)), (100, 100, 2))
        gib = 2 ** 30
        self.assertEqual(size_verdict(1 * gib, 2048, 8192), "ok")
        self.assertEqual(size_verdict(3 * gib, 2048, 8192), "alone")  # checked after, by itself
        self.assertEqual(size_verdict(9 * gib, 2048, 8192), "too_large")
        self.assertEqual(size_verdict(3 * gib, 2048, 2048), "too_large")  # cpu: no "alone"

    def test_timeout_is_per_check_each_redraw_starting_it_again(self):
        import time as clock

        def redraws(prob, conf, conn):  # four checks of 0.7 s: 2.8 s in all, over the timeout
            for k in range(4):
                clock.sleep(0.7)
                conn.send({"attempt": f"variant {k}"})
            conn.send(dict(prob, status="degenerate", blockers=[], notes=[], rewrites=[]))

        def hangs(prob, conf, conn):
            clock.sleep(3.5)

        saved = ki.worker_main
        try:
            for fake, want in ((redraws, "degenerate"), (hangs, "rejected")):
                ki.worker_main = fake
                (res,) = ki.run_all([{"source": "p.py", "name": "kb_l1_p", "level": 1}],
                                    dict(self.CONF, timeout=2.0, jobs=1), lambda i, r: None)
                self.assertEqual(res["status"], want, res)
            self.assertEqual(res["blockers"][0]["kind"], "timeout")
        finally:
            ki.worker_main = saved

    def problem(self, rel):
        probs = ki.load_problems([os.path.join(DATA, rel)], None)
        ki.assign_names(probs)
        return probs[0]

    @need_kiln
    def test_numerical_check_catches_a_wrong_translation(self):
        prob = self.problem("level2/functions_elementwise.py")
        for tamper in (None, "scalar", "order"):
            state, res = ki.map_problem(dict(prob), self.CONF)
            spec = state["spec"]
            if tamper == "scalar":  # y / 3 -> y / 3.1: outputs off by up to ~0.01
                div = next(o for o in spec["ops"] if o["op"] == "div")
                div["attrs"]["scalar"] = 3.1
            elif tamper == "order":  # maximum(e, y) - y / 3 -> y / 3 - maximum(e, y)
                sub = next(o for o in spec["ops"] if o["op"] == "sub")
                sub["args"].reverse()
            with tempfile.TemporaryDirectory() as tmp:
                if tamper is None:
                    self.assertEqual(ki.check_problem(state, res, self.CONF, tmp), [])
                    self.assertEqual(res["check"], "ok")
                    continue
                with self.assertRaises(ki.Blocked) as cm:
                    ki.check_problem(state, res, self.CONF, tmp)
            self.assertEqual((cm.exception.kind, cm.exception.what),
                             ("check", "numerical mismatch"), tamper)
            self.assertIn("Model output", cm.exception.detail)

    def test_scale_batch_follows_derived_sizes(self):
        code = _read(os.path.join(DATA, "level1", "inputs_and_constants.py"))
        ns, scaling, source = ki.exec_problem(code, "p.py", 0.1)
        self.assertEqual((ns["batch_size"], ns["input_shape"]), (6, (6, 8)))
        self.assertEqual(scaling["batch_size"], {"from": 64, "to": 6})
        self.assertEqual(source, code.replace("batch_size = 64", "batch_size = 6"))
        ns, scaling, _ = ki.exec_problem(code, "p.py", 0.001)
        self.assertEqual(ns["batch_size"], 1)  # never below 1
        code = _read(os.path.join(DATA, "level1", "mostly_zero.py"))
        _, scaling, source = ki.exec_problem(code, "p.py", 0.5)
        self.assertEqual(scaling["note"], "no module-level batch_size nor a size to scale: "
                                          "sizes as given")
        self.assertEqual(source, code)
        # no batch_size: each size computed from literals alone, >= 256, by sqrt(F); one that
        # follows another (K = N * 2) follows it; small constants (a kernel size) stay
        code = ("import torch\nN = 2048 * 2\nK = N * 2\nM = 1001\nk = 3\n"
                "class Model(torch.nn.Module):\n    pass\n"
                "def get_inputs():\n    return [torch.rand(M, K), torch.rand(K, N)]\n"
                "def get_init_inputs():\n    return [k]\n")
        ns, scaling, source = ki.exec_problem(code, "p.py", 1 / 256)
        # 4096 -> 256, a multiple of 8 as it was; 1001 is not one, so 63 is not rounded
        self.assertEqual((ns["N"], ns["K"], ns["M"], ns["k"]), (256, 512, 63, 3))
        self.assertEqual(scaling["sizes"], {"N": {"from": 4096, "to": 256},
                                            "M": {"from": 1001, "to": 63}})
        self.assertIn("N = 256\nK = N * 2\nM = 63\n", source)
        # with a batch_size: its other sizes only when asked (the importer asks when a problem
        # is still too large to check with its batch scaled)
        code = code.replace("N = 2048 * 2\n", "N = 2048 * 2\nbatch_size = 512\n")
        ns, scaling, _ = ki.exec_problem(code, "p.py", 1 / 256)
        self.assertEqual((ns["batch_size"], ns["N"], "sizes" in scaling), (2, 4096, False))
        ns, scaling, source = ki.exec_problem(code, "p.py", 1 / 256, sizes_too=True)
        self.assertEqual((ns["batch_size"], ns["N"], ns["M"]), (2, 256, 63))
        self.assertIn("N = 256\nbatch_size = 2\n", source)
        self.assertIn("too large with batch_size scaled", scaling["note"])
        ns, scaling, _ = ki.exec_problem(code, "p.py", 1.0)
        self.assertEqual(scaling, {"batch_size": None})
        # an expression, an annotation, non-ASCII before it on its line, CRLF line ends
        code = ("import torch\r\nn = 40\r\ns = 'é'; batch_size: int = n * 2  # é\r\n"
                "class Model(torch.nn.Module):\r\n    pass\r\n"
                "def get_inputs():\r\n    return [torch.rand(batch_size)]\r\n"
                "def get_init_inputs():\r\n    return []\r\n")
        ns, _, source = ki.exec_problem(code, "p.py", 0.25)
        self.assertEqual(ns["batch_size"], 20)
        self.assertEqual(source, code.replace("n * 2  #", "20  #"))

    def test_softmax_draw_and_the_reshapes_that_keep_its_rows(self):
        from kernelbench_draws import Recorder, input_init
        with Recorder(meta=True) as rec:
            kept = torch.rand(4, 6).softmax(-1).view(2, 2, 6)
            split = torch.rand(4, 6).softmax(dim=-1).view(4, 3, 2)
            other_dim = torch.rand(4, 6).softmax(dim=0)
        self.assertEqual(input_init(kept, rec, "input 0"), {"init": "uniform", "softmax": True})
        for t in (split, other_dim):
            with self.assertRaises(ki.Blocked) as cm:
                input_init(t, rec, "input 1")
            self.assertIn("softmax", cm.exception.detail)

    def test_rearrange_shim_splits_merges_and_reorders(self):
        from kernelbench.compat import rearrange
        x = torch.arange(2 * 6 * 3 * 4.0).reshape(2, 6, 3, 4)
        self.assertTrue(torch.equal(rearrange(x, "b (c l) ... -> b c l ...", l=3),
                                    x.reshape(2, 2, 3, 3, 4)))
        self.assertTrue(torch.equal(rearrange(x, "b c l h -> b h c l"), x.permute(0, 3, 1, 2)))
        self.assertTrue(torch.equal(rearrange(x, "b c l h -> b (c l) h"), x.reshape(2, 18, 4)))
        self.assertTrue(torch.equal(rearrange(x, "b c l h -> (h b) l c"),
                                    x.permute(3, 0, 2, 1).reshape(8, 3, 6)))
        for bad, kw in (("b (c l) -> b c l", {"l": 4}), ("b c -> b", {}), ("b c l h -> b c l", {}),
                        ("b (c (l)) h p -> b", {})):
            with self.assertRaises(ValueError, msg=bad):
                rearrange(x, bad, **kw)

    def test_refused_for_nature_or_not_yet(self):
        def r(status, *blockers, **kv):
            return dict(status=status, blockers=[dict(kind=k, what=w) for k, w in blockers], **kv)
        self.assertIsNone(ki.refused_for(r("imported")))
        self.assertEqual(ki.refused_for(r("degenerate", redraw_outcomes=["degenerate"] * 3)),
                         "nature")
        self.assertEqual(ki.refused_for(r("degenerate", redraw_outcomes=["degenerate",
                                                                           "too_large"])),
                         "not_yet")  # a redraw the machine could not check says nothing
        self.assertEqual(ki.refused_for(r("degenerate")), "not_yet")  # --keep-draws: not tried
        self.assertEqual(ki.refused_for(r("rejected", ("random", "forward is not deterministic"))),
                         "nature")
        self.assertEqual(ki.refused_for(r("rejected", ("check", "ill-conditioned in float32"))),
                         "nature")
        self.assertEqual(ki.refused_for(r("rejected", ("random", "x"), ("missing_op", "F.y"))),
                         "not_yet")
        self.assertEqual(ki.refused_for(r("too_large", ("too_large", "too large to check here"))),
                         "not_yet")

    def test_sizes_in_lists_tied_to_the_batch_and_a_least_batch(self):
        code = ("import torch\nbatch_size = 4096\nhidden = [32768, 32768, 10]\n"
                "shape = (4096,)\nk = 3\n"
                "class Model(torch.nn.Module):\n    pass\n"
                "def get_inputs():\n    return [torch.rand(batch_size, *shape)]\n"
                "def get_init_inputs():\n    return [hidden, k]\n")
        # lists and tuples of sizes scale element by element (small ones stay), sizes by sqrt(F)
        ns, scaling, source = ki.exec_problem(code, "p.py", 1 / 256, sizes_too=True)
        self.assertEqual((ns["batch_size"], ns["hidden"], ns["shape"], ns["k"]),
                         (16, [2048, 2048, 10], (256,), 3))
        self.assertEqual(scaling["sizes"]["hidden"], {"from": [32768, 32768, 10],
                                                      "to": [2048, 2048, 10]})
        self.assertIn("hidden = [2048, 2048, 10]\nshape = (256,)\n", source)
        # tied: a size equal to batch_size's own value is the batch (a hinge loss's feature dim)
        ns, _, source = ki.exec_problem(code, "p.py", 1 / 256, sizes_too=True, tie_batch=True)
        self.assertEqual((ns["batch_size"], ns["shape"], ns["hidden"]), (16, (16,), [2048, 2048, 10]))
        self.assertIn("shape = (16,)\n", source)
        # a least batch: 2 where 1 would be (BatchNorm trains on two values per channel), never
        # above the problem's own
        code1 = code.replace("batch_size = 4096", "batch_size = 8")
        ns, scaling, _ = ki.exec_problem(code1, "p.py", 1 / 256, min_batch=2)
        self.assertEqual(scaling["batch_size"], {"from": 8, "to": 2, "least": 2})
        self.assertIn("batch_size 8 -> 2 (--scale-batch 0.00390625, at least 2 for BatchNorm)",
                      ki.describe_scaling(scaling, 1 / 256))
        ns, _, _ = ki.exec_problem(code1.replace("batch_size = 8", "batch_size = 1"), "p.py",
                                   1 / 256, min_batch=2)
        self.assertEqual(ns["batch_size"], 1)

    def test_kernelbench_table_refusals(self):
        def blockers(code):
            prob = {"source": "level1/p.py", "code": code, "stem": "p", "level": 1,
                    "level_from": "path", "name": "kb_l1_p"}
            with self.assertRaises(ki.BlockedMany) as cm:
                ki.map_problem(prob, dict(self.CONF, no_check=True))
            return [(b.kind, b.what, b.detail) for b in cm.exception.blockers]
        head = "import torch\nimport torch.nn as nn\n\n"
        tail = "\ndef get_inputs():\n    return [torch.randn(4, 8)]\n"
        self.assertEqual(blockers(
            head + "class Model(nn.Module):\n    def __init__(self, w, dt):\n"
            "        super().__init__()\n"
            "    def forward(self, x):\n        return torch.relu(x)\n" + tail +
            "def get_init_inputs():\n    return [8, (torch.float32,)]\n"),
            [("load", "a value the [kernelbench] table cannot hold",
              "get_init_inputs() item 1[0]: dtype torch.float32")])
        self.assertEqual(blockers(
            head + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('s', torch.ones(8), persistent=False)\n"
            "    def forward(self, x):\n        return x * self.s\n" + tail +
            "def get_init_inputs():\n    return []\n"),
            [("load", "a param that is not in the Model's state_dict",
              "param 's' is Model.s (a non-persistent buffer or a plain tensor attribute)")])

    def test_rank_missing(self):
        def r(level, *blockers):
            return {"status": "rejected", "level": level, "source": f"p{len(blockers)}",
                    "blockers": [{"kind": k, "what": w, "detail": ""} for k, w in blockers]}
        results = [r(1, ("missing_op", "torch.cat")),
                   r(1, ("missing_op", "torch.cat"), ("missing_op", "torch.cat")),
                   r(2, ("missing_op", "torch.cat"), ("init", "param init: expression")),
                   r(3, ("missing_op", "nn.LSTM"), ("trace", "x")),
                   {"status": "imported", "level": 1, "source": "ok", "blockers": []}]
        rank = ki.rank_missing(results)
        self.assertEqual([(e["what"], e["problems"], e["alone"]) for e in rank], [
            ("torch.cat", 3, 2), ("nn.LSTM", 1, 0), ("param init: expression", 1, 0)])
        self.assertEqual(rank[0]["levels"], {"1": 2, "2": 1})

    def test_peak_bytes_frees_each_result_after_its_last_reader(self):
        from kernelbench.tracing import spec_peak_bytes
        x = {"name": "x", "shape": [4]}  # 16 bytes, live throughout

        def op(name, kind, *args):
            return {"out": name, "op": kind, "args": list(args)}
        shapes = {n: [4] for n in "adc"}
        # d is read by nobody: freed at once; a lives until c reads it; c is the output.
        spec = {"inputs": [x], "params": [], "outputs": ["c"],
                "ops": [op("a", "relu", "x"), op("d", "neg", "x"), op("c", "relu", "a")]}
        self.assertEqual(spec_peak_bytes(spec, shapes), 48)
        spec["ops"][2] = op("c", "add", "a", "d")  # now d lives until step 2 as well
        self.assertEqual(spec_peak_bytes(spec, shapes), 64)
        # A long chain holds two results at a time (KernelBench's 4200-op problem had taken 4 min).
        chain = [op("t0", "tanh", "x")] + [op(f"t{i}", "tanh", f"t{i - 1}") for i in range(1, 5000)]
        spec = {"inputs": [x], "params": [], "outputs": ["t4999"], "ops": chain}
        self.assertEqual(spec_peak_bytes(spec, {f"t{i}": [4] for i in range(5000)}), 48)

    def test_toml_writer_round_trips(self):
        spec = {"name": "t", "level": 1, "dtype": "float32", "description": 'a "q" \\ é',
                "outputs": ["y0"], "inputs": [{"name": "x", "shape": [2, 3], "init": "normal"}],
                "params": [], "ops": [{"out": "y0", "op": "clamp", "args": ["x"],
                                       "attrs": {"min": -1, "max": 1e-05}}]}
        text = ki.to_toml(spec)
        back = tomllib.loads(text)
        self.assertEqual(back["ops"][0]["attrs"], {"min": -1, "max": 1e-05})
        self.assertEqual(back["description"], spec["description"])
        self.assertNotIn("params", back)
        # the [kernelbench] table, last; the source a literal string where it can be
        for source, literal in (("class Model:\n    s = 'é \\ \"'\n", True),
                                ("s = \'\'\'x\'\'\'\n", False), ("a\r\nb\r\n", False),
                                ("x = '\U0001F600'\n\x7f", False), ("'", False)):
            spec["kernelbench"] = {"source": source, "init_inputs": [3, [1, 2.5], True, "s"],
                                   "forward": [{"input": "x"}, {"value": [1, 2]}],
                                   "bool_inputs": [], "state_dict": {"w": "fc.weight",
                                                                     "a.b": "x.y"},
                                   "model_keys": ["fc.weight", "x.y"]}
            text = ki.to_toml(spec)  # asserts the round trip
            self.assertEqual(tomllib.loads(text)["kernelbench"], spec["kernelbench"])
            self.assertIn("\n[kernelbench]\nsource = " + ("\'\'\'\n" if literal else '"'), text)
            self.assertIn('"a.b" = "x.y"', text)


if __name__ == "__main__":
    if ki is None or not HAVE_KILN:  # ctest reads this line as a skip, not a pass
        print(f"SKIP: torch: {TORCH_ERROR or 'ok'}; kiln at {KILN}: {HAVE_KILN}", flush=True)
    unittest.main()
