#!/usr/bin/env python3
"""Before/after SASS of a representative set of variants of every kernel family, for two source trees.

  tools/bench/sass/sass_diff.py BASE_TREE NEW_TREE [--arch sm_90 --arch sm_120] [--family attention_fwd ...]
                                [--dump build/nvrtc_dump] [--out DIR] [--jobs 2] [--keep]

BASE_TREE / NEW_TREE: two checkouts of the project (e.g. `git worktree add /tmp/base <commit>` and this one).
For each family, arch and tree, nvrtc_dump (tools/bench/sass/nvrtc_dump.cc; its header says how to build it)
compiles the family's variants below with NVRTC exactly as the tuner does, from that tree's kernels/<folder>
(plus kernels/common where the tree has it); nvdisasm (-c -hex; $NVDISASM, else on PATH, else the CUDA
toolkit's; `pip install nvidia-cuda-nvdisasm` where the toolkit lacks it) disassembles each kernel. Per kernel
and arch the table says:
  identical      the same instructions with the same encodings, control bits (stalls, barriers) included;
  same-ins       the same instruction text, other control bits (scheduling) somewhere;
  differs        other instructions: instruction counts of both trees, the diff's size and the opcodes whose
                 counts changed.
plus registers and spills of both. Exit status 0 when every kernel is identical, 1 otherwise (2 on errors).
The whole set (100 kernels: the Hopper group is compiled for sm_90a only) takes about 4 minutes on 2 busy cores.
Static SASS is not a timing: a kernel that differs needs a GPU measurement; one that is identical does not.
"""
import argparse
import collections
import concurrent.futures
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

# family group -> (kernels/ folder, main file, name expressions[, the archs it is compiled for, whatever --arch
# says: the Hopper tiers' translation units exist for sm_90a only]). Winners and neighbours of every family on the
# H200 and sm_120: each template of every .cuh, both stage counts, the mask kinds (3 | 8 = 11: DFlash full with
# the document bound), head dims 64 / 128 / 256, and the configs the family seeds.
VARIANTS = {
    "attention_fwd": ("attention", "attention_kernels.cu", [
        "dflash_attn::AttnFwd<128,128,64,4,2,3>",
        "dflash_attn::AttnFwd<128,128,64,4,2,1>",
        "dflash_attn::AttnFwd<128,128,64,4,1,11>",
        "dflash_attn::AttnFwd<128,64,128,4,2,4>",
        "dflash_attn::AttnFwd<64,64,32,4,1,2>",
        "dflash_attn::AttnFwd<256,64,64,4,2,0>",
        "dflash_attn::AttnFwd<128,128,32,8,2,12>",
    ]),
    "attention_bwd": ("attention", "attention_kernels.cu", [
        "dflash_attn::AttnBwdPre<128,true>",
        "dflash_attn::AttnBwdPre<64,false>",
        "dflash_attn::AttnBwdDqConvert<128>",
        "dflash_attn::AttnBwdKv<128,64,64,4,1,3,true>",
        "dflash_attn::AttnBwdKv<128,64,128,8,2,1,false>",
        "dflash_attn::AttnBwdKv<64,32,64,4,2,2,true>",
        "dflash_attn::AttnBwdDq<128,64,64,4,2,3>",
        "dflash_attn::AttnBwdDq<128,64,64,4,1,1>",
        "dflash_attn::AttnBwdDq<64,32,64,2,1,2>",
    ]),
    "attention_bwd2d": ("attention", "attention_kernels.cu", [
        "dflash_attn::AttnBwdKv2d<128,64,128,8,2,3>",
        "dflash_attn::AttnBwdKv2d<128,64,128,8,1,3>",
        "dflash_attn::AttnBwdKv2d<128,64,128,8,2,1>",
        "dflash_attn::AttnBwdKv2d<128,64,64,4,1,4>",
        "dflash_attn::AttnBwdKv2d<128,64,128,8,2,11>",
        "dflash_attn::AttnBwdKv2d<64,64,128,8,2,1>",
    ]),
    "attention_sm90a": ("attention", "attention_kernels_sm90a.cu", [
        "dflash_attn::AttnFwdTma<128,128,2,2,3>",
        "dflash_attn::AttnFwdTma<128,128,2,1,4>",
        "dflash_attn::AttnFwdTma<128,64,3,0,11>",
        "dflash_attn::AttnFwdTma<256,64,2,2,1>",
        "dflash_attn::AttnFwdWgmma<128,128,128,2,0,3>",
        "dflash_attn::AttnFwdWgmma<128,128,64,3,1,1>",
        "dflash_attn::AttnBwdWgmma<128,64,128,2,3>",
        "dflash_attn::AttnBwdWgmma<128,64,64,2,4>",
        "dflash_attn::AttnBwdWgmma<64,128,128,2,11>",
        "dflash_attn::AttnBwdTma<128,2,1,3>",
        "dflash_attn::AttnBwdTma<128,2,0,4>",
        "dflash_attn::AttnBwdTma<128,2,1,11>",
    ], ("sm_90a",)),
    "gdn": ("gdn", "gdn_kernels.cu", [
        "gdn::gdn_chunk_prep<32, 8, true>",
        "gdn::gdn_chunk_prep<32, 4, true>",
        "gdn::gdn_chunk_prep<64, 4, false>",
        "gdn::gdn_chunk_prep<64, 4, true>",
        "gdn::gdn_chunk_state<64, 32, 4, false>",
        "gdn::gdn_chunk_state<32, 32, 4, true>",
        "gdn::gdn_chunk_state<32, 64, 8, true>",
        "gdn::gdn_state_combine<32>",
        "gdn::gdn_state_combine<64>",
        "gdn::gdn_chunk_output<64, 64, 4>",
        "gdn::gdn_chunk_output<32, 32, 8>",
        "gdn::gdn_chunk_fused<32, 64, 8, 1>",
        "gdn::gdn_chunk_fused<32, 64, 8, 2>",
        "gdn::gdn_chunk_fused<32, 32, 8, 2>",
        "gdn::gdn_chunk_fused<32, 64, 4, 1>",
        "gdn::gdn_chunk_fused<64, 64, 4, 1>",
        "gdn::gdn_chunk_fused<32, 16, 4, 2>",
        "gdn::gdn_recurrent<32>",
    ]),
    "conv1d": ("conv1d", "conv1d.cu", [
        "dflash_conv1d::conv1d_fwd_token_major<128, 8, 4, 128>",
        "dflash_conv1d::conv1d_fwd_token_major<64, 2, 16, 256>",
        "dflash_conv1d::conv1d_fwd_channel_major<4, 4, 8, 128>",
        "dflash_conv1d::conv1d_fwd_channel_major<1, 1, 4, 256>",
    ]),
}

_INS = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;\s*/\*\s*(0x[0-9a-f]+)\s*\*/\s*$")
_HEX2 = re.compile(r"^\s*/\*\s*(0x[0-9a-f]+)\s*\*/\s*$")
_LABEL = re.compile(r"^(\.L_x_\d+):\s*$")
_FUNC = re.compile(r"^\.text\.(\S+):\s*$")
_LABEL_REF = re.compile(r"\.L_x_\d+")


def find_nvdisasm():
    for cand in (os.environ.get("NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"):
        if cand and os.path.exists(cand):
            return cand
    sys.exit("sass_diff: no nvdisasm ($NVDISASM, PATH, /usr/local/cuda/bin); pip install nvidia-cuda-nvdisasm")


def local_labels(func):
    """Renumbers the function's .L_x_N labels in order of first appearance: nvdisasm numbers them across the whole
    cubin, so a label of one kernel would otherwise change with the label count of the kernels before it."""
    names = {}
    rename = lambda m: names.setdefault(m.group(0), f".L_{len(names)}")
    return [[_LABEL_REF.sub(rename, i), e] for i, e in func]


def parse_sass(text):
    """mangled name -> list of (instruction text, encoding) and labels as ('.L_N:', '')."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        m = _INS.match(line)
        if m:
            cur.append([m.group(1), m.group(2)])
            continue
        m = _HEX2.match(line)
        if m and cur and cur[-1][1]:
            cur[-1][1] += m.group(1)
            continue
        m = _LABEL.match(line)
        if m:
            cur.append([m.group(1) + ":", ""])
    return {name: local_labels(f) for name, f in funcs.items()}


def opcode(ins):
    tok = ins.split()
    if tok and tok[0].startswith("@"):
        tok = tok[1:]
    return tok[0] if tok else ""


def build_one(dump, nvdisasm, tree, group, arch, workdir):
    folder, main, exprs = VARIANTS[group][:3]
    dirs = [os.path.join(tree, "kernels", folder)]
    if os.path.isdir(os.path.join(tree, "kernels", "common")):
        dirs.append(os.path.join(tree, "kernels", "common"))
    prefix = os.path.join(workdir, f"{group}_{arch}")
    env = dict(os.environ, SRC=":".join(dirs))
    r = subprocess.run([dump, arch, prefix, main] + exprs, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvrtc_dump {tree} {group} {arch}: {r.stderr.strip()[:2000]}")
    res = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        # ARCH EXPR... MANGLED regs R stack S spill_st A spill_ld B smem M (EXPR may contain spaces)
        i = parts.index("regs")
        expr, mangled = " ".join(parts[1:i - 1]), parts[i - 1]
        kv = dict(zip(parts[i::2], map(int, parts[i + 1::2])))
        res[expr] = (mangled, kv)
    d = subprocess.run([nvdisasm, "-c", "-hex", prefix + ".cubin"], capture_output=True, text=True)
    if d.returncode != 0:
        raise RuntimeError(f"nvdisasm {prefix}.cubin: {d.stderr.strip()}")
    return res, parse_sass(d.stdout)


def compare(base, new):
    """(status, detail) of two parsed functions."""
    if base == new:
        return "identical", ""
    bi = [i for i, _ in base]
    ni = [i for i, _ in new]
    if bi == ni:
        n = sum(1 for a, b in zip(base, new) if a[1] != b[1])
        return "same-ins", f"{n} encodings differ (control bits)"
    diff = [l for l in difflib.unified_diff(bi, ni, lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("+++", "---")]
    bc = collections.Counter(opcode(i) for i in bi if not i.endswith(":"))
    nc = collections.Counter(opcode(i) for i in ni if not i.endswith(":"))
    ops = sorted(set(bc) | set(nc))
    delta = ", ".join(f"{o} {nc[o] - bc[o]:+d}" for o in ops if nc[o] != bc[o])
    return "differs", f"diff {len(diff)} lines; {delta or 'same opcode counts (order / operands)'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--arch", action="append")
    ap.add_argument("--family", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--dump", default=os.path.join("build", "nvrtc_dump"))
    ap.add_argument("--out", help="keep the cubins and the per-kernel SASS here (default: a temporary folder)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    archs = args.arch or ["sm_90", "sm_120"]
    groups = args.family or list(VARIANTS)
    group_archs = lambda g: VARIANTS[g][3] if len(VARIANTS[g]) > 3 else archs
    nvdisasm = find_nvdisasm()
    out = args.out or tempfile.mkdtemp(prefix="sass_diff.")
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    for t in trees:
        os.makedirs(os.path.join(out, t), exist_ok=True)

    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for g in groups:
            for a in group_archs(g):
                for t, tree in trees.items():
                    jobs[(g, a, t)] = pool.submit(build_one, args.dump, nvdisasm, tree, g, a, os.path.join(out, t))
        try:
            results = {k: f.result() for k, f in jobs.items()}
        except RuntimeError as e:
            print(f"sass_diff: {e}", file=sys.stderr)
            return 2

    rows, changed = [], 0
    for g in groups:
        for expr in VARIANTS[g][2]:
            for a in group_archs(g):
                (bm, bres), (bsass) = results[(g, a, "base")][0][expr], results[(g, a, "base")][1]
                (nm, nres), (nsass) = results[(g, a, "new")][0][expr], results[(g, a, "new")][1]
                bf, nf = bsass.get(bm, []), nsass.get(nm, [])
                for t, name, f in (("base", bm, bf), ("new", nm, nf)):
                    with open(os.path.join(out, t, f"{name}.{a}.sass"), "w") as fh:
                        fh.write("\n".join(f"{i:60s} {e}" for i, e in f) + "\n")
                status, detail = compare(bf, nf) if bm == nm else ("differs", "other mangled name")
                changed += status != "identical"
                count = lambda f: sum(1 for i, _ in f if not i.endswith(":"))
                res = lambda r: f"{r['regs']}" + (f"+{r['spill_st']}st/{r['spill_ld']}ld" if r["spill_st"] or r["spill_ld"] else "")
                rows.append((expr, a, status, f"{count(bf)} -> {count(nf)}", f"{res(bres)} -> {res(nres)}", detail))
    print("| kernel | arch | SASS | instructions | registers | detail |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\n{len(rows) - changed} of {len(rows)} kernels identical; per-kernel SASS in {out}/{{base,new}}")
    return 0 if changed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
