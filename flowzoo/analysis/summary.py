"""The end-of-run text of ``flowzoo train``, read from a run's ``summary.json`` (no torch:
the same text can be printed for any finished run)."""

from __future__ import annotations


def print_summary(summary: dict) -> None:
    """What ``flowzoo train`` prints at the end: status, held-out accuracy with its CIs,
    the gain, behaviour rates, out-of-distribution, gradient shares and warnings."""
    c = summary.get("curve")
    done, at = summary["steps_done"], summary.get("resumed_at") or 0
    session = f"; this session: steps {at}..{done} in" if at else " in"
    print(f"status {summary['status']} after {done} steps{session} {summary['wall_s']:.0f}s")
    if c:
        e = summary.get("eval", {})

        def ci(lo_hi) -> str:
            return f"[{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]"

        print(
            f"held-out accuracy ({e.get('problems')} problems x {e.get('samples')} samples at "
            f"T={e.get('temperature')}; 95% CIs over problems):\n"
            f"  base  {c['base']:.3f} {ci(c['base_ci'])}\n"
            f"  final {c['final']:.3f} {ci(c['final_ci'])}   (mean of the last evaluations)\n"
            f"  gain  {c['gain']:+.3f} {ci(c['gain_ci'])}"
            f"   ({'paired' if c['paired'] else 'unpaired'})\n"
            f"  peak  {c['peak']:.3f} at step {c['peak_step']}; trajectory: {c['klass']}"
            + ("  (a cliff)" if c["cliff"] else "")
        )
        if e.get("greedy_base") is not None:
            print(f"  greedy: base {e['greedy_base']:.3f}, last {e['greedy_last']:.3f}")
        b0, b1 = e.get("behaviour_base") or {}, e.get("behaviour_last") or {}
        if b0:
            rates = ", ".join(f"{r} {b0[r]:.2f} -> {b1.get(r, float('nan')):.2f}" for r in b0)
            print(f"  considered behaviour (share of decidable turns), base -> last: {rates}")
        o = summary.get("ood")
        if o:
            print(
                f"out-of-distribution ({o['problems']} problems, structure never trained):\n"
                f"  base  {o['base']:.3f} {ci(o['base_ci'])}   final {o['final']:.3f} "
                f"{ci(o['final_ci'])}   gain {o['gain']:+.3f} {ci(o['gain_ci'])}"
            )
    shares = summary.get("mean_grad_share") or {}
    if shares:
        print("mean gradient-mass share: " + ", ".join(f"{r} {v:.2f}" for r, v in shares.items()))
    for w in summary.get("warnings", []):
        print(f"WARNING: {w}")
