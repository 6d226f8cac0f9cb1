"""What caps imagined-vs-real outcome agreement where RL trains: the judge, or the dynamics?

Issue 17 asks for 90% agreement on balanced windows at the horizon RL uses from keyframes.
``eval-wm`` reports one figure per horizon: the model's judge on its imagined scene. This splits
it. Each of ``eval-wm``'s balanced keyframe windows (``keyframe_<h>_balanced``: half of them end in
a real success) is replayed once, open loop, and judged several ways:

- ``head``: the success head on the pathway's imagined positions, at the model's calibrated cut
  (``eval-wm``'s figure for a model judged by its head; computed the same way for one judged by
  the rule);
- ``head_on_recorded_positions``: the same head on the recorded positions of the same steps, and
  ``head_on_real_frames``: on the real frames, its own keypoints included. Both are what
  agreement would be with perfect dynamics: the head's own ceiling. ``best_cut`` gives each at the
  cut that is best on this very set (:func:`~worldsim.world_models.metrics.calibrate_threshold` on
  it), an oracle upper bound, not a figure a user gets;
- ``rule``: the task's rule on the imagined positions (``outcome="rule"``); ``rule_without_resting``:
  the cube's centre on the zone whatever its imagined height; ``zone_widened_<cm>``: that with
  the zone widened (an oracle sweep, like ``best_cut``);
- ``judge_trained_on_imagination``: a judge that learns the pathway's own errors. With
  ``--world-model`` a ``train-wm`` run folder, the model's low-dimensional dynamics (they never
  read frames) are rolled from every keyframe and from random starts of its training episodes,
  and a small MLP on each imagined step (positions, heights, world positions, proprio, task)
  learns whether the real episode has succeeded by that step, max-pooled over the window's
  steps as a window is judged. Its cut is calibrated on the run's validation episodes' balanced
  keyframe windows (4 to 16 steps): no held-out outcome chooses it. If it does no better than the
  head, no judge of the imagined positions will: the positions carry no more.

Beside them, the imagined cube's height above rest per step (quantiles) against the recorded one,
and the share of imagined steps whose cube the rule holds to be lifted. PushCube only: the rule
variants read its cube and zone.

    python benchmarks/studies/outcome_judges.py --world-model runs/study/test/wm \\
        --data runs/study/test/iid.h5 runs/study/test/noisier.h5 \\
        runs/study/test/iid_seed50000.h5 runs/study/test/noisier_seed50000.h5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from worldsim.data.index import split_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.families.base import ON_ZONE, RESTING_TOLERANCE
from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import CUBE_HALF
from worldsim.envs.tasks import get_task
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.evaluate import balanced_windows, held_out_bank
from worldsim.world_models.imagined_step import Rollout
from worldsim.world_models.keyframes import KeyframeRule, select_keyframes
from worldsim.world_models.layers import task_one_hot
from worldsim.world_models.metrics import (
    agreement,
    calibrate_threshold,
    real_frame_probabilities,
    row_tasks,
    window_max,
)
from worldsim.world_models.model import WorldModel
from worldsim.world_models.objects import RELATION_UNIT_M
from worldsim.world_models.replay import open_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

WIDENINGS_CM = (0.5, 1.0, 2.0, 3.0)
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
# the judge trained on imagination: small and briefly trained (a 256-wide MLP trained 3,000
# updates overfitted its 14,000 windows: its calibrated cut fell to 0.002)
JUDGE_WIDTH = 64
JUDGE_UPDATES = 600
JUDGE_BATCH = 512
JUDGE_HORIZON = 16
RANDOM_STARTS_PER_EPISODE = 4  # besides the keyframes, so both outcomes are well represented
CUT_HORIZONS = (4, 8, 12, 16)


# ---------------------------------------------------------------- the judges and what they read
# Besides the model's own judge, the same windows are judged by the rule with the zone widened
# (zone_excess), the head at the cut best on the very windows judged (best_cut, an oracle upper
# bound), or a judge trained on the model's own imagined steps (judge_features of the states
# imagined_states rolls with the low-dimensional dynamics alone).
def zone_excess(cube_xy: np.ndarray, zone_xy: np.ndarray) -> np.ndarray:
    """How far (metres, max-norm) each cube centre lies outside the band the rule counts as on
    the zone; <= 0 means on it."""
    return np.abs(cube_xy - zone_xy).max(axis=-1) - ON_ZONE


def scored(judged: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """The agreement figures a row of the table needs."""
    a = agreement(judged, real)
    return {k: a[k] for k in ("accuracy", "recall", "specificity", "episodes")}


def best_cut(scores: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """The cut most accurate on these very windows (the one a calibration on them would pick),
    and its figures: an oracle."""
    cut = calibrate_threshold(scores, real)
    return {"cut": cut, **scored(scores >= cut, real)}


def judge_features(model: WorldModel, points: torch.Tensor, heights: torch.Tensor, proprio: torch.Tensor,
                   task: torch.Tensor) -> torch.Tensor:
    """What the judge trained on imagination reads of one imagined step ``(N, D)``: the keypoints
    ``(N, E, 2)``, the positions the rules place them at, the normalized proprio and the task."""
    assert model.rules is not None
    where = model.rules.positions(points, heights) / RELATION_UNIT_M
    return torch.cat([points.flatten(1) / model.config.image_size * 2 - 1, where.flatten(1), proprio,
                      task_one_hot(task, len(model.config.tasks))], dim=1)


@torch.no_grad()
def imagined_states(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's low-dimensional dynamics alone (the proprio head and the pathway: what the
    judges read, and neither reads frames) rolled ``horizon`` steps from the recorded starts with
    the recorded actions: each step's judge features ``(N, H, D)``, the head's success
    probability ``(N, H)``, the real success ``(N, H)`` and ``valid`` ``(N, H)``."""
    cfg = model.config
    context = bank.context_rows(episodes, starts, cfg.context)
    objects = bank.recorded_objects(context)
    assert objects is not None  # the held-out and training files have state (checked by held_out_bank's caller)
    proprio, points, heights = torch.from_numpy(bank.proprio[context]), objects[0].float(), objects[1].float()
    task = torch.tensor([model.task_index(bank.infos[e].task) for e in episodes])
    ahead = starts[:, None] + 1 + np.arange(horizon)[None]
    valid = ahead <= bank.lengths[episodes][:, None]
    actions = bank.step_start[episodes][:, None] + np.minimum(ahead - 1, bank.lengths[episodes][:, None] - 1)
    observed = bank.obs_start[episodes][:, None] + np.minimum(ahead, bank.lengths[episodes][:, None])
    no_frames = torch.zeros(0)  # the dynamics read the rollout's proprio and objects alone
    features, head = [], []
    for k in range(horizon):
        norm, moved, lifted = model.step_dynamics(Rollout(no_frames, no_frames, proprio, points, heights),
                                                  torch.from_numpy(bank.actions[actions[:, k]]), task)
        assert moved is not None and lifted is not None
        features.append(judge_features(model, moved, lifted, norm, task))
        head.append(torch.sigmoid(model.judge.success_head.judge(moved, task, norm)[0]))
        proprio = torch.cat([proprio[:, 1:], model.scale.raw(norm)[:, None]], dim=1)
        points = torch.cat([points[:, 1:], moved[:, None]], dim=1)
        heights = torch.cat([heights[:, 1:], lifted[:, None]], dim=1)
    return (torch.stack(features, 1), torch.stack(head, 1), torch.from_numpy(bank.success[observed] & valid),
            torch.from_numpy(valid))


# ---------------------------------------------------------------- the study
def judge_scores(judge: nn.Module, features: torch.Tensor, valid: torch.Tensor) -> np.ndarray:
    """A window's score: the judge's highest success probability over its valid steps."""
    with torch.no_grad():
        return torch.sigmoid(judge(features).squeeze(-1)).masked_fill(~valid, 0.0).max(1).values.numpy()


def fit_imagination_judge(model: WorldModel, run: Path, seed: int) -> tuple[nn.Module, float, int]:
    """The judge of ``judge_trained_on_imagination`` (module docstring) for the model of the
    ``train-wm`` run folder ``run``, its cut and its number of training windows."""
    settings = json.loads((run / "config.json").read_text())
    with EpisodeReader(settings["data"]) as reader:  # the run's own split: its tasks, fraction and seed
        tasks = [get_task(t).name for t in settings["task"]] or reader.tasks
        indices = np.array([info.index for info in reader.episode_info() if info.task in tasks])
        train_pos, val_pos = split_episodes(len(indices), settings["val_fraction"], settings["seed"])
        train = EpisodeBank(reader, tasks=tasks, episodes=indices[train_pos])
        val = EpisodeBank(reader, tasks=tasks, episodes=indices[val_pos])
    keys = select_keyframes(train, KeyframeRule())
    rng = np.random.default_rng(seed)
    extra = rng.integers(0, len(train), RANDOM_STARTS_PER_EPISODE * len(train))
    episodes = np.concatenate([keys.episode, extra])
    starts = np.concatenate([keys.step, (rng.random(len(extra)) * train.lengths[extra]).astype(np.int64)])
    features, _, success, valid = imagined_states(model, train, episodes, starts, JUDGE_HORIZON)
    reached = torch.cummax(success.float(), dim=1).values  # the real episode has succeeded by step k
    torch.manual_seed(seed)
    judge = nn.Sequential(nn.Linear(features.shape[-1], JUDGE_WIDTH), nn.SiLU(), nn.Linear(JUDGE_WIDTH, JUDGE_WIDTH),
                          nn.SiLU(), nn.Linear(JUDGE_WIDTH, 1))
    optimizer = torch.optim.AdamW(judge.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(JUDGE_UPDATES):
        b = torch.randint(0, len(features), (JUDGE_BATCH,))
        pooled = torch.cummax(judge(features[b]).squeeze(-1).masked_fill(~valid[b], -30.0), dim=1).values
        y, w = reached[b], valid[b].float()
        # each class weighs half, as on the balanced windows it is judged on
        weight = w * (y / (y * w).sum().clamp_min(1) + (1 - y) / ((1 - y) * w).sum().clamp_min(1)) / 2
        loss = (F.binary_cross_entropy_with_logits(pooled, y, reduction="none") * weight).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    keys = select_keyframes(val, KeyframeRule())
    scores, real = [], []
    for h in CUT_HORIZONS:
        even = balanced_windows(val, keys.episode, keys.step, h, len(keys.episode), seed)
        f, _, s, v = imagined_states(model, val, keys.episode[even], keys.step[even], h)
        scores.append(judge_scores(judge, f, v))
        real.append(s.any(1).numpy())
    return judge.eval(), calibrate_threshold(np.concatenate(scores), np.concatenate(real)), len(episodes)


@torch.no_grad()
def real_probabilities(model: WorldModel, bank: EpisodeBank) -> tuple[np.ndarray, np.ndarray]:
    """The head's success probability on every recorded observation row of ``bank``: from the
    real frame (its keypoints found in it) and from the recorded positions."""
    points = bank.recorded_objects(np.arange(len(bank.images)))[0].float()
    proprio = model.scale.normalize(torch.from_numpy(bank.proprio))
    logit = model.judge.success_head.judge(points, torch.from_numpy(row_tasks(model, bank)), proprio)[0]
    return real_frame_probabilities(model, bank), torch.sigmoid(logit).numpy()


def judge_windows(model: WorldModel, bank: EpisodeBank, on_real: tuple[np.ndarray, np.ndarray], episodes: np.ndarray,
                  starts: np.ndarray, horizon: int, seed: int, trained: tuple[nn.Module, float] | None = None
                  ) -> dict[str, Any]:
    """Every judge's agreement over the windows ``episodes``/``starts`` of ``horizon`` steps;
    ``on_real``: :func:`real_probabilities` of ``bank``; ``trained``: the judge trained on
    imagination and its cut (:func:`fit_imagination_judge`), if any."""
    run = open_loop(model, bank, episodes, starts, horizon, generator=torch.Generator().manual_seed(seed))
    assert run.points is not None and run.heights is not None and model.rules is not None
    real = (run.success[:, 1:] & run.valid[:, 1:]).any(axis=1)
    spec = get_task(bank.infos[int(episodes[0])].task)
    cube, zone = ENTITIES.index(f"{spec.obj}_cube"), ENTITIES.index(f"{spec.goal}_zone")
    n, steps = run.points.shape[:2]
    where = model.rules.positions(torch.from_numpy(run.points).float().flatten(0, 1),
                                  torch.from_numpy(run.heights).float().flatten(0, 1)).reshape(n, steps, -1, 3).numpy()
    task = torch.full((n * steps,), model.task_index(spec.name))
    points, proprio = torch.from_numpy(run.points).float().flatten(0, 1), torch.from_numpy(run.imagined_proprio)
    rule = model.rules.outcome(task, proprio.flatten(0, 1), points,
                               torch.from_numpy(run.heights).float().flatten(0, 1))[0]
    with torch.no_grad():  # as imagination judges with the head, whatever this model's own outcome is
        logit = model.judge.success_head.judge(points, task, model.scale.normalize(proprio.flatten(0, 1)))[0]
    # how far inside the zone's band the cube came at its closest (negative: short of it)
    inside = window_max(-zone_excess(where[:, :, cube, :2], where[:, :, zone, :2]), run.valid)
    rows = bank.obs_start[episodes][:, None] + starts[:, None] + np.arange(steps)[None]
    rows = np.minimum(rows, (bank.obs_start[episodes] + bank.lengths[episodes])[:, None])
    on_frames, on_positions = (p[rows] for p in on_real)
    cut = model.config.judge.success_threshold
    head = window_max(torch.sigmoid(logit).reshape(n, steps).numpy(), run.valid)
    frames, positions = window_max(on_frames, run.valid), window_max(on_positions, run.valid)
    lifted = where[:, 1:, cube, 2] > CUBE_HALF + RESTING_TOLERANCE
    recorded = bank.recorded_objects(rows)[1].numpy()[:, :, cube]
    learned = {}
    if trained is not None:  # read from this very replay: its dynamics are what imagined_states rolls
        normalized = model.scale.normalize(proprio.flatten(0, 1))
        features = judge_features(model, points, torch.from_numpy(run.heights).float().flatten(0, 1), normalized,
                                  task).reshape(n, steps, -1)[:, 1:]
        scores = judge_scores(trained[0], features, torch.from_numpy(run.valid[:, 1:]))
        learned = {"judge_trained_on_imagination": {**scored(scores >= trained[1], real),
                                                    "best_cut": best_cut(scores, real)}}
    return {
        "windows": n, "base_rate": float(real.mean()),
        "head": scored(head >= cut, real),
        "head_on_recorded_positions": {**scored(positions >= cut, real), "best_cut": best_cut(positions, real)},
        "head_on_real_frames": {**scored(frames >= cut, real), "best_cut": best_cut(frames, real)},
        "head_best_cut": best_cut(head, real),
        "rule": scored(window_max(rule.reshape(n, steps).numpy().astype(float), run.valid) > 0, real),
        **learned,
        "rule_without_resting": scored(inside >= 0, real),
        **{f"zone_widened_{w:g}cm": scored(inside >= -w / 100, real) for w in WIDENINGS_CM},
        "imagined_steps_lifted": float(lifted[run.valid[:, 1:]].mean()),
        "cube_above_rest_mm": {
            "imagined": np.round(1000 * np.quantile(where[:, :, cube, 2] - CUBE_HALF, QUANTILES, axis=0), 1).tolist(),
            "recorded": np.round(1000 * np.quantile(recorded - CUBE_HALF, QUANTILES, axis=0), 1).tolist()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", type=Path, required=True, help="a model with the object pathway")
    parser.add_argument("--data", type=Path, nargs="+", required=True, help="held-out PushCube files (with state)")
    parser.add_argument("--horizons", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--windows", type=int, default=256, help="at most this many windows per horizon")
    parser.add_argument("--seed", type=int, default=0, help="eval-wm's seed: the same sets and windows")
    parser.add_argument("--tag", default="", help="suffix of the result file")
    args = parser.parse_args()
    use_torch_threads(1)
    model = WorldModel.from_pretrained(args.world_model)
    model.eval()
    if model.rules is None:
        parser.error(f"--world-model {args.world_model}: no object pathway, so no imagined positions to judge")
    trained, judge = None, {}
    if "data" in json.loads((args.world_model / "config.json").read_text()):  # a train-wm run folder
        network, cut, windows = fit_imagination_judge(model, args.world_model, args.seed)
        trained, judge = (network, cut), {"cut": cut, "training_windows": windows}
        print(f"judge trained on imagination: {windows} windows, cut {cut:.3f}", flush=True)
    sets = {}
    for path in args.data:
        bank = held_out_bank(model, path, balance=True, seed=args.seed).bank
        keys = select_keyframes(bank, KeyframeRule())
        on_real = real_probabilities(model, bank)
        sets[path.stem] = {}
        for h in args.horizons:
            even = balanced_windows(bank, keys.episode, keys.step, h, args.windows, args.seed)
            sets[path.stem][f"keyframe_{h}_balanced"] = judge_windows(model, bank, on_real, keys.episode[even],
                                                                      keys.step[even], h, args.seed, trained)
            row = sets[path.stem][f"keyframe_{h}_balanced"]
            print(f"{path.stem} {h} steps: head {row['head']['accuracy']:.3f}, on real frames "
                  f"{row['head_on_real_frames']['accuracy']:.3f}, rule {row['rule']['accuracy']:.3f}, without "
                  f"resting {row['rule_without_resting']['accuracy']:.3f}"
                  + (f", trained on imagination {row['judge_trained_on_imagination']['accuracy']:.3f}"
                     if trained else ""), flush=True)
    report(f"outcome_judges{'_' + args.tag if args.tag else ''}", {
        "world_model": str(args.world_model), "outcome": model.config.judge.outcome,
        "success_threshold": model.config.judge.success_threshold, "judge_trained_on_imagination": judge or None,
        "sets": sets}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
