"""`python -m benchmarks [--quick] [--only NAME ...] [--json PATH]`: run, print a table, write JSON."""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time

from benchmarks.common import failed

BENCHES = (
    "env",
    "verifier",
    "sandbox",
    "rollout",
    "grpo",
    "memory",
    "fsdp",
    "endpoint",
    "train",
    "busy",
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", allow_abbrev=False)
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--only", action="append", choices=BENCHES)
    p.add_argument("--json", default="benchmarks/results.json")
    args = p.parse_args(argv)
    rows = []
    for name in args.only or BENCHES:
        t = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks.bench_{name}")
            got = mod.run(quick=args.quick)
        except Exception as e:  # one broken benchmark is a row marked so, not the end of the run
            why = f"{type(e).__name__}: {e}"
            print(f"[{name}] failed: {why}", file=sys.stderr)
            got = [failed(name, "(the whole benchmark)", "", "", why)]
        rows += got
        print(f"[{name}] {len(got)} rows in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    print(
        f"{'bench':<9} {'metric':<46} {'value':>10} {'reference':>10} {'ratio':>7} {'target':>7} met"
    )
    for r in rows:
        tgt = "" if r.target is None else (("<=" if r.lower_is_better else ">=") + f"{r.target:g}")
        met = {True: "yes", False: "NO", None: ""}[r.met] if r.measured else "NOT RUN"
        print(
            f"{r.bench:<9} {r.metric:<46} {r.value:>10.3g} {r.reference:>10.3g} {r.ratio:>7.2f} {tgt:>7} {met}"
        )
        if not r.measured:
            print(f"{'':<9} {r.note}")
    out = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "quick": args.quick,
        "rows": [r.as_dict() for r in rows],
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
