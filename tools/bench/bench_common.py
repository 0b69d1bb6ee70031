"""The pieces every benchmark script of tools/bench shares (attention_bench.py, gdn_bench.py, config_ab.py): the
canonical problem JSON, a log that echoes, running a command (optionally streaming its output), and kernel_bench's
JSON result line.
"""
import json
import subprocess
import time


def pjson(p):
    """A problem or config as the compact, key-sorted JSON the tools take (the cache keys it the same way)."""
    return json.dumps(p, separators=(",", ":"), sort_keys=True)


def log_line(log, text):
    print(text, flush=True)
    if log:
        log.write(text + "\n")
        log.flush()


def run_cmd(cmd, log, stream=False, timeout=None):
    """Runs cmd; returns (CompletedProcess-like with returncode/stdout/stderr, seconds). stream=True echoes its
    output line by line as it comes (long warmups show progress) and returns it as stdout. timeout (seconds, not
    with stream): past it the process is killed (its kernels end with it) and the result has returncode 124."""
    log_line(log, "$ " + " ".join(cmd))
    t0 = time.time()
    if not stream:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            r = subprocess.CompletedProcess(cmd, 124, out, "killed after %g s (a kernel that never ends?)" % timeout)
        if log:
            log.write(r.stdout + r.stderr)
        return r, time.time() - t0
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            log_line(log, line.rstrip("\n"))
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(lines), ""), time.time() - t0


def kernel_bench_json(cmd, log, timeout=1800):
    """Runs a kernel_bench command: its JSON result line, or {"error": message}. kernel_bench ends itself when one
    launch does not finish within its --timeout-ms; `timeout` (seconds) is the backstop (a --check run computes a
    float64 reference on the CPU, minutes for a large backward)."""
    r, _ = run_cmd(cmd, log, timeout=timeout)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        return {"error": "unreadable kernel_bench output: %s" % e}
