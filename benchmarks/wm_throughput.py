"""Imagined frames per second of the world-model env against the physics env with pixels.

For each batch size (1, 16, 64 by default) it steps ``worldsim/Imagined-<task>`` (the tiny
config on CPU; pass ``--config base`` on a GPU) and ``worldsim/<task>`` with
``obs_mode="pixels"`` for the same number of env steps with random actions, in the same run,
and reports env steps (= frames) per second. Speed does not depend on the weights, so the
model is untrained unless ``--world-model`` names one; the keyframes are a few scripted-expert
episodes collected first. Prints one JSON line last.

    python benchmarks/wm_throughput.py --threads 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from common import report

import worldsim  # noqa: F401  (registers the envs)
from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.runtime.device import resolve_device
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models import PRESETS, WorldModel, build_config


def frames_per_second(env: gym.vector.VectorEnv, steps: int, seed: int = 0) -> float:
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps, env.num_envs, 4)).astype(np.float32)
    env.step(actions[0])  # warm-up (allocation, first-call overheads)
    start = time.perf_counter()
    for action in actions[1:]:
        env.step(action)
    return (steps - 1) * env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--config", default="tiny", choices=list(PRESETS))
    parser.add_argument("--name", default="wm_throughput", help="write benchmarks/results/NAME.json")
    parser.add_argument("--world-model", default=None,
                        help="a trained world model (default: an untrained preset)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--frames", type=int, default=640, help="frames per measurement (at least 4 steps)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: the idle cores)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rung", default="sim-seeded", choices=("sim-seeded", "pixels"),
                        help="the imagination rung (sim-seeded, as the committed results ran; pixels also runs the "
                             "model's detector at every reset)")
    args = parser.parse_args()
    use_torch_threads(args.threads or None)
    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        keyframes = Path(tmp) / "keyframes.h5"
        collect_episodes([args.task], lambda t: ScriptedExpert(ScriptedExpertConfig(t, 0.3, 0.0, 0)), 8,
                         keyframes, num_envs=8, progress=False)
        with EpisodeReader(keyframes) as reader:
            instruction = reader.instructions[0]
        if args.world_model:
            model = WorldModel.from_pretrained(args.world_model)
        else:
            torch.manual_seed(0)
            model = WorldModel(build_config(args.config, tasks=(args.task,), instructions=(instruction,)))
        model = model.to(device).eval()
        rows = []
        for batch in args.batch_sizes:
            steps = max(4, args.frames // batch)
            imagined = gym.make_vec(f"worldsim/Imagined-{args.task}", num_envs=batch, world_model=model,
                                    keyframes=keyframes, device=device, autoreset_mode="SameStep",
                                    rung=args.rung)
            physics = gym.make_vec(f"worldsim/{args.task}", num_envs=batch, obs_mode="pixels",
                                   autoreset_mode="SameStep")
            row = {"batch": batch, "imagined_fps": round(frames_per_second(imagined, steps), 1),
                   "physics_pixels_fps": round(frames_per_second(physics, steps), 1)}
            imagined.close()
            physics.close()
            rows.append(row)
            print(row, flush=True)
    result = {"task": args.task, "config": args.config, "rung": args.rung,
              "world_model": args.world_model, "parameters": model.num_parameters(),
              "sampling_steps": model.config.sampling_steps, "image_size": model.config.image_size,
              "device": str(device), "torch_threads": torch.get_num_threads(), "rows": rows,
              "imagined_fps_at_64": next((r["imagined_fps"] for r in rows if r["batch"] == 64), None),
              "target_fps_at_64": 200}
    report(args.name, result, args)


if __name__ == "__main__":
    main()
