"""Env-steps per second of the MuJoCo CPU, MJX and MuJoCo Warp backends, state and pixels.

One env-step is one control step (5 physics steps, 20 Hz) of one env, with uniform random
actions made where the backend keeps its arrays (numpy for MuJoCo, JAX for MJX, torch on the
device for Warp) and autoreset NextStep (resets included). For every task in ``--tasks``,
batch size in ``--num-envs``, backend in ``--backends`` and observation mode in ``--obs``
(``state``, or ``pixels``: 64x64 front-camera images plus proprio), a row holds:

``steps_per_s``
    timed over ``--steps`` steps after two untimed ones (compilation, graph capture), the
    device synchronised before the clock stops.
``first_s``
    the wall time of the first reset and step (kernel compilation or loading, JIT, graph capture).

MJX has no renderer, so its pixel rows are skipped; a backend whose package is missing is
skipped with the reason. The issue's GPU goals (one H200): >= 1M env-steps/s state
(ReachCube), >= 300k state (PushCube), >= 100k with 64x64 pixels (PushCube).

Run ``python benchmarks/backend_throughput.py`` (on a GPU: the defaults, 1,024 / 4,096 / 16,384
envs; ``--device cpu`` for Warp's CPU device). Rows print as they finish; the last line of
stdout is one JSON object with every figure, also written to
``benchmarks/results/backend_throughput.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from common import RESULTS, report

import worldsim  # noqa: F401  (registers the envs)

SIZES = [1024, 4096, 16384]
GOALS = {("ReachCube-v0", "state"): 1_000_000, ("PushCube-v0", "state"): 300_000, ("PushCube-v0", "pixels"): 100_000}
MISSING = {"mjx": ("jax", "mujoco.mjx"), "warp": ("warp", "mujoco_warp")}


def action_source(backend: str, num_envs: int, device: str):
    """A function of the step index giving uniform random actions where ``backend`` keeps its arrays."""
    if backend == "mjx":
        import jax

        key = jax.random.PRNGKey(0)
        return lambda t: jax.random.uniform(jax.random.fold_in(key, t), (num_envs, 4), minval=-1.0, maxval=1.0)
    if backend == "warp":
        generator = torch.Generator(device).manual_seed(0)
        return lambda t: torch.rand((num_envs, 4), generator=generator, device=device) * 2 - 1
    rng = np.random.default_rng(0)
    return lambda t: rng.uniform(-1, 1, (num_envs, 4)).astype(np.float32)


def synchronise(backend: str, out: Any) -> None:
    """Wait for the device to finish what the step queued."""
    if backend == "mjx":
        import jax

        jax.block_until_ready(out)
    elif backend == "warp" and torch.cuda.is_available():
        torch.cuda.synchronize()


def time_backend(task: str, backend: str, obs: str, num_envs: int, steps: int, device: str) -> dict[str, float]:
    kwargs: dict[str, Any] = {"backend": backend, "obs_mode": obs}
    if backend == "warp":
        kwargs["device"] = device
    env = gym.make_vec(f"worldsim/{task}", num_envs=num_envs, **kwargs)
    actions = action_source(backend, num_envs, device)
    start = time.perf_counter()
    env.reset(seed=0)
    synchronise(backend, env.step(actions(0)))
    first = time.perf_counter() - start
    synchronise(backend, env.step(actions(1)))
    start = time.perf_counter()
    for t in range(steps):
        out = env.step(actions(t + 2))
    synchronise(backend, out)
    seconds = time.perf_counter() - start
    env.close()
    return {"steps_per_s": num_envs * steps / seconds, "first_s": first}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["ReachCube-v0", "PushCube-v0"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=SIZES)
    parser.add_argument("--backends", nargs="+", default=["mujoco", "mjx", "warp"], choices=["mujoco", "mjx", "warp"])
    parser.add_argument("--obs", nargs="+", default=["state", "pixels"], choices=["state", "pixels"])
    parser.add_argument("--steps", type=int, default=100, help="timed steps per row (GPU backends)")
    parser.add_argument("--cpu-steps", type=int, default=10, help="timed steps per row of the MuJoCo CPU backend")
    parser.add_argument("--device", default="cuda", help="Warp's device: cuda, cuda:<i> or cpu")
    parser.add_argument("--out", type=Path, default=RESULTS / "backend_throughput.json",
                        help="the result file (a JSON of args, commit, machine and metrics)")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.num_envs) or args.steps < 1 or args.cpu_steps < 1:
        parser.error("--num-envs, --steps and --cpu-steps must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows, skipped = [], []
    for backend in args.backends:
        absent = [m for m in MISSING.get(backend, ()) if importlib.util.find_spec(m) is None]
        if absent:
            skipped.append({"backend": backend, "reason": f"{', '.join(absent)} not installed"})
            continue
        for task in args.tasks:
            for obs in args.obs:
                if backend == "mjx" and obs == "pixels":
                    continue
                for n in args.num_envs:
                    steps = args.cpu_steps if backend == "mujoco" else args.steps
                    row = {"task": task, "backend": backend, "obs": obs, "num_envs": n,
                           **time_backend(task, backend, obs, n, steps, args.device)}
                    goal = GOALS.get((task, obs)) if backend == "warp" else None
                    if goal is not None:
                        row |= {"goal": goal, "meets_goal": row["steps_per_s"] >= goal}
                    rows.append(row)
                    print(f"{backend:6s} {task:13s} {obs:6s} N={n:6d}  {row['steps_per_s']:12,.0f} env-steps/s  "
                          f"first {row['first_s']:6.1f} s", flush=True)
    result = {"device": args.device,
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "rows": rows, "skipped": skipped}
    report(args.out.stem, result, args, args.out.parent)


if __name__ == "__main__":
    main()
