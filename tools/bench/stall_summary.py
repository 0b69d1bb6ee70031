#!/usr/bin/env python3
"""Where one kernel's warps stalled, from Nsight Compute's source page: the sampled stall reasons in total, by
opcode, by named address range (a loop, a warp role) and on the hottest SASS instructions, as a short text table.

  ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source no \\
      -k regex:NAME -c 1 -o P <program>
  ncu --import P.ncu-rep --page source --csv --print-source sass > P.csv
  python3 tools/bench/stall_summary.py P.csv [--top 25] [--ranges 'loop=2cc0-6190,producer=400-1200']

Input: the CSV ncu writes for one profiled kernel (several functions, e.g. a __noinline__ callee, come as several
blocks, each summarised). A block's header row names the columns: Address, Source (the SASS text), "Warp Stall
Sampling (All Samples)" and one stall_<reason> column per reason (stall_selected: the sample caught the warp
issuing). Addresses are printed as offsets from the block's first instruction, the numbering `nvdisasm -c` and
tools/bench/sass/sass_blocks.py use for a cubin's function, so --ranges can take a loop's bounds from there.
Samples are a statistical picture of where warps wait, not timings.
"""
import argparse
import collections
import csv
import sys

ALL = "Warp Stall Sampling (All Samples)"


def number(cell):
    cell = (cell or "").replace(",", "").strip()
    try:
        return float(cell)
    except ValueError:
        return 0.0


def address(cell):
    cell = (cell or "").strip()
    try:
        return int(cell, 16) if cell.lower().startswith("0x") else int(cell)
    except ValueError:
        return None


def blocks(rows):
    """(label, header, data rows) for each header row with Address, Source and the all-samples column."""
    out, label = [], ""
    i = 0
    while i < len(rows):
        row = rows[i]
        if "Address" in row and "Source" in row and ALL in row:
            header, data, own_label = row, [], label
            i += 1
            while i < len(rows) and not ("Address" in rows[i] and ALL in rows[i]):
                r = rows[i]
                if len(r) == len(header) and address(r[header.index("Address")]) is not None:
                    data.append(r)
                elif any(c.strip() for c in r):
                    label = " ".join(c.strip() for c in r if c.strip())
                i += 1
            out.append((own_label, header, data))
            continue
        if any(c.strip() for c in row):
            label = " ".join(c.strip() for c in row if c.strip())
        i += 1
    return out


def opcode(sass):
    tokens = sass.split()
    if tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    return tokens[0].split(".")[0] if tokens else "?"


def parse_ranges(text):
    ranges = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, _, span = part.partition("=")
        lo, _, hi = span.partition("-")
        if not name or not lo or not hi:
            raise ValueError(f"--ranges: '{part}' is not NAME=LO-HI (hex offsets)")
        ranges.append((name, int(lo, 16), int(hi, 16)))
    return ranges


def percent(part, whole):
    return 100.0 * part / whole if whole else 0.0


def reasons_text(totals, whole, n):
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{r} {percent(v, whole):.1f}%" for r, v in top if v > 0)


def summarise(label, header, data, top, ranges, out):
    col = {name: header.index(name) for name in header}
    reasons = [name for name in header if name.startswith("stall_")]
    first = min(address(r[col["Address"]]) for r in data)
    total = sum(number(r[col[ALL]]) for r in data)
    out.append(f"== {label or 'kernel'}: {len(data)} instructions, {total:.0f} stall samples")
    if total == 0:
        out.append("   no samples (was SourceCounters / WarpStateStats collected?)")
        return
    by_reason = collections.Counter({rs: sum(number(r[col[rs]]) for r in data) for rs in reasons})
    out.append("by reason: " + reasons_text(by_reason, total, len(reasons)))
    by_op = collections.Counter()
    for r in data:
        by_op[opcode(r[col["Source"]])] += number(r[col[ALL]])
    out.append("by opcode: " + ", ".join(f"{o} {percent(v, total):.1f}%" for o, v in by_op.most_common(12)))
    for name, lo, hi in ranges:
        inside = [r for r in data if lo <= address(r[col["Address"]]) - first < hi]
        part = sum(number(r[col[ALL]]) for r in inside)
        split = collections.Counter({rs: sum(number(r[col[rs]]) for r in inside) for rs in reasons})
        out.append(f"range {name} [{lo:x}, {hi:x}): {percent(part, total):.1f}% of samples, {len(inside)} "
                   f"instructions; of its samples: {reasons_text(split, part, 5)}")
    out.append(f"top {top} instructions (offset, % of samples, its main reasons, SASS):")
    for r in sorted(data, key=lambda r: -number(r[col[ALL]]))[:top]:
        samples = number(r[col[ALL]])
        if samples == 0:
            break
        own = collections.Counter({rs: number(r[col[rs]]) for rs in reasons})
        out.append(f"  {address(r[col['Address']]) - first:05x} {percent(samples, total):5.1f}%  "
                   f"[{reasons_text(own, samples, 2)}]  {r[col['Source']].strip()[:80]}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="hottest instructions to list (default 25)")
    ap.add_argument("--ranges", default="", help="NAME=LO-HI,... hex offsets to sum samples over")
    args = ap.parse_args(argv)
    try:
        ranges = parse_ranges(args.ranges)
        with open(args.csv, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, ValueError) as e:
        print(f"stall_summary: {e}", file=sys.stderr)
        return 2
    found = [b for b in blocks(rows) if b[2]]
    if not found:
        print(f"stall_summary: {args.csv} holds no SASS rows with '{ALL}' (export with --page source --csv "
              "--print-source sass from a report with SourceCounters)", file=sys.stderr)
        return 2
    out = []
    for label, header, data in found:
        summarise(label, header, data, args.top, ranges, out)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
