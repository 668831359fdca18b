"""The update step reads the same whatever the process layout (FSDP or whole copies are one
object, :func:`distributed.layout`), and every random stream of a run comes from one helper
(:class:`trainer.Seeds`). The two-process and FSDP equivalences are in test_distributed.py."""

import ast
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train import distributed  # noqa: E402
from flowzoo.agents.train.trainer import Seeds  # noqa: E402

TRAIN = Path(distributed.__file__).parent


def _functions(path: Path) -> dict[str, ast.AST]:
    tree = ast.parse(path.read_text())
    return {
        n.name: n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _reads_fsdp(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "fsdp" for n in ast.walk(node))


def test_the_update_step_never_branches_on_fsdp():
    """Only the constructor reads ``cfg.fsdp`` (to pick the layout); the update, the
    rollout and the evaluation ask the layout object."""
    learner = _functions(TRAIN / "learner.py")
    readers = [n for n, f in learner.items() if n not in ("Learner", "__init__") and _reads_fsdp(f)]
    assert readers == []
    trainer = _functions(TRAIN / "trainer.py")
    step = ["train_step", "update", "evaluate", "_rollout", "_rollout_round", "_sample"]
    assert [n for n in step if _reads_fsdp(trainer[n])] == []


def test_every_random_stream_of_the_loop_comes_from_seeds():
    """No seeding call in the trainer or the learner outside :class:`Seeds`."""
    seeding = {"manual_seed", "default_rng", "Random", "seed"}
    for name in ("trainer.py", "learner.py"):
        tree = ast.parse((TRAIN / name).read_text())
        seeds = next(
            (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Seeds"), None
        )
        inside = {id(n) for n in ast.walk(seeds)} if seeds is not None else set()
        calls = [
            n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and id(n) not in inside
        ]
        assert [c for c in calls if c in seeding] == [], name


def test_seeds_are_a_function_of_seed_step_and_round():
    a, b = Seeds(3), Seeds(3)
    assert a.problems(5, 1).integers(1 << 30) == b.problems(5, 1).integers(1 << 30)
    assert a.problems(5, 0).integers(1 << 30) != a.problems(6, 0).integers(1 << 30)
    assert a.episode(2, 0, 1, 3) != a.episode(2, 1, 1, 3) != Seeds(4).episode(2, 1, 1, 3)
    g1, g2 = a.sampler(2, 0, 0, "cpu"), a.sampler(2, 0, 1, "cpu")  # each process its own
    assert torch.rand(4, generator=g1).tolist() != torch.rand(4, generator=g2).tolist()
    assert a.minibatches(7).random() == b.minibatches(7).random() != a.tree(7).random()
    assert isinstance(a.tree(0), random.Random)


def _model_and_loss():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    return m, list(m.parameters()), (m(x) ** 2).mean()


def test_the_single_process_layout_is_whole_copies():
    info = distributed.DistInfo()
    par = distributed.layout(info, sharded=False)
    assert type(par) is distributed.Replicated and par.retries_oom
    assert type(distributed.layout(info, sharded=True)) is distributed.Sharded
    m, params, loss = _model_and_loss()
    par.backward(loss, params)
    _, params2, loss2 = _model_and_loss()
    loss2.backward()  # the same gradient as backward() on one process
    for p, q in zip(params, params2, strict=True):
        assert torch.equal(p.grad, q.grad)
    g = torch.arange(6.0)
    assert par.role_gradient(g) is g and par.idle_passes(3) == 0
    assert par.sum_shards([1.5, 2.0]) == [1.5, 2.0] and par.gram_reduce() is None
    flat = torch.cat([p.grad.flatten() for p in params])
    par.install(params, flat * 2)  # one process: .grad already holds the whole gradient
    assert torch.equal(torch.cat([p.grad.flatten() for p in params]), flat)
    distributed.write_flat_grad(params, flat * 2)
    assert torch.equal(torch.cat([p.grad.flatten() for p in params]), flat * 2)


class _OutOfMemoryInBackward(torch.autograd.Function):
    """Identity forward; its backward runs out of memory half-way through a graph."""

    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        raise torch.OutOfMemoryError("simulated")


def test_a_failed_backward_leaves_grad_untouched():
    """Why the whole-copy layout does not call backward(): all or nothing, so an
    out-of-memory micro-batch can be retried smaller."""
    m, params, loss = _model_and_loss()
    distributed.accumulate(loss, params)
    before = [p.grad.clone() for p in params]
    half = _OutOfMemoryInBackward.apply(m.bias).sum() + (m.weight**2).sum()
    with pytest.raises(torch.OutOfMemoryError):
        distributed.layout(distributed.DistInfo(), sharded=False).backward(half, params)
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.grad, b)


def test_one_grpo_update_reads_in_three_files():
    """The update step (learner.py), what GRPO is (algorithms/grpo.py) and the loss pieces
    (losses.py) are the whole of one GRPO update: the learner handles no role gradient and
    no out-of-memory or FSDP pass itself (the role-level diagnostics are RoleProbe's hooks,
    the retries and idle passes the layout's), and the three stay about 600 lines."""
    learner = (TRAIN / "learner.py").read_text()
    for plumbing in ("flat_grad", "flat_params", "role_gradient_stats", "OutOfMemoryError"):
        assert plumbing not in learner, plumbing
    files = ("learner.py", "algorithms/grpo.py", "losses.py")
    assert sum(len((TRAIN / f).read_text().splitlines()) for f in files) <= 650
