#!/usr/bin/env python3
"""Runs test files of tinygrad's own test suite on hexrpc's ``HEXRPC`` device and on tinygrad's
``CPU`` device, and compares them.

tinygrad's PyPI package has no tests: TESTS is a directory holding tinygrad's ``test/`` package
(``test/__init__.py``, ``test/helpers.py`` and the chosen test files with what they import) taken
from the tinygrad repository at the commit matching the installed tinygrad. Nothing of it is part
of hexrpc.

Each (file, device) pair is one pytest process, run serially (``DEV=<device>``, working
directory TESTS, so ``import test.helpers`` works). For ``HEXRPC`` the plugin
``tinygrad_suite_plugin`` (next to this script) imports ``hexrpc.tinygrad`` before collection and
``HEXRPC_BENCH=1`` is set unless given: the bench with the executor (kernels built for Hexagon
and run under qemu-hexagon; every time it reports is simulated). Each test's call phase is
bounded by ``--timeout`` seconds.

Output, in OUT (default ``./tinygrad-suite-out``): per pair ``<file>.<device>.xml`` (JUnit),
``.log`` (pytest's output), ``.json`` (wall time, exit status, HEXRPC device counters). The
report, printed at the end (``--report-only``: from OUT without running), gives the counts per
file and device and every test that passes on CPU and fails on HEXRPC with the first line of its
failure; ``--diff-out`` also writes that list as JSON.

Example::

    HEXRPC_CLI=target/debug/hexrpc CC=clang-19 python bindings/python/tools/tinygrad_suite.py \\
        /path/to/tgtests test/backend/test_ops.py test/backend/test_jit.py test/unit/test_jit.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FILES = ("test/backend/test_ops.py", "test/backend/test_jit.py", "test/unit/test_jit.py")
DEVICES = ("HEXRPC", "CPU")
OUTCOMES = ("passed", "failed", "error", "skipped")


def stem(file: str) -> str:
    return file.replace("/", ".").removesuffix(".py")


def run_one(tests: Path, file: str, device: str, out: Path, timeout: float, python: str, extra: list[str]) -> dict:
    base = out / f"{stem(file)}.{device}"
    env = dict(os.environ)
    env["DEV"] = device
    env.setdefault("CC", "clang-19")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(tests)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TG_SUITE_STATS"] = f"{base}.stats.json"
    if device == "HEXRPC":
        env.setdefault("HEXRPC_BENCH", "1")
    cmd = [python, "-m", "pytest", "-p", "tinygrad_suite_plugin", "-p", "no:cacheprovider", "-q", "-rN",
           f"--tg-timeout={timeout:g}", f"--junitxml={base}.xml", "-o", "junit_family=xunit1", file, *extra]
    print(f"[tinygrad-suite] {device:6s} {file} ...", flush=True)
    t0 = time.monotonic()
    with open(f"{base}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    stats_path = Path(f"{base}.stats.json")
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
    info = {"file": file, "device": device, "exit": rc, "wall_s": round(wall, 1), "stats": stats, "cmd": cmd}
    Path(f"{base}.json").write_text(json.dumps(info, indent=1))
    print(f"[tinygrad-suite] {device:6s} {file}: exit {rc}, {wall:.0f} s", flush=True)
    return info


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def results(xml_path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the failure/error/skip message)."""
    out: dict[str, tuple[str, str]] = {}
    if not xml_path.exists():
        return out
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        tid = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, msg = "passed", ""
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                outcome = "failed" if kind == "failure" else kind
                msg = first_line(el.get("message")) or first_line(el.text)
                break
        # A test that failed in the call and errored in teardown appears twice: keep the worst.
        if tid in out and OUTCOMES.index(out[tid][0]) >= OUTCOMES.index(outcome) and out[tid][0] != "skipped":
            continue
        out[tid] = (outcome, msg)
    return out


def report(out: Path, files: list[str], diff_out: Path | None) -> list[dict]:
    print(f"\n{'file':34s} {'device':7s} {'pass':>6s} {'fail':>6s} {'error':>6s} {'skip':>6s} {'total':>6s} {'wall':>8s}")
    diff: list[dict] = []
    hex_only: list[dict] = []
    for file in files:
        res = {}
        for device in DEVICES:
            base = out / f"{stem(file)}.{device}"
            res[device] = results(Path(f"{base}.xml"))
            meta = json.loads(Path(f"{base}.json").read_text()) if Path(f"{base}.json").exists() else {}
            counts = {k: sum(1 for o, _ in res[device].values() if o == k) for k in OUTCOMES}
            wall = f"{meta['wall_s']:.0f}s" if "wall_s" in meta else "-"
            note = "" if meta.get("exit") in (0, 1, None) else f"  (pytest exit {meta['exit']})"
            print(f"{file:34s} {device:7s} {counts['passed']:6d} {counts['failed']:6d} {counts['error']:6d} "
                  f"{counts['skipped']:6d} {len(res[device]):6d} {wall:>8s}{note}")
        if not res["CPU"] or not res["HEXRPC"]:
            continue  # a device without results (not run, or its run broke off before the report)
        for tid, (o, _) in res["CPU"].items():
            h = res["HEXRPC"].get(tid)
            if o == "passed" and (h is None or h[0] in ("failed", "error")):
                diff.append({"file": file, "test": tid, "hexrpc": h[0] if h else "missing", "first_line": h[1] if h else ""})
        for tid, (o, msg) in res["HEXRPC"].items():
            c = res["CPU"].get(tid)
            if o in ("failed", "error") and (c is None or c[0] == "skipped"):
                hex_only.append({"file": file, "test": tid, "hexrpc": o, "first_line": msg})
    print(f"\npass on CPU, fail on HEXRPC: {len(diff)}")
    for d in diff:
        print(f"  {d['test']}  [{d['hexrpc']}]  {d['first_line']}")
    if hex_only:
        print(f"\nfail on HEXRPC, skipped on CPU (not compared): {len(hex_only)}")
        for d in hex_only:
            print(f"  {d['test']}  [{d['hexrpc']}]  {d['first_line']}")
    if diff_out:
        diff_out.write_text(json.dumps(diff, indent=1))
    return diff


def read_known(path: Path) -> set[str]:
    """Test ids, one a line; ``#`` starts a comment."""
    return {line.split("#", 1)[0].strip() for line in path.read_text().splitlines()} - {""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Arguments after `--` are passed to pytest.")
    ap.add_argument("tests", type=Path, help="directory that holds tinygrad's test/ package")
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES), help=f"test files under TESTS (default: {' '.join(DEFAULT_FILES)})")
    ap.add_argument("--out", type=Path, default=Path("tinygrad-suite-out"))
    ap.add_argument("--devices", default=",".join(DEVICES), help="which devices to run (comma-separated; the report reads both)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one test may run (0: no limit)")
    ap.add_argument("--python", default=sys.executable, help="the Python with tinygrad, torch, pytest and hexrpc")
    ap.add_argument("--report-only", action="store_true", help="only print the report from OUT")
    ap.add_argument("--diff-out", type=Path, help="write the CPU-pass/HEXRPC-fail list here as JSON")
    ap.add_argument("--known", type=Path, help="test ids allowed to pass on CPU and fail on HEXRPC (one a line, # comments); "
                    "with it the exit status is 1 if any other test does, or if a pytest run did not complete")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    tests = args.tests.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    known = read_known(args.known) if args.known else None
    runs = []
    if not args.report_only:
        for file in args.files:
            if not (tests / file).is_file():
                ap.error(f"{tests / file} does not exist")
        for device in args.devices.split(","):
            for file in args.files:
                runs.append(run_one(tests, file, device, out, args.timeout, args.python, extra))
    diff = report(out, args.files, args.diff_out)
    if known is None:
        return 0
    status = 0
    # pytest exits 0 (all passed) or 1 (some failed); anything else means the run broke off.
    for r in runs:
        if r["exit"] not in (0, 1):
            print(f"[tinygrad-suite] {r['device']} {r['file']}: pytest exited {r['exit']}")
            status = 1
    new = [d for d in diff if d["test"] not in known]
    if new:
        print(f"\n[tinygrad-suite] {len(new)} CPU-pass/HEXRPC-fail tests not in {args.known}:")
        for d in new:
            print(f"  {d['test']}")
        status = 1
    ran = tuple(stem(f) + "." for f in args.files)
    fixed = sorted(t for t in known - {d["test"] for d in diff} if t.startswith(ran))
    if fixed:
        print(f"\n[tinygrad-suite] {len(fixed)} tests of {args.known} no longer fail on HEXRPC (remove them):")
        for t in fixed:
            print(f"  {t}")
    return status


if __name__ == "__main__":
    sys.exit(main())
