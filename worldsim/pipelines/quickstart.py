"""``worldsim quickstart``: the whole pipeline, small, on CPU, with one report at the end.

1. **demonstrations**: the scripted expert (with action noise) records ``demos`` episodes;
2. **behaviour cloning**: TinyVLA learns from them (``bc_steps``);
3. **co-evolution, one round** (:mod:`worldsim.pipelines.coevolve`): the BC policy collects
   ``real_episodes`` real episodes (with its features, for step 6); a world model trains on
   them and the demonstrations (``wm.steps``); GRPO post-trains the policy in imagination
   (``rl.env_steps``); the BC and the post-trained policy are evaluated in physics on the same
   ``eval_episodes`` episodes (paired starts, :mod:`worldsim.evaluation.compare`) and in
   imagination;
4. **world-model fidelity** on ``heldout_episodes`` new real episodes of the BC policy, balanced
   between successes and failures when both occur (:mod:`worldsim.world_models.evaluate`);
5. side-by-side videos of the final policy, real | imagined;
6. **failure detection** (:mod:`worldsim.failure`): detectors fitted and calibrated on the BC
   policy's real rollouts, scored on held-out ones;
7. ``report.md`` in ``out``: what each stage measured, with intervals, base rates, the budgets
   actually run, and links to every plot and video.

Every budget is a number of steps, so the same seed gives the same report on any machine; the
optional time budgets are safety nets that say loudly when they cut a stage (and the report
repeats it). Torch uses ``torch_threads`` threads (default: the cores idle when the run starts,
:mod:`worldsim.runtime.threads`). Every stage is recorded
in ``out/coevolve/state.json`` or by its output file, so ``--resume`` continues an interrupted run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.tasks import get_task
from worldsim.failure.detect import parse_detectors
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds
from worldsim.pipelines.quickstart_report import detection_summary, write_report
from worldsim.runtime.checkpoint import CHECKPOINT_FILE
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.threads import check_torch_threads, use_torch_threads
from worldsim.runtime.validation import positive_ints

console = Console()


@dataclass
class QuickstartConfig:
    """The whole pipeline at small scale (:func:`quickstart`)."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = (
        "task", "demos", "bc_steps", "real_episodes", "eval_episodes", "imagined_eval_episodes", "heldout_episodes",
        "detectors", "out", "resume", "seed", "torch_threads", "progress", "imagination")
    """The fields that are flags; the rest (the world model's and GRPO's budgets) a config file sets."""

    task: str = "PushCube-v0"
    """Task (see `worldsim list-envs`)."""
    demos: int = 100
    """Scripted-expert demonstrations for behaviour cloning."""
    bc_steps: int = 1500
    """Behaviour-cloning optimiser steps."""
    real_episodes: int = 100
    """Real episodes the BC policy collects for the world model (and the failure detectors)."""
    eval_episodes: int = 200
    """Real evaluation episodes per policy: the same episodes for both (a paired comparison)."""
    imagined_eval_episodes: int = 32
    """Imagined evaluation episodes per policy."""
    heldout_episodes: int = 60
    """New real episodes of the BC policy on which the world model's fidelity is measured."""
    detectors: str = "safe-mlp,stac,knn,action-variance"
    """Failure detectors to compare (see `worldsim detect --help`)."""
    out: Path = Path("runs/quickstart")
    """Run folder; report.md is the place to start."""
    resume: bool = False
    """Continue an interrupted run in --out."""
    seed: int = 0
    """Seed of everything."""
    torch_threads: int | None = None
    """Torch CPU threads (None: the cores idle when the run starts)."""
    progress: bool = True
    """Show progress bars."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """How GRPO imagines and what the imagined evaluations show the policy (the world model is
    the one this run trains, on the CPU)."""
    wm: WorldModelRounds = field(default_factory=lambda: WorldModelRounds(steps=800))
    """The world model's training: 800 optimiser steps (the learning-rate schedule spans them); a
    time budget is a safety net that stops it (the report says so). One round: no refinement."""
    rl: RLRounds = field(default_factory=lambda: RLRounds(env_steps=12_800, num_envs=32, group_size=8))
    """GRPO in imagination: 12,800 imagined env steps, 10 iterations of 32 episodes of 40 steps; a
    time budget is a safety net that stops it (the report says so)."""

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": ("world_model", "keyframes", "device"),
                                                             "wm": ("refine_steps",), "rl": ("algo",)}
    """The run trains its own world model once (no refinement), takes keyframes from its own real
    episodes, on the CPU, and post-trains with GRPO."""

    def __post_init__(self) -> None:
        self.task = get_task(self.task).name
        positive_ints(self, ("demos", "bc_steps", "real_episodes", "eval_episodes", "imagined_eval_episodes",
                             "heldout_episodes"))
        check_torch_threads(self.torch_threads)
        if self.rl.algo != "grpo":  # its report is GRPO's
            raise ValueError(f"rl.algo={self.rl.algo!r}: the quickstart runs GRPO (`worldsim coevolve --rl.algo ppo` "
                             "runs PPO)")
        parse_detectors(self.detectors)


DEFAULT_MINUTES = 6.5
"""Minutes the default budgets take on 2 quiet CPU cores with 2 torch threads: the results page's
fresh-clone runs (5.7) and the two sampled evaluations of 200 episodes added since (about 50 s);
slower hosts, or cores shared with other jobs, take several times as long."""
WORLD_MODEL_SHARE = 0.5
"""Share of that time the world model's training takes (it scales with ``wm.steps``); the other
budgets are taken to share the rest equally."""
_SCALED = ("demos", "bc_steps", "real_episodes", "rl.env_steps", "eval_episodes", "imagined_eval_episodes",
           "heldout_episodes")


def estimate_minutes(config: QuickstartConfig) -> float:
    """The minutes :func:`quickstart` should take on 2 quiet CPU cores: :data:`DEFAULT_MINUTES`
    scaled by each budget's ratio to its default, weighted by :data:`WORLD_MODEL_SHARE` (a rough
    guide, printed when a run starts)."""
    default = QuickstartConfig()
    rest = sum(attrgetter(name)(config) / attrgetter(name)(default) for name in _SCALED) / len(_SCALED)
    return DEFAULT_MINUTES * (WORLD_MODEL_SHARE * config.wm.steps / default.wm.steps
                              + (1 - WORLD_MODEL_SHARE) * rest)


def quickstart(config: QuickstartConfig) -> dict[str, Any]:
    """Run the stages of the module docstring into ``config.out`` (refused when not empty, unless
    ``resume``: finished stages are then skipped); returns the summary ``summary.json`` holds."""

    from worldsim.data.collect import collect_episodes
    from worldsim.failure.detect import DetectionConfig, run_detection
    from worldsim.pipelines.coevolve import CoevolveConfig, coevolve
    from worldsim.policies import load_policy
    from worldsim.training.bc import BCConfig, train_bc
    from worldsim.world_models.evaluate import evaluate_world_model

    out = config.out
    if out.exists() and any(out.iterdir()) and not config.resume:
        raise ValueError(f"{out} is not empty: pass --resume to continue that run, or a new --out")
    threads = use_torch_threads(config.torch_threads)  # stages given None keep this count
    if not config.resume:
        minutes = max(1, round(estimate_minutes(config)))
        console.print(f"quickstart: about {minutes} minute{'s' if minutes > 1 else ''} on 2 quiet CPU cores (the "
                      f"default budgets take {DEFAULT_MINUTES} there, scaled by these budgets); longer on shared cores")
    # Stage timings persist, so a resumed run still reports what every stage took.
    timing_file = out / "timings.json"
    timings = json.loads(timing_file.read_text()) if config.resume and timing_file.exists() else {}

    def stage(name: str, done: Path, work: Callable[[], Any], result: Callable[[], str] | None = None) -> None:
        """Run ``work`` unless a resumed run finished it; then say what it gave (``result``)."""
        if config.resume and done.exists():
            console.print(f"[dim]{name}: done earlier[/]")
            return
        console.rule(f"[bold]quickstart: {name}")
        began = time.time()
        work()
        timings[name] = round(time.time() - began, 1)
        write_json(timing_file, timings)
        if result is not None:
            console.print(f"{name}: {result()}")

    demos = out / "data" / "demos.h5"
    stage("expert demonstrations", demos, lambda: expert_demonstrations(
        config.task, config.demos, demos, config.seed, config.progress), lambda: _describe_outcomes(demos))
    bc = out / "bc"
    resume_bc = config.resume and (bc / CHECKPOINT_FILE).exists()
    stage("behaviour cloning", bc / "summary.json", lambda: train_bc(BCConfig(
        data=demos, out=bc, steps=config.bc_steps, seed=config.seed, torch_threads=config.torch_threads,
        resume=resume_bc, overwrite=not resume_bc, progress=config.progress)))
    coevolution = CoevolveConfig(
        base_policy=bc / "policy", task=config.task, demonstrations=demos, real_episodes=config.real_episodes,
        rounds=1, wm=config.wm, rl=config.rl, eval_episodes=config.eval_episodes,
        imagined_eval_episodes=config.imagined_eval_episodes, record_features=True, videos=2, out=out / "coevolve",
        resume=config.resume and (out / "coevolve" / "state.json").exists(), seed=config.seed, device="cpu",
        torch_threads=config.torch_threads, progress=config.progress,
        imagination=config.imagination.replace(device="cpu"))
    stage("world model + RL in imagination", out / "coevolve" / "results.json", lambda: coevolve(coevolution))
    results = json.loads((out / "coevolve" / "results.json").read_text())
    readings = out / "readings.json"
    stage("sampled actions", readings, lambda: write_json(readings, sampled_readings(config, results)),
          lambda: ", ".join(f"{name} {100 * r['success_rate']:.1f}%" for name, r in
                            json.loads(readings.read_text()).items()))
    world_model = Path(results["rounds"][-1].get("world_model") or results["rounds"][0]["world_model"])

    heldout = out / "data" / "heldout.h5"
    policy = load_policy(bc / "policy").eval()
    stage("held-out real episodes", heldout, lambda: collect_episodes(
        [config.task], lambda t: policy, config.heldout_episodes, heldout, num_envs=min(config.heldout_episodes, 30),
        seed=config.seed + 50_000, obs_mode="pixels+state", progress=config.progress),
        lambda: _describe_outcomes(heldout))
    with_both = set(_outcomes(heldout)) == {True, False}
    stage("world-model fidelity", out / "fidelity" / "fidelity.json", lambda: evaluate_world_model(
        world_model, heldout, balance=with_both, imagination=config.imagination.replace(device="cpu"),
        out=out / "fidelity", videos=2,
        seed=config.seed, progress=config.progress), lambda: _describe_fidelity(out / "fidelity" / "fidelity.json"))
    detect = out / "detect"

    def detection() -> None:
        try:
            run_detection(DetectionConfig(
                data=out / "coevolve" / "round_0" / "data.h5", detectors=config.detectors, seen_tasks=(config.task,),
                alpha=0.2, cp="constant", seeds=(0, 1, 2), videos=2, out=detect))
        except ValueError as error:  # too few successes or failures to fit, calibrate and test on
            console.print(f"[yellow]failure detection skipped:[/] {error}")
            write_json(detect / "skipped.json", {"reason": str(error)})

    stage("failure detection", detect / "results.json", detection)
    summary = summarize(config, timings, sum(timings.values()), threads)
    write_report(config.out, summary)
    return summary


def sampled_readings(config: QuickstartConfig, results: dict[str, Any]) -> dict[str, Any]:
    """The BC and post-trained policies read with sampled actions, on the same real episodes as
    co-evolution's evaluation with their mean actions, so that each policy can be read at its
    better reading: sampling alone can lift a BC policy."""
    from worldsim.evaluation.evaluate import evaluate_in_physics
    from worldsim.evaluation.rank import REAL_EVAL_SEED_OFFSET
    from worldsim.policies import load_policy

    readings = {}
    for name, row in (("bc", results["rounds"][0]), ("final", results["rounds"][-1])):
        evaluation = evaluate_in_physics(load_policy(row["policy"]), [config.task], config.eval_episodes,
                                         seed=config.seed + REAL_EVAL_SEED_OFFSET, deterministic=False)
        readings[name] = {"success_rate": evaluation["success_rate"],
                          "outcomes": evaluation["per_task"][config.task]["outcomes"]}
    return readings


def best_readings(results: dict[str, Any], readings: dict[str, Any], task: str) -> dict[str, Any]:
    """Each policy (BC, the post-trained one) at its better reading on the evaluation episodes,
    mean action or sampled (:func:`~worldsim.evaluation.compare.better_reading`), and the paired
    comparison of the two."""
    from worldsim.evaluation.compare import better_reading, paired_comparison

    chosen, outcomes = {}, {}
    for name, row in (("bc", results["rounds"][0]), ("final", results["rounds"][-1])):
        read = {"mean": row["real"]["per_task"][task]["outcomes"], "sampled": readings[name]["outcomes"]}
        chosen[name] = better_reading(sum(read["mean"]), sum(read["sampled"]))
        outcomes[name] = read[chosen[name]]
    return {"readings": chosen, "comparison": paired_comparison(outcomes["bc"], outcomes["final"]),
            "sampled_success": {name: r["success_rate"] for name, r in readings.items()}}


def expert_demonstrations(task: str, episodes: int, out: Path, seed: int, progress: bool = True) -> None:
    """The quickstart's demonstrations: ``episodes`` episodes (pixels + state) of ``task``'s
    scripted expert with its demonstration noise (:func:`~worldsim.policies.expert.demonstration_noise`)."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.policies.expert import demonstration_noise

    noise = demonstration_noise(task)
    collect_episodes([task], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=noise, seed=seed)), episodes,
                     out, num_envs=min(episodes, 25), seed=seed, obs_mode="pixels+state", progress=progress)


def _outcomes(path: Path) -> list[bool]:
    from worldsim.data.reader import EpisodeReader

    with EpisodeReader(path) as reader:
        return [info.success for info in reader.episode_info()]


def _describe_outcomes(path: Path) -> str:
    outcomes = _outcomes(path)
    return f"{len(outcomes)} episodes, {sum(outcomes)} successes ({100 * sum(outcomes) / len(outcomes):.1f}%)"


def _describe_fidelity(path: Path) -> str:
    fidelity = json.loads(path.read_text())
    full = fidelity["success_by_horizon"]["full"]
    return (f"PSNR {fidelity['psnr_at_8']:.1f} / {fidelity['psnr_at_horizon']:.1f} dB after 8 / 32 steps; "
            f"outcome agreement over full replays {100 * full['accuracy']:.0f}% (base rate "
            f"{100 * full['base_rate']:.0f}%)")


def summarize(config: QuickstartConfig, timings: dict[str, float], seconds: float, threads: int) -> dict[str, Any]:
    """The figures of every stage, read back from the files the stages wrote (``threads``: torch's
    CPU threads)."""
    from worldsim.envs.imagination import imagination_aids
    from worldsim.world_models import WorldModel

    out = config.out
    results = json.loads((out / "coevolve" / "results.json").read_text())
    state = json.loads((out / "coevolve" / "state.json").read_text())["stages"]
    fidelity = json.loads((out / "fidelity" / "fidelity.json").read_text())
    skipped = out / "detect" / "skipped.json"
    detection = None if skipped.exists() else json.loads((out / "detect" / "results.json").read_text())
    bc = json.loads((out / "bc" / "summary.json").read_text())
    wm = next(v for k, v in state.items() if "train world model" in k)
    rl = results["rounds"][-1].get("rl", {})
    model = WorldModel.from_pretrained(results["rounds"][0]["world_model"])
    contact = fidelity["object_error_after_contact"]
    return {
        "task": config.task, "seed": config.seed, "torch_threads": threads, "demos": config.demos,
        "rung": config.imagination.rung.name,
        "aids": list(imagination_aids(config.imagination, model)),
        "timings_s": timings,
        "wall_clock_s": round(seconds, 1),
        "budgets": {"bc": {"steps": bc["steps"], "asked": bc["steps_asked"], "stopped_by": bc["stopped_by"]},
                    "world_model": {"steps": wm["steps"], "asked": config.wm.steps, "stopped_by": wm["stopped_by"]},
                    "grpo": {"env_steps": rl.get("env_steps"), "asked": config.rl.env_steps,
                             "stopped_by": rl.get("stopped_by")}},
        "bc_loss": {"train": bc.get("train_loss"), "val": bc.get("val_loss")},
        "comparison": results["last_round_comparison"],
        "best_readings": best_readings(results, json.loads((out / "readings.json").read_text()), config.task),
        "guard": {"accepted": results["rounds"][-1]["accepted"], "reasons": results["rounds"][-1].get("reasons", [])},
        "bc_real_success": results["base_real_success"], "final_real_success": results["final_real_success"],
        "imagined_success": [r["imagined"]["success_rate"] for r in results["rounds"] if "imagined" in r],
        "world_model": {"held_out": fidelity["held_out"], "psnr_at_8": fidelity["psnr_at_8"],
                        "psnr_at_32": fidelity["psnr_at_horizon"],
                        "psnr_copy_first": [fidelity.get("psnr_copy_first_at_8"),
                                            fidelity.get("psnr_copy_first_at_horizon")],
                        "region_psnr_at_32": fidelity.get("region_psnr_at_horizon"),
                        "object_error_16_after_contact_cm": contact["at_horizon_cm"] if contact else None,
                        "agreement": {k: fidelity["success_by_horizon"][k] for k in ("last_16", "full")},
                        "physics_ceiling": {k: a["accuracy"]
                                            for k, a in (fidelity.get("physics_ceiling") or {}).items()}},
        **(detection_summary(detection, config.task) if detection else {"detectors": None, "detection": None}),
        "detection_skipped": json.loads(skipped.read_text())["reason"] if detection is None else None,
    }
