"""How fast each stage of the quickstart's pipeline runs beside a busy neighbour, at worldsim's defaults.

    python benchmarks/contention.py
    python benchmarks/contention.py --repeats 1 --stages train-bc train-wm

A shared machine is the common case (a laptop with a browser, a lab server, CI), and a torch
thread pool sized for idle cores runs several times slower when one of them is taken. Each stage
is one ``worldsim`` command in a fresh process, timed from launch to exit (imports and start-up
included, as a user waits for them): alone ("quiet"), then beside one single-threaded busy process
that this script starts and stops itself ("busy"), ``--repeats`` times in turn. ``ratio`` is the
quiet median time over the busy median time (1: unaffected, 0.5: twice as slow); the target is
at least 0.4 for every stage. Stages that take ``--torch-threads`` also run with one thread per
core (``--torch-threads <cores>``, torch's own default), beside the defaults, so that the gain of
choosing by idle cores (:mod:`worldsim.runtime.threads`) stands beside its cost on quiet cores.

The inputs are built first, untimed, in ``--out``: the scripted expert's demonstrations
(PushCube, pixels and state), a BC policy and a world model trained briefly on them. Writes
``benchmarks/results/contention.json``: per stage and thread setting, ``quiet_s`` and ``busy_s``
(every repeat) and ``ratio``; for the training commands also ``train_quiet_s``,
``train_busy_s`` and ``train_ratio``, their training loop alone (``train_seconds`` of the run's
``summary.json``: start-up excluded, where the thread count matters most).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro
from common import report
from rich.console import Console

console = Console(stderr=True)
STAGES: tuple[str, ...] = ("collect", "train-bc", "evaluate", "train-wm", "train-rl")
"""The quickstart's stages, one command each."""
THREADED: tuple[str, ...] = ("train-bc", "train-wm", "train-rl")
"""The stages whose command takes ``--torch-threads``."""
NEIGHBOUR = [sys.executable, "-c", "while True: pass"]
"""One single-threaded busy process."""


@dataclass
class Args:
    stages: tuple[str, ...] = STAGES
    """Stages to time (of collect, train-bc, evaluate, train-wm, train-rl)."""
    repeats: int = 2
    """Quiet and busy runs of each stage and thread setting, taken in turn."""
    demos: int = 60
    """Expert episodes: the demonstrations every stage reads."""
    bc_steps: int = 150
    """Behaviour-cloning steps of the train-bc stage."""
    wm_steps: int = 30
    """World-model steps of the train-wm stage."""
    episodes: int = 200
    """Episodes of the collect and evaluate stages."""
    rl_env_steps: int = 5120
    """Imagined env steps of the train-rl stage (GRPO on the pixels rung, 32 envs, horizon 40)."""
    cores_arm: bool = True
    """Also time the threaded stages with one torch thread per core (torch's default)."""
    out: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "worldsim_contention")
    """Where the inputs and the stages' runs go."""


def worldsim(*argv: str) -> list[str]:
    return [sys.executable, "-m", "worldsim", *argv]


def commands(args: Args, stage: str, threads: list[str]) -> list[str]:
    """The command line of one stage, reading the inputs in ``args.out``."""
    out, demos = args.out, str(args.out / "demos.h5")
    common = ["--no-progress", "--overwrite", *threads]
    if stage == "collect":
        return worldsim("collect", "--task", "PushCube-v0", "--episodes", str(args.episodes), "--noise", "0.3",
                        "--num-envs", "25", "--out", str(out / "collect.h5"), "--overwrite")
    if stage == "train-bc":
        return worldsim("train-bc", "--data", demos, "--steps", str(args.bc_steps), "--eval-episodes", "0",
                        "--device", "cpu", "--out", str(out / "bc_stage"), *common)
    if stage == "evaluate":
        return worldsim("evaluate", "--policy", str(out / "bc" / "policy"), "--episodes", str(args.episodes),
                        "--num-envs", "50", "--out", str(out / "evaluate.json"))
    if stage == "train-wm":
        return worldsim("train-wm", "--data", demos, "--steps", str(args.wm_steps), "--device", "cpu",
                        "--out", str(out / "wm_stage"), *common)
    if stage == "train-rl":
        return worldsim("train-rl", "--algo", "grpo", "--task", "PushCube-v0", "--policy", str(out / "bc" / "policy"),
                        "--world-model", str(out / "wm" / "world_model"), "--keyframes", demos, "--rung", "pixels",
                        "--obs-mode", "pixels", "--num-envs", "32", "--total-env-steps", str(args.rl_env_steps),
                        "--eval-episodes", "10", "--device", "cpu", "--out", str(out / "rl_stage"), *common)
    raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")


def run(argv: list[str]) -> tuple[float, float | None]:
    """Seconds ``argv`` took, launch to exit, and a training command's own loop seconds
    (``train_seconds`` of its ``summary.json``; None for other commands); its output is kept only
    when it fails."""
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": "egl"})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    seconds = time.perf_counter() - began
    summary = Path(argv[argv.index("--out") + 1]) / "summary.json" if argv[3].startswith("train-") else None
    return seconds, (json.loads(summary.read_text())["train_seconds"] if summary else None)


def beside_neighbour(argv: list[str]) -> tuple[float, float | None]:
    """:func:`run` while one busy process ran beside it (started a second before)."""
    neighbour = subprocess.Popen(NEIGHBOUR)
    try:
        time.sleep(1.0)
        return run(argv)
    finally:
        neighbour.kill()
        neighbour.wait()


def summarize(times: dict[str, list[tuple[float, float | None]]]) -> dict[str, object]:
    """Every repeat's seconds, quiet and busy, and the ratio of their medians; for a training
    command, the same for its training loop alone (``train_*``)."""
    row: dict[str, object] = {}
    for prefix, column in (("", 0), ("train_", 1)):
        quiet, busy = ([round(t[column], 1) for t in times[arm] if t[column] is not None] for arm in ("quiet", "busy"))
        if len(quiet) < len(times["quiet"]) or len(busy) < len(times["busy"]):
            continue  # not a training command
        row |= {f"{prefix}quiet_s": quiet, f"{prefix}busy_s": busy,
                f"{prefix}ratio": round(statistics.median(quiet) / statistics.median(busy), 2)}
    return row


def build_inputs(args: Args) -> None:
    """Demonstrations, a BC policy and a world model in ``args.out`` (skipped when present)."""
    demos = args.out / "demos.h5"
    steps = [
        (demos, worldsim("collect", "--task", "PushCube-v0", "--episodes", str(args.demos), "--noise", "0.3",
                         "--num-envs", "25", "--out", str(demos), "--overwrite")),
        (args.out / "bc" / "policy", worldsim("train-bc", "--data", str(demos), "--steps", "300", "--eval-episodes",
                                              "0", "--device", "cpu", "--out", str(args.out / "bc"), "--no-progress",
                                              "--overwrite")),
        (args.out / "wm" / "world_model", worldsim("train-wm", "--data", str(demos), "--steps", "60", "--device",
                                                   "cpu", "--out", str(args.out / "wm"), "--no-progress",
                                                   "--overwrite")),
    ]
    for made, argv in steps:
        if not made.exists():
            console.print(f"inputs: {argv[3]} ({run(argv)[0]:.0f} s)")


def main(args: Args) -> None:
    unknown = sorted(set(args.stages) - set(STAGES))
    if unknown or args.repeats < 1:
        raise SystemExit(f"error: --stages takes {', '.join(STAGES)} (not {unknown}); --repeats must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    build_inputs(args)
    cores = os.cpu_count() or 1
    arms = {"default": []} | ({f"{cores} threads": ["--torch-threads", str(cores)]} if args.cores_arm else {})
    stages: dict[str, dict[str, dict[str, object]]] = {}
    for stage in args.stages:
        for arm, threads in arms.items():
            if threads and stage not in THREADED:
                continue
            argv = commands(args, stage, threads)
            times: dict[str, list[tuple[float, float | None]]] = {"quiet": [], "busy": []}
            for _ in range(args.repeats):
                times["quiet"].append(run(argv))
                times["busy"].append(beside_neighbour(argv))
            row = summarize(times)
            stages.setdefault(stage, {})[arm] = row
            console.print(f"{stage:9s} {arm:10s} quiet {row['quiet_s']} s, busy {row['busy_s']} s: ratio "
                          f"{row['ratio']:.2f}" + (f" (training loop alone {row['train_ratio']:.2f})"
                                                   if "train_ratio" in row else ""))
    worst = min(float(per_arm["default"]["ratio"]) for per_arm in stages.values())
    report("contention", {"stages": stages, "neighbour": " ".join(NEIGHBOUR[1:]), "cores": cores,
                          "worst_default_ratio": worst, "target": 0.4}, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
