"""``bench accuracy``'s summary over seeds: each stage's error pooled against its floor."""

import numpy as np
import pytest

from ctmhsa.sims.benchmarks.accuracy import pooled, worst_stage


def _run(case, level, seed, nrmse, floor):
    metrics = {st: dict(nrmse=e, noise_floor=f) for st, e, f in zip(("q", "Z", "x_tilde"), nrmse, floor)}
    return dict(case=case, level=level, P=1, copies="readout", seed=seed,
                checkpoints=[dict(T=1.0, metrics={}), dict(T=5.0, metrics=metrics)])


@pytest.mark.codegen_independent
def test_pooled_ratio_is_the_rms_error_over_the_rms_floor_per_case_and_level():
    runs = [_run("cross", "lif", 1, (0.1, 0.3, 0.2), (0.1, 0.1, 0.2)),
            _run("cross", "lif", 2, (0.2, 0.1, 0.2), (0.1, 0.1, 0.1)),
            _run("cross", "escape", 1, (0.1, 0.1, 0.1), (0.1, 0.2, 0.1))]
    groups = pooled(runs)
    assert [(g["case"], g["level"], g["device"], g["seeds"], g["T"]) for g in groups] == [
        ("cross", "lif", "runtime", [1, 2], 5.0), ("cross", "escape", "runtime", [1], 5.0)]
    compiled = dict(_run("cross", "lif", 3, (0.1, 0.1, 0.1), (0.1, 0.1, 0.1)), device="cpp_standalone")
    assert len(pooled(runs + [compiled])) == 3    # another device's draws: a group of its own
    lif = groups[0]["ratio"]
    np.testing.assert_allclose(lif["q"], np.sqrt((0.01 + 0.04) / 0.02))
    np.testing.assert_allclose(lif["Z"], np.sqrt((0.09 + 0.01) / 0.02))
    np.testing.assert_allclose(lif["x_tilde"], np.sqrt(0.08 / 0.05))
    assert groups[1]["ratio"]["Z"] == pytest.approx(0.5)


@pytest.mark.codegen_independent
def test_worst_stage_skips_unknown_floors():
    run = _run("linear", "lif", 3, (0.1, 0.5, 0.3), (0.1, float("nan"), 0.2))
    assert worst_stage(run) == ("x_tilde", pytest.approx(1.5))
    unknown = _run("linear", "lif", 3, (0.1, 0.5, 0.3), (float("nan"),) * 3)
    stage, ratio = worst_stage(unknown)
    assert stage == "" and np.isnan(ratio)
    assert np.isnan(pooled([run])[0]["ratio"]["Z"])
