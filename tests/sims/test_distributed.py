"""Heads split at the nuclei and run anywhere (dask), and sweeps that resume."""

import os

import numpy as np
import pytest

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.distributed import stage_seeds
from ctmhsa.sims.sweep import sweep

pytestmark = pytest.mark.distributed


KW = dict(neuron="escape", duration=0.5, warmup=0.2, seed=4, record_spikes=True)


@pytest.fixture(scope="module")
def serial(problem2):
    return simulate_mhsa(*problem2, scheduler="serial", **KW)


@pytest.mark.long   # 15 s: starts a dask LocalCluster; the split itself is tested serially below
def test_split_run_on_a_local_cluster_equals_the_single_process_run(problem2, serial):
    pytest.importorskip("distributed")
    dist = simulate_mhsa(*problem2, scheduler="local", **KW)    # LocalCluster, 2 workers
    assert set(dist.spikes) == set(serial.spikes) == {"nucleus1", "nucleus1_kv", "nucleus1_v", "l23",
                                                      "interneuron", "l5it", "l5pt", "nucleus2"}
    for pop in serial.spikes:
        assert serial.spikes[pop][0].size > 0, pop
        for k in (0, 1):
            np.testing.assert_array_equal(dist.spikes[pop][k], serial.spikes[pop][k], err_msg=pop)
    for st in serial.stages:
        np.testing.assert_array_equal(dist.stages[st], serial.stages[st], err_msg=st)


# 10 s (load 5 on 2 cores; 47 s at load 11-40): a one-worker cluster on loopback, two heads;
# long since 0.15 (the split run itself is checked above against the one-network run)
@pytest.mark.long
def test_split_run_at_a_scheduler_address_keeps_only_the_recorded_spikes(problem2, serial):
    """A cluster reached by its address (a LocalCluster on loopback standing for a remote one):
    the same spikes as the serial run; only the recorded populations' spike trains come back."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert isinstance(address, str) and address.startswith("tcp://127.0.0.1:")
        dist = simulate_mhsa(*problem2, scheduler=address, **dict(KW, record_spikes=("l23", "nucleus2")))
    assert set(dist.spikes) == {"l23", "nucleus2"}     # l5pt went to nucleus 2, not back
    for pop in dist.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(dist.spikes[pop][k], serial.spikes[pop][k], err_msg=pop)
    np.testing.assert_array_equal(dist.x_tilde, serial.x_tilde)
    assert dist.diagnostics["fano"] == pytest.approx(serial.diagnostics["fano"], rel=1e-12)


@pytest.mark.codegen_independent
def test_fano_sums_pool_like_the_concatenated_chunks():
    from ctmhsa.neurons.window import fano_factors
    from ctmhsa.neurons.window import fano_from_sums, fano_sums

    rng = np.random.default_rng(0)
    a, b = rng.poisson(3.0, (10, 7)).astype(float), rng.poisson(5.0, (10, 4)).astype(float)
    sa, sb = fano_sums({"p": a}), fano_sums({"p": b})
    pooled = fano_from_sums({"p": tuple(sa["p"][k] + sb["p"][k] for k in (0, 1))})
    assert pooled["p"] == pytest.approx(fano_factors({"p": np.concatenate([a, b], axis=1)})["p"], rel=1e-12)
    assert fano_from_sums({"q": (0.0, 0.0)}) == {"q": 1.0}


@pytest.mark.long   # 15 s with the head project cached; a cold cache compiles it (about a minute)
@pytest.mark.standalone
def test_split_run_on_the_standalone_device_compiles_once_and_matches_everywhere(problem2, serial):
    """Heads on cpp_standalone: serial and on a LocalCluster the same spikes, also on workers that
    kept their head networks from a run with another seed; the cluster runs and a run with another
    seed reuse the project the serial run compiled (no new project); escape
    cells draw the same random numbers on either device, so the runtime split run's spikes too
    (replayed there by a SpikeGeneratorGroup, here from a table: the same steps)."""
    pytest.importorskip("distributed")
    from ctmhsa.neurons.backend import cache_dir

    root = os.path.join(cache_dir(), "standalone")
    kw = dict(KW, device="cpp_standalone", threads=0)
    from distributed import Client, LocalCluster

    from ctmhsa.devices import standalone

    sa = simulate_mhsa(*problem2, scheduler="serial", **kw)
    compiled = {d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, ".compiled"))}
    # the nucleus-1 spikes are a run argument of the head project: another seed compiles nothing
    other = simulate_mhsa(*problem2, scheduler="serial", **dict(kw, seed=5))
    assert not np.array_equal(other.spikes["l5pt"][1], sa.spikes["l5pt"][1])
    # on one cluster, seed 5 then seed 4: the workers keep their head networks between the runs,
    # and the second run replays its own nucleus-1 spikes (the tables are rebuilt), not the first's
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        first = simulate_mhsa(*problem2, scheduler=client, **dict(kw, seed=5))
        assert any(client.run(lambda: bool(standalone._KEPT)).values())   # (dask decides which worker runs a head)
        dist = simulate_mhsa(*problem2, scheduler=client, **kw)
    assert {d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, ".compiled"))} == compiled
    for pop in other.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(first.spikes[pop][k], other.spikes[pop][k], err_msg=pop)
    assert sa.config["device"] == dist.config["device"] == "cpp_standalone"
    for pop in serial.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(dist.spikes[pop][k], sa.spikes[pop][k], err_msg=pop)
            np.testing.assert_array_equal(sa.spikes[pop][k], serial.spikes[pop][k], err_msg=pop)
    np.testing.assert_array_equal(dist.x_tilde, sa.x_tilde)
    # the second head of each process ran in the network its first head built (only the binary
    # ran again); without recorded trains the heads count their spikes: the same answer
    quiet = simulate_mhsa(*problem2, scheduler="serial", **dict(kw, record_spikes=()))
    for st in serial.stages:   # the same spikes; window integrals equal to rounding (C++ vs Cython)
        np.testing.assert_allclose(quiet.stages[st], serial.stages[st], rtol=1e-9, atol=1e-12, err_msg=st)
    assert quiet.diagnostics["fano"] == pytest.approx(serial.diagnostics["fano"], rel=1e-12)


def test_split_run_decodes_like_the_one_network_run(problem2, serial):
    """Same circuit, other random streams: both near their noise floors."""
    whole = simulate_mhsa(*problem2, **KW)
    for res in (serial, whole):
        met = res.metrics()
        for st in ("q", "v", "y", "v_tilde", "x_tilde"):
            assert met[st]["nrmse"] <= 2.5 * met[st]["noise_floor"] + 0.05, st
    assert serial.counts == whole.counts


def test_stage_seeds_are_distinct_and_reproducible():
    a, b = stage_seeds(4, 5), stage_seeds(5, 5)
    assert a == stage_seeds(4, 5) and len(set(a)) == 5 and not set(a) & set(b)


def test_scheduler_argument_errors(problem2):
    with pytest.raises(ValueError, match="scheduler: heads are split at the spiking levels"):
        simulate_mhsa(*problem2, neuron="rate", scheduler="serial")
    with pytest.raises(ValueError, match="scheduler: a split run has no checkpoints"):
        simulate_mhsa(*problem2, neuron="escape", scheduler="serial", device="cpp_standalone",
                      duration=1.0, checkpoints=(0.5,))
    with pytest.raises(ValueError, match="scheduler: expected None"):
        simulate_mhsa(*problem2, neuron="escape", scheduler=3)


def test_sweep_writes_items_and_resumes(problem2, tmp_path):
    X, WQ, WK, WV, WO = problem2
    items = [dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO, neuron="rate", duration=0.5, seed=s) for s in (0, 1)]
    paths = sweep(items, scheduler="serial", out_dir=str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["item_0", "item_1"]
    stamp = [os.path.getmtime(os.path.join(p, "provenance.json")) for p in paths]
    import shutil

    shutil.rmtree(paths[1])                 # as if the sweep had been killed before item 1
    again = sweep(items, scheduler="serial", out_dir=str(tmp_path))
    assert os.path.getmtime(os.path.join(again[0], "provenance.json")) == stamp[0]   # not redone
    assert os.path.isfile(os.path.join(again[1], "provenance.json"))                  # redone
    with pytest.raises(TypeError, match=r"items\[0\]: expected a dict"):
        sweep([3], scheduler="serial")


@pytest.mark.long   # 12 s: a sweep in a subprocess, killed and rerun
def test_killed_sweep_resumes_without_recomputing(tmp_path):
    """A sweep process killed after its first item: rerunning it keeps that item and completes
    the others; no half-written item looks complete."""
    import subprocess
    import sys
    import time

    out = tmp_path / "sweep"
    script = tmp_path / "run_sweep.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(__file__))!r})\n"
        "from conftest import random_problem\n"
        "from ctmhsa.sims.sweep import sweep\n"
        "X, _, WQ, WK, WV, WO = random_problem(seed=3, n=3, H=1, dk=3, dv=3, de=3)\n"
        "items = [dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO, neuron='escape', duration=0.8, warmup=0.1, seed=s)\n"
        "         for s in range(4)]\n"
        f"sweep(items, scheduler='serial', out_dir={str(out)!r})\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "item_0" / "provenance.json"
    t0 = time.time()
    while not first.exists() and time.time() - t0 < 120 and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert first.exists(), "the sweep did not finish its first item"
    done = [k for k in range(4) if (out / f"item_{k}" / "provenance.json").exists()]
    assert len(done) < 4, "the sweep finished before it was killed"
    stamp = first.stat().st_mtime
    subprocess.run([sys.executable, str(script)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert first.stat().st_mtime == stamp                          # not recomputed
    assert all((out / f"item_{k}" / "provenance.json").exists() for k in range(4))
    assert not [p for p in os.listdir(out) if p.startswith(".")]   # no temporary left behind


@pytest.mark.codegen_independent
def test_bench_cortex_rejects_bad_flags_before_running():
    import argparse

    from ctmhsa.sims.benchmarks import benchmark

    cortex = benchmark("cortex")
    parser = argparse.ArgumentParser()
    cortex.add_arguments(parser)
    assert cortex._check(parser.parse_args(["--parts", "cortex,single"])) == ["cortex", "single"]
    for argv, name in ((["--parts", "brain"], "parts"), (["--H", "0"], "H"), (["--threads", "-1"], "threads"),
                       (["--duration", "0"], "duration")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            cortex._check(parser.parse_args(argv))


@pytest.mark.codegen_independent
def test_bench_cortex_reports_the_peak_of_its_own_part():
    """The cortex part's peak is its own: 8 heads built as one network earlier in the process
    (19 GB) once hid the 100-head run's client memory."""
    from ctmhsa.sims.benchmarks.common import part_peak_rss_mb, reset_peak_rss

    if not reset_peak_rss():
        pytest.skip("this system cannot reset a process's peak memory")
    big = np.ones(2 ** 25)          # 256 MB, touched
    high = part_peak_rss_mb()
    del big
    assert reset_peak_rss()
    assert part_peak_rss_mb() < high - 200
