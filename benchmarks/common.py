"""What every benchmark does with its figures: print them as one JSON line (the last line of its
output) and keep that line as ``<results>/<name>.json``: the standing benchmarks' in
``benchmarks/results/``, the studies' (``benchmarks/studies/``) in ``benchmarks/studies/results/``.
Every file holds ``args`` (what the script was run with), ``commit`` (the code it ran, ``-dirty``
when the tree had uncommitted changes), ``machine`` (CPU model and cores, torch threads, GPU,
platform, date) and ``metrics`` (the figures)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
STUDY_RESULTS = Path(__file__).resolve().parent / "studies" / "results"


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: CPU model and cores, torch threads, GPU, platform, date."""
    info: dict[str, Any] = {"cpu": cpu_model(), "cpu_cores": os.cpu_count(), "platform": platform.platform(),
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        info["gpu"] = None
    return info


def commit() -> str | None:
    """The commit the code ran at (``git describe --always --dirty``), None outside a checkout."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True,
                              text=True, cwd=RESULTS.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def plain_args(args: Any) -> dict[str, Any]:
    """A script's arguments (an argparse namespace, a dataclass or a dict) as a JSON-ready dict."""
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    elif dataclasses.is_dataclass(args) and not isinstance(args, type):
        args = dataclasses.asdict(args)
    return json.loads(json.dumps(dict(args), default=str))


def report(name: str, metrics: dict[str, Any], args: Any, results: Path = RESULTS) -> dict[str, Any]:
    """Print ``{args, commit, machine, metrics}`` as one JSON line and write it to
    ``<results>/<name>.json`` (atomically: a reader never sees half a file)."""
    record = {"args": plain_args(args), "commit": commit(), "machine": machine(), "metrics": metrics}
    line = json.dumps(record, default=str)
    results.mkdir(parents=True, exist_ok=True)
    tmp = results / f".{name}.json.tmp"
    tmp.write_text(line + "\n")
    tmp.replace(results / f"{name}.json")
    print(line)
    return record


def fix_protocol(folder: Path, protocol: dict[str, Any], predates: dict[str, Any] | None = None) -> bool:
    """Fix a run's protocol before any test episode runs: write ``folder/protocol.json`` when the
    folder has none (True: a new run), else check that ``protocol`` is the one kept there (False);
    ``predates``: the values of keys a kept protocol may be older than. ``ValueError`` ("another
    protocol (<the keys that differ>) ...") otherwise: a changed protocol is a new run, in a new
    folder, on new test seeds."""
    from worldsim.runtime.run_logging import write_json

    protocol = json.loads(json.dumps(protocol))  # as the kept file reads back (tuples as lists)
    kept = folder / "protocol.json"
    if not kept.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_json(kept, protocol)
        return True
    theirs = (predates or {}) | json.loads(kept.read_text())
    changed = sorted(k for k in protocol.keys() | theirs.keys() if protocol.get(k) != theirs.get(k))
    if changed:
        raise ValueError(f"another protocol ({', '.join(changed)}): a changed protocol is a new run, with a new "
                         "--out and a new --test-seed")
    return False


def fixed_protocol(parser: argparse.ArgumentParser, args: Any, protocol: dict[str, Any],
                   predates: dict[str, Any] | None = None) -> bool:
    """:func:`fix_protocol` in ``args.out`` for a study's command line: True for a new run (its
    protocol to be reported before any episode runs); another protocol kept there is the
    parser's error."""
    try:
        return fix_protocol(args.out, protocol, predates)
    except ValueError as error:
        parser.error(f"{args.out} holds {error}")


def checked_recipe(parser: argparse.ArgumentParser, make: Any) -> Any:
    """The RL recipe (an ``RLRounds``) ``make()`` builds from a study's flags, its errors the
    parser's: a bad value, or GRPO's groups not dividing the envs."""
    try:
        recipe = make()
    except ValueError as error:
        parser.error(str(error))
    if not recipe.groups_divide_envs:
        parser.error(f"--num-envs {recipe.num_envs}: GRPO's groups of --group-size {recipe.group_size} must divide it")
    return recipe


def check_only_seeds(parser: argparse.ArgumentParser, args: Any) -> None:
    """``--only-seeds`` must name seeds of ``--seeds`` (the parser's error otherwise)."""
    if args.only_seeds and not set(args.only_seeds) <= set(args.seeds):
        parser.error(f"--only-seeds {args.only_seeds} are not all among --seeds {args.seeds}")


def seed_records(args: Any, run_seed: Any) -> list[dict[str, Any]] | None:
    """Run ``run_seed(args, seed)`` for each seed of ``args.only_seeds`` (every one of
    ``args.seeds`` without it); then, unless only some seeds ran, every seed's record as
    ``run_seed`` left it in ``args.out/seed_<seed>.json``, for the study to gather."""
    for seed in args.only_seeds or args.seeds:
        run_seed(args, seed)
    if args.only_seeds is not None:
        return None
    return [json.loads((args.out / f"seed_{seed}.json").read_text()) for seed in args.seeds]


def noisy_expert(task: str, noise: float, grasp_noise: float, epsilon: float = 0.0, grasp_epsilon: float = 0.0,
                 seed: int = 0) -> Any:
    """The scripted expert for ``task`` with displacement noise and a share of random actions,
    the smaller ``grasp_*`` ones for the grasping families (pick-and-place, stack): grasping is
    precise, and at noise 0.1 the expert already fails three times in four."""
    from worldsim.envs.tasks import get_task
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    grasping = get_task(task).grasping
    return ScriptedExpert(ScriptedExpertConfig(task, grasp_noise if grasping else noise,
                                               grasp_epsilon if grasping else epsilon, seed))


class GpuBusy:
    """The share of time a CUDA GPU was running kernels while a block ran: a thread reads
    ``torch.cuda.utilization()`` (NVML's share of the last sample period with a kernel running)
    every ``every`` seconds, with its ``time.time()``. :meth:`percent` is their mean, ``None``
    without CUDA; a GPU starved by host-side work reads low however fast its kernels are."""

    def __init__(self, every: float = 0.25) -> None:
        import threading

        import torch

        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._cuda = torch.cuda.is_available()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import time

        import torch

        while not self._stop.wait(self.every):
            self.samples.append((time.time(), int(torch.cuda.utilization())))

    def __enter__(self) -> GpuBusy:
        if self._cuda:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._stop.set()
            self._thread.join()

    def percent(self, since: float = float("-inf"), until: float = float("inf")) -> float | None:
        """The mean reading taken between ``since`` and ``until`` (``time.time()`` stamps)."""
        readings = [r for t, r in self.samples if since < t <= until]
        return round(sum(readings) / len(readings), 1) if readings else None


def aids_of(imagination: Any, world_models: list[str | Path]) -> list[str]:
    """What imagining with ``imagination`` (an :class:`~worldsim.envs.imagination.ImaginationConfig`)
    in the world models saved at ``world_models`` (folders or ``train-wm`` runs, one per seed) takes
    from the simulator and from hand-written code, as each was built
    (:func:`~worldsim.envs.imagination.imagination_aids`): every aid any of them took, in order."""
    from worldsim.envs.imagination import imagination_aids
    from worldsim.world_models import WorldModel

    return list(dict.fromkeys(aid for path in world_models
                              for aid in imagination_aids(imagination, WorldModel.from_pretrained(path))))
