"""Confidence intervals, trajectory classes and the capture reading, on synthetic runs whose
answer is known (each rule must be able to come out either way)."""

import random

import pytest

import flowzoo
from flowzoo.analysis.readings import capture, readings_of, trajectory
from flowzoo.analysis.stats import bootstrap_ci, paired_diff_ci
from flowzoo.envs.registry import workflow_readings


def _eval(acc: float, n: int = 400, k: int = 4, seed: int = 0):
    """An evaluation of the same ``n`` problems (fixed difficulties, mean 0.4) x ``k`` fresh
    samples, every problem's chance shifted so the expected accuracy is ``acc``."""
    diff = random.Random(12345)
    p = [min(1.0, max(0.0, diff.betavariate(0.8, 1.2))) for _ in range(n)]
    shift = acc - sum(p) / n
    rng = random.Random(seed)
    per = [sum(rng.random() < min(1, max(0, q + shift)) for _ in range(k)) for q in p]
    return {"accuracy": sum(per) / (n * k), "samples": k, "episodes": n, "per_problem": per}


def _curve(accs: list[float], n: int = 400) -> list[tuple[int, dict]]:
    return [(10 * i, _eval(a, n, seed=i)) for i, a in enumerate(accs)]


def test_bootstrap_ci_covers_the_mean_and_shrinks_with_problems():
    rng = random.Random(0)
    small = [float(rng.random() < 0.3) for _ in range(50)]
    big = [float(rng.random() < 0.3) for _ in range(2000)]
    m, lo, hi = bootstrap_ci(small)
    assert lo < m < hi and m == pytest.approx(sum(small) / 50)
    _, lo2, hi2 = bootstrap_ci(big)
    assert (hi2 - lo2) < (hi - lo) / 4
    assert lo2 < 0.3 < hi2
    # a constant has no spread
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_paired_difference_resolves_what_unpaired_intervals_cannot():
    rng = random.Random(1)
    a = [float(rng.random() < 0.4) for _ in range(300)]
    b = list(a)
    for i in rng.sample(range(300), 30):  # 30 problems flip from wrong to right, none back
        b[i] = 1.0
    d, lo, hi = paired_diff_ci(a, b)
    assert lo > 0 and d == pytest.approx((sum(b) - sum(a)) / 300)
    with pytest.raises(ValueError, match="same problems"):
        paired_diff_ci(a, b[:-1])


def test_trajectory_classes():
    flat = trajectory(_curve([0.40, 0.41, 0.39, 0.40, 0.41]))
    assert flat.klass == "never rose" and not flat.cliff
    assert flat.gain_ci[0] < 0 < flat.gain_ci[1] and flat.paired
    held = trajectory(_curve([0.40, 0.48, 0.52, 0.53, 0.52]))
    assert held.klass == "rose and held" and held.gain_ci[0] > 0
    fell = trajectory(_curve([0.40, 0.55, 0.60, 0.35, 0.33, 0.34]))
    assert fell.klass == "rose then fell" and fell.cliff and fell.peak_step == 20
    # fell from its peak but ended above its base: a fall, not a cliff
    partial = trajectory(_curve([0.30, 0.55, 0.60, 0.45, 0.44, 0.45]))
    assert partial.klass == "rose then fell" and not partial.cliff
    # the peak is the best of many evaluations: a noise-sized bump does not count as a rise
    bump = trajectory(_curve([0.40, 0.42, 0.43, 0.41, 0.40]))
    assert bump.klass == "never rose"


def test_trajectory_of_a_curve_without_per_problem_scores_uses_its_intervals():
    ev = [(s, {"accuracy": a, "episodes": 64}) for s, a in [(0, 0.4), (4, 0.45), (8, 0.42)]]
    t = trajectory(ev)
    assert not t.paired and t.klass == "never rose"  # 64 problems cannot resolve +0.05
    big = [(s, {"accuracy": a, "episodes": 5000}) for s, a in [(0, 0.4), (4, 0.6), (8, 0.6)]]
    assert trajectory(big).klass == "rose and held"


def _metrics(
    shares: list[dict], tokens: dict, evals: list[dict], turns: dict | None = None
) -> list[dict]:
    rows = [{"step": -1, "eval": evals[0]}]
    turns = turns or tokens  # the same proportions unless given
    for i, sh in enumerate(shares):
        rows.append(
            {
                "step": i,
                "roles": {
                    r: {"grad_share": v, "tokens": tokens[r], "turns": turns[r]}
                    for r, v in sh.items()
                },
            }
        )
    rows[-1]["eval"] = evals[-1]
    return rows


def test_capture_is_read_against_token_share_and_early_share():
    toks = {"solver": 300, "aggregator": 100}  # token share 0.75 / 0.25
    e0 = {"accuracy": 0.40, "majority_correct": 0.38}
    e1 = {"accuracy": 0.40, "majority_correct": 0.45}  # aggregator now below the majority
    growing = [{"solver": 0.8 + 0.015 * i, "aggregator": 0.2 - 0.015 * i} for i in range(9)]
    voting = workflow_readings("voting")  # what a voting run records in its summary
    c = capture(voting, _metrics(growing, toks, [e0, e1]))
    assert c["role"] == "solver" and c["captured"]
    assert c["partner"] == "aggregator"
    assert c["partner_quality_base"] == pytest.approx(0.02)
    assert c["partner_quality_final"] == pytest.approx(-0.05)
    # a share that only reflects the solver's tokens (and does not grow) is not capture
    proportional = [{"solver": 0.76, "aggregator": 0.24}] * 9
    assert not capture(voting, _metrics(proportional, toks, [e0, e1]))["captured"]
    # a share far above the tokens that shrinks over training is not capture either
    shrinking = [{"solver": 0.95 - 0.01 * i, "aggregator": 0.05 + 0.01 * i} for i in range(9)]
    assert not capture(voting, _metrics(shrinking, toks, [e0, e1]))["captured"]
    # too few steps to read
    assert capture(voting, _metrics(growing[:2], toks, [e0, e1])) is None
    # a workflow that declares no partner reads none
    single = capture(workflow_readings("single"), _metrics(growing, toks, [e0, e1]))
    assert single["partner"] is None and single["partner_quality_final"] is None


def test_every_workflow_records_the_readings_the_study_uses():
    """The readings come from the workflow's own declaration, through the run's summary:
    every extra a workflow declares appears in its outcome's info, its partner is one of its
    roles and its parallel roles are played by several agents."""
    from flowzoo.envs.scripted import expert_policy, play_episode

    for env_id in flowzoo.list_envs():
        env = flowzoo.make_env(env_id, n_tasks=2)
        wf = env.workflow
        rec = wf.readings.record(wf.parallel_roles)
        roles = {env.role_of(a) for a in env.possible_agents}
        assert rec["partner"] in roles | {None}, env_id
        for r in rec["parallel"]:
            assert sum(env.role_of(a) == r for a in env.possible_agents) > 1, (env_id, r)
        info = play_episode(env, expert_policy(0.3), seed=0)
        assert set(rec["extras"]) <= set(info), (env_id, rec["extras"], sorted(info))
        assert readings_of({"readings": rec}, "no-such-workflow") == rec
        assert readings_of({}, wf.name) == rec  # runs before the record: the declaration


def test_a_run_that_peaks_at_its_last_evaluation_has_not_fallen():
    climbing = trajectory(_curve([0.34, 0.36, 0.38, 0.39, 0.40, 0.47]))
    assert climbing.peak_step == 50 and climbing.klass == "rose and held"
    assert climbing.final < climbing.peak  # the window's mean is below its last point


def test_isolated_vs_shared_pairs_by_seed_and_can_come_out_either_way():
    """Seeds share problems and base evaluations: a small consistent per-seed difference on a
    large seed-to-seed spread is clear when paired and lost by Welch; pairing only happens
    when both sides ran the same seeds; a difference that changes sign stays unclear."""
    from flowzoo.analysis.findings import paired_by_seed
    from flowzoo.analysis.stats import welch

    seeds = [0, 1, 2, 3]
    shared = [0.20, 0.40, 0.30, 0.50]
    isolated = [x + 0.03 for x in shared]
    d, h, paired = paired_by_seed(isolated, seeds, shared, seeds)
    assert paired and d == pytest.approx(0.03) and d - h > 0  # clearly higher
    dw, hw = welch(isolated, shared)
    assert dw - hw < 0  # unpaired, the seeds' spread hides it
    lower = [x - 0.03 for x in shared]
    d, h, _ = paired_by_seed(lower, seeds, shared, seeds)
    assert d + h < 0  # clearly lower: the rule comes out the other way
    mixed = [x + e for x, e in zip(shared, [0.05, -0.05, 0.04, -0.04], strict=True)]
    d, h, _ = paired_by_seed(mixed, seeds, shared, seeds)
    assert d - h < 0 < d + h
    _, _, paired = paired_by_seed(isolated, [0, 1, 2, 4], shared, seeds)
    assert not paired  # different seeds: Welch


def test_capture_null_follows_the_losss_weighting_and_needs_intervals():
    """The solver writes 3/4 of the tokens in 1/2 of the turns. A growing share of about 0.7
    is capture against a sequence-weighted loss (turn share 0.5) but not against a
    token-weighted one (token share 0.75); and a share that jumps about from step to step
    around the same means is not capture (its growth interval includes 0)."""
    e = {"accuracy": 0.4, "majority_correct": 0.38}
    toks, turns = {"solver": 300, "aggregator": 100}, {"solver": 3, "aggregator": 3}
    growing = [{"solver": 0.62 + 0.02 * i, "aggregator": 0.38 - 0.02 * i} for i in range(9)]
    m = _metrics(growing, toks, [e, e], turns)
    voting = workflow_readings("voting")
    seq = capture(voting, m, "seq-mean-token-mean")
    assert seq["captured"] and seq["null"] == "turn share" and seq["excess_ci"][1] > 0.05
    tok = capture(voting, m, "token-mean")
    assert not tok["captured"] and tok["null"] == "token share"
    noisy = [
        {"solver": 0.70 + (0.25 if i % 2 else -0.25) + 0.005 * i, "aggregator": 0.3}
        for i in range(9)
    ]
    assert not capture(voting, _metrics(noisy, toks, [e, e], turns), "seq-mean-token-mean")[
        "captured"
    ]


def test_wilson_interval_matches_the_textbook_and_stays_in_0_1():
    from flowzoo.analysis.stats import wilson

    lo, hi = wilson(7, 10)  # the textbook's 95% Wilson interval for 7/10: [0.397, 0.892]
    assert (round(lo, 3), round(hi, 3)) == (0.397, 0.892)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
    # narrower with more turns at the same rate
    assert wilson(140, 200)[1] - wilson(140, 200)[0] < wilson(14, 20)[1] - wilson(14, 20)[0]
