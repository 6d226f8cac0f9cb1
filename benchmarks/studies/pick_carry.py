"""Does the world model carry the cube when physics does? PickPlaceCube's lifts and placements,
with the recorded gripper and with the gripper the model imagines.

Closed loop, PickPlaceCube's models pay for grasps that fail in physics (the ladder's
``start_agreement`` figures). This study asks where those false successes come from, on real
episodes whose outcome is known: each seed's ``pixels`` model (``--ladder``) replays the recorded
actions of the ladder's held-out BC episodes (both readings: by the mean action and sampled)
from their starts, two ways:

- **recorded gripper**: the object pathway alone moved by the recorded gripper motion
  (:func:`worldsim.world_models.replay.pathway_replay`): the carry itself, whether the pathway
  lifts the cube where the real gripper lifted it;
- **imagined gripper**: the whole model on the ``sim-seeded`` rung (the objects start at the
  recorded state, so the start is the same), the gripper moved by the model's own proprio
  dynamics and the frames drawn (:func:`~worldsim.world_models.replay.open_loop`).

For each, against physics, per episode: the cube lifted (its centre 3 cm above its resting height
at some step), and placed (the task's success rule met at some step, judged on the pathway's
positions and the gripper's, recorded or imagined): how many of each physics shows, how many the
model shows, and the false and missed ones; and how far the imagined gripper is from the real
one (its TCP and its finger gap).

Beside each seed's ladder model, the same model trained again with the gripper's correction
reading the cubes (``sees-cubes``: ``[model.proprio] sees_cubes = true``, everything else, the data
and the seed as the ladder trained it; trained under ``--out`` by ``worldsim train-wm``, about 10
minutes a seed at 1 thread): a gripper blind to the cubes learns the average of a grasp that
holds (the fingers stop on the cube) and one that closes on nothing. Writes
``benchmarks/studies/results/pick_carry.json``; each seed's figures are kept under ``--out``.

    python benchmarks/studies/pick_carry.py --ladder runs/ladder_pick_tested runs/ladder_pick --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # anchor_clearing.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from anchor_clearing import trained  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402

LIFT_M = 0.03
"""The cube counts as lifted once its centre is this far above its resting height."""
READINGS = ("mean", "sampled")
MODELS = {"ladder": {}, "sees-cubes": {"proprio": {"sees_cubes": True}}}
"""Each model replayed: the ladder's own, and the variant trained again with these changes."""


def confusion(real: np.ndarray, imagined: np.ndarray) -> dict[str, int]:
    """How many episodes physics and the model each show the event in, and the false and missed ones."""
    return {"real": int(real.sum()), "imagined": int(imagined.sum()), "both": int((real & imagined).sum()),
            "false": int((imagined & ~real).sum()), "missed": int((real & ~imagined).sum())}


def placed(model: Any, bank: Any, proprio: np.ndarray, points: np.ndarray, heights: np.ndarray,
           valid: np.ndarray) -> np.ndarray:
    """Whether the task's rule holds at some valid step of each episode ``(N,)``, on raw proprio
    ``(N, T, 4)``, the objects' image positions ``(N, T, E, 2)`` and heights ``(N, T, E)``."""
    import torch

    n, t = valid.shape
    task = torch.tensor([model.task_index(bank.infos[j].task) for j in range(n)]).repeat_interleave(t)
    with torch.no_grad():
        success, _ = model.rules.outcome(task, torch.from_numpy(proprio.reshape(n * t, -1)).float(),
                                         torch.from_numpy(points.reshape(n * t, *points.shape[2:])).float(),
                                         torch.from_numpy(heights.reshape(n * t, -1)).float())
    return (success.numpy().reshape(n, t) & valid).any(1)


def replay_reading(model: Any, heldout: Path, seed: int) -> dict[str, Any]:
    """Both replays of ``heldout``'s episodes against physics."""
    import torch

    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.envs.observations import ENTITY_HEIGHTS, task_entities
    from worldsim.envs.tasks import get_task
    from worldsim.world_models.data import EpisodeBank
    from worldsim.world_models.replay import open_loop, pathway_replay

    bank = EpisodeBank(heldout)
    n, horizon = len(bank), int(bank.lengths.max())
    every, zeros = np.arange(n), np.zeros(n, np.int64)
    steps = np.minimum(np.arange(horizon + 1)[None], bank.lengths[:, None])
    rows = bank.obs_start[:, None] + steps
    valid = np.arange(horizon + 1)[None] <= bank.lengths[:, None]
    cube = np.array([int(task_entities(get_task(info.task))[0]) for info in bank.infos])
    rest = ENTITY_HEIGHTS[cube][:, None]
    assert bank.entity_heights is not None
    real_lifted = ((bank.entity_heights[rows, cube[:, None]] - rest > LIFT_M) & valid).any(1)
    real_placed = np.array([bool(bank.success[r].any()) for r in rows])
    points, heights = pathway_replay(model, bank, every, zeros, horizon)
    run = open_loop(model, bank, every, zeros, horizon, imagination=ImaginationConfig(rung="sim-seeded"),
                    generator=torch.Generator().manual_seed(seed))
    assert run.points is not None and run.heights is not None
    out: dict[str, Any] = {"episodes": n, "real_successes": int(real_placed.sum())}
    for name, proprio, p, h in (("recorded_gripper", bank.proprio[rows], points, heights),
                                ("imagined_gripper", run.imagined_proprio, run.points, run.heights)):
        lifted = ((h[np.arange(n), :, cube] - rest > LIFT_M) & valid).any(1)
        out[name] = {"lifted": confusion(real_lifted, lifted),
                     "placed": confusion(real_placed, placed(model, bank, proprio, p, h, valid))}
    apart = run.imagined_proprio - run.real_proprio
    tcp = np.linalg.norm(apart[..., :3], axis=-1)[valid]
    out["imagined_gripper"]["tcp_cm_mean"] = round(100 * float(tcp.mean()), 3)
    out["imagined_gripper"]["gap_cm_mean"] = round(100 * float(np.abs(apart[..., 3])[valid].mean()), 3)
    return out


def study_seed(ladder: Path, seed: int, out: Path) -> dict[str, Any]:
    """Both held-out readings replayed by each of :data:`MODELS` for one seed (kept in ``out``:
    read back when there)."""
    from worldsim.runtime.run_logging import write_json
    from worldsim.world_models.model import WorldModel

    run = ladder / f"pixels_s{seed}" / "round_0"
    row: dict[str, Any] = {}
    for name, changes in MODELS.items():
        kept = out / f"{ladder.name}_{name}_s{seed}.json"
        if not kept.exists():
            wm = trained(run / "wm", changes, run / "all.h5", out / f"{ladder.name}_{name}_s{seed}" / "wm")
            model = WorldModel.from_pretrained(wm).eval()
            write_json(kept, {reading: replay_reading(model, ladder / f"base_s{seed}" / f"heldout_{reading}.h5", seed)
                              for reading in READINGS})
        row[name] = json.loads(kept.read_text())
    return row


def pooled(seeds: dict[str, Any]) -> dict[str, Any]:
    """Each count summed over the seeds, per model, reading, gripper and event, and the gripper's
    errors averaged."""
    first = next(iter(seeds.values()))
    out: dict[str, Any] = {}
    for name in MODELS:
        out[name] = {}
        for reading in READINGS:
            entry = {gripper: {event: {key: sum(s[name][reading][gripper][event][key] for s in seeds.values())
                                       for key in first[name][reading][gripper][event]}
                               for event in ("lifted", "placed")}
                     for gripper in ("recorded_gripper", "imagined_gripper")}
            for key in ("tcp_cm_mean", "gap_cm_mean"):
                entry["imagined_gripper"][key] = round(float(np.mean(
                    [s[name][reading]["imagined_gripper"][key] for s in seeds.values()])), 3)
            out[name][reading] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, nargs="+", required=True, help="finished PickPlaceCube ladder runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/pick_carry"), help="each seed's figures")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (cores are shared)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    ladders: dict[str, Any] = {}
    for ladder in args.ladder:
        seeds = {str(seed): study_seed(ladder, seed, args.out) for seed in args.seeds}
        ladders[str(ladder)] = {"seeds": seeds, "pooled": pooled(seeds)}
        print(f"{ladder}: {json.dumps(ladders[str(ladder)]['pooled'])}", file=sys.stderr)
    report("pick_carry", {"ladders": ladders, "lift_m": LIFT_M}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
