"""Imagined frames per second of the world-model env against the physics env with pixels.

For each batch size (1, 16, 64 by default) and action chunk (1, and 4 as TinyVLA acts, by
default) it steps ``worldsim/Imagined-<task>`` (the tiny config on CPU; pass ``--config base`` on
a GPU) and ``worldsim/<task>`` with ``obs_mode="pixels"`` for the same number of env steps with
random actions, in the same run, and reports env steps per second (the steps each chunk
executed, ``info["chunk_steps"]``). With chunks of K a model that draws each frame from the first
(the tiny preset) draws one frame per chunk, the one returned, so that its steps per second are
not its frames per second. Speed depends on the weights only through how often episodes end (a
reset reads the start frames; an untrained model's episodes end at random), so a trained
``--world-model`` gives the rates training sees; the keyframes are a few scripted-expert
episodes collected first. Prints one JSON line last.

    python benchmarks/wm_throughput.py --threads 1 --world-model runs/quickstart/coevolve/round_0/world_model
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


def steps_per_second(env: gym.vector.VectorEnv, calls: int, chunk: int, seed: int = 0) -> float:
    """Env steps per second over ``calls`` calls of ``step`` with random chunks of ``chunk`` actions
    (after one warm-up call: allocation, first-call overheads)."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (calls + 1, env.num_envs, chunk, 4)).astype(np.float32)
    env.step(actions[0])
    executed, start = 0, time.perf_counter()
    for action in actions[1:]:
        executed += int(env.step(action)[4]["chunk_steps"].sum())
    return executed / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--config", default="tiny", choices=list(PRESETS))
    parser.add_argument("--name", default="wm_throughput", help="write benchmarks/results/NAME.json")
    parser.add_argument("--world-model", default=None,
                        help="a trained world model (default: an untrained preset)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 4], help="actions per step() call")
    parser.add_argument("--frames", type=int, default=640,
                        help="env steps per measurement (at least 4 calls of step())")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: the idle cores)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rung", default="sim-seeded", choices=("sim-seeded", "pixels"),
                        help="the imagination rung (sim-seeded, as the committed results ran; pixels also runs the "
                             "model's detector at every reset)")
    args = parser.parse_args()
    if min(args.batch_sizes + args.chunks) < 1:
        parser.error("--batch-sizes and --chunks take positive integers")
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
            imagined = gym.make_vec(f"worldsim/Imagined-{args.task}", num_envs=batch, world_model=model,
                                    keyframes=keyframes, device=str(device), autoreset_mode="SameStep",
                                    rung=args.rung)
            physics = gym.make_vec(f"worldsim/{args.task}", num_envs=batch, obs_mode="pixels",
                                   autoreset_mode="SameStep")
            for chunk in args.chunks:
                calls = max(4, args.frames // (batch * chunk))
                row = {"batch": batch, "chunk": chunk,
                       "imagined_steps_per_s": round(steps_per_second(imagined, calls, chunk), 1),
                       "physics_pixels_steps_per_s": round(steps_per_second(physics, calls, chunk), 1)}
                rows.append(row)
                print(row, flush=True)
            imagined.close()
            physics.close()
    result = {"task": args.task, "config": args.config, "rung": args.rung,
              "world_model": args.world_model, "parameters": model.num_parameters(),
              "sampling_steps": model.config.sampling_steps, "image_size": model.config.image_size,
              "frames_on_demand": model.frames_on_demand,
              "device": str(device), "torch_threads": torch.get_num_threads(), "rows": rows,
              "imagined_steps_per_s_at_64": {r["chunk"]: r["imagined_steps_per_s"] for r in rows if r["batch"] == 64},
              "target_steps_per_s_at_64": 200}
    report(args.name, result, args)


if __name__ == "__main__":
    main()
