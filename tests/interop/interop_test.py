"""The interop suite: dflash-train's files and numbers against the public code (transformers' Qwen3.5, z-lab's
DFlash drafter and its generator), on the tiny preset. Run by CTest through tests/interop/interop.sh with the
suite's own Python environment; each subcommand is one test and exits 0 (agrees), 1 (disagrees: what and by how
much) or raises.

    interop_test.py target-ours-in-transformers  RUN DUMP   our saved target in Qwen3_5ForCausalLM: loads with no
                                                          missing / unexpected key and no warning, same greedy tokens,
                                                          logits and layer outputs within fp32 tolerance
    interop_test.py target-transformers-in-ours  RUN DUMP WORK   a target transformers saved (random, the preset's
                                                          config) loads in dflash-train: same features, logits, tokens
    interop_test.py drafter-ours-in-public       RUN DUMP   our drafter checkpoint in dflash.DFlashDraftModel: loads
                                                          strictly, same block logits
    interop_test.py tau-matches-public-generator RUN        tau of `dflash-train eval` (RUN/eval-trained.json) equals
                                                          tau of dflash.model.dflash_generate on the same prompts
                                                          (over an exact, uncached target: see UncachedTarget)

RUN is a `dflash-train --preset tiny` run folder (preset/target, preset/data/eval_prompts.jsonl, checkpoints/latest,
eval-trained.json); DUMP the interop_dump binary (tests/interop/interop_dump.cc).
"""
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

torch.set_num_threads(1)
torch.manual_seed(0)

LOGIT_ATOL = 2e-4   # fp32: both sides sum the same products in different orders
FEATURE_ATOL = 2e-4
RTOL = 1e-4


class WarningCollector(logging.Handler):
    """Collects transformers' warnings while loading (a file the public code loads must load without one)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        message = record.getMessage()
        # Environment, not file: transformers' Qwen3.5 says so when the flash-linear-attention kernels are absent.
        if "fast path is not available" not in message:
            self.messages.append(message)


def collecting_warnings():
    import transformers

    transformers.logging.set_verbosity_warning()
    collector = WarningCollector()
    logging.getLogger("transformers").addHandler(collector)
    return collector


def prompts_of(run: Path):
    lines = (run / "preset" / "data" / "eval_prompts.jsonl").read_text().splitlines()
    return [json.loads(line)["input_ids"] for line in lines if line.strip()]


def latest_drafter(run: Path) -> Path:
    latest = run / "checkpoints" / "latest"
    name = latest.read_text().strip() if latest.is_file() else latest.resolve().name
    return run / "checkpoints" / name / "drafter"


def dump(binary: str, *args) -> dict:
    out = Path(args[-1])
    subprocess.run([binary, *map(str, args)], check=True)
    return load_file(str(out))


def compare(what, ours, theirs, atol, failures):
    diff = (ours.double() - theirs.double()).abs()
    bound = atol + RTOL * theirs.double().abs()
    worst = diff.max().item()
    if (diff > bound).any():
        failures.append(f"{what}: max |ours - transformers| {worst:.3g} above {atol:g} + {RTOL:g}|x|")
    return worst


def load_hf_target(target_dir: Path):
    from transformers import Qwen3_5ForCausalLM

    collector = collecting_warnings()
    model, info = Qwen3_5ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32, output_loading_info=True)
    problems = [f"{k}: {sorted(v)}" for k, v in info.items() if v]
    problems += [f"warning: {m}" for m in collector.messages]
    return model.eval(), problems


def hf_greedy(model, prompt, max_new):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_new):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def check_target(model, dumped, prompts, max_new, failures, label):
    layers = model.config.num_hidden_layers
    hidden = model.config.hidden_size
    worst_logits = worst_features = 0.0
    for i, prompt in enumerate(prompts):
        greedy = dumped[f"greedy.{i}"].tolist()
        theirs = hf_greedy(model, prompt, max_new)
        if theirs != greedy:
            at = next(k for k, (a, b) in enumerate(zip(theirs, greedy)) if a != b)
            failures.append(f"{label} prompt {i}: greedy tokens differ first at generated token {at}")
        seq = torch.tensor([list(prompt) + greedy[:-1]])
        with torch.no_grad():
            out = model(seq, output_hidden_states=True)
        worst_logits = max(worst_logits, compare(f"{label} prompt {i} logits", dumped[f"logits.{i}"],
                                                 out.logits[0], LOGIT_ATOL, failures))
        features = dumped[f"features.{i}"]
        # hidden_states[k + 1] is layer k's output; the last one is compared through the logits (transformers may
        # hand it back after the final norm).
        for k in range(layers - 1):
            worst_features = max(worst_features, compare(
                f"{label} prompt {i} layer {k}", features[:, k * hidden:(k + 1) * hidden],
                out.hidden_states[k + 1][0], FEATURE_ATOL, failures))
    print(f"{label}: {len(prompts)} prompts x {max_new} greedy tokens; max |logit diff| {worst_logits:.3g}, "
          f"max |layer output diff| {worst_features:.3g}")


def target_ours_in_transformers(run: Path, binary: str) -> list:
    target_dir = run / "preset" / "target"
    model, failures = load_hf_target(target_dir)
    prompts, max_new = prompts_of(run), 96
    dumped = dump(binary, "target", target_dir, run / "preset" / "data" / "eval_prompts.jsonl", max_new,
                  run / "interop-target-ours.safetensors")
    check_target(model, dumped, prompts, max_new, failures, "our target in transformers")
    return failures


def target_transformers_in_ours(run: Path, binary: str, work: Path) -> list:
    from transformers import AutoConfig, Qwen3_5ForCausalLM

    config = AutoConfig.from_pretrained(str(run / "preset" / "target"))
    torch.manual_seed(1)
    model = Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():  # transformers' init leaves the norms neutral: give them values, so a misread shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    saved = work / "target-saved-by-transformers"
    model.save_pretrained(str(saved))
    prompts, max_new = prompts_of(run), 32
    dumped = dump(binary, "target", saved, run / "preset" / "data" / "eval_prompts.jsonl", max_new,
                  work / "interop-target-transformers.safetensors")
    failures = []
    check_target(model, dumped, prompts, max_new, failures, "transformers' target in dflash-train")
    return failures


def drafter_ours_in_public(run: Path, binary: str) -> list:
    from dflash.model import DFlashDraftModel

    drafter_dir = latest_drafter(run)
    collector = collecting_warnings()
    model, info = DFlashDraftModel.from_pretrained(str(drafter_dir), dtype=torch.float32, output_loading_info=True)
    failures = [f"{k}: {sorted(v)}" for k, v in info.items() if v]
    failures += [f"warning: {m}" for m in collector.messages]
    model.eval()
    target = load_file(str(run / "preset" / "target" / "model.safetensors"))
    embed, head = target["model.embed_tokens.weight"].float(), target["lm_head.weight"].float()
    dumped = dump(binary, "drafter", run / "preset" / "target", drafter_dir,
                  run / "preset" / "data" / "eval_prompts.jsonl", run / "interop-drafter.safetensors")
    worst = 0.0
    for i in range(len(prompts_of(run))):
        context, block = dumped[f"context.{i}"], dumped[f"block.{i}"]
        s, b = context.shape[0], block.shape[0]
        with torch.no_grad():
            hidden = model(target_hidden=context[None], noise_embedding=embed[block][None],
                           position_ids=torch.arange(s + b)[None])
            logits = model.compute_logits(hidden, lambda h: h @ head.T)[0]
        worst = max(worst, compare(f"drafter prompt {i} block logits", dumped[f"logits.{i}"], logits, LOGIT_ATOL,
                                   failures))
    print(f"our drafter in dflash.DFlashDraftModel: block logits of {len(prompts_of(run))} prompts, max |diff| "
          f"{worst:.3g}")
    return failures


class UncachedTarget(torch.nn.Module):
    """transformers' target as dflash_generate calls it, but exact: each call recomputes the whole sequence (the
    committed tokens before the call's first position, then the call's tokens) without a cache. On the CPU path
    (no flash-linear-attention) transformers 5.23's cache does not roll the gated delta net's state back exactly when
    dflash_generate crops it after a rejected block, so dflash_generate's output drifts from greedy decoding; this
    keeps dflash_generate's own counting and drafter calls while the target's answers stay those of greedy decoding."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config, self.lm_head = model, model.config, model.lm_head
        self.history = []

    @property
    def device(self):
        return self.model.device

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def forward(self, input_ids, position_ids, past_key_values=None, use_cache=False, logits_to_keep=0,
                output_hidden_states=False):
        first = int(position_ids[0, 0])
        self.history = self.history[:first] + input_ids[0].tolist()
        n = input_ids.shape[1]
        out = self.model(torch.tensor([self.history]), output_hidden_states=output_hidden_states)
        hidden = tuple(h[:, -n:] for h in out.hidden_states) if output_hidden_states else None
        logits = out.logits[:, -(logits_to_keep or n):]
        return type(out)(logits=logits, hidden_states=hidden)


def tau_matches_public_generator(run: Path) -> list:
    import dflash.model as public
    from dflash.model import DFlashDraftModel, dflash_generate

    public._cuda_time = time.perf_counter  # its timer synchronises CUDA; the counts do not depend on it
    ours = json.loads((run / "eval-trained.json").read_text())
    target, failures = load_hf_target(run / "preset" / "target")
    drafter = DFlashDraftModel.from_pretrained(str(latest_drafter(run)), dtype=torch.float32).eval()
    max_new = ours["generated_tokens"] // len(ours["prompts"])
    lengths, drifted = [], []
    crop = public._crop_to

    def crop_filled(cache, length):  # the uncached target's cache stays empty: nothing to crop there
        if cache.get_seq_length() > length:
            crop(cache, length)

    for i, prompt in enumerate(prompts_of(run)):
        public._crop_to = crop_filled
        stats = dflash_generate(drafter, UncachedTarget(target), torch.tensor([prompt]), max_new, None,
                                return_stats=True)
        public._crop_to = crop
        if stats.output_ids[0, len(prompt):].tolist() != hf_greedy(target, prompt, max_new):
            failures.append(f"prompt {i}: dflash_generate over the uncached target is not greedy decoding")
        cached = dflash_generate(drafter, target, torch.tensor([prompt]), max_new, None)
        if cached[0, len(prompt):].tolist() != stats.output_ids[0, len(prompt):].tolist():
            drifted.append(i)
        lengths.append(list(stats.acceptance_lengths))
        mine = ours["prompts"][i]
        theirs_tau = sum(lengths[-1]) / len(lengths[-1])
        if mine["steps"] != len(lengths[-1]) or abs(mine["tau"] - theirs_tau) > 1e-12:
            failures.append(f"prompt {i}: dflash-train {mine['steps']} steps, tau {mine['tau']:.6f}; dflash_generate "
                            f"{len(lengths[-1])} steps, tau {theirs_tau:.6f}")
    if drifted:  # noticed, not ours to fix: reported so that it is seen
        print(f"note: dflash_generate with transformers' own cache drifts from greedy decoding on prompts {drifted} "
              f"of {len(lengths)} (its state rollback on the CPU path); tau is compared over the uncached target")
    pooled = sum(map(sum, lengths)) / sum(map(len, lengths))
    per_prompt = sum(sum(x) / len(x) for x in lengths if x) / len([x for x in lengths if x])
    print(f"tau_pooled: dflash-train {ours['tau_pooled']:.6f}, dflash_generate {pooled:.6f}; tau_per_prompt_mean: "
          f"dflash-train {ours['tau_per_prompt_mean']:.6f}, dflash benchmark average {per_prompt:.6f} "
          f"({len(lengths)} prompts, {max_new} new tokens)")
    if abs(ours["tau_pooled"] - pooled) > 1e-12 or abs(ours["tau_per_prompt_mean"] - per_prompt) > 1e-12:
        failures.append("the tau figures differ")
    return failures


def main(argv) -> int:
    command, run = argv[1], Path(argv[2])
    if command == "target-ours-in-transformers":
        failures = target_ours_in_transformers(run, argv[3])
    elif command == "target-transformers-in-ours":
        failures = target_transformers_in_ours(run, argv[3], Path(argv[4]))
    elif command == "drafter-ours-in-public":
        failures = drafter_ours_in_public(run, argv[3])
    elif command == "tau-matches-public-generator":
        failures = tau_matches_public_generator(run)
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
