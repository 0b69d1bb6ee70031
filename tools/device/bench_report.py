#!/usr/bin/env python3
"""Tables of tools/device/bench_all.sh from the parts' raw results (JSON), no GPU needed.

  bench_report.py step --dflash-train T.json --python P.json [--python-partial PP.json] --out DIR
      The step part's side-by-side table (DIR/step.md) and its raw JSON (DIR/step.json: both sides' objects):
      dflash-train's full-size step (tools/bench/train_step_bench.py) vs the Python stack's
      (py_dflash_step.py: SpecForge + FLA + torch.compile(flex_attention)). A side that failed or was cut short is
      reported as such (the Python side's partial JSON, when it is all there is).
  bench_report.py summary OUT_DIR --status STATUS.tsv
      The short summary of every part under OUT_DIR (attention/attention_bench.json, gdn/gdn_bench.json,
      step/step.json, launch/), one row per shape or measure: ours, the reference, and reference time / ours
      (above 1: ours is faster). STATUS.tsv has one line per part: name, exit status, seconds, note. Printed and
      written to OUT_DIR/summary.md.
"""
import argparse
import json
import os
import sys


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": "unreadable %s: %s" % (path, e)}


def fmt(x, spec, unit=""):
    return "-" if x is None else format(x, spec) + unit


def ratio(ref, ours):
    return "%.2fx" % (ref / ours) if ref and ours else "-"


def step_sides(dflash, python, python_partial):
    """(dflash-train dict, Python-stack dict) with an "error" key for a side that has no final result."""
    if dflash is None:
        dflash = {"error": "no train_step_bench.json (the run failed or was cut: see logs.tgz)"}
    if python is None:
        python = {"error": "no py_step.json (the run failed or was cut: see logs.tgz)"}
        if python_partial is not None:
            python["partial"] = python_partial
    return dflash, python


def step_table(dflash, python):
    def d(*keys):
        v = dflash
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    def p(*keys):
        v = python
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    ms = lambda s: None if s is None else s * 1e3  # noqa: E731
    rows = [
        ("median step", fmt(ms(d("median_step_s")), ".0f", " ms"), fmt(ms(p("median_step_s")), ".0f", " ms")),
        ("tokens/s (target context)", fmt(d("tokens_per_s"), ".0f"), fmt(p("tokens_per_s"), ".0f")),
        ("process start -> first step done", fmt(d("warm", "first_step_done_s"), ".1f", " s (warm cache)"),
         fmt(p("startup_s", "process_start_to_first_step_done"), ".1f", " s (compiles and autotunes)")),
        ("first step", fmt(ms(d("first_step_s")), ".0f", " ms"), fmt(p("startup_s", "first_step"), ".1f", " s")),
        ("cold run: tune the missing keys + 1 step (wall)", fmt(d("cold_run_wall_s"), ".1f", " s"), "-"),
        ("peak GPU memory (allocator)", fmt(d("peak_memory_gib"), ".1f", " GiB"), fmt(p("peak_memory_gib"), ".1f", " GiB")),
    ]
    # Phases side by side (median ms). dflash-train times the loss apart from the drafter forward, the Python stack
    # times them together; its "metrics" phase holds what follows the optimizer.
    ours, theirs = d("phases_ms") or {}, p("median_phases_s") or {}
    if ours or theirs:
        t = lambda k: None if k not in theirs else theirs[k] * 1e3  # noqa: E731
        both = lambda *ks: None if not all(k in ours for k in ks) else sum(ours[k] for k in ks)  # noqa: E731
        rows += [
            ("phase: target forward", fmt(both("target_forward"), ".0f", " ms"), fmt(t("target_fwd"), ".0f", " ms")),
            ("phase: drafter forward + loss", fmt(both("drafter_forward", "loss"), ".0f", " ms"),
             fmt(t("drafter_fwd_loss"), ".0f", " ms")),
            ("phase: backward", fmt(both("backward"), ".0f", " ms"), fmt(t("backward"), ".0f", " ms")),
            ("phase: clip + AdamW", fmt(both("optimizer"), ".0f", " ms"),
             fmt(t("grad_scale_clip_adamw"), ".0f", " ms")),
            ("phase: rest (host, metrics)", fmt(both("host", "grad_sync"), ".0f", " ms"), fmt(t("metrics"), ".0f", " ms")),
        ]
        if ours:
            rows.append(("dflash-train phases (median ms)", ", ".join("%s %.1f" % kv for kv in ours.items()), "-"))
        if theirs:
            rows.append(("Python step phases (median ms)", "-",
                         ", ".join("%s %.1f" % (k, v * 1e3) for k, v in theirs.items())))
    lines = ["| measure | dflash-train | Python stack (SpecForge 0.2.0, FLA 0.6.0, flex) |", "|---|---|---|"]
    lines += ["| %s | %s | %s |" % r for r in rows]
    for name, side in (("dflash-train", dflash), ("Python stack", python)):
        if "error" in side:
            lines.append("| %s | %s | |" % (name, str(side["error"])[:300]))
    lines.append("")
    lines.append("Python stack step / dflash-train step: %s" % ratio(p("median_step_s"), d("median_step_s")))
    return "\n".join(lines)


def cmd_step(a):
    dflash, python = step_sides(load(a.dflash_train), load(a.python), load(a.python_partial))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "step.json"), "w") as f:
        json.dump({"dflash_train": dflash, "python_stack": python}, f, indent=1)
    text = ("Full-size DFlash drafter step (27B drafter, random Qwen3.6-27B-shaped target, 4096 tokens, 512 anchors, "
            "batch 1, one GPU)\n\n" + step_table(dflash, python) + "\n")
    with open(os.path.join(a.out, "step.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def attention_rows(res):
    rows = []
    for name in res.get("shapes", {}):
        kb = res.get("kernel_bench", {}).get(name, {})
        forward_only = kb.get("bwd") is None  # head dim 256: no backward
        fwd, bwd = (kb.get("fwd") or {}).get("median_ms"), (kb.get("bwd") or {}).get("median_ms")
        ours = fwd if forward_only else (fwd + bwd if fwd and bwd else None)
        refs = res.get("torch", {}).get(name, [])  # one row per reference system (causal: SDPA flash and cuDNN)
        for ref in refs if isinstance(refs, list) else [refs]:
            rf, rb = ref.get("fwd_ms"), ref.get("bwd_ms")
            theirs = rf if forward_only else (rf + rb if rf and rb else None)
            measured = fmt(ours, ".3f", " ms") if forward_only else (
                fmt(ours, ".3f", " ms") + " (%s / %s)" % (fmt(fwd, ".3f"), fmt(bwd, ".3f")))
            rows.append(("attention", name + (" fwd" if forward_only else " fwd+bwd"), measured,
                         "%s %s" % (ref.get("system", "reference"), fmt(theirs, ".3f", " ms")), ratio(theirs, ours)))
    return rows


def gdn_rows(res):
    rows = []
    for name in res.get("shapes", {}):
        ours = res.get("ours", {}).get(name, {}).get("median_ms")
        fla = res.get("fla", {}).get(name, {})
        rows.append(("gdn", name, fmt(ours, ".3f", " ms"), "FLA %s" % fmt(fla.get("ms"), ".3f", " ms"),
                     ratio(fla.get("ms"), ours)))
    if not res.get("complete", True):
        rows.append(("gdn", "(incomplete: the run stopped before the last shape)", "", "", ""))
    return rows


def step_rows(res):
    d, p = res.get("dflash_train", {}), res.get("python_stack", {})
    rows = [("step", "median step", fmt(d.get("median_step_s") and d["median_step_s"] * 1e3, ".0f", " ms"),
             "Python stack %s" % fmt(p.get("median_step_s") and p["median_step_s"] * 1e3, ".0f", " ms"),
             ratio(p.get("median_step_s"), d.get("median_step_s")))]
    first_d = (d.get("warm") or {}).get("first_step_done_s")
    first_p = (p.get("startup_s") or {}).get("process_start_to_first_step_done")
    rows.append(("step", "process start -> first step done", fmt(first_d, ".1f", " s"),
                 "Python stack %s" % fmt(first_p, ".1f", " s"), ratio(first_p, first_d)))
    rows.append(("step", "cold run (tune missing keys + 1 step)", fmt(d.get("cold_run_wall_s"), ".1f", " s"), "-", "-"))
    return rows


def cmd_summary(a):
    status = []
    if a.status and os.path.exists(a.status):
        with open(a.status) as f:
            status = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    rows = []
    for fields in status:
        part, rc, secs, note = (fields + ["", "", ""])[:4]
        rows.append((part, "run", "exit %s, %s s" % (rc, secs), note, ""))
        key = "attention" if part.startswith("attention") else part
        if key == "attention":
            res = load(os.path.join(a.dir, "attention", "attention_bench.json"))
            rows += attention_rows(res) if res and "error" not in res else [(part, "no result", "", "", "")]
        elif key == "gdn":
            res = load(os.path.join(a.dir, "gdn", "gdn_bench.json"))
            rows += gdn_rows(res) if res and "error" not in res else [(part, "no result", "", "", "")]
        elif key == "step":
            res = load(os.path.join(a.dir, "step", "step.json"))
            rows += step_rows(res) if res and "error" not in res else [(part, "no result", "", "", "")]
        elif key == "launch":
            have = os.path.exists(os.path.join(a.dir, "launch", "launch.md"))
            rows.append((part, "result", "see launch/launch.md" if have else "no result", "", ""))
    lines = ["| part | measure | ours | reference | reference / ours |", "|---|---|---|---|---|"]
    lines += ["| %s | %s | %s | %s | %s |" % r for r in rows]
    text = "\n".join(lines)
    with open(os.path.join(a.dir, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--dflash-train", required=True)
    s.add_argument("--python", required=True)
    s.add_argument("--python-partial")
    s.add_argument("--out", required=True)
    m = sub.add_parser("summary")
    m.add_argument("dir")
    m.add_argument("--status")
    a = ap.parse_args()
    return cmd_step(a) if a.cmd == "step" else cmd_summary(a)


if __name__ == "__main__":
    sys.exit(main())
