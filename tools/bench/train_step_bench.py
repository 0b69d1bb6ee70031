#!/usr/bin/env python3
"""Full-size drafter training step on the GPU machine (issue 6): dflash-train with a randomly initialised
Qwen3.6-27B-shaped target (tools/bench/configs/qwen3.6-27b-target.json, drawn on the GPU; layers after the last tap,
61, are not built) and the 27B DFlash drafter (configs/dflash-27b-drafter.json: 5 layers, hidden 5120, 32/8 heads,
4 sliding + 1 full layer), rows of --max-length tokens with --anchors anchors, every hot kernel from the cache.

Two runs of the real `dflash-train` binary:
  1. cold: `--tune-missing --max-steps 1` into --cache-dir: tunes exactly the keys these shapes need (reported as
     the one-time cost), then one step;
  2. warm: a fresh process, same cache, `--max-steps --steps`: the time from process start to the first step
     (dflash-train prints it: process start -> first step begins / done, dynamic loading and the 27B random init
     included), then the steady-state step time (median over steps 2..N), tokens/s and the allocator's peak memory
     (metrics.jsonl).
The data are random token rows (every position labelled): speed and memory do not depend on the token values.

Usage (GPU machine, repository root; see tools/bench/README.md):
  python3 tools/bench/train_step_bench.py --build-dir build-gpu --cache-dir /tmp/dflash-bench-cache
Dry run (no GPU: writes the data and prints the commands): add --dry-run.
"""
import argparse
import json
import os
import random
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


def run(cmd, log_path, dry, metrics_path, steps):
    """Runs dflash-train until `steps` lines are in its metrics log, then kills it: the end-of-run checkpoint (21 GB
    of fp32 masters and AdamW moments at this size) is not part of the step being measured, and the device's disk
    is small. Killing a run is safe by design (checkpoints are written .partial -> rename)."""
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
                        p.kill()
                        p.wait()
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
    ap.add_argument("--target-config", default=os.path.join(HERE, "configs", "qwen3.6-27b-target.json"))
    ap.add_argument("--drafter-config", default=os.path.join(HERE, "configs", "dflash-27b-drafter.json"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for logs and train_step_bench.json")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.steps < 2:
        sys.exit("train_step_bench: --steps must be >= 2 (the first step is reported separately)")

    with open(a.drafter_config) as f:
        drafter = json.load(f)
    with open(a.target_config) as f:
        target = json.load(f)
    vocab = target.get("text_config", target)["vocab_size"]
    mask_token = drafter["dflash_config"]["mask_token_id"]
    os.makedirs(a.work_dir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    data = os.path.join(a.work_dir, "rows.jsonl")
    write_rows(data, a.steps + 2, a.max_length, vocab, mask_token, seed=1)

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
    rc, warm_text, warm_wall = run(common + ["--output", warm_dir, "--max-steps", str(a.steps)],
                                   os.path.join(a.out, "train_step_warm.log"), a.dry_run,
                                   os.path.join(warm_dir, "metrics.jsonl"), a.steps)
    if a.dry_run:
        return
    if rc != 0:
        print(warm_text[-4000:])
        sys.exit(f"train_step_bench: the warm run failed (exit {rc}); log in {a.out}/train_step_warm.log")
    with open(os.path.join(warm_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    later = steps[1:]
    step_s = statistics.median(s["step_time_s"] for s in later)
    tokens = statistics.median(s["tokens"] for s in later)
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
        "tokens_per_s": tokens / step_s,
        "drafter_block_tokens_per_s": a.anchors * drafter["block_size"] / step_s,
        "peak_memory_gib": max(s["peak_memory_bytes"] for s in steps) / 2 ** 30,
        "loss_first_last": [steps[0]["loss"], steps[-1]["loss"]],
    }
    with open(os.path.join(a.out, "train_step_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("\n| measure | value |\n|---|---|")
    print(f"| cold run (tune missing keys + 1 step), wall | {cold_wall:.1f} s |")
    w = result["warm"]
    print(f"| warm: process start -> first step begins | {w.get('first_step_begins_s', float('nan')):.1f} s "
          f"(27B random init {w.get('target_init_s', float('nan')):.1f} s) |")
    print(f"| warm: process start -> first step done | {w.get('first_step_done_s', float('nan')):.1f} s |")
    print(f"| first step | {steps[0]['step_time_s'] * 1e3:.0f} ms |")
    print(f"| median step (2..{len(steps)}) | {step_s * 1e3:.0f} ms |")
    print(f"| tokens/s (target context tokens) | {result['tokens_per_s']:.0f} |")
    print(f"| peak GPU memory (allocator) | {result['peak_memory_gib']:.1f} GiB |")
    print(f"| loss first / last step | {steps[0]['loss']:.3f} / {steps[-1]['loss']:.3f} |")


if __name__ == "__main__":
    main()
