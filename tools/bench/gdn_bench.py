#!/usr/bin/env python3
"""Side-by-side gated-delta-net forward benchmark on the GPU machine, one run, one GPU: this family's TUNED
WINNER (read from the kernel cache by kernel_bench) vs flash-linear-attention's chunk_gated_delta_rule forward, BOTH
timed with CUDA events over CUDA-graph replays (host overhead out of both sides).

Steps: (1) `dflash-tune warmup --problem gdn=...` for every shape into --cache-dir (a no-op for cached keys);
(2) `kernel_bench --graph` per shape: a graph of --graph-launches launches of the winner, replays timed (median of
--reps, L2 flushed before each replay), per-launch time = replay / launches; (3) FLA in this process: eager warm-up
(Triton compile + autotune, reported as "first call"), a torch.cuda.CUDAGraph of the same number of calls, replays
timed the same way.

Qwen3.5 conventions on both sides: q, k [T, H, 128], v [T, HV, 128] bf16, raw gate inputs a, b [T, HV] bf16,
A_log, dt_bias [HV] fp32; g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) computed inside the kernels
(FLA: use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True), L2-normalised q and k inside the kernels
(use_qk_l2norm_in_kernel=True), scale 128^-1/2, final state written (our problems' default final_state=true;
FLA: output_final_state=True), no initial state. Grouped value heads HV = 3H (or 2H) are passed to FLA directly:
fla-core >= 0.6 supports HV > H natively (GVA), so q and k are NOT repeated. FLA's backend dispatch is disabled
(FLA_DISABLE_BACKEND_DISPATCH=1) so that its own Triton kernels run, not an optional third-party backend.
Packed shape: 8 sequences, 32768 tokens; the cut points are the ones our workload drew with --seed
(kernel_bench --instance-out), random, so the sequences are NOT all 4096 long: both sides get the same cu_seqlens.

sm_120 stand-in (--sm80-peers; no sm_120 GPU is at hand): FLA compiled for the mma.sync instruction set that sm_120
has, per shape in a child process (tools/bench/triton_sm80.py): TRITON_OVERRIDE_ARCH=sm80, and while FLA is imported
(its IS_NVIDIA_HOPPER and other configuration flags are set at import) torch reports capability (8, 0) and a device
name without "NVIDIA H", so FLA takes its non-Hopper paths; the shared-memory budget FLA sizes its configurations by
stays the H200's (an sm_120 has ~100 KB). The child counts the wgmma / mma.sync of the PTX Triton wrote: a row whose
PTX holds wgmma is marked as no stand-in. Compare it with the portable tier's row (--portable-arch sm_90).

Usage (GPU machine, from the repository root, FLA wheels installed; see tools/bench/README.md):
  python3 tools/bench/gdn_bench.py --build-dir build-gpu --cache-dir /tmp/dflash-bench-cache
Dry run (no torch, no GPU, no FLA): python3 tools/bench/gdn_bench.py --build-dir build-bench --dry-run
"""
import argparse
import json
import os
import sys
import time

from bench_common import kernel_bench_json, log_line, pjson, run_cmd

K = 128


def gdn_problem(h, hv, tokens, seqs=1):
    return {"heads": h, "value_heads": hv, "head_dim": K, "tokens": tokens, "num_seqs": seqs, "dtype": "bf16"}


SHAPES = [
    ("(16,48) 1x8192", gdn_problem(16, 48, 8192)),
    ("(16,32) 1x8192", gdn_problem(16, 32, 8192)),
    ("(16,48) 1x32768", gdn_problem(16, 48, 32768)),
    ("(16,48) 8 packed, 32768", gdn_problem(16, 48, 32768, 8)),
]


# ---------------------------------------------------------------------------------------------------- our side

def warmup_cmd(args, shapes, arch=None):
    cmd = [args.dflash_tune, "--cache-dir", args.cache_dir, "warmup"] + (["--arch", arch] if arch else [])
    for _, p in shapes:
        cmd += ["--problem", "gdn=" + pjson(p)]
    if args.budget:
        cmd += ["--budget", args.budget]
    return cmd


def kernel_bench_cmd(args, problem, arch=None):
    cmd = [args.kernel_bench, "--family", "gdn", "--problem", pjson(problem), "--cache-dir", args.cache_dir,
           "--seed", str(args.seed), "--warmup", str(args.warmup), "--reps", str(args.reps), "--graph",
           "--graph-launches", str(args.graph_launches)] + (["--arch", arch] if arch else [])
    if args.no_flush:
        cmd.append("--no-flush")
    if args.check:
        cmd.append("--check")
    return cmd


def run_kernel_bench(args, problem, log, arch=None):
    return kernel_bench_json(kernel_bench_cmd(args, problem, arch), log)


def instance_facts(args, name, problem, log):
    """cu_seqlens of the workload our kernel_bench builds with --seed."""
    path = os.path.join(args.work_dir, "gdn_" + "".join(c if c.isalnum() else "_" for c in name) + ".json")
    cmd = [args.kernel_bench, "--family", "gdn", "--problem", pjson(problem), "--seed", str(args.seed),
           "--instance-only", "--instance-out", path]
    r, _ = run_cmd(cmd, log)
    if r.returncode != 0:
        raise RuntimeError("kernel_bench --instance-only failed for %s: %s" % (name, r.stderr.strip()))
    with open(path) as f:
        facts = json.load(f)
    cu = facts["cu_seqlens"]
    if cu[0] != 0 or cu[-1] != problem["tokens"] or len(cu) != problem.get("num_seqs", 1) + 1 or \
            any(b <= a for a, b in zip(cu, cu[1:])):
        raise RuntimeError("%s: implausible cu_seqlens %s" % (name, cu))
    return facts


# ------------------------------------------------------------------------------------------------------ FLA side

def fla_time(torch, args, p, cu_list):
    """FLA chunk_gated_delta_rule forward: first-call seconds and per-call ms over CUDA-graph replays."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.utils.index import prepare_chunk_indices
    T, H, HV = p["tokens"], p["heads"], p["value_heads"]
    g = torch.Generator(device="cuda").manual_seed(args.seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    q, k, v = randn(1, T, H, K), randn(1, T, H, K), randn(1, T, HV, K)
    a, b = randn(1, T, HV), randn(1, T, HV)
    # A_log = log U(0.5, 16), dt_bias = softplus^-1(log-uniform(1e-3, 1e-1)): the Qwen3.5 init, as our workload.
    A_log = torch.empty(HV, device="cuda").uniform_(0.5, 16.0, generator=g).log()
    dt = torch.empty(HV, device="cuda").uniform_(-6.907755, -2.302585, generator=g).exp()
    dt_bias = torch.log(torch.expm1(dt))
    cu = cu_cpu = chunk_indices = None
    if len(cu_list) > 2:
        cu_cpu = torch.tensor(cu_list, dtype=torch.long)
        cu = cu_cpu.to("cuda")
        # Computed once outside the graph (it needs the host copy); FLA accepts it precomputed.
        chunk_indices = prepare_chunk_indices(cu, 64, cu_seqlens_cpu=cu_cpu)

    def call():
        return chunk_gated_delta_rule(q, k, v, a, b, scale=K ** -0.5, initial_state=None, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                      cu_seqlens=cu, cu_seqlens_cpu=cu_cpu, chunk_indices=chunk_indices,
                                      use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)

    with torch.no_grad():
        t0 = time.time()
        o, ht = call()
        torch.cuda.synchronize()
        first = time.time() - t0
        if tuple(o.shape) != (1, T, HV, K) or not bool(torch.isfinite(o).all()) or not bool(torch.isfinite(ht).all()):
            raise RuntimeError("FLA output has shape %s or non-finite values" % (tuple(o.shape),))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(args.graph_launches):
                call()
        torch.cuda.synchronize()
        flush = None
        if not args.no_flush:
            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
            flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        for _ in range(args.warmup):
            graph.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(args.reps):
            if flush is not None:
                flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graph.replay()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / args.graph_launches)
        ts.sort()
        n = len(ts)
        median = (ts[(n - 1) // 2] + ts[n // 2]) / 2
        del graph
    return first, median


def sm80_fla_child(args):
    """The --sm80-child process: FLA for one shape on the mma.sync instruction set; prints one JSON row."""
    from triton_sm80 import count_ptx, enter_sm80_process, reported_as_sm80
    triton_cache = enter_sm80_process()
    if not args.fla_backend_dispatch:
        os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
    import torch
    with reported_as_sm80(torch, device_name="sm_120 stand-in (capability 8.0)"):
        import fla
        import fla.ops.gated_delta_rule  # noqa: F401 - its modules read the flags at import
        from fla.utils import IS_NVIDIA_HOPPER
    with open(args.sm80_child) as f:
        spec = json.load(f)
    first, ms = fla_time(torch, args, spec["problem"], spec["cu_seqlens"])
    wg, mma = count_ptx(triton_cache)
    row = {"system": "FLA %s, sm_80 instruction set" % getattr(fla, "__version__", "?"), "ms": ms,
           "note": "first call %.1f s; TRITON_OVERRIDE_ARCH=sm80, FLA imported with capability (8, 0) "
                   "(IS_NVIDIA_HOPPER %s); PTX: %d wgmma, %d mma.sync" % (first, IS_NVIDIA_HOPPER, wg, mma)}
    print(json.dumps(row), flush=True)
    return 0 if wg == 0 and mma > 0 and not IS_NVIDIA_HOPPER else 1


def sm80_fla_row(args, name, p, cu, log):
    """FLA on the mma.sync instruction set for one shape, in a child process (the overrides are per process)."""
    path = os.path.join(args.work_dir, name.replace(" ", "_").replace(",", "") + ".sm80.json")
    with open(path, "w") as f:
        json.dump({"problem": p, "cu_seqlens": cu}, f)
    cmd = [sys.executable, os.path.abspath(__file__), "--sm80-child", path, "--seed", str(args.seed),
           "--warmup", str(args.warmup), "--reps", str(args.reps), "--graph-launches", str(args.graph_launches)]
    cmd += (["--no-flush"] if args.no_flush else []) + (["--fla-backend-dispatch"] if args.fla_backend_dispatch else [])
    r, _ = run_cmd(cmd, log)
    row = {"shape": name, "tokens": p["tokens"]}
    try:
        row.update(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        row.update({"system": "FLA, sm_80 instruction set",
                    "note": "failed: " + (r.stderr.strip()[-300:] or "no output")})
        return row
    if r.returncode != 0:
        row["note"] += "; NOT A STAND-IN: its PTX holds wgmma or FLA still saw Hopper"
    return row


# ------------------------------------------------------------------------------------------------------- table

def table(rows):
    lines = ["| shape | system | ms | tokens/s (M) | vs FLA | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        ms, base = r.get("ms"), r.get("fla_ms")
        tps = r["tokens"] / (ms * 1e-3) / 1e6 if ms else None
        ratio = base / ms if ms and base else None
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            r["shape"], r["system"], "-" if ms is None else "%.3f" % ms, "-" if tps is None else "%.1f" % tps,
            "-" if ratio is None else "%.2fx" % ratio, r.get("note", "")))
    return "\n".join(lines)


def lengths_note(cu):
    lens = [b - a for a, b in zip(cu, cu[1:])]
    return "" if len(lens) == 1 else "lengths %s" % lens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build-dir", default="build-gpu", help="CMake build dir with dflash-tune and kernel_bench")
    ap.add_argument("--dflash-tune", help="dflash-tune binary (default: BUILD/tools/dflash_tune/dflash-tune)")
    ap.add_argument("--kernel-bench", help="kernel_bench binary (default: BUILD/tools/bench/kernel_bench)")
    ap.add_argument("--cache-dir", default="/tmp/dflash-bench-cache", help="kernel cache for warmup and lookups")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gdn_bench"),
                    help="where gdn_bench.md and .json go (default $OUT)")
    ap.add_argument("--work-dir", default="/tmp/gdn_bench_work", help="instance files and the log")
    ap.add_argument("--seed", type=int, default=1, help="inputs / cu_seqlens seed (default 1)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed graph replays (default 3)")
    ap.add_argument("--reps", type=int, default=25, help="timed graph replays, median reported (default 25)")
    ap.add_argument("--graph-launches", type=int, default=10, help="forward calls per captured graph (default 10)")
    ap.add_argument("--no-flush", action="store_true", help="do not flush L2 before each replay (both sides)")
    ap.add_argument("--budget", help="passed to `dflash-tune warmup --budget` (e.g. 40 or 90s)")
    ap.add_argument("--skip-warmup", action="store_true", help="use the cache as it is")
    ap.add_argument("--portable-arch", help="also warm up and time the winners of this arch (sm_90 on a Hopper GPU: "
                    "the portable tier alone, beside the default arch's sm_90a winners over both tiers)")
    ap.add_argument("--check", action="store_true", help="kernel_bench --check (float64 reference, also after a "
                                                         "graph replay)")
    ap.add_argument("--fla-backend-dispatch", action="store_true",
                    help="let FLA dispatch to an optional backend (default: FLA's own Triton kernels)")
    ap.add_argument("--shapes", help="comma-separated subset of: " + "; ".join(n for n, _ in SHAPES) +
                    " (give them by index 0-%d)" % (len(SHAPES) - 1))
    ap.add_argument("--fla-shapes", help="run FLA only on these of the selected shapes (indices into the full "
                                         "list, e.g. 0,2; default: all): FLA's first call per new (H, HV, varlen) "
                                         "costs 30-45 s of Triton compile + autotune")
    ap.add_argument("--sm80-peers", action="store_true",
                    help="add the sm_120 stand-in rows: FLA compiled for the mma.sync instruction set (see above)")
    ap.add_argument("--sm80-child", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true", help="no torch, no GPU, no FLA: print the commands and the "
                                                           "instance facts")
    args = ap.parse_args()
    if args.sm80_child:
        return sm80_fla_child(args)
    args.dflash_tune = args.dflash_tune or os.path.join(args.build_dir, "tools", "dflash_tune", "dflash-tune")
    args.kernel_bench = args.kernel_bench or os.path.join(args.build_dir, "tools", "bench", "kernel_bench")
    shapes = SHAPES
    if args.shapes:
        try:
            idx = [int(x) for x in args.shapes.split(",")]
            shapes = [SHAPES[i] for i in idx]
        except (ValueError, IndexError):
            ap.error("--shapes wants indices 0-%d, e.g. 0,1" % (len(SHAPES) - 1))
    fla_names = {n for n, _ in shapes}
    if args.fla_shapes is not None:
        try:
            fla_names = {SHAPES[int(x)][0] for x in args.fla_shapes.split(",") if x}
        except (ValueError, IndexError):
            ap.error("--fla-shapes wants indices 0-%d, e.g. 0,2" % (len(SHAPES) - 1))
    if args.reps < 1 or args.warmup < 0 or args.graph_launches < 1:
        ap.error("--reps and --graph-launches must be >= 1 and --warmup >= 0")
    for b in [args.kernel_bench] + ([] if args.dry_run or args.skip_warmup else [args.dflash_tune]):
        if not os.access(b, os.X_OK):
            ap.error("not an executable: %s (build it, or pass --build-dir / --dflash-tune / --kernel-bench)" % b)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)

    with open(os.path.join(args.work_dir, "gdn_bench.log"), "w") as log:
        facts = {name: instance_facts(args, name, p, log) for name, p in shapes}
        for name, p in shapes:
            log_line(log, "%s: cu_seqlens %s" % (name, facts[name]["cu_seqlens"]))
        if args.dry_run:
            log_line(log, "dry run: would run")
            log_line(log, "  " + " ".join(warmup_cmd(args, shapes)))
            for _, p in shapes:
                log_line(log, "  " + " ".join(kernel_bench_cmd(args, p)))
            rows = []
            for name, p in shapes:
                for system in ("ours (tuned winner)", "FLA chunk_gated_delta_rule"):
                    rows.append({"shape": name, "system": system, "tokens": p["tokens"],
                                 "note": "not run (dry run) " + lengths_note(facts[name]["cu_seqlens"])})
            print(table(rows))
            return 0

        results = {"shapes": {n: p for n, p in shapes}, "seed": args.seed, "reps": args.reps, "warmup": args.warmup,
                   "graph_launches": args.graph_launches, "flush_l2": not args.no_flush, "ours": {}, "fla": {}}
        if not args.skip_warmup:
            r, secs = run_cmd(warmup_cmd(args, shapes), log, stream=True)
            log_line(log, "warmup: exit %d, %.1f s" % (r.returncode, secs))
            results["warmup_s"] = secs
            if args.portable_arch:
                r, secs = run_cmd(warmup_cmd(args, shapes, args.portable_arch), log, stream=True)
                log_line(log, "warmup --arch %s: exit %d, %.1f s" % (args.portable_arch, r.returncode, secs))
        ours, portable = {}, {}
        results["portable_arch"] = args.portable_arch
        results["portable"] = portable
        for name, p in shapes:
            ours[name] = run_kernel_bench(args, p, log)
            results["ours"][name] = ours[name]
            log_line(log, "%s: ours %s" % (name, ours[name].get("median_ms", ours[name].get("error"))))
            if args.portable_arch:
                portable[name] = run_kernel_bench(args, p, log, args.portable_arch)
                log_line(log, "%s: ours, %s winners %s" % (name, args.portable_arch,
                                                           portable[name].get("median_ms", portable[name].get("error"))))

        if not args.fla_backend_dispatch:
            os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"  # read when fla is imported
        torch, dev, tv = None, "?", "unavailable"
        try:
            import torch  # only now: kernel_bench ran without torch holding the GPU
            dev, tv = torch.cuda.get_device_name(0), torch.__version__
            import fla
            fla_version = getattr(fla, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - reported in the table, our numbers still printed
            fla_version = None
            fla_error = "not run: %s: %s" % (type(e).__name__, e)
        header = ("Gated delta net forward, %s, torch %s, FLA %s; both sides CUDA-graph replays of %d calls, median "
                  "of %d replays after %d, L2 %s; seed %d\n\n" % (
                      dev, tv, fla_version, args.graph_launches, args.reps,
                      args.warmup, "not flushed" if args.no_flush else "flushed before each replay", args.seed))

        def write_outputs(rows, complete):
            # Rewritten after every shape, so a run cut short (device time limit) still leaves what it measured.
            text = table(rows) + ("" if complete else "\n\n(incomplete: the run stopped before the last shape)")
            with open(os.path.join(args.out, "gdn_bench.md"), "w") as f:
                f.write(header + text + "\n")
            with open(os.path.join(args.out, "gdn_bench.json"), "w") as f:
                json.dump(dict(results, complete=complete), f, indent=1)
            return text

        write_outputs([{"shape": n, "system": "ours (tuned winner)", "tokens": p["tokens"],
                        "ms": ours[n].get("median_ms"), "note": "FLA not measured yet"} for n, p in shapes],
                      complete=False)
        rows = []
        for name, p in shapes:
            cu = facts[name]["cu_seqlens"]
            mine = ours[name]
            fla_row = {"shape": name, "system": "FLA chunk_gated_delta_rule %s" % (fla_version or ""),
                       "tokens": p["tokens"]}
            if fla_version is None:
                fla_row["note"] = fla_error
            elif name not in fla_names:
                fla_row["note"] = "not measured in this run (--fla-shapes)"
            else:
                try:
                    first, ms = fla_time(torch, args, p, cu)
                    fla_row["ms"] = ms
                    fla_row["note"] = "first call %.1f s (Triton compile + autotune)" % first
                except Exception as e:  # noqa: BLE001 - the comparison must not hide our numbers
                    fla_row["note"] = ("failed: %s: %s" % (type(e).__name__, e))[:300]
            results["fla"][name] = fla_row
            our = {"shape": name, "system": "ours (tuned winner)", "tokens": p["tokens"],
                   "fla_ms": fla_row.get("ms")}
            if "error" in mine:
                our["note"] = "failed: " + mine["error"]
            else:
                our["ms"] = mine["median_ms"]
                our["note"] = "%s spread %.3f %s" % (pjson(mine["config"]), mine["spread"], lengths_note(cu))
            rows += [our]
            if args.portable_arch:
                mine_p = portable[name]
                row_p = {"shape": name, "system": "ours, %s winners (portable tier)" % args.portable_arch,
                         "tokens": p["tokens"], "fla_ms": fla_row.get("ms")}
                if "error" in mine_p:
                    row_p["note"] = "failed: " + mine_p["error"]
                else:
                    row_p["ms"] = mine_p["median_ms"]
                    row_p["note"] = "%s spread %.3f" % (pjson(mine_p["config"]), mine_p["spread"])
                rows.append(row_p)
            rows.append(fla_row)
            if args.sm80_peers and name in fla_names:
                torch.cuda.empty_cache()  # the child shares the GPU
                sm80 = sm80_fla_row(args, name, p, cu, log)
                if args.portable_arch and sm80.get("ms") and portable[name].get("median_ms"):
                    sm80["note"] += "; FLA sm80 / ours %s: %.2fx" % (args.portable_arch,
                                                                  sm80["ms"] / portable[name]["median_ms"])
                results["fla"][name + " sm80"] = sm80
                rows.append(sm80)
            n = p.get("num_seqs", 1)
            if n > 1 and fla_version is not None and name in fla_names:
                # The shape is n sequences of equal length; our workload draws random cut points (and
                # cannot be told otherwise), so FLA also runs the equal split, shown without a row of ours.
                equal = [i * p["tokens"] // n for i in range(n + 1)]
                eq_row = {"shape": name, "system": "FLA, equal lengths %dx%d (no ours)" % (n, p["tokens"] // n),
                          "tokens": p["tokens"]}
                try:
                    _, eq_row["ms"] = fla_time(torch, args, p, equal)
                except Exception as e:  # noqa: BLE001
                    eq_row["note"] = ("failed: %s: %s" % (type(e).__name__, e))[:300]
                results["fla"][name + " equal"] = eq_row
                rows.append(eq_row)
            if fla_version is not None:
                torch.cuda.empty_cache()
            log_line(log, "%s: done" % name)
            write_outputs(rows, complete=False)
        text = write_outputs(rows, complete=True)
        print(header + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
