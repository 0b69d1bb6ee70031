#!/usr/bin/env python3
"""The dflash_tune package's demonstration: SpecForge's full-size DFlash drafter step (the 27B drafter, 4096 tokens,
512 anchors) with its compiled flex_attention, and with dflash_tune.ops.dflash_attention (the one-line change
``dflash_tune.specforge.use()``), side by side in one run on one GPU.

Each side runs in its own process (so that "process start to first step done" is that process's): SpecForge 0.2.0's
DFlashDraftModel (AutoDraftModel.from_config), OnlineDFlashModel (anchor sampling, masks, the chunked loss),
TrainerCore.train_step with BF16Optimizer (fp32 masters, AdamW, clipping), on random target features (the 5 tapped
target layers' hidden states, drawn per step; the drafter step alone: no target model) and random tokens, every
position labelled; the same seeds on both sides, so the same weights, inputs and anchors. Before the sides run,
``dflash_tune.warmup`` fills the cache ($DFLASH_CACHE_DIR) with the drafter attention's keys (full and sliding
layers, forward and backward): the dflash_tune side starts on a warm cache, as a team does after one warmup.

    python3 tools/bench/py_drafter_step.py [--steps 6] [--warmup 1] [--sides flex,dflash_tune]

Needs specforge (pip install specforge==0.2.0, or its wheel in --wheel-dir, default .whl_py) and dflash_tune
installed. Prints one table and, last, one JSON line (also $OUT/py_drafter_step.json when OUT is set).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time


def process_start_epoch():
    """Wall-clock time at which this process started (from /proc)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


PROCESS_START = process_start_epoch()

# The 27B DFlash drafter (tools/bench/configs/dflash-27b-drafter.json) and the target dims it reads.
DRAFTER_CONFIG = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 17408,
    "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rms_norm_eps": 1e-06, "rope_theta": 10000000, "vocab_size": 248320,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"], "sliding_window": 2048,
    "use_sliding_window": True, "block_size": 16, "num_target_layers": 64,
    "dflash_config": {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]},
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sides", default="flex,dflash_tune", help="comma-separated: flex, dflash_tune")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # one side, in its own process
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6, help="measured steps (median over them)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps after the first one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warmup-cache", action="store_true", help="skip the dflash_tune.warmup before the sides")
    ap.add_argument("--wheel-dir", default=".whl_py", help="folder with the specforge wheel if it is not installed")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    return ap.parse_args()


def attention_shapes(a):
    cfg = DRAFTER_CONFIG
    base = dict(ctx_len=a.max_length, num_blocks=a.anchors, block_size=cfg["block_size"],
                heads_q=cfg["num_attention_heads"], heads_kv=cfg["num_key_value_heads"], head_dim=cfg["head_dim"])
    return [dict(base, window=0), dict(base, window=cfg["sliding_window"])]


def run_side(a):
    t0 = time.time()
    for w in sorted(glob.glob(os.path.join(a.wheel_dir, "specforge-*.whl"))):
        sys.path.insert(0, os.path.abspath(w))
    import tempfile

    import torch
    from specforge.algorithms.common import dflash_family_model as sfm
    from specforge.modeling import auto as sfauto
    from specforge.modeling.target import target_utils as sftarget
    from specforge.optimizer import BF16Optimizer
    from specforge.runtime.contracts import TrainBatch
    from specforge.training.backend import FSDPTrainingBackend, ParallelConfig
    from specforge.training.controller import TrainerCore
    from specforge.training.strategies.base import DFlashTrainStrategy, StepContext
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    if a.side == "dflash_tune":
        import dflash_tune.specforge
        dflash_tune.specforge.use()  # the one-line change
    t_imports = time.time() - t0

    device, dtype = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(a.seed)
    cfg = DRAFTER_CONFIG
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
        json.dump(cfg, tmp)
    draft_config = sfauto.AutoDraftModelConfig.from_file(tmp.name)
    os.unlink(tmp.name)
    draft_config._attn_implementation = "flex_attention"
    with torch.device(device):
        draft = sfauto.AutoDraftModel.from_config(draft_config, torch_dtype=dtype, dflash_kernels=None)
    draft = draft.to(device=device, dtype=dtype)
    tcfg = Qwen3_5TextConfig(hidden_size=5120, vocab_size=cfg["vocab_size"], num_hidden_layers=64)
    with torch.device(device):
        heads = sftarget.TargetEmbeddingsAndHead(tcfg)
    heads.to(dtype=dtype)
    torch.nn.init.normal_(heads.lm_head.weight, std=0.02)
    torch.nn.init.normal_(heads.embed_tokens.weight, std=0.02)
    heads.eval().requires_grad_(False)
    online = sfm.OnlineDFlashModel(
        draft_model=draft, target_lm_head=heads.lm_head, target_embed_tokens=heads.embed_tokens,
        mask_token_id=cfg["dflash_config"]["mask_token_id"], block_size=cfg["block_size"],
        attention_backend="flex_attention", num_anchors=a.anchors, loss_decay_gamma=7.0,
        objective_chunk_blocks=128, loss_type="dflash").to(device=device, dtype=dtype)

    def optimizer_factory(module):
        return BF16Optimizer(module, lr=6e-4, max_grad_norm=1.0, warmup_ratio=0.04, lr_scheduler="cosine",
                             total_steps=2900)

    backend = FSDPTrainingBackend(ParallelConfig(), optimizer_factory=optimizer_factory)
    wrapped = backend.prepare_model(online, wrap=False, optimizer_target=online.draft_model)
    core = TrainerCore(DFlashTrainStrategy(wrapped), backend, accumulation_steps=1)
    t_built = time.time() - t0

    S, n_taps = a.max_length, len(cfg["dflash_config"]["target_layer_ids"])
    gen = torch.Generator(device=device).manual_seed(a.seed + 1)
    loss_mask = torch.ones(1, S, dtype=torch.long, device=device)
    records = []

    def one_step(i):
        ids = torch.randint(0, cfg["vocab_size"] - 1, (1, S), device=device, generator=gen)
        ids = torch.where(ids == cfg["dflash_config"]["mask_token_id"], ids + 1, ids)
        feats = torch.randn(1, S, n_taps * 5120, device=device, generator=gen).to(dtype)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        batch = TrainBatch(sample_ids=[f"row{i}"], strategy="dflash",
                           tensors={"input_ids": ids, "hidden_states": feats, "loss_mask": loss_mask})
        result = core.train_step(batch, StepContext(global_step=i, total_steps=2900))
        torch.cuda.synchronize()
        records.append({"wall_s": time.perf_counter() - start, "loss": float(result.loss),
                        "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30})

    one_step(0)
    first_done = time.time() - PROCESS_START
    for i in range(1, 1 + a.warmup + a.steps):
        one_step(i)
    measured = records[1 + a.warmup:]
    return {"side": a.side, "imports_s": t_imports, "built_s": t_built,
            "process_start_to_first_step_done_s": first_done, "first_step_s": records[0]["wall_s"],
            "median_step_s": statistics.median(r["wall_s"] for r in measured),
            "peak_memory_gib": max(r["peak_gib"] for r in records),
            "losses": [r["loss"] for r in records], "step_times_s": [round(r["wall_s"], 4) for r in measured]}


def main():
    a = parse_args()
    if a.side:
        print(json.dumps(run_side(a)), flush=True)
        return
    import torch

    import dflash_tune
    result = {"tool": "py_drafter_step", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cache_dir": dflash_tune.cache_dir(), "shape": {"max_length": a.max_length, "anchors": a.anchors}}
    if not a.no_warmup_cache:
        t0 = time.time()
        for shape in attention_shapes(a):
            dflash_tune.warmup("dflash_attention", **shape)
        result["warmup_s"] = time.time() - t0
    sides = {}
    for side in a.sides.split(","):
        argv = [sys.executable, os.path.abspath(__file__), "--side", side, "--max-length", str(a.max_length),
                "--anchors", str(a.anchors), "--steps", str(a.steps), "--warmup", str(a.warmup),
                "--seed", str(a.seed), "--wheel-dir", a.wheel_dir]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            sides[side] = {"failed": True, "rc": r.returncode, "stderr_tail": r.stderr[-3000:]}
            print(f"{side} failed (rc {r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
            continue
        sides[side] = json.loads(r.stdout.strip().splitlines()[-1])
    result["sides"] = sides
    print("\n| SpecForge 27B drafter step, 4096 tokens, 512 anchors | " + " | ".join(sides) + " |")
    print("|---|" + "---|" * len(sides))
    rows = [("process start -> first step done (s)", "process_start_to_first_step_done_s", "{:.1f}"),
            ("first step (s)", "first_step_s", "{:.2f}"), ("median step (ms)", "median_step_s", "{:.0f}"),
            ("peak GPU memory (GiB)", "peak_memory_gib", "{:.1f}")]
    for label, key, fmt in rows:
        vals = [fmt.format(s[key] * (1e3 if key == "median_step_s" else 1)) if key in s else "failed"
                for s in sides.values()]
        print(f"| {label} | " + " | ".join(vals) + " |")
    print("| loss, first step | " + " | ".join(f"{s['losses'][0]:.4f}" if "losses" in s else "failed"
                                             for s in sides.values()) + " |")
    line = json.dumps(result)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "py_drafter_step.json"), "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    sys.exit(0 if all("failed" not in s for s in sides.values()) else 1)


if __name__ == "__main__":
    main()
