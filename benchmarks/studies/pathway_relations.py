"""Does the object pathway carry a pushed cube as far as it really goes? The pathway alone, with
each object's offset from the gripper among its inputs, and trained on rollouts
of its own of ``dynamics.horizon`` 8 or 16 steps, fitted on one episode file and rolled open loop
on another.

Each variant is a fresh ``tiny`` model's low-dimensional dynamics (the proprio head and the
object pathway) fitted by :meth:`~worldsim.world_models.WorldModel.dynamics_loss` for
``--updates`` AdamW steps (train-wm's recipe for them: 800 training steps x 2 updates, warm-up
and cosine decay) on ``--data``; the frame model is not trained: it plays no part in where the
pathway puts the cube. Then, on ``--held-out`` windows of ``--horizon`` steps, the pathway is
rolled on its own predictions with the recorded gripper motion, and the cube's predicted
displacement is compared with its real one where the real cube moved more than 2 px: the share
of the real displacement the prediction covers along it (1: as far as the real cube) and the end
error in cm on the table; plus how far it moves cubes that really stayed. One step ahead, from
recorded contexts, the same share on the steps where the cube moved more than 2 mm, split by
what moved it: the paddle (low, its centre within 5 cm of the cube's) or nothing the step shows
(the cube sliding or tipping on after a push).

The ``none`` rows of the committed results (the pathway without the offsets) were measured at
commit b949d55, before reading the offsets stopped being an option.

    python benchmarks/studies/pathway_relations.py --data runs/study/test/train.h5 --held-out runs/study/test/iid.h5 \\
        --variants relations relations_h16
    python benchmarks/studies/pathway_relations.py \\
        ... --seed 1 --variants relations relations_h16  # pathway_relations_s1.json
    python benchmarks/studies/pathway_relations.py \\
        ... --updates 800 --variants relations_h16 --tag 800_updates  # [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from worldsim.data.index import split_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.observations import ENTITIES
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models import WorldModel
from worldsim.world_models.config import build_config
from worldsim.world_models.data import EpisodeBank

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

WARMUP = 200
MOVED_PX = 2.0
MOVED_M = 0.002
PUSHED = ENTITIES.index("red_cube")  # PushCube's cube
PADDLE_LOW_M = 0.05  # TCP below this, its centre within PADDLE_REACH_M of the cube's: the paddle pushes it
PADDLE_REACH_M = 0.05
# each variant's pathway settings (relations: the tiny preset's)
VARIANTS: dict[str, dict[str, dict[str, int]]] = {
    "relations": {"dynamics": {"horizon": 8}},
    "relations_h16": {"dynamics": {"horizon": 16}}}


def fit(bank: EpisodeBank, inputs: dict[str, dict[str, int]], updates: int, seed: int) -> tuple[WorldModel, float]:
    torch.manual_seed(seed)
    instructions = tuple(bank.instructions[t] for t in bank.tasks)
    model = WorldModel(build_config("tiny", tasks=tuple(bank.tasks), instructions=instructions,
                                    image_size=bank.image_shape[0], **inputs))
    model.set_normalization(bank.proprio.mean(axis=0), bank.proprio.std(axis=0))
    parameters = model.dynamics_parameters()
    optimizer = torch.optim.AdamW(parameters, lr=1e-3, weight_decay=1e-5)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP) * (
        0.1 + 0.45 * (1 + math.cos(math.pi * min(s, updates) / updates))))
    windows, noise = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 2)
    task_ids = {t: model.task_index(t) for t in bank.tasks}
    cfg = model.config
    start = time.time()
    for _ in range(updates):
        loss, _ = model.dynamics_loss(bank.state_windows(cfg.dynamics.batch, cfg.context, cfg.dynamics.horizon,
                                                         task_ids, windows), noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
    return model.eval(), time.time() - start


@torch.no_grad()
def carried(model: WorldModel, bank: EpisodeBank, horizon: int, windows: int, seed: int) -> dict[str, float]:
    cfg = model.config
    task_ids = {t: model.task_index(t) for t in bank.tasks}
    w = bank.state_windows(windows, cfg.context, horizon, task_ids, torch.Generator().manual_seed(seed))
    points, heights = w["points"], w["heights"]
    for k in range(horizon):
        moved, lifted = model.move_objects(points, heights, w["proprio"][:, k:k + cfg.context],
                                           w["proprio"][:, k + cfg.context], w["actions"][:, k], w["task"])
        points = torch.cat([points[:, 1:], moved[:, None]], dim=1)
        heights = torch.cat([heights[:, 1:], lifted[:, None]], dim=1)
    done = w["valid"][:, -1]
    start = w["points"][done, -1, PUSHED]
    real, predicted = w["target"][done, -1, PUSHED] - start, points[done, -1, PUSHED] - start
    distance = real.norm(dim=-1)
    pushed = distance > MOVED_PX
    along = (predicted * real).sum(-1) / distance.clamp_min(1e-6) / distance.clamp_min(1e-6)
    camera = model.objects.camera

    def on_table(pixels: torch.Tensor, height: torch.Tensor) -> torch.Tensor:
        return camera.unproject(pixels, height)[..., :2]

    end_cm = 100 * (on_table(points[done, -1, PUSHED], heights[done, -1, PUSHED])
                    - on_table(w["target"][done, -1, PUSHED], w["target_heights"][done, -1, PUSHED])).norm(dim=-1)
    return {"windows": int(done.sum()), "pushed": int(pushed.sum()), **one_step_shares(model, bank, windows, seed),
            "real_displacement_px_median": round(float(distance[pushed].median()), 2),
            "predicted_displacement_px_median": round(float(predicted[pushed].norm(dim=-1).median()), 2),
            "share_of_real_displacement_median": round(float(along[pushed].median()), 3),
            "end_error_cm_median": round(float(end_cm[pushed].median()), 2),
            "unpushed_drift_px_mean": round(float(predicted[~pushed].norm(dim=-1).mean()), 2)}


@torch.no_grad()
def one_step_shares(model: WorldModel, bank: EpisodeBank, windows: int, seed: int) -> dict[str, float | int]:
    """The median share of the cube's real move the pathway predicts one step ahead from recorded
    contexts, on steps where the paddle pushes it and on steps where it moves on its own."""
    cfg = model.config
    w = bank.state_windows(8 * windows, cfg.context, 1, {t: model.task_index(t) for t in bank.tasks},
                           torch.Generator().manual_seed(seed + 3))
    moved, lifted = model.move_objects(w["points"], w["heights"], w["proprio"][:, :cfg.context],
                                       w["proprio"][:, cfg.context], w["actions"][:, 0], w["task"])
    unproject = model.objects.camera.unproject
    before = unproject(w["points"][:, -1, PUSHED], w["heights"][:, -1, PUSHED])
    real = (unproject(w["target"][:, 0, PUSHED], w["target_heights"][:, 0, PUSHED]) - before)[:, :2]
    predicted = (unproject(moved[:, PUSHED], lifted[:, PUSHED]) - before)[:, :2]
    tcp = w["proprio"][:, cfg.context, :3]
    paddle = (tcp[:, 2] < PADDLE_LOW_M) & ((before[:, :2] - tcp[:, :2]).norm(dim=-1) < PADDLE_REACH_M)
    moving = w["valid"][:, 0] & (real.norm(dim=-1) > MOVED_M)
    share = (predicted * real).sum(-1) / (real * real).sum(-1).clamp_min(1e-12)
    out: dict[str, float | int] = {}
    for name, rows in (("pushed", moving & paddle), ("sliding", moving & ~paddle)):
        out[f"one_step_{name}_steps"] = int(rows.sum())
        out[f"one_step_{name}_share_median"] = round(float(share[rows].median()), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="episodes with state to fit on (90%% of them)")
    parser.add_argument("--held-out", type=Path, required=True, help="episodes with state to roll out on")
    parser.add_argument("--updates", type=int, default=1600)
    parser.add_argument("--horizon", type=int, default=16)
    parser.add_argument("--windows", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tag", default="", help="suffix of the result file's name")
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS),
                        help="the pathway's settings")
    args = parser.parse_args()
    use_torch_threads(args.threads)
    with EpisodeReader(args.data) as reader:
        indices = np.array([info.index for info in reader.episode_info()])
        train, _ = split_episodes(len(indices), 0.1, args.seed)
        bank = EpisodeBank(reader, tasks=reader.tasks, episodes=indices[train])
    with EpisodeReader(args.held_out) as reader:
        held = EpisodeBank(reader, tasks=reader.tasks)
    variants = {}
    for name in args.variants:
        model, seconds = fit(bank, VARIANTS[name], args.updates, args.seed)
        variants[name] = {**carried(model, held, args.horizon, args.windows, args.seed),
                          "fit_seconds": round(seconds, 1)}
        print(name, variants[name], flush=True)
    report("pathway_relations" + (f"_s{args.seed}" if args.seed else "") + (f"_{args.tag}" if args.tag else ""), {
        "variant_settings": {name: VARIANTS[name] for name in args.variants}, "data": str(args.data),
        "held_out": str(args.held_out), "fit_episodes": len(bank), "updates": args.updates, "horizon": args.horizon,
        "seed": args.seed, "variants": variants}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
