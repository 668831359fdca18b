"""The passage reading (steps to peak / plateau / fall, passed or not) and the optimiser
figures, on synthetic runs whose answer is known: each must be able to come out either way."""

from flowzoo.analysis.protocol import optimiser_figures, passage, protocol_line
from tests.analysis.test_readings import _curve


def test_a_run_still_rising_at_its_end_has_not_passed_its_peak():
    rising = passage(_curve([0.30, 0.33, 0.36, 0.40, 0.44, 0.48, 0.52]))
    assert not rising.passed and rising.fall_step is None
    assert rising.peak_step >= 50 and rising.after_plateau < 3


def test_a_run_that_rose_then_fell_passed_its_peak_and_says_when_it_fell():
    fell = passage(_curve([0.30, 0.40, 0.52, 0.52, 0.52, 0.38, 0.30, 0.28]))
    assert fell.passed and fell.fall_step is not None
    assert 20 <= fell.peak_step <= 40 and fell.fall_step >= 50
    assert fell.plateau_step <= fell.peak_step


def test_a_plateau_held_for_three_evaluations_passes_without_a_fall():
    held = passage(_curve([0.30, 0.45, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50]))
    assert held.passed and held.fall_step is None
    assert held.plateau_step <= 20


def test_one_lucky_evaluation_does_not_set_the_peak():
    # a single high evaluation in a flat run: the moving average keeps the peak near it, and
    # no fall is read against an outlier the paired test cannot separate from noise
    lucky = passage(_curve([0.40, 0.40, 0.40, 0.47, 0.40, 0.40, 0.40, 0.40], n=100))
    assert lucky.fall_step is None or lucky.fall_step > 30


def _step(opt: int, clip: float, dev: float) -> dict:
    return {
        "step": 0,
        "policies": {"shared": {"opt_steps": opt}},
        "roles": {"solver": {"clip_frac": clip, "ratio_dev": dev}},
    }


def test_optimiser_figures_show_whether_the_clip_acted():
    idle = optimiser_figures([{"step": -1}, _step(1, 0.0, 0.0), _step(1, 0.0, 0.0)])
    assert idle["opt_steps"] == {"shared": 1.0}
    assert idle["roles"]["solver"]["clip_acted"] == 0.0
    acted = optimiser_figures([_step(12, 0.02, 0.05), _step(14, 0.0, 0.01)])
    assert acted["opt_steps"]["shared"] == 13.0
    assert acted["roles"]["solver"]["clip_acted"] == 0.5
    assert abs(acted["roles"]["solver"]["ratio_dev"] - 0.03) < 1e-12


def test_protocol_line_names_the_mini_batches_and_schedule():
    assert "mini-batches of 4" in protocol_line(
        {"lr": 5e-5, "lr_schedule": "cosine", "warmup_steps": 5, "ppo_mini_batch": 4}
    )
    assert "1 Adam step(s)" in protocol_line({"lr": 5e-5, "minibatches": 1})
