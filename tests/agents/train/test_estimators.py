# ruff: noqa: E402
"""The credit-assignment estimators' arithmetic on hand-made batches (small numbers computed
by hand in each test), and their refusal at the config boundary where one does not apply.

Per-role running baseline (``algo="role-baseline"``), Dr. MAS's per-agent normalisation
(``algo="dr-mas"``) against GRPO's ``adv_norm`` choices (the older ``per-role`` switch is not
Dr. MAS's form), and the config/CLI names;
the centralised critic's arithmetic and its update on a real tiny model are in
``test_estimators_model.py``."""

import math

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.algorithms import dr_mas, grpo, role_baseline
from flowzoo.agents.train.algorithms.role_baseline import EPS, RunningBaseline
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.rollout import EpisodeRecord, TurnRecord
from flowzoo.cli import build_parser, main
from flowzoo.config import TrainConfig


def _batch(cfg: TrainConfig, episodes) -> Batch:
    """A batch by hand: ``episodes`` is a list of (task, [(agent, role, reward), ...]), each
    agent speaking once, in the order given."""
    records = []
    for e, (task, turns) in enumerate(episodes):
        rec = EpisodeRecord(e, "voting-math", task, task)
        for k, (agent, role, reward) in enumerate(turns):
            rec.turns.append(
                TurnRecord(
                    e,
                    agent,
                    role,
                    0,
                    k,
                    "shared",
                    [1, 2],
                    [3, 4],
                    [-0.5, -0.5],
                    f"text of {agent}",
                    True,
                    reward=reward,
                )  # fmt: skip
            )
        records.append(rec)
    return Batch.of(cfg, records)


def _voting(rewards: list[tuple[float, float, float]], task: str = "p"):
    """Voting episodes on one problem: (solver_0, solver_1, aggregator) rewards each."""
    return [
        (task, [("solver_0", "solver", a), ("solver_1", "solver", b), ("aggregator", "aggregator", c)])
        for a, b, c in rewards
    ]  # fmt: skip


# ------------------------------------------------------------ per-role running baseline


def _rb_cfg(**kw) -> TrainConfig:
    return TrainConfig(
        **{"algo": "role-baseline", "baseline_decay": 0.5, "filter_groups": False, **kw}
    )


def test_role_baseline_matches_a_hand_computation():
    """decay 0.5. Step 1: solvers earn 1,0,1,0 (first seen: mean 1/2, second moment 1/2,
    std 1/2): advantages (r - 1/2) / 1/2 = +-1; the aggregator earns 1,1 (mean 1, std 0):
    advantages 0 (a pooled baseline of 2/3 would give it +1/3 each). Step 2: solvers all 1:
    centred on the old mean 1/2 -> 1/2; moments move to 3/4, 3/4, so the std is
    sqrt(3/4 - 9/16) = sqrt(3)/4 and the advantage 2/sqrt(3); the aggregator earns 0,0:
    centred on 1 -> -1; moments 1/2, 1/2, std 1/2, advantage -2."""
    cfg = _rb_cfg()
    state = role_baseline.new_state(cfg)
    b1 = _batch(cfg, _voting([(1, 0, 1), (1, 0, 1)]))
    a1 = role_baseline.advantages(cfg, b1, None, state)
    h = 0.5 / (0.5 + EPS)
    assert a1.scalar == pytest.approx([h, -h, 0.0, h, -h, 0.0], abs=1e-12)
    assert a1.stats["baseline"] == {
        "aggregator": {"mean": 1.0, "std": 0.0},
        "solver": {"mean": 0.5, "std": 0.5},
    }
    b2 = _batch(cfg, _voting([(1, 1, 0), (1, 1, 0)]))
    a2 = role_baseline.advantages(cfg, b2, None, state)
    s = 0.5 / (math.sqrt(3) / 4 + EPS)
    g = -1.0 / (0.5 + EPS)
    assert a2.scalar == pytest.approx([s, s, g, s, s, g], abs=1e-12)
    assert state.moments["solver"][:2] == [0.75, 0.75]
    assert state.moments["aggregator"][:2] == [0.5, 0.5]
    assert [m[2] for m in state.moments.values()] == [2.0, 2.0]


def test_role_baseline_without_std_norm_is_the_centred_reward():
    """``std_norm=False`` (SPIRAL's form): reward minus the role's running mean, nothing
    divided: step 1 +-1/2 and 0; step 2 1/2 and -1, as above before the division."""
    cfg = _rb_cfg(std_norm=False)
    state = role_baseline.new_state(cfg)
    a1 = role_baseline.advantages(cfg, _batch(cfg, _voting([(1, 0, 1), (1, 0, 1)])), None, state)
    assert a1.scalar == [0.5, -0.5, 0.0, 0.5, -0.5, 0.0]
    a2 = role_baseline.advantages(cfg, _batch(cfg, _voting([(1, 1, 0), (1, 1, 0)])), None, state)
    assert a2.scalar == [0.5, 0.5, -1.0, 0.5, 0.5, -1.0]


def test_role_baseline_decay_zero_is_last_steps_mean_and_an_absent_role_keeps_its_own():
    """decay 0: the baseline is the previous step's mean. A role that does not play a step
    (only solvers below) keeps its moments for the step it plays again."""
    cfg = _rb_cfg(baseline_decay=0.0, std_norm=False)
    state = role_baseline.new_state(cfg)
    role_baseline.advantages(cfg, _batch(cfg, _voting([(1, 0, 1), (0, 0, 1)])), None, state)
    solo = [("p", [("solver_0", "solver", 1.0), ("solver_1", "solver", 1.0)])]
    a = role_baseline.advantages(cfg, _batch(cfg, solo), None, state)
    assert a.scalar == [0.75, 0.75]  # 1 - mean(1, 0, 0, 0)
    assert state.moments["aggregator"] == [1.0, 1.0, 1.0]  # untouched by the solo step
    a = role_baseline.advantages(cfg, _batch(cfg, _voting([(0, 0, 0)])), None, state)
    assert a.scalar == [-1.0, -1.0, -1.0]  # solver's last mean 1, aggregator's 1


def test_role_baseline_moves_on_every_turn_even_those_filter_groups_drops():
    """``filter_groups``: the aggregator's group (1, 1) has no variance, so its turns add no
    loss; its baseline still moved: the state equals a run without the filter."""
    a_cfg, b_cfg = _rb_cfg(filter_groups=True), _rb_cfg()
    sa, sb = role_baseline.new_state(a_cfg), role_baseline.new_state(b_cfg)
    eps = _voting([(1, 0, 1), (1, 0, 1)])
    out = role_baseline.advantages(a_cfg, _batch(a_cfg, eps), None, sa)
    role_baseline.advantages(b_cfg, _batch(b_cfg, eps), None, sb)
    assert out.skip == {2, 5} and out.stats["dropped_groups"] == 1
    assert sa.state_dict() == sb.state_dict()
    # the group counts the run's no-signal warning reads are there
    assert out.stats["groups"] == 2 and out.stats["zero_std_groups"] == 1


def test_role_baseline_sums_every_role_in_one_order_even_without_turns():
    """Under torchrun the step's sums are reduced over processes: a process whose share has
    no turns sends the same list (every env role, in order) and ends with the same moments as
    the one that had them (here: solvers 1, 0; aggregator 1, 1)."""
    roles, rewards = ["solver", "solver", "aggregator", "aggregator"], [1.0, 0.0, 1.0, 1.0]
    a = RunningBaseline(0.5, ("solver", "aggregator"))
    b = RunningBaseline(0.5, ("solver", "aggregator"))
    sent: list[list[float]] = []
    a.step(roles, rewards, True, reduce=lambda xs: sent.append(list(xs)) or xs)
    assert (
        b.step([], [], True, reduce=lambda xs: [x + y for x, y in zip(sent[0], xs, strict=True)])
        == []
    )
    assert sent[0] == [
        2.0,
        2.0,
        2.0,
        2.0,
        1.0,
        1.0,
    ]  # aggregator then solver: n, sum, sum of squares
    assert a.state_dict() == b.state_dict()
    assert role_baseline.new_state(_rb_cfg(env="orch-workers-math")).roles == (
        "orchestrator", "worker", "synthesizer",
    )  # fmt: skip


def test_role_baseline_state_round_trips_through_a_checkpoint(tmp_path):
    """The state is plain data a ``weights_only`` load reads; a restored baseline gives the
    next step exactly what the unbroken one gives. A missing or foreign state is refused."""
    cfg = _rb_cfg()
    state = role_baseline.new_state(cfg)
    role_baseline.advantages(cfg, _batch(cfg, _voting([(1, 0, 1), (0, 0, 1)])), None, state)
    torch.save(state.state_dict(), tmp_path / "s.pt")
    back = role_baseline.new_state(cfg)
    back.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    nxt = _batch(cfg, _voting([(1, 1, 0), (0, 1, 1)]))
    assert role_baseline.advantages(cfg, nxt, None, back).scalar == (
        role_baseline.advantages(cfg, nxt, None, state).scalar
    )
    assert back.state_dict() == state.state_dict()
    for bad in (None, {}, {"decay": 0.5, "moments": []}, {"decay": 0.9, "moments": {}},
                {"decay": 0.5, "moments": {"solver": [0.1, float("nan"), 1]}},
                {"decay": 0.5, "moments": {"solver": [0.1, 0.2]}}):  # fmt: skip
        with pytest.raises(ValueError):
            role_baseline.new_state(cfg).load_state_dict(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="running state"):
        role_baseline.advantages(cfg, nxt, None, None)
    with pytest.raises(ValueError, match="decay"):
        RunningBaseline(1.5)


# ------------------------------------------------------------ Dr. MAS: per-agent norm


def _two_roles(cfg: TrainConfig) -> Batch:
    """One problem, two episodes whose roles earn apart (a role signal): solver 1, 0;
    aggregator 3, 1; turn order s, a, s, a."""
    eps = [("p", [("solver_0", "solver", 1.0), ("aggregator", "aggregator", 3.0)]),
           ("p", [("solver_0", "solver", 0.0), ("aggregator", "aggregator", 1.0)])]  # fmt: skip
    return _batch(cfg, eps)


def test_dr_mas_differs_from_grpos_global_and_per_role_norms():
    """Groups by problem (``group_by="task"``). Dr. MAS: the solver's own 1, 0 (mean 1/2,
    std 1/2) -> +-1; the aggregator's own 3, 1 (mean 2, std 1) -> +-1. GRPO's ``group`` (one
    group of all four, mean 5/4, std sqrt(19/16)): -1/4, 7/4, -5/4, -1/4 over that std.
    ``per-role`` (the older switch): the group's mean 5/4, then each role's std of its
    centred turns over the batch (solver -1/4, -5/4: 1/2; aggregator 7/4, -1/4: 1):
    -1/2, 7/4, -5/2, -1/4 -- not Dr. MAS's. Without ``std_norm``: 1/2, 1, -1/2, -1."""
    cfg = TrainConfig(algo="dr-mas", group_by="task", filter_groups=False)
    adv = {"dr-mas": dr_mas.advantages(cfg, _two_roles(cfg)).scalar}
    for norm in ("group", "per-role"):
        cfg = TrainConfig(adv_norm=norm, group_by="task", filter_groups=False)
        adv[norm] = grpo.advantages(cfg, _two_roles(cfg)).scalar
    s, a = 0.5 / (0.5 + 1e-6), 1.0 / (1.0 + 1e-6)
    assert adv["dr-mas"] == pytest.approx([s, a, -s, -a], abs=1e-12)
    raw = TrainConfig(algo="dr-mas", group_by="task", filter_groups=False, std_norm=False)
    # (GRPO's arithmetic divides by the unit scale + 1e-6 there too)
    assert dr_mas.advantages(raw, _two_roles(raw)).scalar == pytest.approx(
        [x / (1 + 1e-6) for x in (0.5, 1.0, -0.5, -1.0)], abs=1e-15
    )
    sd = math.sqrt(19 / 16)
    assert adv["group"] == pytest.approx([x / (sd + 1e-6) for x in (-0.25, 1.75, -1.25, -0.25)])
    assert adv["per-role"] == pytest.approx([-0.5, 1.75, -2.5, -0.25], abs=1e-5)


def test_dr_mas_equals_grpo_when_the_groups_already_split_roles():
    """Under the study's ``group_by="task_role"`` every group is one role's already: Dr.
    MAS's form is plain GRPO there, number for number (and not under ``group_by="task"``)."""
    eps = _voting([(1, 0, 1), (0, 0, 1), (1, 1, 0)])
    for group_by in ("task_role", "task_role_turn", "task_agent_turn", "task"):
        got = {}
        for algo, fn in (("dr-mas", dr_mas.advantages), ("grpo", grpo.advantages)):
            cfg = TrainConfig(algo=algo, group_by=group_by, filter_groups=False)
            got[algo] = fn(cfg, _batch(cfg, eps)).scalar
        assert (got["dr-mas"] == got["grpo"]) == (group_by != "task"), group_by


def test_dr_mas_under_a_team_reward_differs_only_where_turn_counts_do():
    """A team reward with every role acting once an episode (Voting): a role's rewards on a
    problem are the episodes' rewards repeated, so Dr. MAS equals GRPO grouped by problem.
    Eval-Opt-like episodes where the optimizer speaks twice in one and once in the other
    (team rewards 1 and 0): the pooled group is 1, 1, 1 | 0, 0 (mean 3/5) but each role's own
    is 1, 1 | 0 (optimizer, mean 2/3) and 1 | 0 (evaluator, mean 1/2): they differ."""
    voting = _voting([(1, 1, 1), (0, 0, 0), (1, 1, 1)])
    evalopt = [
        ("p", [("optimizer", "optimizer", 1.0), ("evaluator", "evaluator", 1.0), ("optimizer", "optimizer", 1.0)]),
        ("p", [("optimizer", "optimizer", 0.0), ("evaluator", "evaluator", 0.0)]),
    ]  # fmt: skip
    got = {}
    for name, eps in (("voting", voting), ("eval-opt", evalopt)):
        for algo, fn in (("dr-mas", dr_mas.advantages), ("grpo", grpo.advantages)):
            cfg = TrainConfig(algo=algo, group_by="task", filter_groups=False, std_norm=False)
            got[name, algo] = fn(cfg, _batch(cfg, eps)).scalar
    assert got["voting", "dr-mas"] == pytest.approx(got["voting", "grpo"], abs=1e-12)
    u = 1 / (1 + 1e-6)
    assert got["eval-opt", "grpo"] == pytest.approx([0.4 * u] * 3 + [-0.6 * u] * 2)
    assert got["eval-opt", "dr-mas"] == pytest.approx([u / 3, 0.5 * u, u / 3, -2 * u / 3, -0.5 * u])


def test_dr_mas_filter_drops_a_roles_group_without_variance():
    """Solver 1, 0 varies, aggregator 1, 1 does not: under ``group_by="task"`` the problem's
    group varies (GRPO's filter keeps all four), but the aggregator's own group does not:
    Dr. MAS drops its two turns (advantage 0 anyway) and counts one dropped group."""
    eps = [("p", [("solver_0", "solver", 1.0), ("aggregator", "aggregator", 1.0)]),
           ("p", [("solver_0", "solver", 0.0), ("aggregator", "aggregator", 1.0)])]  # fmt: skip
    cfg = TrainConfig(algo="dr-mas", group_by="task")
    out = dr_mas.advantages(cfg, _batch(cfg, eps))
    assert out.skip == {1, 3} and out.stats["dropped_groups"] == 1
    assert out.stats["groups"] == 2 and out.stats["zero_std_groups"] == 1
    assert out.scalar is not None and out.scalar[1] == out.scalar[3] == 0.0
    plain = TrainConfig(adv_norm="group", group_by="task")
    assert grpo.advantages(plain, _batch(plain, eps)).skip == set()


# ------------------------------------------------------------ selectable, and refused


def test_each_estimator_is_a_config_and_cli_choice_with_help():
    """The names: ``--algo role-baseline`` (+ ``--baseline-decay``), ``--algo dr-mas``,
    ``--critic-input central`` (PPO); ``flowzoo train --help`` shows each with its help text
    and source."""
    from flowzoo.agents.train.algorithms import ALGORITHMS

    assert ALGORITHMS["role-baseline"].state is not None
    sub = build_parser()._subparsers._group_actions[0].choices["train"]
    text = " ".join(sub.format_help().split())
    for want in ("--algo {grpo,ppo,rloo,role-baseline,dr-mas}", "--critic-input {local,central}",
                 "not Dr. MAS's per-agent form", "--baseline-decay", "Dr. MAS",
                 "MAPPO", "running mean of the turn's role's rewards",
                 "the last step's mean); other algorithms ignore it (default: 0.9); must be in [0, 1]"):  # fmt: skip
        assert want in text, want
    args = sub.parse_args(["--algo", "ppo", "--critic-input", "central"])
    assert (args.algo, args.critic_input) == ("ppo", "central")
    for kw in (dict(algo="role-baseline", baseline_decay=0.8), dict(algo="ppo", critic_input="central"),
               dict(algo="dr-mas", group_by="task", env="eval-opt-math")):  # fmt: skip
        cfg = TrainConfig(**kw)  # accepted where they apply
        assert all(getattr(cfg, k) == v for k, v in kw.items())


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        # a centralised critic without PPO's critic
        (dict(algo="grpo", critic_input="central"), "applies to algo='ppo' only"),
        (dict(algo="rloo", critic_input="central"), "applies to algo='ppo' only"),
        (dict(algo="role-baseline", critic_input="central"), "applies to algo='ppo' only"),
        (dict(algo="dr-mas", critic_input="central"), "applies to algo='ppo' only"),
        # ... on a one-agent env, or on tree rollouts (no whole episodes)
        (dict(algo="ppo", critic_input="central", env="single-math"), "two or more agents (eval-opt-math"),
        (dict(algo="ppo", critic_input="central", env="single-code"), "use critic_input='local'"),
        (dict(algo="ppo", critic_input="central", rollout="tree", group_by="task_agent_turn"), "rollout='independent'"),
        # a per-role baseline on a one-role env
        (dict(algo="role-baseline", env="single-math"), "two or more roles (eval-opt-math"),
        (dict(algo="role-baseline", env="single-code"), "use algo='grpo' or 'rloo'"),
        # Dr. MAS on one role, or with another normalisation than its own
        (dict(algo="dr-mas", env="single-math"), "use algo='grpo' (the same numbers)"),
        (dict(algo="dr-mas", env="single-code"), "two or more roles (eval-opt-math"),
        (dict(algo="dr-mas", adv_norm="global"), "does not apply to it: give adv_norm='group'"),
        (dict(algo="dr-mas", adv_norm="per-role"), "or that adv_norm with algo='grpo'"),
        (dict(algo="dr-mas", adv_norm="none"), "adv_norm='none' does not apply"),
        # names and domains
        (dict(critic_input="global"), "valid: local, central"),
        (dict(algo="role_baseline"), "role-baseline"),
        (dict(algo="mappo"), "grpo, ppo, rloo, role-baseline, dr-mas"),
        (dict(algo="dr_mas"), "dr-mas"),
        (dict(adv_norm="agent-wise"), "group, global, per-role, none"),
        (dict(algo="role-baseline", baseline_decay=1.5), "baseline_decay"),
        (dict(algo="role-baseline", baseline_decay=-0.1), "baseline_decay"),
        (dict(algo="role-baseline", baseline_decay=float("nan")), "baseline_decay"),
    ],
)  # fmt: skip
def test_an_estimator_that_does_not_apply_is_refused_naming_what_does(kw, says):
    with pytest.raises(ValueError) as e:
        TrainConfig(**kw)
    assert says in str(e.value), str(e.value)


def test_the_cli_refuses_it_before_anything_is_built_or_written(tmp_path, capsys):
    """From the command line and from a config file: exit 2 with the message, no run
    directory made (the config is checked before torch is imported or a model loads)."""
    out = tmp_path / "run"
    assert (
        main(["train", "--algo", "grpo", "--critic-input", "central", "--out-dir", str(out)]) == 2
    )
    assert "applies to algo='ppo' only" in capsys.readouterr().err
    cfg = tmp_path / "c.toml"
    cfg.write_text('algo = "role-baseline"\nenv = "single-math"\n')
    assert main(["train", "--config", str(cfg), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "single-math has one role (solver)" in err and "Traceback" not in err
    assert not out.exists()
