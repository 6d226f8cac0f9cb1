"""Throughput of the MJX (JAX) backend against the MuJoCo CPU backend, in env-steps per second.

One env-step is one control step (5 physics steps, 20 Hz) of one env. For each task in
``--tasks`` (reach and push by default) and batch size N in ``--num-envs``:

``mjx``
    ``gym.make_vec(task, num_envs=N, backend="mjx")`` stepped ``--steps`` times with uniform
    random actions drawn on the JAX device (autoreset NextStep, so resets are included),
    timed after the first step; arrays never leave the device.
``compile_s``
    the wall time of the first reset and step beyond a steady step: JIT compilation, paid
    once per batch size (the compiled step is shared by every task).
``cpu``
    ``gym.make_vec(task, num_envs=N)`` (:class:`~worldsim.envs.vector_env.TabletopVectorEnv`,
    MuJoCo in C on every core) on the same actions, for ``--cpu-steps`` steps.
``ratio``
    mjx / cpu.

JAX picks the device (a GPU when jax[cuda] is installed); ``jax.devices()`` is reported. The
issue's batch sizes are 256, 1024, 4096 and 16384; on a CPU-only machine MJX manages a few
hundred env-steps/s, so the default there is 32 and 256 (16384 envs take about a minute per
step). Run ``python benchmarks/mjx_throughput.py [--num-envs 256 1024 4096 16384]``; rows are
printed as they finish, and the last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import jax
import numpy as np
from common import report
from tqdm import tqdm

import worldsim  # noqa: F401  (registers the envs)

ACCELERATOR_SIZES = [256, 1024, 4096, 16384]
CPU_SIZES = [32, 256]


def time_mjx(task: str, num_envs: int, steps: int) -> dict[str, float]:
    env = gym.make_vec(f"worldsim/{task}", num_envs=num_envs, backend="mjx")
    key = jax.random.PRNGKey(0)
    actions = [jax.random.uniform(k, (num_envs, 4), minval=-1.0, maxval=1.0)
               for k in jax.random.split(key, steps + 2)]
    start = time.perf_counter()
    jax.block_until_ready(env.reset(seed=0))
    jax.block_until_ready(env.step(actions[0]))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(env.step(actions[1]))
    one = time.perf_counter() - start
    start = time.perf_counter()
    for a in actions[2:]:
        out = env.step(a)
    jax.block_until_ready(out)
    seconds = time.perf_counter() - start
    env.close()
    return {"mjx": num_envs * steps / seconds, "compile_s": max(first - one, 0.0)}


def time_cpu(task: str, num_envs: int, steps: int) -> float:
    env = gym.make_vec(f"worldsim/{task}", num_envs=num_envs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps + 1, num_envs, 4)).astype(np.float32)
    env.step(actions[0])
    start = time.perf_counter()
    for a in actions[1:]:
        env.step(a)
    seconds = time.perf_counter() - start
    env.close()
    return num_envs * steps / seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["ReachCube-v0", "PushCube-v0"], help="tasks to time")
    parser.add_argument("--num-envs", nargs="+", type=int, default=None,
                        help=f"batch sizes; default {ACCELERATOR_SIZES} on an accelerator, {CPU_SIZES} on a CPU")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed MJX steps per figure; default 200 on an accelerator, 5 on a CPU")
    parser.add_argument("--cpu-steps", type=int, default=50, help="timed steps of the MuJoCo CPU backend")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.num_envs or []) or (args.steps is not None and args.steps < 1):
        parser.error("--num-envs and --steps must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    on_cpu = jax.default_backend() == "cpu"
    sizes = args.num_envs or (CPU_SIZES if on_cpu else ACCELERATOR_SIZES)
    steps = args.steps or (5 if on_cpu else 200)
    devices = [str(d) for d in jax.devices()]
    print(f"JAX devices: {devices}")
    rows = []
    for task, n in tqdm([(t, n) for t in args.tasks for n in sizes], desc="configurations"):
        row = {"task": task, "num_envs": n, **time_mjx(task, n, steps)}
        row["cpu"] = time_cpu(task, n, args.cpu_steps)
        row["ratio"] = row["mjx"] / row["cpu"]
        rows.append(row)
        tqdm.write(f"{task:14s} N={n:6d}  mjx {row['mjx']:10.0f} env-steps/s  compile {row['compile_s']:6.1f} s  "
                   f"cpu {row['cpu']:9.0f}  ratio {row['ratio']:.4f}")
    report("mjx_throughput", {"jax_devices": devices, "jax_backend": jax.default_backend(),
                      "steps": steps, "rows": rows})


if __name__ == "__main__":
    main()
