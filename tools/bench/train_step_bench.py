#!/usr/bin/env python3
"""Full-size drafter training step on the GPU machine: dflash-train with a randomly initialised
Qwen3.6-27B-shaped target (setup/presets/dflash-27b.target.json, drawn on the GPU; layers after the last tap,
61, are not built) and the 27B DFlash drafter (setup/presets/dflash-27b.drafter.json: 5 layers, hidden 5120, 32/8 heads,
4 sliding + 1 full layer), rows of --max-length tokens with --anchors anchors, every hot kernel from the cache.

Two runs of the real `dflash-train` binary:
  1. cold: `--tune-missing --max-steps 1` into --cache-dir: tunes exactly the keys these shapes need (reported as
     the one-time cost), then one step;
  2. warm: a fresh process, same cache, `--max-steps --steps`: the time from process start to the first step
     (dflash-train prints it: process start -> first step begins / done, dynamic loading and the 27B random init
     included), then the steady-state step time (median over steps 2..N), tokens/s and the allocator's peak memory
     (metrics.jsonl).
  3. with --nproc-per-node N (N > 1): a warm run of N data-parallel ranks (`dflash-train --nproc-per-node N`, one
     GPU each, the same per-rank row: batch 1 per rank), and the scaling efficiency on tokens/s:
     tokens/s(N ranks) / (N x tokens/s(1 rank)) (= t1 / tN on the median step times);
  4. with --target-device-offset K (K > 0): two warm single-rank runs with the target on cuda:K and the drafter on
     cuda:0 (features moved GPU to GPU, the target's cached kernels on its own GPU): pipelined (the pair's default:
     the target computes the next row's features while the drafter trains) and in series (--pipeline off). The
     serial run's phases give each side's time (target: its target_forward; drafter: the rest of its step), and the
     pipelined step is reported against the larger side;
     With --nproc-per-node N too and K >= N (e.g. 4 GPUs: N 2, K 2): a warm run of N pairs (batch 1 each) and
     their scaling efficiency against the one pipelined pair;
  5. with --one-gpu-pipeline: a warm run with --pipeline on, target and drafter on one GPU (two streams), beside the
     serial warm run of 2.
The data are random token rows (every position labelled): speed and memory do not depend on the token values.

Usage (GPU machine, repository root; see tools/bench/README.md):
  python3 tools/bench/train_step_bench.py --build-dir build-gpu --cache-dir /tmp/dflash-bench-cache
  ... --nproc-per-node 2 --target-device-offset 1      (a 2-GPU machine: scaling and pairs too)
  ... --one-gpu-pipeline                                (one GPU: the pipelined schedule on two streams too)
Dry run (no GPU: writes the data and prints the commands): add --dry-run.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def write_rows(path, rows, length, vocab, mask_token, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            ids = [rng.randrange(vocab - 1) for _ in range(length)]
            ids = [i if i != mask_token else i + 1 for i in ids]
            f.write(json.dumps({"input_ids": ids, "loss_mask": [1] * length}) + "\n")


def descendants(pid):
    """Every live process below `pid` (the --nproc-per-node launcher's workers run in their own process groups)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


def kill_tree(p):
    for child in descendants(p.pid):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
    p.kill()
    p.wait()


def run(cmd, log_path, dry, metrics_path, steps):
    """Runs dflash-train until `steps` lines are in its metrics log, then kills it (with its workers): the
    end-of-run checkpoint (21 GB of fp32 masters and AdamW moments at this size) is not part of the step being
    measured, and the device's disk is small. Killing a run is safe by design (checkpoints are written .partial ->
    rename)."""
    print("$ " + " ".join(cmd), flush=True)
    if dry:
        return 0, "", 0.0
    t0 = time.time()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        while p.poll() is None:
            time.sleep(0.2)
            if os.path.exists(metrics_path):
                with open(metrics_path) as f:
                    if sum(1 for line in f if line.strip()) >= steps:
                        kill_tree(p)
                        break
    wall = time.time() - t0
    with open(log_path) as f:
        text = f.read()
    done = os.path.exists(metrics_path) and sum(1 for line in open(metrics_path) if line.strip()) >= steps
    return (0 if done else (p.returncode or 1)), text, wall


def startup_lines(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("start-up: first step begins"):
            out["first_step_begins_s"] = float(line.split("begins ")[1].split(" s")[0])
        elif line.startswith("start-up: first step done"):
            out["first_step_done_s"] = float(line.split("done ")[1].split(" s")[0])
        elif "random weights drawn on" in line:
            out["target_init_s"] = float(line.split(" in ")[1].split(" s")[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build-gpu")
    ap.add_argument("--cache-dir", default="/tmp/dflash-bench-cache")
    ap.add_argument("--work-dir", default="/tmp/dflash-train-step-bench")
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--steps", type=int, default=8, help="steps of the warm run (median over steps 2..N)")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="P > 0: the warm run traces steps 2..P+1 (dflash-train --profile-steps; the trace, gzipped, "
                         "goes to --out) and the median is taken over the steps after them")
    presets = os.path.join(HERE, "..", "..", "setup", "presets")  # the configs of `dflash-tune warmup --preset dflash-27b`
    ap.add_argument("--target-config", default=os.path.join(presets, "dflash-27b.target.json"))
    ap.add_argument("--drafter-config", default=os.path.join(presets, "dflash-27b.drafter.json"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for logs and train_step_bench.json")
    ap.add_argument("--nproc-per-node", type=int, default=1,
                    help="N > 1: also a warm run of N data-parallel ranks (batch 1 each) and the scaling efficiency")
    ap.add_argument("--target-device-offset", type=int, default=0,
                    help="K > 0: also a warm single-rank run with the target on cuda:K")
    ap.add_argument("--one-gpu-pipeline", action="store_true",
                    help="also a warm run with --pipeline on (target and drafter on one GPU, two streams)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.steps < 2 + a.profile_steps:
        sys.exit("train_step_bench: --steps must be >= 2 + --profile-steps (the first step and the traced ones are "
                 "reported separately)")

    with open(a.drafter_config) as f:
        drafter = json.load(f)
    with open(a.target_config) as f:
        target = json.load(f)
    vocab = target.get("text_config", target)["vocab_size"]
    mask_token = drafter["dflash_config"]["mask_token_id"]
    os.makedirs(a.work_dir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    data = os.path.join(a.work_dir, "rows.jsonl")
    write_rows(data, (a.steps + 2) * max(1, a.nproc_per_node), a.max_length, vocab, mask_token, seed=1)

    train = os.path.join(a.build_dir, "tools", "dflash_train", "dflash-train")
    common = [train, "--random-target", a.target_config, "--drafter-config", a.drafter_config, "--data", data,
              "--max-length", str(a.max_length), "--anchors", str(a.anchors), "--cache-dir", a.cache_dir,
              "--kernels", "cached", "--epochs", "1", "--warmup", "0", "--save-every", "0"]
    cold_dir, warm_dir = os.path.join(a.work_dir, "cold"), os.path.join(a.work_dir, "warm")
    for d in (cold_dir, warm_dir):
        subprocess.run(["rm", "-rf", d])
    # Both runs are stopped once their steps are logged (see run()); wall times include process exit.
    rc, cold_text, cold_wall = run(common + ["--output", cold_dir, "--tune-missing", "--max-steps", "1"],
                                   os.path.join(a.out, "train_step_cold.log"), a.dry_run,
                                   os.path.join(cold_dir, "metrics.jsonl"), 1)
    if rc != 0:
        print(cold_text[-4000:])
        sys.exit(f"train_step_bench: the cold run failed (exit {rc}); log in {a.out}/train_step_cold.log")
    profile = ["--profile-steps", str(a.profile_steps)] if a.profile_steps > 0 else []
    rc, warm_text, warm_wall = run(common + profile + ["--output", warm_dir, "--max-steps", str(a.steps)],
                                   os.path.join(a.out, "train_step_warm.log"), a.dry_run,
                                   os.path.join(warm_dir, "metrics.jsonl"), a.steps)
    if a.dry_run:
        return
    if rc != 0:
        print(warm_text[-4000:])
        sys.exit(f"train_step_bench: the warm run failed (exit {rc}); log in {a.out}/train_step_warm.log")
    steps = read_steps(warm_dir)
    step_s, tokens_per_s = steady(steps, skip=1 + a.profile_steps)
    phases = phase_medians(steps, skip=1 + a.profile_steps)
    traces = [f for f in os.listdir(warm_dir) if f.startswith("profile-steps-")] if a.profile_steps > 0 else []
    for f in traces:
        with open(os.path.join(warm_dir, f), "rb") as src, gzip.open(os.path.join(a.out, f + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    result = {
        "shape": {"max_length": a.max_length, "anchors": a.anchors, "target": os.path.basename(a.target_config),
                  "drafter": os.path.basename(a.drafter_config)},
        "cold_run_wall_s": round(cold_wall, 1),
        "cold": startup_lines(cold_text),
        "warm": startup_lines(warm_text),
        "warm_run_wall_s": round(warm_wall, 1),
        "first_step_s": steps[0]["step_time_s"],
        "median_step_s": step_s,
        "step_times_s": [round(s["step_time_s"], 4) for s in steps],
        "tokens_per_s": tokens_per_s,
        "drafter_block_tokens_per_s": a.anchors * drafter["block_size"] / step_s,
        "peak_memory_gib": max(s["peak_memory_bytes"] for s in steps) / 2 ** 30,
        "loss_first_last": [steps[0]["loss"], steps[-1]["loss"]],
        "phases_ms": phases,
        "profile_traces": [f + ".gz" for f in traces],
    }
    extra = []  # (name, command options, output folder)
    if a.nproc_per_node > 1:
        extra.append(("ranks", ["--nproc-per-node", str(a.nproc_per_node), "--batch-size", "1"]))
    if a.target_device_offset > 0:
        extra.append(("pairs", ["--target-device-offset", str(a.target_device_offset)]))
        extra.append(("pairs_serial", ["--target-device-offset", str(a.target_device_offset), "--pipeline", "off"]))
    if a.nproc_per_node > 1 and a.target_device_offset >= a.nproc_per_node:
        extra.append(("pair_ranks", ["--nproc-per-node", str(a.nproc_per_node), "--batch-size", "1",
                                     "--target-device-offset", str(a.target_device_offset)]))
    if a.one_gpu_pipeline:
        extra.append(("one_gpu_pipelined", ["--pipeline", "on"]))
    for name, options in extra:
        out_dir = os.path.join(a.work_dir, name)
        subprocess.run(["rm", "-rf", out_dir])
        rc, text, wall = run(common + options + ["--output", out_dir, "--max-steps", str(a.steps)],
                             os.path.join(a.out, f"train_step_{name}.log"), False,
                             os.path.join(out_dir, "metrics.jsonl"), a.steps)
        if rc != 0:
            print(text[-4000:])
            result[name] = {"error": f"exit {rc}; log in {a.out}/train_step_{name}.log"}
            continue
        s_steps = read_steps(out_dir)
        s_step_s, s_tps = steady(s_steps)
        result[name] = {"options": options, "wall_s": round(wall, 1), "median_step_s": s_step_s,
                        "step_times_s": [round(s["step_time_s"], 4) for s in s_steps], "tokens_per_s": s_tps,
                        "peak_memory_gib": max(s["peak_memory_bytes"] for s in s_steps) / 2 ** 30,
                        "phases_ms": phase_medians(s_steps, skip=1), "target_ms": target_median(s_steps, skip=1),
                        "losses": [s["loss"] for s in s_steps],
                        "warm": startup_lines(text)}
        if name == "ranks":
            # Same per-rank row on every rank: N ranks process N x the tokens of one rank per step.
            result[name]["scaling_efficiency"] = s_tps / (a.nproc_per_node * tokens_per_s)
    p, ps, pr = result.get("pairs"), result.get("pairs_serial"), result.get("pair_ranks")
    if pr and "error" not in pr and p and "error" not in p:
        pr["scaling_efficiency"] = pr["tokens_per_s"] / (a.nproc_per_node * p["tokens_per_s"])
    if ps and "error" not in ps:
        ps["sides_ms"] = pipeline_sides(ps)
        if p and "error" not in p:
            p["step_over_larger_side"] = p["median_step_s"] * 1e3 / max(ps["sides_ms"].values())
    with open(os.path.join(a.out, "train_step_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("\n| measure | value |\n|---|---|")
    print(f"| cold run (tune missing keys + 1 step), wall | {cold_wall:.1f} s |")
    w = result["warm"]
    print(f"| warm: process start -> first step begins | {w.get('first_step_begins_s', float('nan')):.1f} s "
          f"(27B random init {w.get('target_init_s', float('nan')):.1f} s) |")
    print(f"| warm: process start -> first step done | {w.get('first_step_done_s', float('nan')):.1f} s |")
    print(f"| first step | {steps[0]['step_time_s'] * 1e3:.0f} ms |")
    print(f"| median step ({2 + a.profile_steps}..{len(steps)}) | {step_s * 1e3:.0f} ms |")
    print(f"| tokens/s (target context tokens) | {tokens_per_s:.0f} |")
    print(f"| peak GPU memory (allocator) | {result['peak_memory_gib']:.1f} GiB |")
    print(f"| loss first / last step | {steps[0]['loss']:.3f} / {steps[-1]['loss']:.3f} |")
    r = result.get("ranks")
    if r and "error" not in r:
        print(f"| {a.nproc_per_node} ranks (batch 1 each): median step | {r['median_step_s'] * 1e3:.0f} ms |")
        print(f"| {a.nproc_per_node} ranks: tokens/s (all ranks) | {r['tokens_per_s']:.0f} |")
        print(f"| {a.nproc_per_node}-GPU scaling efficiency: tok/s(N) / (N x tok/s(1)) | "
              f"{r['scaling_efficiency']:.3f} |")
    elif r:
        print(f"| {a.nproc_per_node} ranks | {r['error']} |")
    if p and "error" not in p:
        print(f"| target on cuda:{a.target_device_offset}, drafter on cuda:0, pipelined: median step | "
              f"{p['median_step_s'] * 1e3:.0f} ms (peak {p['peak_memory_gib']:.1f} GiB on the drafter's GPU; "
              f"the target's own time {p['target_ms']:.0f} ms a step) |")
    elif p:
        print(f"| target on cuda:{a.target_device_offset} | {p['error']} |")
    if ps and "error" not in ps:
        sides = ps["sides_ms"]
        print(f"| the same pair in series (--pipeline off): median step | {ps['median_step_s'] * 1e3:.0f} ms "
              f"(target side {sides['target']:.0f} ms, drafter side {sides['drafter']:.0f} ms) |")
        if p and "error" not in p:
            print(f"| pipelined pair step / larger side (goal <= 1.1) | {p['step_over_larger_side']:.3f} |")
            print(f"| pipelined / serial pair step | {p['median_step_s'] / ps['median_step_s']:.3f} |")
    elif ps:
        print(f"| target on cuda:{a.target_device_offset}, in series | {ps['error']} |")
    if pr and "error" not in pr:
        print(f"| {a.nproc_per_node} pairs (batch 1 each), pipelined: median step | "
              f"{pr['median_step_s'] * 1e3:.0f} ms, {pr['tokens_per_s']:.0f} tokens/s |")
        if "scaling_efficiency" in pr:
            print(f"| {a.nproc_per_node}-pair scaling efficiency: tok/s(N pairs) / (N x tok/s(1 pair)) "
                  f"(goal >= 0.95) | {pr['scaling_efficiency']:.3f} |")
    elif pr:
        print(f"| {a.nproc_per_node} pairs | {pr['error']} |")
    o = result.get("one_gpu_pipelined")
    if o and "error" not in o:
        print(f"| one GPU, --pipeline on (two streams): median step | {o['median_step_s'] * 1e3:.0f} ms "
              f"({o['median_step_s'] / step_s:.3f} x the serial step; the target's own time {o['target_ms']:.0f} "
              f"ms a step; peak {o['peak_memory_gib']:.1f} GiB) |")
        diffs = [abs(x - y) for x, y in zip(o["losses"], (s["loss"] for s in steps))]
        print(f"| one GPU, --pipeline on: losses against the serial run's, step 1 / max over steps | "
              f"{diffs[0]:.3g} / {max(diffs):.3g} (same data and anchors; the attention backward's fp32 atomics "
              f"make later steps differ in the last bits) |")
    elif o:
        print(f"| one GPU, --pipeline on | {o['error']} |")
    if phases:
        print("\n| phase (median ms, CUDA events) | " + " | ".join(phases) + " |")
        print("|---|" + "---|" * len(phases))
        print("| dflash-train | " + " | ".join(f"{v:.1f}" for v in phases.values()) + " |")
        for name, _ in extra:
            r = result.get(name, {})
            if r.get("phases_ms"):
                print(f"| dflash-train, {name} | " + " | ".join(f"{r['phases_ms'].get(k, float('nan')):.1f}"
                                                           for k in phases) + " |")
    for f in traces:
        print(f"profile trace: {a.out}/{f}.gz (ui.perfetto.dev or chrome://tracing)")


def read_steps(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def phase_medians(steps, skip):
    """Median milliseconds of each phase (metrics.jsonl "phases_ms") over the steps after the first `skip`."""
    later = [s["phases_ms"] for s in steps[skip:] if "phases_ms" in s]
    if not later:
        return {}
    return {name: statistics.median(p[name] for p in later) for name in later[0]}


def target_median(steps, skip):
    """Median of the target's own forward time a step (metrics.jsonl "target_ms": with --pipeline it runs beside
    the drafter's work, and phases_ms.target_forward is only what the drafter waited)."""
    later = [s["target_ms"] for s in steps[skip:] if "target_ms" in s]
    return statistics.median(later) if later else float("nan")


def pipeline_sides(serial_run):
    """Each side's time a step in a serial run's medians: the target's forward, and the rest (the drafter's)."""
    target = serial_run["phases_ms"]["target_forward"]
    return {"target": target, "drafter": serial_run["median_step_s"] * 1e3 - target}


def steady(steps, skip=1):
    """Median step time and tokens/s over the steps after the first `skip` (the first step warms up)."""
    later = steps[skip:]
    step_s = statistics.median(s["step_time_s"] for s in later)
    return step_s, statistics.median(s["tokens"] for s in later) / step_s


if __name__ == "__main__":
    main()
