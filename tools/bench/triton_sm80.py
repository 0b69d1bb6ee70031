"""The sm_120 stand-in's shared pieces for the benchmark scripts (attention_bench.py, gdn_bench.py): Triton peers
compiled for the mma.sync instruction set that sm_120 has, on a Hopper GPU, in a child process of their own (the
overrides are per process).

How: TRITON_OVERRIDE_ARCH=sm80 before Triton compiles anything (Triton then lowers its dots to mma.sync, not
wgmma, and still runs ptxas for the GPU's own arch, so the H200 loads the result), a fresh TRITON_CACHE_DIR (so the
PTX counted afterwards is this process's own), and the capability a library chooses its configurations by reported
as (8, 0) only while it chooses them (reported to all of torch, Inductor built sm_80 cubins the H200 cannot load).
count_ptx proves the result: a stand-in's PTX holds no wgmma.
"""
import contextlib
import os
import pathlib
import re
import tempfile


def enter_sm80_process(inductor=False):
    """Sets the overrides for this process (call before torch / triton are imported); returns the Triton cache dir."""
    cache = tempfile.mkdtemp(prefix="sm80-triton-")
    os.environ["TRITON_OVERRIDE_ARCH"] = "sm80"
    os.environ["TRITON_CACHE_DIR"] = cache
    if inductor:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="sm80-inductor-")
    return cache


@contextlib.contextmanager
def reported_as_sm80(torch, device_name=None):
    """Within: torch.cuda.get_device_capability reports (8, 0) and, when device_name is given,
    torch.cuda.get_device_name reports it (libraries that test the name for "NVIDIA H", as FLA does)."""
    # Triton's driver binds torch.cuda.get_device_capability when it is first created and compiles for what it
    # reports from then on: created inside this context (FLA's import asks it for the target) it would build sm_80
    # cubins the H200 cannot load ("no kernel image is available"), so it is created with the real one first.
    import triton
    triton.runtime.driver.active.get_current_target()
    real_cap, real_name = torch.cuda.get_device_capability, torch.cuda.get_device_name
    torch.cuda.get_device_capability = lambda device=None: (8, 0)
    if device_name is not None:
        torch.cuda.get_device_name = lambda device=None: device_name
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_name = real_cap, real_name


def count_ptx(root):
    """(wgmma, mma.sync) instruction counts over every PTX file Triton wrote under root."""
    wg = ms = 0
    for path in pathlib.Path(root).rglob("*.ptx"):
        text = path.read_text(errors="replace")
        wg += len(re.findall(r"wgmma\.mma_async", text))
        ms += len(re.findall(r"\bmma\.sync", text))
    return wg, ms
