#!/usr/bin/env python3
"""Tests of tools/kernelbench/tolerance.py: the float32 / float64 gap and the zeros rule give the
same answers a slice at a time as over the whole tensor, and the float64 forward moves to the cpu
when the device runs out of memory; and of tools/torch_baselines.py's digest and eager / compiled
comparison, a slice at a time too. Seconds; needs torch only.

    /usr/bin/python3 tests/tools/test_kernelbench_tolerance.py -v
"""
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from kernelbench import tolerance as tol
    import torch_baselines as tb
    TORCH_ERROR = None
except (ImportError, SystemExit) as e:
    tol, tb, TORCH_ERROR = None, None, e


def state_for(outputs, index=()):
    return {"spec": {"outputs": outputs}, "index": set(index)}


@unittest.skipIf(TORCH_ERROR is not None, f"no torch here: {TORCH_ERROR}")
class Sliced(unittest.TestCase):
    def setUp(self):
        self.saved = (tb.SLICE, tol.QUANTILE_SAMPLE)
        torch.manual_seed(0)

    def tearDown(self):
        tb.SLICE, tol.QUANTILE_SAMPLE = self.saved

    def test_window_and_gap_same_in_slices(self):
        y64 = torch.randn(37, 53, dtype=torch.float64)
        y32 = (y64 + 1e-6 * torch.randn_like(y64)).float()
        st = state_for(["y"])
        whole = tol.atol_window(st, [y32], [y64], 1e-4)
        res_whole = {"rewrites": []}
        tol.float32_tolerance(st, [y32], [y64], (1e-4, 1e-4), res_whole)
        tb.SLICE = 100  # 20 slices, the last one short
        sliced = tol.atol_window(st, [y32], [y64], 1e-4)
        res_sliced = {"rewrites": []}
        tol.float32_tolerance(st, [y32], [y64], (1e-4, 1e-4), res_sliced)
        self.assertEqual(whole, sliced)
        self.assertEqual(res_whole["float32_gap"], res_sliced["float32_gap"])
        self.assertGreater(res_sliced["float32_gap"], 0)

    def test_a_nan_in_a_later_slice_is_not_lost(self):
        y64 = torch.zeros(10, dtype=torch.float64)
        y32 = y64.float()
        y32[6] = float("nan")
        tb.SLICE = 4
        st = state_for(["y"])
        self.assertIsNone(tol.atol_window(st, [y32], [y64], 1e-4))
        from kernelbench_draws import Blocked
        with self.assertRaises(Blocked):  # the gap is not finite: ill-conditioned
            tol.float32_tolerance(st, [y32], [y64], (1e-4, 1e-4), {"rewrites": []})

    def test_quantile_exact_when_small_sampled_when_big(self):
        y = torch.arange(1000, dtype=torch.float32) - 500  # |y|: 0 .. 500
        exact = tol.abs_quantile(y, 0.9)
        ref = y.double().abs().kthvalue(900).values.item()
        self.assertEqual(exact, ref)
        tol.QUANTILE_SAMPLE = 100  # every 10th element
        self.assertAlmostEqual(tol.abs_quantile(y, 0.9), ref, delta=10)

    def test_degeneracy_in_slices(self):
        tb.SLICE = 7
        spec = {"outputs": ["y"]}
        x = torch.rand(10, 10)
        self.assertEqual(tol.degeneracy(spec, [x.clone()], {"x": x}, 1e-4, 1e-4, {}, set()),
                         ["output 'y': copying input 'x' passes (the task is the identity on "
                          "these inputs)"])
        y = x.clone()
        y[9, 9] += 1  # one element in the last slice tells the copy apart
        self.assertEqual(tol.degeneracy(spec, [y], {"x": x}, 1e-4, 1e-4, {}, set()), [])
        small = torch.full((10, 10), 1e-6)
        small[0, :1] = 1.0  # 99% of elements within atol of zero
        self.assertEqual(tol.degeneracy(spec, [small], {}, 1e-4, 1e-4, {}, set()), [])
        small[0, 0] = 1e-6  # 100%
        flags = tol.degeneracy(spec, [small], {}, 1e-4, 1e-4, {}, set())
        self.assertEqual(len(flags), 1)
        self.assertIn("all-zeros output is within tolerance on 100.00%", flags[0])

    def test_float64_forward_falls_back_to_cpu(self):
        class OnlyCpu(torch.nn.Module):
            def forward(self, x):
                if x.device.type != "cpu":
                    raise RuntimeError("CUDA out of memory. Tried to allocate 12.00 GiB")
                return x * 2

        res = {"notes": []}
        ys = tol.float64_outputs(OnlyCpu(), lambda m, a: [m(*a)], [torch.ones(3)], res,
                                 tries=[torch.device("meta"), torch.device("cpu")])
        self.assertEqual(ys[0].device.type, "cpu")
        self.assertEqual(ys[0].dtype, torch.float64)
        self.assertTrue(torch.equal(ys[0], torch.full((3,), 2.0, dtype=torch.float64)))
        self.assertEqual(res["notes"], ["float64 forward out of device memory: run on the cpu"])

    def test_float64_forward_failure_is_noted(self):
        class Broken(torch.nn.Module):
            def forward(self, x):
                raise ValueError("no float64 kernel")

        res = {"notes": []}
        self.assertIsNone(tol.float64_outputs(Broken(), lambda m, a: [m(*a)],
                                              [torch.ones(2)], res))
        self.assertIn("float64 forward fails (ValueError: no float64 kernel)", res["notes"][0])


@unittest.skipIf(TORCH_ERROR is not None, f"no torch here: {TORCH_ERROR}")
class BaselinesSliced(unittest.TestCase):
    def setUp(self):
        self.saved = tb.SLICE

    def tearDown(self):
        tb.SLICE = self.saved

    def test_digest_is_the_same_in_slices(self):
        x = torch.randn(12345, generator=torch.Generator().manual_seed(0))
        x[5000], x[11000] = float("nan"), float("inf")  # in the 6th and 12th slices of 1000
        whole = tb.digest(x, 8)
        tb.SLICE = 1000
        sliced = tb.digest(x, 8)
        self.assertEqual(sliced["nonfinite"], 2)
        self.assertEqual(sliced["samples"], whole["samples"])
        self.assertAlmostEqual(sliced["sum"], whole["sum"], places=9)
        self.assertAlmostEqual(sliced["abs_sum"], whole["abs_sum"], places=6)

    def test_differs_names_the_first_bad_element_past_the_first_slice(self):
        want = torch.randn(12345, generator=torch.Generator().manual_seed(1))
        got = want.clone()
        got[7777] += 1
        got[9000] -= 1
        tb.SLICE = 1000
        self.assertIsNone(tb.differs(want.clone(), want, 1e-4, 1e-4))
        why = tb.differs(got, want, 1e-4, 1e-4)
        self.assertIn("at 2 of 12345 elements, first at flat index 7777", why)
        self.assertIn(f"eager {float(want[7777])!r}", why)


if __name__ == "__main__":
    unittest.main()
