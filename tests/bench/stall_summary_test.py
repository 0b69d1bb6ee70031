#!/usr/bin/env python3
"""tools/bench/stall_summary.py on CSVs laid out as ncu's source page export (a label row, the header row, one row
per SASS instruction; numbers with thousands separators; two functions): the totals, the by-reason and by-opcode
shares, the address ranges and the hottest instructions it prints, and its one-line errors."""
import csv
import io
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench", "stall_summary.py")
HEADER = ["#", "Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "stall_wait", "stall_barrier", "stall_selected"]


def csv_text(functions):
    buf = io.StringIO()
    w = csv.writer(buf)
    for name, base, rows in functions:
        w.writerow(["Function Name", name])
        w.writerow(HEADER)
        for i, (sass, wait, barrier, selected) in enumerate(rows):
            total = wait + barrier + selected
            w.writerow([str(i + 1), f"0x{base + 16 * i:016x}", sass, "1,000", f"{total:,}", str(total - selected),
                        f"{wait:,}", str(barrier), str(selected)])
    return buf.getvalue()


def run(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


class StallSummaryTest(unittest.TestCase):
    KERNEL = ("kernel_a", 0x7F0000001000, [
        ("HGMMA.64x64x16.F32.BF16 R88, R128, gdesc[UR12], RZ", 600, 0, 200),  # offset 0x00: 800
        ("@!P0 BAR.SYNC.DEFER_BLOCKING 0x0", 0, 1500, 100),                  # offset 0x10: 1600
        ("FMUL R1, R2, R3", 0, 0, 1000),                                      # offset 0x20: 1000
        ("HGMMA.64x128x16.F32.BF16 R24, R96, gdesc[UR4].tnspB, R24", 500, 0, 100),  # 0x30: 600
    ])
    CALLEE = ("callee_b", 0x7F0000009000, [("LDS R0, [R1]", 10, 0, 0), ("EXIT", 0, 0, 0)])

    def test_totals_reasons_opcodes_ranges_and_hottest(self):
        r = run(csv_text([self.KERNEL, self.CALLEE]), "--top", "3", "--ranges", "products=0-20,tail=20-40")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("== Function Name kernel_a: 4 instructions, 4000 stall samples", lines)
        # wait 1100, barrier 1500, selected 1400 of 4000
        self.assertIn("by reason: stall_barrier 37.5%, stall_selected 35.0%, stall_wait 27.5%", lines)
        self.assertIn("by opcode: BAR 40.0%, HGMMA 35.0%, FMUL 25.0%", lines)  # the predicate is not the opcode
        self.assertTrue(any(l.startswith("range products [0, 20): 60.0% of samples, 2 instructions") for l in lines))
        self.assertTrue(any(l.startswith("range tail [20, 40): 40.0% of samples, 2 instructions") for l in lines))
        top = [l for l in lines if l.startswith("  ")]
        self.assertEqual(len(top), 4)  # 3 of kernel_a, 1 of the callee (its EXIT has no samples)
        self.assertTrue(top[0].startswith("  00010  40.0%  [stall_barrier 93.8%, stall_selected 6.2%]"), top[0])
        self.assertTrue(top[1].startswith("  00020  25.0%  [stall_selected 100.0%]  FMUL"), top[1])
        self.assertIn("== Function Name callee_b: 2 instructions, 10 stall samples", lines)

    def test_bad_input_is_one_line_and_exit_2(self):
        r = run("Function Name,x\nnot,a,header\n")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertIn("no SASS rows", r.stderr)
        r = run(csv_text([self.KERNEL]), "--ranges", "loop=10")
        self.assertEqual(r.returncode, 2)
        self.assertIn("NAME=LO-HI", r.stderr)
        r = subprocess.run([sys.executable, SCRIPT, "/nonexistent/x.csv"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
