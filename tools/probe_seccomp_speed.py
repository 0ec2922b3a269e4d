"""Does a seccomp filter slow torch's forward on this machine? Linux before 5.16 (and later kernels
in their seccomp modes) forces speculation mitigations on a filtered process unless the filter is
installed with SECCOMP_FILTER_FLAG_SPEC_ALLOW, as Kiln's kernel hosts now do. Prints the CPU's
vulnerability files and, per mode (no filter, a filter, a filter with SPEC_ALLOW; each in a fresh
process), the median wall and event time of a small Linear + ReLU forward on cuda, back to back
and after a 2 ms sleep (as a kernel host's calls come). Usage: python3 tools/probe_seccomp_speed.py
"""
import ctypes
import os
import struct
import subprocess
import sys
import time

PR_SET_NO_NEW_PRIVS, SYS_SECCOMP, SECCOMP_SET_MODE_FILTER = 38, 317, 1
TSYNC, SPEC_ALLOW = 1, 4
MODES = ["none", "seccomp", "seccomp_spec_allow"]


def install_filter(spec_allow):
    """An allow-everything filter: any filter is what makes Linux force its mitigations."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    assert libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    ret_allow = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0x7fff0000))
    prog = SockFprog(1, ctypes.cast(ret_allow, ctypes.c_void_p))
    flags = TSYNC | (SPEC_ALLOW if spec_allow else 0)
    r = libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog))
    assert r == 0, ctypes.get_errno()


def measure(mode):
    import torch
    dev = torch.device("cuda")
    lin = torch.nn.Linear(256, 256).to(dev)
    x = torch.randn(64, 256, device=dev)
    out = torch.empty(64, 256, device=dev)

    def forward():
        with torch.no_grad():
            out.copy_(torch.relu(lin(x)))

    for _ in range(20):
        forward()
    torch.cuda.synchronize()
    if mode != "none":
        install_filter(mode == "seccomp_spec_allow")
    spec = [line for line in open("/proc/self/status").read().splitlines()
            if line.startswith("Speculation")]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    walls, events, after_sleep = [], [], []
    for _ in range(300):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        forward()
        stop.record()
        stop.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
        events.append(start.elapsed_time(stop))
    for _ in range(100):
        time.sleep(0.002)
        t0 = time.perf_counter()
        forward()
        torch.cuda.synchronize()
        after_sleep.append((time.perf_counter() - t0) * 1e3)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(f"{mode:20s} wall {med(walls):.3f} ms, events {med(events):.3f} ms, after a sleep "
          f"{med(after_sleep):.3f} ms | {'; '.join(spec)}", flush=True)


def main():
    if len(sys.argv) > 1:
        return measure(sys.argv[1])
    folder = "/sys/devices/system/cpu/vulnerabilities"
    for f in sorted(os.listdir(folder)):
        print(f, ":", open(os.path.join(folder, f)).read().strip())
    print("kernel", os.uname().release, "| cmdline", open("/proc/cmdline").read().strip()[:300])
    for mode in MODES * 2:  # twice, interleaved: a drift shows as a difference between rounds
        subprocess.run([sys.executable, __file__, mode], check=False)


if __name__ == "__main__":
    main()
