"""The imagination ladder: what each rung of imagination (``oracle``, ``sim-seeded``, ``pixels``,
``video``; :mod:`worldsim.envs.imagination`) gives a policy trained in it, against controls that
only what the world model learned can beat.

For each seed, one BC base (the co-evolution benchmark's: ``--bc-demos`` noisy scripted-expert
demonstrations, ``--bc-steps`` of behaviour cloning) and then, from it, with the same real-episode
budget (``--real-episodes`` x ``--rounds``):

- ``direct-rl``: GRPO in physics on the whole real budget, rewarded by the task's dense shaping,
  with at least as many policy updates as the imagination arm
  (:func:`~worldsim.pipelines.coevolve.direct_rl_epochs`), once per learning rate of
  ``--direct-rl-lrs``; each seed keeps the one its round evaluations rank first;
- co-evolution on each rung of ``--rungs`` with each reward of ``--rewards``: the first reward is
  the headline and must reward success alone (``transition`` or ``sparse``); the others (``dense``,
  the task's shaping) are reported beside it. Arms after the first of a rung reuse its round 0 (the
  same base episodes and world model); ``oracle`` and ``sim-seeded`` reuse the ``pixels`` run's;
- **the placebo** of every co-evolution arm (``<arm>~static``): the same world model, reward,
  budget and round 0 with the object dynamics switched off (``ImaginationConfig.placebo``), so
  that no object ever moves. A gain the placebo matches came from the reward or the gripper's
  motion, not from what the model learned. A model without the object pathway (``video``) has no
  static placebo.

**Readings.** Every policy, BC included, is read with its mean action and with sampled actions.
Each seed's arm takes the reading its round evaluations (``--eval-episodes`` real episodes, seed
``seed + 10000``) rank first, never the test; every gain is against BC's chosen reading. The
co-evolution arms' real episodes are collected with sampled actions (what RL explores with) or,
with ``--collect tested``, read as BC is tested, so that the world model sees the outcomes the
tested policy reaches (PickPlaceCube's BC grasps by its mean action, almost never sampled).

**Protocol first, test once.** The protocol (every argument that shapes a figure) is written to
``<out>/protocol.json`` and, before any test episode runs, to
``benchmarks/seed_records/imagination_ladder/<task>_test<test seed>/protocol.json`` (a variant's
named by the task and the variant); a run whose
arguments differ from its folder's protocol, or whose test seed another protocol holds, is refused
(a changed protocol is a new ``--out`` with a new ``--test-seed``). Every seed's policies are then
tested once, after their last round, on the same ``--test-episodes`` real episodes (seed
``--test-seed + 1000 x seed``), both readings each; the outcomes are kept and never run again, and
the seed's record (outcomes, readings, fidelity, aids) is kept beside that protocol, so that a
protocol too long for one sitting is run seed by seed (``--only-seeds``, also for parallel
processes) and gathered from the kept records. ``--only-runs`` runs only some of a seed's runs (its
base first), so that two processes can share one seed; a run without it then measures and tests.
The result is written once every seed has been tested; until then the standing figures stay.

A static placebo of a success-only reward judged by the task's rule is not trained: a world whose
objects never move leaves the rule's verdicts to the start alone, so every rollout from a start is
paid alike, every GRPO advantage and so every update is 0, and its policy is the base's (tested as BC
is; ``not_trained`` in its figures).

**Figures.** Gains are over seeds (the mean of the seeds' paired differences, its 95% interval
resampling the seeds, then each seed's episodes: :func:`~worldsim.evaluation.compare.over_seeds`),
the pooled McNemar figure beside them. Each rung's world model is also measured on
``--heldout-episodes`` new real episodes of the BC policy read as BC is tested (the reading its
round evaluations chose: a set read otherwise can hold no success, as PickPlaceCube's sampled BC
episodes did), balanced between successes and failures, replayed on that rung
(:func:`~worldsim.world_models.evaluate.evaluate_world_model`): PSNR 8 and 32 steps from episode
starts, whole-frame and in the windows on the gripper, the task's object and where each started,
each beside the copied start frame's; the task object's error 16 steps after contact, outcome
agreement on balanced 8-step keyframe windows, on the last 8 steps of every held-out episode and
over full replays, beside physics' own agreement with the cube 0.33 mm and 1 mm off, and the BC
policy's action gap on the rung's frames. ``aids`` lists what each arm takes
from the simulator and from hand-written code.

**Variants.** ``--wm-model TABLE.FIELD=VALUE ...`` changes every rung's world model as a config
file's ``[model]`` tables would (e.g. ``judge.heights=true proprio.sees_cubes=true``: options no
preset turns on). Such a run is part of its protocol and writes
``benchmarks/studies/results/imagination_ladder_variants.json``, its entry keyed by the task and
the changes, so that the standing result keeps the presets' own models. ``--variant NAME`` sends
any other run there too (e.g. a larger imagined budget), keyed by the task and ``NAME``.

Writes ``benchmarks/results/imagination_ladder.json``, one entry per task under
``metrics.tasks.<task>`` (a run replaces its own task's entry and keeps the others): ``protocol``
(written before any test episode runs), ``bc``, ``direct_rl``, ``run`` (the arguments, commit and
machine of the run that made the entry) and under ``rungs.<arm>`` ``success``, ``seeds``,
``real_episodes``, ``reward``, ``aids``, ``gain_vs_bc`` and ``gain_vs_bc_ci`` (over seeds),
``gain_vs_bc_ci_pooled``, ``gain_vs_placebo`` and ``gain_vs_placebo_ci``, ``gain_vs_direct_rl`` and
``gain_vs_direct_rl_ci`` (points), both readings' success, and the fidelity figures.

    python benchmarks/imagination_ladder.py --task PushCube-v0 --seeds 0 1 2 3 4 --rungs pixels \\
        --rewards transition dense --rounds 1 --test-episodes 200 --out runs/ladder_controls
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from coevolve import bc_base
from common import RESULTS, STUDY_RESULTS, aids_of, commit, fix_protocol, machine, plain_args, report

from worldsim.envs.core import IMAGINED_REWARD_TYPES
from worldsim.envs.imagination import JUDGES, PIXELS, RUNGS, ImaginationConfig, Rung
from worldsim.evaluation.compare import READINGS, better_reading, over_seeds, paired_comparison
from worldsim.evaluation.rank import REAL_EVAL_SEED_OFFSET
from worldsim.pipelines.coevolve import CoevolveConfig, coevolve, last_accepted
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelPreset, WorldModelRounds
from worldsim.runtime.run_logging import write_json
from worldsim.training.rl import RLRunConfig
from worldsim.world_models.config import PRESETS, build_config

SUCCESS_ONLY = ("transition", "sparse")
"""Rewards from the judge's verdict alone: the headline's."""
RUN_ONLY = ("threads", "out", "only_seeds", "only_runs")
"""Arguments that say how a run is carried out, not what it measures: outside the protocol."""
try:
    from tomllib import loads as toml_loads
except ImportError:  # Python 3.10
    from tomli import loads as toml_loads  # type: ignore[no-redef]
VARIANTS = "imagination_ladder_variants"
"""The study result a run with ``--wm-model`` changes writes to (the standing result keeps the presets' models)."""
SEED_RECORDS = RESULTS.parent / "seed_records" / "imagination_ladder"
"""Where each protocol and its tested seeds' records are kept, one folder per result entry and test seed."""


def model_changes(entries: list[str]) -> dict[str, Any]:
    """``--wm-model`` entries (``TABLE.FIELD=VALUE``, the value as TOML reads it) as the nested
    tables a preset is changed by: ``judge.heights=true`` -> ``{"judge": {"heights": True}}``.
    ``ValueError`` naming the entry that is not of that form."""
    changes: dict[str, Any] = {}
    for entry in entries:
        key, _, value = entry.partition("=")
        table, _, name = key.strip().rpartition(".")
        try:
            parsed = toml_loads(f"v = {value.strip()}")["v"] if value.strip() else None
        except ValueError:  # TOML's decode error
            parsed = None
        if not table or not name or parsed is None:
            raise ValueError(f"{entry!r}: give TABLE.FIELD=VALUE, the value as in a config file "
                             "(e.g. judge.heights=true)")
        node = changes
        for part in table.split("."):
            node = node.setdefault(part, {})
        node[name] = parsed
    return changes


def publish(entry: dict[str, Any], args: argparse.Namespace) -> None:
    """Report the run's task entry (its protocol and figures) with the run that made it (``run``:
    arguments, commit, machine) under ``metrics.tasks``; every other entry of the result is kept as
    its own run left it, so that a PickPlaceCube run never overwrites PushCube's. A run whose world
    models change a preset (``--wm-model``) or that is named a variant (``--variant``) writes the
    study result instead, its entry keyed by the task and the variant's name (by default the
    changes), so that the standing result keeps the standing protocol's figures."""
    name, key, folder = destination(args)
    kept = folder / f"{name}.json"
    tasks = json.loads(kept.read_text())["metrics"].get("tasks", {}) if kept.exists() else {}
    run = {"args": plain_args(args), "commit": commit(), "machine": machine()}
    report(name, {"tasks": {**tasks, key: entry | {"run": run}}}, args, folder)


def destination(args: argparse.Namespace) -> tuple[str, str, Path]:
    """The result a run's figures go to, its entry's key there and the result's folder: the
    standing result keyed by the task, or the variants' study keyed by the task and the variant."""
    if args.wm_model or args.variant:
        return VARIANTS, f"{args.task} {args.variant or ' '.join(sorted(args.wm_model))}", STUDY_RESULTS
    return "imagination_ladder", args.task, RESULTS


def kept_records(args: argparse.Namespace) -> Path:
    """Where a protocol and each of its tested seeds' records are kept: one folder per result
    entry (:func:`destination`) and test seed (an entry's test seed belongs to one protocol).
    Seeds tested in separate sittings are gathered from here, and
    ``benchmarks/studies/ladder_pairs.py`` compares two such folders."""
    _, key, _ = destination(args)
    return SEED_RECORDS / f"{key.replace(' ', '_')}_test{args.test_seed}"


def direct_view(record: dict[str, Any]) -> dict[str, Any]:
    """A seed's record with the direct-RL run whose learning rate it chose also as ``direct-rl``."""
    return record | {"arms": record["arms"] | {"direct-rl": record["arms"][record["direct_rl"]]}}


@dataclass(frozen=True)
class Arm:
    """One co-evolution arm: its rung, world-model preset, judge, reward and placebo, and the arm
    whose round 0 it reuses (None: it trains its own)."""

    name: str
    rung: Rung
    preset: WorldModelPreset
    judge: str | None
    reward: str
    placebo: str | None
    round0: str | None

    @property
    def imagination(self) -> ImaginationConfig:
        return ImaginationConfig(rung=self.rung, judge=self.judge, reward_type=self.reward, placebo=self.placebo)


def pays_alike(arm: Arm, world_model: Path) -> bool:
    """Whether ``arm`` is a static placebo that pays every rollout from a start alike: a success-only
    reward judged by the task's rule on the objects' positions, which a static world holds where
    they started. The verdicts then depend on the start alone, so every rollout of a GRPO group (one
    start) returns the same whatever its actions, every advantage is 0 and every Adam step is 0:
    training it would return the base policy unchanged, at the cost of a full arm."""
    if arm.placebo != "static" or arm.reward not in SUCCESS_ONLY:
        return False
    from worldsim.world_models import WorldModel

    return WorldModel.from_pretrained(world_model).judge.check(arm.judge) == "rule"


def heldout_episodes(policy: Path, task: str, episodes: int, base: Path, seed: int, reading: str) -> Path:
    """``episodes`` new real episodes of ``policy`` read as ``reading`` (with state, for the
    fidelity figures), kept in ``base / heldout_<reading>.h5``: the same episode starts for
    either reading."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import load_policy

    out = base / f"heldout_{reading}.h5"
    if not out.exists():
        loaded = load_policy(policy).eval()
        collect_episodes([task], lambda t: loaded, episodes, out, num_envs=min(episodes, 30), seed=seed + 50_000,
                         obs_mode="pixels+state", deterministic=READINGS[reading], progress=False)
    return out


def fidelity(world_model: Path, heldout: Path, rung: Rung, out: Path, seed: int, judge: str | None = None,
             policy: Path | None = None) -> dict[str, Any]:
    """The rung's fidelity figures of ``world_model`` on the held-out episodes (balanced between
    successes and failures when both occur: ``heldout.balanced`` says); with ``policy``, its
    action gap on the rung's frames."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.world_models.evaluate import evaluate_world_model

    kept = out / "fidelity.json"  # a finished evaluation is read back, not run again
    if kept.exists():
        fid = json.loads(kept.read_text())
    else:
        with EpisodeReader(heldout) as reader:
            both = {i.success for i in reader.episode_info()} == {True, False}
        fid = evaluate_world_model(world_model, heldout, balance=both, curve_steps=32,
                                   imagination=ImaginationConfig(rung=rung, judge=judge), policy=policy, out=out,
                                   videos=2, seed=seed, progress=False)
    by = fid["success_by_horizon"]
    contact = fid.get("object_error_after_contact") or {}
    physics = fid.get("physics_ceiling") or {}

    def accuracy(row: dict[str, Any] | None) -> float | None:
        return None if row is None else row["accuracy"]

    # the windows on the gripper, the task's object and where each started (a ghost arm or a
    # doubled cube shows there), each beside the copied start frame: psnr_<region>[_copy_first]_<step>
    regions = {f"psnr_{name}{'' if who == 'model' else '_copy_first'}_{step}": value
               for step, at in ((8, fid.get("region_psnr_at_8")), (32, fid.get("region_psnr_at_horizon"))) if at
               for name, pair in at.items() for who, value in pair.items()}

    return {"psnr_8": fid["psnr_at_8"], "psnr_32": fid["psnr_at_horizon"],
            # the trivial predictor's: each replay's start frame copied (fidelity files written before it: None)
            "psnr_copy_first_8": fid.get("psnr_copy_first_at_8"),
            "psnr_copy_first_32": fid.get("psnr_copy_first_at_horizon"),
            "object_error_cm_16": contact.get("at_horizon_cm"),
            "agreement_keyframe_8": accuracy(by.get("keyframe_8_balanced")),
            "agreement_keyframe_8_majority": (by.get("keyframe_8_balanced") or {}).get("majority_accuracy"),
            # the last 8 steps of every held-out episode: 8-step windows from real mid-episode states
            # whose outcomes keep the held-out set's balance (keyframe windows that end in a success
            # within 8 steps are few: their balanced set can be empty)
            "agreement_last_8": accuracy(by["last_8"]),
            "agreement_full": accuracy(by["full"]), "agreement_full_majority": by["full"]["majority_accuracy"],
            "physics_full_0.33mm": accuracy(physics.get("shift_0.33mm")),
            "physics_full_1mm": accuracy(physics.get("shift_1mm")),
            # the BC policy's action on the rung's frames against its action on the real ones
            "action_gap_8": fid.get("action_gap_at_8"), "action_gap_32": fid.get("action_gap_at_horizon"),
            "action_step_change": fid.get("step_change_mean"), **regions, "judge": fid["judge"],
            "heldout": fid["held_out"]}


OUTCOME_FIGURES = ("agreement_", "physics_full_")
"""The figures of :func:`fidelity` that score the judge's verdicts against real outcomes."""


def fidelity_means(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over seeds of each of :func:`fidelity`'s figures. An outcome agreement is averaged
    over the seeds whose held-out episodes hold both outcomes (``agreement_seeds`` of them): where
    the policy never succeeded (or never failed) it only says how often the judge gives the one
    answer, so it is left out (None when no seed has both)."""
    both = [f for f in per_seed if f["heldout"]["successes"] and f["heldout"]["failures"]]

    def mean(key: str) -> float | None:
        values = [f[key] for f in (both if key.startswith(OUTCOME_FIGURES) else per_seed) if f[key] is not None]
        return float(np.mean(values)) if values else None

    return {k: mean(k) for k in per_seed[0] if k not in ("heldout", "judge")} | {
        "judge": per_seed[0]["judge"], "agreement_seeds": len(both)}


def row(rung: Rung, preset: str, judge: str | None = None) -> str:
    """A rung's name in the results: the rung, with ``@<preset>`` for a world model other than
    ``tiny`` and ``:<judge>`` for a judge other than the model's own."""
    return (rung.name if preset == "tiny" else f"{rung.name}@{preset}") + (f":{judge}" if judge else "")


def arms_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Arm]:
    """The co-evolution arms, in the order they run (an arm after the one whose round 0 it reuses)."""
    if args.rewards[0] not in SUCCESS_ONLY:
        parser.error(f"--rewards {' '.join(args.rewards)}: the first is the headline's and must reward success "
                     f"alone ({' or '.join(SUCCESS_ONLY)})")
    specs: dict[str, tuple[Rung, WorldModelPreset, str | None]] = {}
    for name in args.rungs:
        spec, _, given_judge = name.partition(":")
        rung_name, _, given_preset = spec.partition("@")
        preset, judge = given_preset or "tiny", given_judge or None
        try:  # the config's own refusals (unknown rung or judge, a judge the rung cannot take)
            rung = ImaginationConfig(rung=rung_name, judge=judge).rung
        except ValueError as error:
            parser.error(f"--rungs {name}: {error}")
        if preset not in PRESETS:
            parser.error(f"--rungs {name}: give RUNG[@PRESET][:JUDGE], PRESET in {', '.join(PRESETS)}")
        specs[row(rung, preset, judge)] = (rung, cast(WorldModelPreset, preset), judge)
    for rung, preset, judge in list(specs.values()):  # a seeded rung reuses the pixels run's round 0
        if rung.seeded:
            specs.setdefault(row(PIXELS, preset, judge), (PIXELS, preset, judge))
    arms: list[Arm] = []
    for name, (rung, preset, judge) in sorted(specs.items(), key=lambda item: item[1][0].seeded):
        origin = row(PIXELS, preset, judge) if rung.seeded else None
        for reward in args.rewards:
            try:
                ImaginationConfig(rung=rung, judge=judge, reward_type=reward)
            except ValueError:  # e.g. the dense reward on the video rung: reported as not run
                continue
            arm_name = name if reward == args.rewards[0] else f"{name}+{reward}"
            arms.append(Arm(arm_name, rung, preset, judge, reward, None, origin))
            origin = origin or arm_name
            if preset == "tiny" or not preset.startswith("video"):  # a model with the object pathway
                if rung.trained_on_state:
                    arms.append(Arm(f"{arm_name}~static", rung, preset, judge, reward, "static", origin))
    return arms


def real_outcomes_of(policy: Path, task: str, episodes: int, seed: int, reading: str, kept: Path) -> list[bool]:
    """``policy``'s outcomes on ``episodes`` real episodes (seed ``seed``) read as ``reading``; kept
    in ``kept``, and read back from there rather than run again."""
    if kept.exists():
        return json.loads(kept.read_text())["outcomes"]
    from worldsim.evaluation.evaluate import evaluate_in_physics
    from worldsim.policies import load_policy

    result = evaluate_in_physics(load_policy(policy), [task], episodes, seed, deterministic=READINGS[reading])
    outcomes = [bool(o) for o in result["per_task"][task]["outcomes"]]
    write_json(kept, {"policy": str(policy), "seed": seed, "reading": reading, "outcomes": outcomes})
    return outcomes


def policy_updates(run_result: dict[str, Any]) -> int:
    """The optimiser steps a run's RL made over all its rounds: each iteration's passes (fewer when
    the trainer's KL guard stopped it early) times its minibatches."""
    total = 0
    for row in run_result["rounds"][1:]:
        folder = Path(row["rl"]["policy"]).parent
        minibatches = json.loads((folder / "config.json").read_text())["num_minibatches"]
        lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        total += minibatches * sum(int(line["early_stop_epoch"]) for line in lines if "early_stop_epoch" in line)
    return total


def policies_of(results: dict[str, dict[str, Any]]) -> dict[str, Path]:
    """Each run's final policy (the last one its guard accepted), and the base's as ``bc``."""
    first = next(iter(results.values()))
    return {"bc": Path(first["rounds"][0]["policy"]),
            **{name: Path(last_accepted(r["rounds"])["policy"]) for name, r in results.items()}}


def chosen(round_eval: dict[str, float]) -> str:
    """The reading the round evaluations rank first (the mean action on a tie)."""
    return better_reading(round_eval["mean"], round_eval["sampled"])


def rl_rounds(args: argparse.Namespace) -> RLRounds:
    """The imagination arms' RL part, as the flags set it (direct RL takes it at each of its rates)."""
    return RLRounds(env_steps=args.rl_env_steps, num_envs=args.rl_num_envs, group_size=args.rl_group_size,
                    lr=args.rl_lr)


def run_seed(args: argparse.Namespace, arms: list[Arm], steps: dict[str, int], seed: int) -> dict[str, Any] | None:
    """One seed: its BC base, the direct-RL grid, every arm, the readings' round evaluations and the
    test episodes (each kept in ``args.out``); the seed's record, also written to ``seed_<seed>.json``.
    With ``--only-runs``, the base and those runs alone (None: no record), so that processes can
    share a seed's runs; a later run without it finds them done, measures and tests. A seed whose
    record is kept (:func:`kept_records`) was tested: its record is returned, nothing runs."""
    kept = kept_records(args) / f"seed_{seed}.json"
    if kept.exists():
        return None if args.only_runs else json.loads(kept.read_text())
    out = args.out
    base = out / f"base_s{seed}"
    demos, bc = bc_base(args.task, seed, args.bc_demos, args.bc_steps, base, args.threads)

    def config(name: str, **changes: Any) -> CoevolveConfig:
        folder = out / f"{name}_s{seed}"
        settings: dict[str, Any] = dict(
            base_policy=bc, task=args.task, suite=None, demonstrations=demos, real_episodes=args.real_episodes,
            rounds=args.rounds, eval_episodes=args.eval_episodes, test_episodes=0, seed=seed, out=folder,
            resume=(folder / "state.json").exists(), videos=0, torch_threads=args.threads, progress=False,
            rl=rl_rounds(args))
        return CoevolveConfig(**(settings | changes))

    def run(config: CoevolveConfig) -> dict[str, Any]:
        done = config.out / "results.json"
        return json.loads(done.read_text()) if done.exists() else coevolve(config)

    def run_arm(arm: Arm, collect: str) -> dict[str, Any] | None:
        """``arm``'s co-evolution (its round 0 its origin's), or None for a placebo that pays
        every rollout alike (:func:`pays_alike`): not trained, its policy the base's."""
        round0 = out / f"{arm.round0}_s{seed}" if arm.round0 else None
        if round0 is not None:
            origin = round0 / "results.json"
            if not origin.exists():
                raise RuntimeError(f"{arm.name} starts from {arm.round0}'s round 0: run {arm.round0} first")
            if pays_alike(arm, Path(json.loads(origin.read_text())["rounds"][0]["world_model"])):
                return None
        wm = WorldModelRounds(preset=arm.preset, model=model_changes(args.wm_model), steps=steps[arm.preset],
                              refine_steps=args.wm_refine_steps)
        return run(config(arm.name, wm=wm, round0_from=round0, imagination=arm.imagination,
                          videos=2 if arm.placebo is None else 0, collect_deterministic=READINGS[collect]))

    only = set(args.only_runs or ())
    results: dict[str, dict[str, Any]] = {}
    for lr in args.direct_rl_lrs:
        name = f"direct-rl@{lr:g}"
        if not only or name in only:
            results[name] = run(config(name, mode="direct-rl", rl=dataclasses.replace(rl_rounds(args), lr=lr)))
    if only:  # main refuses --collect tested here: its reading comes from the whole seed's evaluations
        for arm in arms:
            if arm.name in only:
                run_arm(arm, "sampled")
        return None

    def round_eval(name: str, policy: Path) -> dict[str, float]:
        """Both readings' success on the round evaluations' episodes: the mean action's from the
        run, sampled here."""
        run_row = results[next(iter(results))]["rounds"][0] if name == "bc" else last_accepted(results[name]["rounds"])
        sampled = real_outcomes_of(policy, args.task, args.eval_episodes, seed + REAL_EVAL_SEED_OFFSET, "sampled",
                                   out / "readings" / f"s{seed}" / f"{name}.json")
        return {"mean": run_row["real"]["success_rate"], "sampled": float(np.mean(sampled))}

    # the world models are replayed on BC's episodes as BC is tested (its reading, chosen on the
    # round evaluations): a policy that succeeds only by its mean action leaves a sampled set
    # without successes, where outcome agreement says nothing
    heldout_reading = chosen(round_eval("bc", bc))
    heldout = heldout_episodes(bc, args.task, args.heldout_episodes, base, seed, heldout_reading)
    # sampled actions are what RL explores with; BC's tested reading shows the world model the
    # outcomes the policy reaches when tested (PickPlaceCube's BC grasps by its mean action only)
    collect = heldout_reading if args.collect == "tested" else "sampled"
    fidelities: dict[str, dict[str, Any]] = {}
    unchanged: list[str] = []  # static placebos that pay every rollout alike: the base's policy
    for arm in arms:
        result = run_arm(arm, collect)
        if result is None:
            unchanged.append(arm.name)
            continue
        results[arm.name] = result
        if arm.placebo is None and arm.reward == args.rewards[0]:
            # one set of fidelity figures per world model and rung (what the rung's replays show)
            world_model = Path(results[arm.name]["rounds"][0]["world_model"])
            folder = out / f"{arm.name}_s{seed}"
            figures = fidelity(world_model, heldout, arm.rung, folder / f"fidelity@{heldout_reading}", seed,
                               judge=arm.judge, policy=bc)
            figures["wm_train_seconds"] = json.loads((world_model / "summary.json").read_text())["train_seconds"]
            if arm.rung is PIXELS and figures["judge"] == "rule":  # the learned head, judging the same replays
                head = fidelity(world_model, heldout, arm.rung, folder / f"fidelity_head@{heldout_reading}", seed,
                                judge="head")
                figures |= {f"{k}_head": head[k] for k in ("agreement_keyframe_8", "agreement_last_8",
                                                            "agreement_full")}
            fidelities[row(arm.rung, arm.preset, arm.judge)] = figures

    policies = policies_of(results)
    round_evals = {name: round_eval(name, policy) for name, policy in policies.items()}
    for name in unchanged:
        policies[name], round_evals[name] = policies["bc"], round_evals["bc"]
    directs = [f"direct-rl@{lr:g}" for lr in args.direct_rl_lrs]
    direct = max(directs, key=lambda name: max(round_evals[name].values()))  # the first on a tie
    tested = ["bc", direct, *(arm.name for arm in arms)]
    round0_models = {arm.name: results[arm.round0 or arm.name]["rounds"][0]["world_model"] for arm in arms}
    record: dict[str, Any] = {"seed": seed, "direct_rl": direct, "fidelity": fidelities,
                              "heldout_reading": heldout_reading, "collect_reading": collect, "arms": {},
                              # what each arm's imagining took, as its saved world model was built
                              "aids": {arm.name: aids_of(arm.imagination, [round0_models[arm.name]]) for arm in arms}}
    for name in tested:  # the test: once, after every arm's last round, both readings
        test_seed = args.test_seed + 1000 * seed
        outcomes = {reading: real_outcomes_of(policies[name], args.task, args.test_episodes, test_seed, reading,
                                              out / "test" / f"s{seed}" / f"{'bc' if name in unchanged else name}"
                                                                          f"_{reading}.json")
                    for reading in READINGS}
        if name in unchanged:
            record["arms"][name] = {"round_eval": round_evals[name], "reading": chosen(round_evals[name]),
                                    "test": outcomes, "policy": str(policies[name]), "trained": False,
                                    "accepted": False, "wall_clock_s": 0.0, "real_episodes": 0,
                                    "rl": {"policy_updates": 0}}
            continue
        run_result = results.get(name)
        record["arms"][name] = {
            "round_eval": round_evals[name], "reading": chosen(round_evals[name]), "test": outcomes,
            "policy": str(policies[name]),
            **({"accepted": last_accepted(run_result["rounds"])["round"] > 0,
                "wall_clock_s": run_result["wall_clock_s"], "real_episodes": run_result["real_budget"],
                "rl": {k: v for k, v in (run_result["rounds"][-1].get("rl") or {}).items()
                       if k in ("env_steps", "train_seconds", "update_epochs")}
                | {"policy_updates": policy_updates(run_result)}} if run_result else {})}
    record["direct_rl_round_evals"] = {name: round_evals[name] for name in directs}
    record["direct_rl_updates"] = {name: policy_updates(results[name]) for name in directs}
    write_json(kept, record)
    return record


def gains(records: list[dict[str, Any]], name: str, against: str) -> dict[str, Any]:
    """``name``'s gain over ``against`` (each read as its round evaluations chose, per seed) in
    points: over seeds with its interval, pooled with McNemar's, and per seed."""
    def read(r: dict[str, Any], arm: str) -> list[bool]:
        return r["arms"][arm]["test"][r["arms"][arm]["reading"]]

    pairs = [(read(r, against), read(r, name)) for r in records]
    seeds = over_seeds(pairs)
    pooled = paired_comparison(sum((a for a, _ in pairs), []), sum((b for _, b in pairs), []))
    return {"gain": 100 * seeds["difference"], "ci": [100 * x for x in seeds["ci95"]],
            "ci_pooled": [100 * x for x in pooled["difference_ci95"]], "gain_pooled": 100 * pooled["difference"],
            "p_pooled": pooled["p_value"], "per_seed": [100 * x for x in seeds["per_seed"]]}


def successes(records: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """``name``'s test success (pooled over seeds): its chosen reading's, and each reading's."""
    def rate(pick: Any) -> float:
        return float(np.mean(sum((r["arms"][name]["test"][pick(r)] for r in records), [])))

    return {"success": rate(lambda r: r["arms"][name]["reading"]),
            **{f"success_{reading}": rate(lambda r, reading=reading: reading) for reading in READINGS},
            "readings": [r["arms"][name]["reading"] for r in records]}


def gather(args: argparse.Namespace, arms: list[Arm], protocol: dict[str, Any],
           records: list[dict[str, Any]]) -> dict[str, Any]:
    """The task's entry in the result from every seed's record."""
    records = [direct_view(r) for r in records]
    vs_bc = gains(records, "direct-rl", "bc")
    metrics: dict[str, Any] = {
        "protocol": protocol, "task": args.task, "seeds": args.seeds, "test_episodes_per_seed": args.test_episodes,
        "bc": successes(records, "bc"),
        "direct_rl": {**successes(records, "direct-rl"), "gain_vs_bc": vs_bc["gain"], "gain_vs_bc_ci": vs_bc["ci"],
                      "gain_vs_bc_ci_pooled": vs_bc["ci_pooled"], "p_vs_bc": vs_bc["p_pooled"],
                      "lr": [float(r["direct_rl"].split("@")[1]) for r in records],
                      "update_epochs": records[0]["arms"]["direct-rl"]["rl"].get("update_epochs"),
                      "policy_updates": [r["arms"]["direct-rl"]["rl"]["policy_updates"] for r in records],
                      # what the KL guard let each learning rate make, per seed: the grid's smallest
                      # rate is the one most likely to make every planned update
                      "policy_updates_by_lr": {name.split("@")[1]: [r["direct_rl_updates"][name] for r in records]
                                               for name in records[0]["direct_rl_updates"]},
                      "real_episodes": records[0]["arms"]["direct-rl"]["real_episodes"],
                      "reward": RLRunConfig.physics_reward},  # coevolve's direct RL sets none: the default
        "rungs": {}}
    rungs = metrics["rungs"]
    for arm in arms:
        vs_bc, vs_direct = gains(records, arm.name, "bc"), gains(records, arm.name, "direct-rl")
        figures: dict[str, Any] = {
            **successes(records, arm.name), "seeds": len(records), "reward": arm.reward, "placebo": arm.placebo,
            "real_episodes": records[0]["arms"][arm.name]["real_episodes"],
            "aids": list(dict.fromkeys(aid for r in records for aid in r["aids"][arm.name])),
            "gain_vs_bc": vs_bc["gain"], "gain_vs_bc_ci": vs_bc["ci"], "gain_vs_bc_ci_pooled": vs_bc["ci_pooled"],
            "p_vs_bc": vs_bc["p_pooled"], "per_seed_gain_vs_bc": vs_bc["per_seed"],
            "gain_vs_direct_rl": vs_direct["gain"], "gain_vs_direct_rl_ci": vs_direct["ci"],
            "gain_vs_direct_rl_ci_pooled": vs_direct["ci_pooled"],
            "rounds_accepted": sum(r["arms"][arm.name]["accepted"] for r in records),
            "policy_updates": [r["arms"][arm.name]["rl"]["policy_updates"] for r in records],
            "wall_clock_s": [r["arms"][arm.name]["wall_clock_s"] for r in records], "wm_preset": arm.preset}
        if any(r["arms"][arm.name].get("trained") is False for r in records):
            figures["not_trained"] = ("a static world pays this success-only reward, judged by the task's rule, alike "
                                      "to every rollout from a start: every advantage and update is 0, so the "
                                      "policy is the base's, tested as BC is")
        placebo = f"{arm.name}~static"
        if arm.placebo is None and any(a.name == placebo for a in arms):
            vs_placebo = gains(records, arm.name, placebo)
            figures |= {"gain_vs_placebo": vs_placebo["gain"], "gain_vs_placebo_ci": vs_placebo["ci"],
                        "gain_vs_placebo_ci_pooled": vs_placebo["ci_pooled"], "p_vs_placebo": vs_placebo["p_pooled"]}
        elif arm.placebo is None:
            figures |= {"gain_vs_placebo": None, "gain_vs_placebo_ci": None,
                        "placebo_note": "a model without the object pathway has no static placebo"}
        kept = [r["fidelity"][row(arm.rung, arm.preset, arm.judge)] for r in records
                if row(arm.rung, arm.preset, arm.judge) in r["fidelity"]]
        if kept and arm.placebo is None and arm.reward == args.rewards[0]:  # the world model's, once
            figures |= fidelity_means(kept) | {"heldout_readings": [r["heldout_reading"] for r in records]}
        figures["collect_readings"] = [r.get("collect_reading", "sampled") for r in records]
        rungs[arm.name] = figures
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rungs", nargs="+", default=["pixels"],
                        help=f"rungs ({', '.join(RUNGS)}), each as RUNG[@PRESET][:JUDGE] (PRESET in "
                             f"{', '.join(PRESETS)}, JUDGE in {', '.join(JUDGES)})")
    parser.add_argument("--rewards", nargs="+", default=["transition", "dense"], choices=IMAGINED_REWARD_TYPES,
                        help="the first is the headline's (success alone); the others are reported beside it")
    parser.add_argument("--bc-demos", type=int, default=100)
    parser.add_argument("--bc-steps", type=int, default=1500)
    parser.add_argument("--real-episodes", type=int, default=100, help="per collection (budget: x rounds)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--wm-steps", nargs="+", default=["800"],
                        help="round 0's world-model steps: N for every preset, PRESET=N for one")
    parser.add_argument("--wm-refine-steps", type=int, default=800)
    parser.add_argument("--wm-model", nargs="+", default=[], metavar="TABLE.FIELD=VALUE",
                        help="changes to every rung's world model (e.g. judge.heights=true); the figures go to "
                             f"benchmarks/studies/results/{VARIANTS}.json, keyed by the task and the changes")
    parser.add_argument("--variant", default=None, metavar="NAME",
                        help=f"a protocol other than the standing one (e.g. a larger --rl-env-steps): the figures "
                             f"go to benchmarks/studies/results/{VARIANTS}.json, keyed by the task and NAME")
    parser.add_argument("--rl-env-steps", type=int, default=12_800)
    parser.add_argument("--rl-num-envs", type=int, default=32)
    parser.add_argument("--rl-group-size", type=int, default=8,
                        help="GRPO's rollouts per start, in imagination and in direct RL (divides --rl-num-envs)")
    parser.add_argument("--rl-lr", type=float, default=3e-5, help="the imagination arms' learning rate")
    parser.add_argument("--direct-rl-lrs", type=float, nargs="+", default=[1e-5, 3e-5, 1e-4],
                        help="direct RL's grid; each seed keeps the rate its round evaluations rank first")
    parser.add_argument("--eval-episodes", type=int, default=50, help="per round (the guard's and the readings')")
    parser.add_argument("--test-episodes", type=int, default=200, help="paired test episodes per seed")
    parser.add_argument("--test-seed", type=int, default=40_000,
                        help="the test episodes' seed (seed + 1000 x the run's seed); a new protocol takes a new one")
    parser.add_argument("--heldout-episodes", type=int, default=60, help="for the fidelity figures")
    parser.add_argument("--collect", default="sampled", choices=["sampled", "tested"],
                        help="the reading of the arms' real episodes: sampled actions, or the one BC is tested by")
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None,
                        help="run these of --seeds only (parallel processes); the result waits for every seed")
    parser.add_argument("--only-runs", nargs="+", default=None, metavar="RUN",
                        help="build each seed's base and only these runs (arms or direct-rl@LR), for processes "
                             "sharing a seed; a run without it then measures and tests")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/ladder_controls"))
    args = parser.parse_args()
    arms = arms_of(parser, args)
    steps: dict[str, int] = {}
    try:
        for entry in sorted(args.wm_steps, key=lambda e: "=" in e):  # N first, PRESET=N over it
            preset, _, value = entry.rpartition("=")
            for name in [preset] if preset else list(PRESETS):
                steps[name] = int(value)
    except ValueError:
        parser.error(f"--wm-steps {' '.join(args.wm_steps)}: give N or PRESET=N")
    try:
        changes = model_changes(args.wm_model)
        for preset in {arm.preset for arm in arms}:
            build_config(preset, **changes)
    except ValueError as error:
        parser.error(f"--wm-model {' '.join(args.wm_model)}: {error}")
    try:
        groups_fit = rl_rounds(args).groups_divide_envs
    except ValueError as error:
        parser.error(str(error))
    if not groups_fit:
        parser.error(f"--rl-group-size {args.rl_group_size}: give at least 2, dividing --rl-num-envs "
                     f"{args.rl_num_envs}")
    if args.only_seeds and not set(args.only_seeds) <= set(args.seeds):
        parser.error(f"--only-seeds {' '.join(map(str, args.only_seeds))}: not all of them are in --seeds")

    runs = [f"direct-rl@{lr:g}" for lr in args.direct_rl_lrs] + [arm.name for arm in arms]
    if args.only_runs and not set(args.only_runs) <= set(runs):
        parser.error(f"--only-runs {' '.join(args.only_runs)}: give some of {', '.join(runs)}")
    if args.only_runs and args.collect == "tested":
        parser.error("--only-runs with --collect tested: the tested reading is chosen from the round evaluations "
                     "a whole seed's run makes; run the seed without --only-runs")
    protocol = {k: v for k, v in plain_args(args).items() if k not in RUN_ONLY}
    protocol |= {"arms": [arm.name for arm in arms], "readings": list(READINGS),
                 "selection": "per seed, on the round evaluations: each arm's reading, direct RL's learning rate",
                 "heldout": "new episodes of the BC policy, read as its round evaluations chose",
                 # a preset whose settings changed builds another model: another protocol
                 "presets": {preset: PRESETS[preset] for preset in sorted({arm.preset for arm in arms})}}
    protocol = json.loads(json.dumps(protocol))  # as the kept file reads back (tuples as lists)
    # runs from before --collect / --wm-model / --variant / --rl-group-size: what those flags default to
    predates = {"collect": "sampled", "wm_model": [], "variant": None, "rl_group_size": 8}
    try:
        fix_protocol(args.out, protocol, predates=predates)
    except ValueError as error:
        parser.error(f"--out {args.out} was started with {error}")
    try:  # kept beside the result before any test episode runs; the standing figures stay until gathered
        fix_protocol(kept_records(args), protocol, predates=predates)
    except ValueError as error:
        parser.error(f"--test-seed {args.test_seed}'s episodes belong to {error}")
    for seed in args.only_seeds or args.seeds:
        run_seed(args, arms, steps, seed)
    if args.only_runs:
        print(f"runs {' '.join(args.only_runs)} done; a run without --only-runs measures and tests")
        return
    files = [kept_records(args) / f"seed_{seed}.json" for seed in args.seeds]
    if not all(f.exists() for f in files):
        print(f"waiting for seeds {[s for s, f in zip(args.seeds, files, strict=True) if not f.exists()]}")
        return
    records = [json.loads(f.read_text()) for f in files]
    publish(gather(args, arms, protocol, records), args)


if __name__ == "__main__":
    main()
