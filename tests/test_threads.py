"""Torch's CPU threads: the idle cores unless asked, decided once per process."""

from __future__ import annotations

import pytest
import torch

from worldsim.runtime import threads


@pytest.fixture
def fresh(monkeypatch):
    """No count decided yet in this process, torch's own count restored afterwards."""
    before, idle_cores = torch.get_num_threads(), threads.idle_cores
    monkeypatch.setattr(threads, "_decided", None)
    idle_cores.cache_clear()
    yield
    idle_cores.cache_clear()
    torch.set_num_threads(before)


@pytest.mark.parametrize("idle_shares, mask, expected", [
    ((0.99, 0.97), (0, 1), 2),        # quiet
    ((0.02, 0.95), (0, 1), 1),        # one busy neighbour on two cores
    ((0.0, 0.0), (0, 1), 1),          # every core busy: still one thread
    ((0.6, 0.6, 0.6), (0, 1, 2), 2),  # three cores 40% busy each
    ((0.0, 0.0, 1.0, 1.0), (2, 3), 2),  # busy cores outside this process's affinity mask do not count
])
def test_idle_cores_sums_the_idle_share_of_each_usable_core(fresh, monkeypatch, idle_shares, mask, expected):
    samples = iter([{core: (0, 0) for core in range(len(idle_shares))},
                    {core: (round(1000 * share), 1000) for core, share in enumerate(idle_shares)}])
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(threads, "usable_cores", lambda: list(mask))
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    assert threads.idle_cores() == expected


def test_proc_stat_is_read_per_core():
    times = threads._cpu_times()
    if times is None:
        pytest.skip("/proc/stat exists on Linux only; elsewhere idle_cores counts every usable core idle")
    assert set(threads.usable_cores()) <= set(times)
    assert all(0 <= idle <= total for idle, total in times.values())


def test_idle_cores_is_every_usable_core_without_proc_stat(fresh, monkeypatch):
    monkeypatch.setattr(threads, "_cpu_times", lambda: None)
    monkeypatch.setattr(threads, "usable_cores", lambda: [0, 1, 2])
    assert threads.idle_cores() == 3


def test_an_asked_count_is_set_and_kept_by_later_calls_without_one(fresh, monkeypatch):
    monkeypatch.setattr(threads, "idle_cores", lambda: pytest.fail("an asked count must not measure"))
    assert threads.use_torch_threads(1) == 1 and torch.get_num_threads() == 1
    assert threads.use_torch_threads() == 1  # a library entry point does not undo the caller's choice
    assert threads.use_torch_threads(2) == 2 and torch.get_num_threads() == 2


def test_none_takes_the_idle_cores_once(fresh, monkeypatch):
    calls = []
    monkeypatch.setattr(threads, "idle_cores", lambda: calls.append(1) or 1)
    assert threads.use_torch_threads(None) == 1 and torch.get_num_threads() == 1
    assert threads.use_torch_threads(None) == 1 and calls == [1]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_counts_are_refused_in_one_line(fresh, bad):
    with pytest.raises(ValueError, match=r"torch_threads=.* must be an int >= 1 \(or None: the idle cores\)"):
        threads.use_torch_threads(bad)
