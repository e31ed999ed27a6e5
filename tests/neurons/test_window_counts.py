"""A compiled stream's windows read from its spikes in blocks (window_counts) against the
cumulative counts before every mark (counts_before) that they replace."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctmhsa.neurons.window import (chunk_ids, counts_before, fano_sums, stream_counted, window_counts,
                                   window_snapshots)

pytestmark = pytest.mark.codegen_independent


def _stream(seed, count, chunks, N, lag, chunk, spikes):
    """Marks of ``count`` windows (``lag`` steps after each presentation's start, ``chunks``
    chunks of ``chunk`` steps, some empty where ``chunk`` is 0) and ``spikes`` random spikes in
    time order, before, between and after the windows."""
    rng = np.random.default_rng(seed)
    period = lag + chunks * chunk + rng.integers(0, 3)
    marks = np.array([[k * period + lag + j * chunk for j in range(chunks + 1)] for k in range(count)], np.int64)
    steps = np.sort(rng.integers(-3, count * period + 4, spikes))
    return rng.integers(0, N, spikes), steps, marks


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), count=st.integers(1, 9), chunks=st.integers(1, 6), N=st.integers(1, 7),
       lag=st.integers(0, 5), chunk=st.integers(0, 4), spikes=st.integers(0, 400), block=st.integers(1, 200))
def test_window_counts_equal_the_cumulative_counts(seed, count, chunks, N, lag, chunk, spikes, block):
    """Window totals and Fano sums equal counts_before's differences and fano_sums on its chunk
    counts, for any block size (one window per block up to all), empty chunks, spikes in the lags
    and outside the stream, and one chunk (nan variance)."""
    cells, steps, marks = _stream(seed, count, chunks, N, lag, chunk, spikes)
    cum = counts_before(cells, steps, N, marks)
    totals, (var, mean) = window_counts(cells, steps, N, marks, block=block)
    np.testing.assert_array_equal(totals, cum[:, -1] - cum[:, 0])
    diff = np.diff(cum, axis=1)
    ref_var, ref_mean = fano_sums({"p": diff})["p"] if chunks > 1 else (np.nan, diff.mean(axis=-2).sum())
    assert mean == pytest.approx(ref_mean, rel=1e-12, abs=1e-12)
    if chunks > 1:
        assert var == pytest.approx(ref_var, rel=1e-9, abs=1e-9)
    else:
        assert np.isnan(var)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), count=st.integers(1, 9), chunks=st.integers(1, 6), N=st.integers(1, 7),
       lag=st.integers(0, 5), chunk=st.integers(0, 4), spikes=st.integers(0, 400))
def test_the_cells_own_counters_count_what_the_spike_times_give(seed, count, chunks, N, lag, chunk, spikes):
    """A compiled stream's cells count their windows themselves (each step's chunk from
    chunk_ids, the reset's counters of COUNTER_RESET, the window count sampled at each window's
    opening and end): stream_counted gives window_counts' totals and Fano sums, empty chunks,
    spikes in the lags and outside the stream included."""
    cells, steps, marks = _stream(seed, count, chunks, N, lag, chunk, spikes)
    t0 = 3                                                   # (the earliest spike is at step -3)
    ids = chunk_ids(marks, t0, int(steps.max(initial=0)) + t0 + 5)
    n_win, n_chunk, k_chunk, s2 = (np.zeros(N) for _ in range(4))
    for c, s in zip(cells, steps):                           # COUNTER_RESET, spike by spike in time order
        k_now = ids[t0 + s]
        new = float(k_now != k_chunk[c])
        s2[c] += new * n_chunk[c] ** 2
        n_chunk[c] = n_chunk[c] * (1 - new) + float(k_now > 0)
        k_chunk[c] = k_now
        n_win[c] += float(k_now > 0)
    inside, bounds, at_bounds = ids[t0 + steps] > 0, marks[:, [0, -1]], np.zeros((count, 2, N))
    for w in range(count):                                   # a sample at a boundary holds the steps before it
        for j in range(2):
            at_bounds[w, j] = np.bincount(cells[inside & (steps < bounds[w, j])], minlength=N)
    totals, (var, mean) = stream_counted(at_bounds, s2, n_chunk, chunks)
    ref_totals, (ref_var, ref_mean) = window_counts(cells, steps, N, marks)
    np.testing.assert_array_equal(totals, ref_totals)
    np.testing.assert_array_equal(at_bounds[-1, 1], n_win)
    assert mean == pytest.approx(ref_mean, rel=1e-12, abs=1e-12)
    if chunks > 1:
        assert var == pytest.approx(ref_var, rel=1e-9, abs=1e-9)
    else:
        assert np.isnan(var) and np.isnan(ref_var)


def test_window_counts_sort_spikes_out_of_time_order():
    cells, steps, marks = _stream(4, 6, 3, 5, 2, 3, 300)
    order = np.random.default_rng(0).permutation(len(steps))
    a = window_counts(cells, steps, 5, marks, block=15)
    b = window_counts(cells[order], steps[order], 5, marks, block=15)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == pytest.approx(b[1], rel=1e-12)


def test_window_counts_refuse_decreasing_marks():
    with pytest.raises(ValueError, match="marks"):
        window_counts([0], [1], 1, [[0, 5], [3, 8]])


def test_window_snapshots_read_totals_and_integrals():
    totals = {"p": np.array([[2.0, 0.0], [1.0, 3.0]])}
    acc = {"p": {"r": np.array([[[0.0, 0.0], [1.0, 2.0]], [[1.0, 2.0], [1.5, 4.0]]])}}
    (T0, s0), (T1, s1) = window_snapshots(totals, acc, 0.5)
    assert T0 == T1 == 0.5
    np.testing.assert_array_equal(s1["p"]["count"], [1.0, 3.0])
    np.testing.assert_allclose(s1["p"]["rate"], [2.0, 6.0])
    np.testing.assert_allclose(s0["p"]["r"], [2.0, 4.0])
    np.testing.assert_allclose(s1["p"]["r"], [1.0, 4.0])
