"""``worldsim detect``: run failure detectors on recorded rollouts under the SAFE protocol.

Reads an episode file written by ``worldsim collect --record-features``, fits, calibrates and
tests every detector on every seed (:mod:`~worldsim.failure.protocol`), and writes to ``--out``:
``results.json`` (every metric, seed and alpha), ``table.md``, ``roc.png``, ``sweep.png``,
``videos/`` (annotated rollouts of the best detectors) and ``detectors/<name>/`` (each detector
fitted and calibrated on the first seed, ready for :class:`~worldsim.failure.DetectorWrapper`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro
from rich.console import Console
from tqdm.auto import tqdm

from worldsim.data.datasets import EpisodeReader
from worldsim.envs.tasks import get_suite, get_task
from worldsim.failure.detectors import DETECTORS, make_detector
from worldsim.failure.protocol import (
    DEFAULT_SWEEP,
    DetectorResult,
    ProtocolConfig,
    check_calibration,
    evaluate_detector,
)
from worldsim.failure.report import annotated_videos, plot_roc, plot_sweep, results_markdown, results_table
from worldsim.failure.rollouts import load_rollouts
from worldsim.runtime.run_logging import to_jsonable, write_json

ALL = ",".join(DETECTORS)


def parse_detectors(spec: str) -> list[str]:
    """``"safe-mlp,fiper"`` -> names, each known (KeyError naming the unknown one otherwise)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--detectors {spec!r} names no detector; known: {ALL}")
    for name in names:
        if name not in DETECTORS:
            raise KeyError(f"unknown detector {name!r} in --detectors; known: {ALL}")
    return list(dict.fromkeys(names))


@dataclass
class Detect:
    """Evaluate failure detectors on recorded rollouts (SAFE protocol: seen/unseen tasks, CP)."""

    rollouts: Path
    """Episode file from `worldsim collect --record-features`."""
    detectors: str = ALL
    """Comma-separated detector names."""
    seen_tasks: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Task trained and calibrated on (repeat the flag)."""
    unseen_tasks: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Task only tested on (repeat the flag)."""
    suite: str | None = None
    """Take the seen/unseen split of this suite (instead of --seen-tasks/--unseen-tasks)."""
    alpha: float = 0.1
    """Allowed false-alarm rate on successes."""
    cp: Literal["functional", "constant"] = "functional"
    """Conformal calibration: time-varying band or one constant."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds (split + fit each)."""
    videos: int = 4
    """Annotated rollout videos per detector, for the best two by seen ROC-AUC (0: none)."""
    out: Path = Path("runs/detect")
    """Where results go."""

    def protocol(self, tasks_in_file: list[str]) -> ProtocolConfig:
        if self.suite and (self.seen_tasks or self.unseen_tasks):
            raise ValueError("give either --suite or --seen-tasks/--unseen-tasks, not both")
        if self.suite:
            suite = get_suite(self.suite)
            seen, unseen = suite.seen, suite.unseen
        else:
            seen = tuple(get_task(t).name for t in self.seen_tasks)
            unseen = tuple(get_task(t).name for t in self.unseen_tasks)
            if not seen:  # default: every task in the file is seen
                seen = tuple(t for t in tasks_in_file if t not in unseen)
        return ProtocolConfig(
            seen_tasks=seen,
            unseen_tasks=unseen,
            alpha=self.alpha,
            cp=self.cp,
            seeds=self.seeds,
            sweep=tuple(sorted({*DEFAULT_SWEEP, self.alpha})),
        )

    def run(self) -> None:
        console = Console()
        names = parse_detectors(self.detectors)
        if self.videos < 0:
            raise ValueError(f"--videos {self.videos} must be >= 0")
        rollouts = load_rollouts(self.rollouts)
        config = self.protocol(sorted({r.task for r in rollouts}))
        joint = any(d.joint_calibration and len(d.components) > 1 for d in map(make_detector, names))
        check_calibration(rollouts, config, joint)
        if self.videos:
            with EpisodeReader(self.rollouts) as reader:
                if "image" not in reader.obs_keys:
                    raise ValueError(
                        f"{self.rollouts} holds no camera images (obs_mode 'state'): "
                        f"pass --videos 0, or collect with pixels"
                    )
        failures = sum(not r.success for r in rollouts)
        console.print(
            f"{len(rollouts)} rollouts ({failures} failures) of {len({r.task for r in rollouts})} tasks; "
            f"seen {list(config.seen_tasks)}, unseen {list(config.unseen_tasks)}"
        )
        results: dict[str, DetectorResult] = {}
        start = time.perf_counter()
        for name in tqdm(names, desc="detectors", unit="detector"):
            results[name] = evaluate_detector(name, rollouts, config)
            results[name].detector.save(self.out / "detectors" / name)
        document = {
            "rollouts": str(self.rollouts),
            "protocol": to_jsonable(config),
            "episodes": len(rollouts),
            "failures": failures,
            "seconds": round(time.perf_counter() - start, 1),
            "detectors": {n: r.to_json() for n, r in results.items()},
        }
        write_json(self.out / "results.json", document)
        (self.out / "table.md").write_text(results_markdown(results, self.alpha))
        plot_roc(results, self.out / "roc.png")
        plot_sweep(results, self.out / "sweep.png")
        if self.videos:
            ranked = sorted(results, key=lambda n: -_seen_auc(results[n]))[:2]
            for name in ranked:
                annotated_videos(results[name], self.rollouts, self.out / "videos", self.videos)
        console.print(results_table(results, self.alpha))
        console.print(
            f"results -> {self.out}/ (results.json, table.md, roc.png, sweep.png, videos/, detectors/)"
        )
        print(
            json.dumps(
                {
                    n: {s: round(v["roc_auc"]["mean"], 3) for s, v in r.summary().items()}
                    for n, r in results.items()
                }
            )
        )


def _seen_auc(result: DetectorResult) -> float:
    value = result.summary().get("seen", {}).get("roc_auc", {}).get("mean", float("nan"))
    return value if value == value else -1.0
