"""Environment throughput of worldsim against its baselines, in env-steps per second.

One env-step is one control step (``frame_skip`` physics steps, 20 Hz) of one environment, so
every figure is ``num_envs * batched_steps / seconds``. Each figure is timed for
``--duration`` seconds after a ``--warmup`` period, at every batch size in ``--num-envs``,
on the MjModel of ``--task`` (PushCube-v0 by default):

``worldsim_state`` (a)
    ``gym.make_vec(task, num_envs=N, obs_mode="state")``, the native batched env, stepped
    with uniform random actions in [-1, 1]. Episodes end and autoreset (NextStep) inside
    the loop, so reset cost is included.
``sync_vector`` (b)
    Gymnasium's ``SyncVectorEnv`` over N single worldsim envs
    (``vectorization_mode="sync"``), same actions: what a user gets without the native
    vector env.
``raw_rollout`` (c)
    ``mujoco.rollout`` alone on the same model, thread count (one per core) and frame skip:
    one call per control step with ``nstep=frame_skip``, random controls in the actuators'
    ``ctrlrange`` held over the frame skip, the final state fed back as the next initial
    state, and the batch restarted from reset states every ``max_episode_steps`` like the
    env's time limit. No observation, reward or reset logic: the ceiling for (a)'s design.
    The workload is close to, not identical with, (a)'s: servo targets drawn over the whole
    ctrlrange move the gripper differently from the env's 3 cm action steps.
``raw_rollout_long`` (c_long)
    The same, but one rollout call covers 50 control steps (``nstep=50*frame_skip``), which
    also removes the per-call Python and thread-pool overhead; a reference only.
``worldsim_pixels`` (d)
    The batched env with ``obs_mode="pixels"``: 64x64 front-camera images rendered for
    every env at every step, plus proprio.

Targets at N=256: a/c >= 0.8 (the env keeps most of the raw physics rate), a/b >= 3 (the
native vector env is worth having over SyncVectorEnv) and pixels >= 2000 env-steps/s.

Run ``python benchmarks/env_throughput.py [--num-envs 64 256 1024] [--duration 3]``. A table
is printed as measurements finish (progress goes to stderr); the last line of stdout is one
JSON object with every figure and the ratios a/b and a/c per batch size. The "other load"
column (``other_cpu_load`` in the JSON) is the share of the machine's CPU time that other
processes took during a measurement; figures above 5% are flagged, as they understate the
throughput and should be measured again on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

# worldsim must load before mujoco: it sets MUJOCO_GL / LP_NUM_THREADS, which are read when
# mujoco starts, and registers the envs.
# isort: off
import worldsim  # noqa: F401
import mujoco
from mujoco import rollout
# isort: on

from common import report

from worldsim.envs.arrays import ACTION_DIM
from worldsim.envs.vector_env import TabletopVectorEnv

MEASUREMENTS: tuple[str, ...] = (
    "worldsim_state", "sync_vector", "raw_rollout", "raw_rollout_long", "worldsim_pixels",
)
LONG_CONTROL_STEPS = 50
TARGET_N = 256
TARGETS = {"a_over_c": 0.8, "a_over_b": 3.0, "worldsim_pixels": 2000.0}
CONTENDED = 0.05  # other processes' share of the CPUs above which a figure is flagged


def cpu_ticks() -> tuple[int, int] | None:
    """(busy clock ticks of the whole machine, ticks of this process), or None without /proc.

    A concurrent job on a small machine can halve a figure; comparing the two counters over a
    measurement shows how much CPU went elsewhere, so such figures can be spotted and redone.
    """
    try:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    # steal counts as "elsewhere": the hypervisor gave our cores to another guest.
    return user + nice + system + irq + softirq + steal, int(fields[11]) + int(fields[12])


@dataclass(frozen=True)
class Timing:
    """``calls`` timed calls, each advancing ``env_steps_per_call`` env-steps.

    ``other_load`` is the share of all cores used by other processes meanwhile (None if unknown).
    """

    calls: int
    seconds: float
    env_steps_per_call: int
    other_load: float | None

    @property
    def rate(self) -> float:
        return self.env_steps_per_call * self.calls / self.seconds


def _run_for(step: Callable[[], None], seconds: float) -> tuple[int, float]:
    """Call ``step`` at least once and until ``seconds`` have passed; return (calls, elapsed)."""
    start = time.perf_counter()
    calls = 0
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls, elapsed


def time_steps(step: Callable[[], None], env_steps_per_call: int, duration: float, warmup: float) -> Timing:
    # Warm-up absorbs first-call costs (thread-pool start, lazy allocations, caches).
    _run_for(step, warmup)
    before = cpu_ticks()
    calls, seconds = _run_for(step, duration)
    after = cpu_ticks()
    other_load = None
    if before is not None and after is not None:
        other_ticks = (after[0] - before[0]) - (after[1] - before[1])
        capacity = seconds * (os.cpu_count() or 1) * os.sysconf("SC_CLK_TCK")
        other_load = max(0.0, other_ticks / capacity)
    return Timing(calls, seconds, env_steps_per_call, other_load)


@contextlib.contextmanager
def reset_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> Iterator[gym.vector.VectorEnv]:
    envs = gym.make_vec(env_id, num_envs=num_envs, **kwargs)
    try:
        envs.reset(seed=0)
        yield envs
    finally:
        envs.close()


def random_action_stepper(envs: gym.vector.VectorEnv, rng: np.random.Generator) -> Callable[[], None]:
    shape = (envs.num_envs, ACTION_DIM)

    def step() -> None:
        envs.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))

    return step


def time_env(env_id: str, num_envs: int, duration: float, warmup: float, **kwargs: Any) -> Timing:
    rng = np.random.default_rng(0)
    with reset_vector_env(env_id, num_envs, **kwargs) as envs:
        return time_steps(random_action_stepper(envs, rng), num_envs, duration, warmup)


@dataclass(frozen=True)
class RawSetup:
    """What the raw rollout needs from the env: its model, timing and a batch of reset states."""

    model: mujoco.MjModel
    frame_skip: int
    episode_steps: int
    initial_state: np.ndarray  # (N, nstate) FULLPHYSICS rows of freshly reset envs


def raw_setup(env_id: str, num_envs: int) -> RawSetup:
    with reset_vector_env(env_id, num_envs, obs_mode="state") as envs:
        env = envs.unwrapped
        assert isinstance(env, TabletopVectorEnv), f"{env_id} did not make worldsim's native vector env"
        return RawSetup(env.model, env.physics.frame_skip, env.max_episode_steps, env.physics.state.copy())


def time_raw_rollout(setup: RawSetup, control_steps: int, duration: float, warmup: float) -> Timing:
    """Time ``mujoco.rollout`` advancing the batch ``control_steps`` control steps per call."""
    model, fs = setup.model, setup.frame_skip
    n, nstate = setup.initial_state.shape
    nthread = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange.T
    nstep = control_steps * fs
    # The same unchecked fast path as worldsim's BatchedPhysics: full-shape, contiguous,
    # preallocated buffers, so the comparison isolates the env's own overhead.
    models = [model] * n
    state = setup.initial_state.copy()
    control = np.empty((n, nstep, model.nu))
    trajectory = np.empty((n, nstep, nstate))
    no_sensors = np.empty((n, nstep, 0))
    episode_step = 0

    with rollout.Rollout(nthread=nthread) as pool:
        datas = [mujoco.MjData(model) for _ in range(nthread)]

        def step() -> None:
            nonlocal episode_step
            # Restart at the env's time limit, so both time in-episode states of the same kind
            # (contact count, hence physics cost, drifts as the cubes get pushed around).
            if episode_step >= setup.episode_steps:
                state[:] = setup.initial_state
                episode_step = 0
            held = rng.uniform(low, high, (n, control_steps, 1, model.nu))
            control.reshape(n, control_steps, fs, model.nu)[:] = held
            pool.rollout(models, datas, state, control, nstep=nstep,
                         state=trajectory, sensordata=no_sensors, skip_checks=True)
            state[:] = trajectory[:, -1]
            episode_step += control_steps

        return time_steps(step, n * control_steps, duration, warmup)


def measurements(env_id: str, num_envs: int, duration: float, warmup: float,
                 setup: RawSetup) -> dict[str, Callable[[], Timing]]:
    """One deferred timing per entry of :data:`MEASUREMENTS`, in that order."""
    return {
        "worldsim_state": lambda: time_env(env_id, num_envs, duration, warmup, obs_mode="state"),
        "sync_vector": lambda: time_env(env_id, num_envs, duration, warmup, vectorization_mode="sync"),
        "raw_rollout": lambda: time_raw_rollout(setup, 1, duration, warmup),
        "raw_rollout_long": lambda: time_raw_rollout(setup, LONG_CONTROL_STEPS, duration, warmup),
        "worldsim_pixels": lambda: time_env(env_id, num_envs, duration, warmup, obs_mode="pixels"),
    }


def ratios(rates: dict[str, float]) -> dict[str, float]:
    return {
        "a_over_b": round(rates["worldsim_state"] / rates["sync_vector"], 3),
        "a_over_c": round(rates["worldsim_state"] / rates["raw_rollout"], 3),
    }


def print_summary(results: dict[str, dict[str, float]], ratio_table: dict[str, dict[str, float]]) -> None:
    print("\nsummary (env-steps/s; a = worldsim_state, b = sync_vector, c = raw_rollout)")
    header = f"{'N':>6}" + "".join(f"{m:>18}" for m in MEASUREMENTS) + f"{'a/b':>8}{'a/c':>8}"
    print(header)
    print("-" * len(header))
    for n, rates in results.items():
        r = ratio_table[n]
        print(f"{n:>6}" + "".join(f"{rates[m]:>18,.0f}" for m in MEASUREMENTS)
              + f"{r['a_over_b']:>8.2f}{r['a_over_c']:>8.2f}")
    key = str(TARGET_N)
    if key in results:
        checks = {
            "a/c": (ratio_table[key]["a_over_c"], TARGETS["a_over_c"]),
            "a/b": (ratio_table[key]["a_over_b"], TARGETS["a_over_b"]),
            "pixels": (results[key]["worldsim_pixels"], TARGETS["worldsim_pixels"]),
        }
        print(f"targets at N={TARGET_N}: " + ", ".join(
            f"{label} {value:,.2f} >= {target:,.4g} {'PASS' if value >= target else 'MISS'}"
            for label, (value, target) in checks.items()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0", help="task name, without 'worldsim/'")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024], metavar="N",
                        help="batch sizes to measure")
    parser.add_argument("--duration", type=float, default=3.0, help="timed seconds per measurement")
    parser.add_argument("--warmup", type=float, default=0.5, help="untimed seconds before each measurement")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0 or min(args.num_envs) < 1:
        parser.error("--duration must be > 0, --warmup >= 0 and every --num-envs >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    env_id = f"worldsim/{args.task}"
    results: dict[str, dict[str, float]] = {}
    other_load: dict[str, dict[str, float | None]] = {}
    ratio_table: dict[str, dict[str, float]] = {}
    total = len(args.num_envs) * len(MEASUREMENTS)

    print(f"{env_id}, {os.cpu_count()} CPUs, mujoco {mujoco.__version__}, "
          f"{args.duration:g} s per measurement after {args.warmup:g} s warm-up")
    print(f"{'N':>6}  {'measurement':<18}{'env-steps/s':>14}{'calls':>8}{'seconds':>9}{'other load':>12}")
    done = 0
    for n in args.num_envs:
        setup = raw_setup(env_id, n)
        rates: dict[str, float] = {}
        loads: dict[str, float | None] = {}
        for name, run in measurements(env_id, n, args.duration, args.warmup, setup).items():
            done += 1
            print(f"[{done}/{total}] N={n} {name} ...", file=sys.stderr, flush=True)
            timing = run()
            rates[name] = round(timing.rate, 1)
            load = timing.other_load
            loads[name] = None if load is None else round(load, 3)
            flag = "?" if load is None else f"{load:.0%}" + (" !" if load > CONTENDED else "  ")
            print(f"{n:>6}  {name:<18}{timing.rate:>14,.0f}{timing.calls:>8}{timing.seconds:>9.2f}{flag:>12}",
                  flush=True)
        results[str(n)] = rates
        other_load[str(n)] = loads
        ratio_table[str(n)] = ratios(rates)
        r = ratio_table[str(n)]
        print(f"{n:>6}  a/b = {r['a_over_b']:.2f}, a/c = {r['a_over_c']:.2f}", flush=True)

    print_summary(results, ratio_table)
    if any(load is not None and load > CONTENDED for loads in other_load.values() for load in loads.values()):
        print(f"! other processes used over {CONTENDED:.0%} of the CPUs during a measurement: "
              "figures marked ! are low and not comparable; rerun on an idle machine")
    report("env_throughput", {
        "task": args.task,
        "cpu_count": os.cpu_count(),
        "mujoco": mujoco.__version__,
        "duration_s": args.duration,
        "results": results,
        "ratios": ratio_table,
        "other_cpu_load": other_load,
    }, args)


if __name__ == "__main__":
    main()
