"""A spiking run whose output is mostly spike-count noise says so (NoiseFloorWarning)."""

import warnings

import numpy as np
import pytest

from ctmhsa.mapping.decode import count_noise_floor
from ctmhsa.mapping.noise import NOISE_DOMINATED, NoiseFloorWarning, warn_noise_dominated


@pytest.mark.codegen_independent
def test_the_warning_compares_the_floor_with_the_outputs_spread():
    ref = np.array([[1.0, -1.0], [2.0, 0.0]])              # spread (std) 1.118
    small = count_noise_floor(np.full((2, 2), 0.25), None, ref)   # 0.5 / 1.118 = 0.45
    big = count_noise_floor(np.full((2, 2), 4.0), None, ref)      # 2 / 1.118 = 1.79
    assert big == pytest.approx(2.0 / np.std(ref)) and NOISE_DOMINATED == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseFloorWarning)
        for quiet in (small, None, float("nan"), NOISE_DOMINATED):
            warn_noise_dominated(quiet, "escape", "x̃", "1 s window")
    with pytest.warns(NoiseFloorWarning, match=r"^escape run: x̃'s spike-count noise floor is 1\.79 times its spread "
                                               r"\(NRMSE, 1 s window\)"):
        warn_noise_dominated(big, "escape", "x̃", "1 s window")


@pytest.mark.brian2
def test_a_noise_dominated_spiking_run_warns_and_a_clean_one_does_not():
    """Weights at scale 0.01 leave x̃ far below its count noise: a warning names the floor; the
    same problem at scale 1 and a 2 s window does not warn."""
    from ctmhsa.sims import simulate_mhsa

    rng = np.random.default_rng(7)
    X = rng.normal(size=(3, 3))
    W = [rng.normal(size=(1, 3, 3)) / np.sqrt(3) for _ in range(3)]
    WO = rng.normal(size=(1, 3, 3)) / np.sqrt(3)
    with pytest.warns(NoiseFloorWarning, match="noise floor is .* times its spread") as rec:
        res = simulate_mhsa(X, *(0.01 * w for w in W), WO, neuron="escape", duration=0.5, seed=1)
    # the warning points at the caller's line, not into the package
    assert [r.filename for r in rec if issubclass(r.category, NoiseFloorWarning)] == [__file__]
    assert res.metrics()["x_tilde"]["noise_floor"] > NOISE_DOMINATED
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseFloorWarning)
        res = simulate_mhsa(X, *W, WO, neuron="escape", duration=2.0, seed=1)
    assert res.metrics()["x_tilde"]["noise_floor"] < NOISE_DOMINATED


@pytest.mark.brian2
def test_a_noise_dominated_stream_warns():
    """A stream's presentations pooled: at weight scale 0.01 its x̃ is mostly count noise, and the
    warning names the windows per presentation."""
    from ctmhsa.sims import simulate_mhsa

    rng = np.random.default_rng(7)
    X = rng.normal(size=(2, 3, 3))
    W = [0.01 * rng.normal(size=(1, 3, 3)) / np.sqrt(3) for _ in range(3)]
    WO = rng.normal(size=(1, 3, 3)) / np.sqrt(3)
    with pytest.warns(NoiseFloorWarning, match="per presentation") as rec:
        simulate_mhsa(X, *W, WO, neuron="escape", presentation=0.3, seed=1)
    assert [r.filename for r in rec if issubclass(r.category, NoiseFloorWarning)] == [__file__]

