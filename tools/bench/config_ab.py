"""Side-by-side timing of chosen configs of one kernel family on one problem, in one process on one GPU: the A/B
that decides whether a new variant replaces an old one (also a variant the tuner still skips, through kernel_bench
--config). Warms the problem into a cache first (kernel_bench reads the compiled artifacts there), checks every
config once against the family's float64 reference, then times the configs in alternation, round after round, and
the tuned winner beside them, so that drift of the GPU over the run shows as a spread, not as a difference.

  python3 tools/bench/config_ab.py --build-dir build-gpu --family gdn \\
      --problem '{"heads":16,"value_heads":48,"head_dim":128,"tokens":8192,"num_seqs":1,"dtype":"bf16"}' \\
      --config 'shared={"chunk":32,"state_bv":64,"out_bv":64,"warps":4,"segment_chunks":0,"fused":3,"piece_chunks":64,"prep_heads":2,"pass_reserve":0}' \\
      --config 'alone={"chunk":32,"state_bv":64,"out_bv":64,"warps":4,"segment_chunks":0,"fused":3,"piece_chunks":64,"prep_heads":2,"pass_reserve":2}' \\
      --graph --rounds 3

Two trees (a change against its base commit): --other-build DIR (a second build of the base's tree, e.g.
`git archive BASE | tar -x -C runs/base` carried to the GPU machine and built there with gpu_run.sh) times every
config with that build's kernel_bench too, as "LABEL @other" in the same alternation, from its own cache
(CACHE-other, warmed by that build's dflash-tune).

Prints a table (label, median ms of each round, best, best relative to the first config) and writes it with the
raw kernel_bench JSON to OUT/config_ab.md and .json. Dry run (no GPU): --dry-run prints the commands.
"""
import argparse
import json
import os
import sys

from bench_common import kernel_bench_json, log_line, pjson, run_cmd


def parse_config(text):
    label, sep, body = text.partition("=")
    if not sep or not label or not body.strip().startswith("{"):
        raise argparse.ArgumentTypeError("--config takes LABEL=JSON, got %r" % text)
    try:
        config = json.loads(body)
    except ValueError as e:
        raise argparse.ArgumentTypeError("--config %s: %s" % (label, e))
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError("--config %s: not a JSON object" % label)
    return label, config


def tools_of(build_dir):
    """dflash-tune and kernel_bench of a build directory; exits with one line when either is missing."""
    tools = (os.path.join(build_dir, "tools", "dflash_tune", "dflash-tune"),
             os.path.join(build_dir, "tools", "bench", "kernel_bench"))
    for b in tools:
        if not os.path.exists(b):
            sys.exit("config_ab.py: %s is missing (build dflash-tune and kernel_bench into %s)" % (b, build_dir))
    return tools


def bench_cmd(args, extra, build):
    """kernel_bench's command line for one side; build = (kernel_bench, cache_dir)."""
    kernel_bench, cache_dir = build
    cmd = [kernel_bench, "--family", args.family, "--problem", pjson(args.problem), "--cache-dir",
           cache_dir, "--seed", str(args.seed), "--warmup", str(args.warmup), "--reps", str(args.reps)]
    if args.graph:
        cmd.append("--graph")
    return cmd + extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build-gpu", help="holds tools/dflash_tune/dflash-tune and "
                    "tools/bench/kernel_bench (default build-gpu)")
    ap.add_argument("--family", required=True, help="kernel family, e.g. gdn, attention_bwd")
    ap.add_argument("--problem", required=True, type=json.loads, help="the family's problem JSON")
    ap.add_argument("--config", action="append", type=parse_config, required=True, dest="configs",
                    help="LABEL=JSON: a config to time (repeatable; the first is the baseline of the ratios)")
    ap.add_argument("--rounds", type=int, default=2, help="timings of every config, in alternation (default 2)")
    ap.add_argument("--reps", type=int, default=25, help="kernel_bench --reps (default 25)")
    ap.add_argument("--warmup", type=int, default=3, help="kernel_bench --warmup (default 3)")
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (kernel_bench --graph)")
    ap.add_argument("--budget", default="12", help="warmup's --budget for the tuned winner (default 12)")
    ap.add_argument("--seed", type=int, default=7, help="inputs' seed (default 7)")
    ap.add_argument("--cache-dir", default="/tmp/dflash-config-ab-cache", help="the cache warmed and read")
    ap.add_argument("--other-build", help="a second build directory (another tree): every config is timed with "
                    "its kernel_bench too, labelled '@other'")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/dflash-config-ab"),
                    help="where config_ab.md / .json go (default $OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args()
    if args.rounds < 1 or args.reps < 1:
        ap.error("--rounds and --reps must be >= 1")
    # (dflash-tune, kernel_bench, cache) of each tree: --build-dir's, then --other-build's.
    builds = [tools_of(args.build_dir) + (args.cache_dir,)]
    if args.other_build:
        builds.append(tools_of(args.other_build) + (args.cache_dir + "-other",))
    benches = [(bench, cache) for _, bench, cache in builds]
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "config_ab.log"), "w")
    warms = [[tune, "--cache-dir", cache, "warmup", "--problem", args.family + "=" + pjson(args.problem),
              "--budget", args.budget, "--seed", str(args.seed)] for tune, _, cache in builds]
    # (label, kernel_bench arguments, (kernel_bench, cache)): every config with each build, alternated.
    sides = [("tuned winner", [], benches[0])]
    for label, c in args.configs:
        sides += [(label + suffix, ["--config", pjson(c)], bench) for suffix, bench in zip(("", " @other"), benches)]
    if args.dry_run:
        log_line(log, "dry run: would run\n" + "\n".join("$ " + " ".join(w) for w in warms))
        for label, extra, build in sides:
            log_line(log, "$ " + " ".join(bench_cmd(args, extra + ["--check"], build)) + "   # " + label +
                     ", checked once")
        return 0
    for warm in warms:
        r, seconds = run_cmd(warm, log, stream=True)
        if r.returncode != 0:
            sys.exit("config_ab.py: warmup failed (exit %d); see %s" % (r.returncode, log.name))
        log_line(log, "warmup: %.0f s" % seconds)
    results = {label: [] for label, _, _ in sides}
    for rnd in range(args.rounds):
        for label, extra, build in sides:
            res = kernel_bench_json(bench_cmd(args, extra + (["--check"] if rnd == 0 else []), build), log)
            results[label].append(res)
            log_line(log, "round %d %s: %s" % (rnd + 1, label, res.get("error") or "%.4f ms" % res["median_ms"]))
    base = min((x["median_ms"] for x in results[args.configs[0][0]] if "error" not in x), default=None)
    head = "| config | " + " | ".join("round %d ms" % (i + 1) for i in range(args.rounds)) + " | best ms | vs %s |" % \
        args.configs[0][0]
    rows = [head, "|" + "---|" * (args.rounds + 3)]
    for label, _, _ in sides:
        runs = results[label]
        ok = [x["median_ms"] for x in runs if "error" not in x]
        cells = [x["error"] if "error" in x else "%.4f" % x["median_ms"] for x in runs]
        best = min(ok) if ok else None
        ratio = "%.3f" % (best / base) if best and base else "-"
        note = ""
        if runs and "error" not in runs[0]:
            skipped = runs[0].get("skipped_by_tuner", "")
            note = " (tuner: %s)" % skipped if skipped else ""
            if label == "tuned winner":
                note = " (%s)" % pjson(runs[0].get("config", {}))
        rows.append("| %s%s | %s | %s | %s |" % (label, note, " | ".join(cells),
                                                 "%.4f" % best if best else "-", ratio))
    table = "\n".join(rows)
    log_line(log, table)
    with open(os.path.join(args.out, "config_ab.md"), "w") as f:
        f.write("%s %s, %s\n\n%s\n" % (args.family, pjson(args.problem), "graph replays" if args.graph else
                                       "plain launches", table))
    with open(os.path.join(args.out, "config_ab.json"), "w") as f:
        json.dump({"family": args.family, "problem": args.problem, "results": results}, f, indent=1)
    return 0 if all("error" not in x for runs in results.values() for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
