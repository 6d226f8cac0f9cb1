"""The record of a co-evolution run: its finished stages and their results, in
``out/state.json``, so that a resumed run skips them, an extended one adds rounds, and an
ablation can adopt another run's round 0."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from worldsim.envs.imagination import DEFAULT_IMAGINATION, Rung
from worldsim.runtime.run_logging import to_jsonable, write_json

console = Console()
STATE_FILE = "state.json"
# The settings round 0 depends on (a run reusing another's round 0 must share them); ``part.field``
# names a field of a part of the config (its refinements and RL come after round 0).
ROUND0_FIELDS = ("base_policy", "suite", "task", "real_episodes", "demonstrations", "wm.preset", "wm.steps",
                 "wm.time_budget", "eval_episodes", "imagined_eval_episodes", "collect_deterministic",
                 "record_features", "seed")
# The settings a resumed run may change: the guard's (recorded verdicts stand, the rounds still
# to be judged use the new ones) and the final test evaluation's.
LATER_FIELDS = ("guard", "test_episodes", "videos")


class Stages:
    """The run's finished stages and their results, kept in ``out/state.json`` (written atomically
    after every stage) so that a resumed run skips them."""

    def __init__(self, out: Path, config: dict[str, Any], resume: bool) -> None:
        self.path = out / STATE_FILE
        if self.path.exists() and not resume:
            raise ValueError(f"{out} already holds a co-evolution run; pass --resume to continue it or "
                             "choose a new --out")
        if resume and not self.path.exists():
            raise ValueError(f"--resume: no {STATE_FILE} in {out}; run without --resume to start there")
        state = json.loads(self.path.read_text()) if resume else {"config": config, "stages": {}}
        if resume:
            # judged and tested after the stages they read, these apply from where the run goes on
            theirs = state["config"] = state["config"] | {k: config[k] for k in LATER_FIELDS}
            changed = [k for k in config if k not in ("resume", "progress") and theirs.get(k) != config[k]]
            if changed == ["rounds"] and config["mode"] == "coevolve" and config["rounds"] > theirs["rounds"]:
                # more rounds extend a run: its rounds stay as recorded, and its last one now also
                # collects and refines the world model for the next
                theirs["rounds"] = config["rounds"]
            elif changed:
                raise ValueError(f"cannot resume {out}: settings changed since it started ({', '.join(changed)}; "
                                 f"only a co-evolution run's rounds may grow, and {', '.join(LATER_FIELDS)} change)")
        self.state = state

    def adopt_round0(self, source: Path, r0: Path) -> None:
        """Copy round 0 of the run in ``source`` (its folder and recorded stages) into this run,
        after checking that it was made with the settings round 0 depends on."""
        state_file = source / STATE_FILE
        if not state_file.exists():
            raise ValueError(f"round0_from={str(source)!r} holds no co-evolution run ({STATE_FILE} missing)")
        theirs = json.loads(state_file.read_text())
        changed = [k for k in ROUND0_FIELDS if _setting(theirs["config"], k) != _setting(self.state["config"], k)]
        if _state_free(theirs["config"]) != _state_free(self.state["config"]):
            changed.append("imagination.rung (a 'video' run trains its world model without state)")
        if changed:
            raise ValueError(f"round0_from={str(source)!r} was run with other {', '.join(changed)}: its round 0 "
                             "is not this run's")
        done = {k: v for k, v in theirs["stages"].items() if k.startswith("round 0:")}
        if not any("world model" in k for k in done) or not any("evaluate" in k for k in done):
            raise ValueError(f"round0_from={str(source)!r} has not finished round 0")
        if not all(k in self.state["stages"] for k in done):
            if r0.exists():
                shutil.rmtree(r0)
            shutil.copytree(source / "round_0", r0)
            self.state["stages"] |= {k: _moved(v, source, self.path.parent) | {"adopted_from": str(source)}
                                     for k, v in done.items()}
            write_json(self.path, self.state)

    def seconds(self) -> float:
        """Time spent in the stages this run recorded, so that a resumed run reports the whole run's
        time, not its last session's; an adopted round 0 is the other run's time."""
        return round(sum(stage["seconds"] for stage in self.state["stages"].values() if "adopted_from" not in stage), 1)

    def run(self, name: str, folder: Path | None, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The recorded result of stage ``name``, or run ``work`` (after clearing ``folder``, the
        leftovers of an interrupted attempt) and record its result."""
        if name in self.state["stages"]:
            console.print(f"[dim]{name}: done earlier[/]")
            return self.state["stages"][name]
        console.rule(f"[bold]{name}")
        if folder is not None and folder.exists():
            shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
        start = time.time()
        result = to_jsonable(work()) | {"seconds": round(time.time() - start, 1)}
        self.state["stages"][name] = result
        write_json(self.path, self.state)
        return result


def _state_free(config: dict[str, Any]) -> bool:
    """Whether the recorded ``config``'s world models train without state (the ``video`` rung)."""
    return not Rung.from_json(_setting(config, "imagination.rung") or DEFAULT_IMAGINATION.rung).trained_on_state


def _setting(config: dict[str, Any], name: str) -> Any:
    """The recorded ``config``'s setting ``name`` (``part.field`` for a part's field; None if absent)."""
    value: Any = config
    for key in name.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _moved(value: Any, source: Path, target: Path) -> Any:
    """``value`` (a stage result) with paths under ``source`` rewritten to lie under ``target``."""
    if isinstance(value, dict):
        return {k: _moved(v, source, target) for k, v in value.items()}
    if isinstance(value, str) and value.startswith(str(source)):
        return str(target) + value[len(str(source)):]
    return value
