"""World-model commands: ``worldsim train-wm``, ``worldsim imagine`` and ``worldsim eval-wm``.

    worldsim train-wm --data data/push.h5 --config tiny --out runs/wm_push
    worldsim imagine --world-model runs/wm_push --data data/push_val.h5 --policy expert --episodes 8 \\
                     --out imagined.mp4
    worldsim eval-wm --world-model runs/wm_push --data data/push_val.h5
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldsim.world_models.train import MODEL_DIR, TrainWMConfig


@dataclass
class TrainWM(TrainWMConfig):
    """Train a world model (next-frame diffusion + proprio + success heads) on recorded episodes,
    or fine-tune one on new episodes with --init (runs under torchrun too)."""

    def run(self) -> dict[str, Any]:
        from rich.console import Console

        from worldsim.world_models.train import train_world_model

        summary = train_world_model(self)
        Console().print(summary)
        Console().print(f"world model -> {self.out / MODEL_DIR}")
        return summary


@dataclass
class Imagine:
    """Imagine episodes from real starts and save them beside reality (real | imagined).

    With --policy expert the recorded actions of each held-out episode are replayed in
    imagination from the episode's first frame (the scripted expert reads the `state`
    observation, which imagination does not produce; replaying its recorded actions gives the
    exact counterpart of the real frames). With a policy checkpoint (a pixel policy), the policy
    acts on the imagined frames; the left column then shows the recorded episode from the same
    start, for reference."""

    world_model: Path
    """World model folder or train-wm run."""
    data: Path
    """Episode file whose episodes give the starts (and the replayed actions)."""
    policy: str = "expert"
    """"expert": replay the recorded actions; else a pixel policy checkpoint or run folder."""
    episodes: int = 8
    """Episodes to imagine (the file's first ones of the model's tasks)."""
    out: Path = Path("imagined.mp4")
    """Video path (.mp4, or .gif): the episodes one after another."""
    horizon: int | None = None
    """Imagined steps per episode (default: the longest episode of the selection)."""
    sampling_steps: int | None = None
    """Denoising steps per frame (default: the model's)."""
    seed: int = 0
    """Seed of the diffusion noise."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""

    def run(self) -> Path:
        from rich.console import Console

        from worldsim.data.datasets import EpisodeReader
        from worldsim.policies import load_policy
        from worldsim.runtime.video import check_video_path, write_video
        from worldsim.world_models import EpisodeBank, WorldModel
        from worldsim.world_models.replay import open_loop, side_by_side

        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        check_video_path(self.out)
        if self.episodes < 1:
            raise ValueError(f"--episodes {self.episodes} must be >= 1")
        model = WorldModel.from_pretrained(self.world_model)
        policy = None if self.policy == "expert" else load_policy(self.policy)
        with EpisodeReader(self.data) as reader:
            chosen = [i.index for i in reader.episode_info() if i.task in model.config.tasks][:self.episodes]
            if not chosen:
                raise ValueError(f"--data {self.data} holds episodes of {', '.join(reader.tasks)}; the world "
                                 f"model knows only {', '.join(model.config.tasks)}")
            bank = EpisodeBank(reader, episodes=chosen)
        if policy is not None:
            for task in bank.tasks:
                policy.check_task(bank.instructions[task])
        horizon = self.horizon or int(bank.lengths.max())
        run = open_loop(model, bank, np.arange(len(bank)), np.zeros(len(bank), np.int64), horizon,
                        sampling_steps=self.sampling_steps, policy=policy,
                        generator=torch.Generator().manual_seed(self.seed))
        clips = [side_by_side(run, i) for i in range(len(bank))]
        path = write_video(self.out, np.concatenate(clips), fps=10)
        threshold = model.config.success_threshold
        agree = [(run.success_prob[i][run.valid[i]] >= threshold).any() for i in range(len(bank))]
        Console().print(f"{len(bank)} episodes, imagined success {np.mean(agree):.0%} "
                        f"(recorded: {np.mean([info.success for info in bank.infos]):.0%}) -> {path}")
        return path


@dataclass
class EvalWM:
    """Fidelity of a world model on held-out episodes: open-loop replay of the real actions from
    episode starts and from keyframes; PSNR and SSIM per step, success agreement, a plot of
    error growth and side-by-side videos."""

    world_model: Path
    """World model folder or train-wm run."""
    data: Path
    """Held-out episode file (not the one trained on)."""
    episodes: int | None = None
    """Use only the file's first N episodes (of the model's tasks)."""
    horizon: int = 32
    """Imagined steps of the PSNR/SSIM curves."""
    out: Path | None = None
    """Folder for fidelity.json, error_growth.png and videos (default: <world-model>/eval)."""
    videos: int = 4
    """Side-by-side videos of full replays."""
    success_threshold: float | None = None
    """Success probability at or above which an imagined frame is a success (default: the
    model's, calibrated by train-wm)."""
    sampling_steps: int | None = None
    """Denoising steps per frame (default: the model's)."""
    seed: int = 0
    """Seed of the diffusion noise and of the keyframe choice."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""

    def run(self) -> dict[str, Any]:
        from rich.console import Console
        from rich.table import Table

        from worldsim.world_models.evaluate import evaluate_world_model

        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        if self.horizon < 1:
            raise ValueError(f"--horizon {self.horizon} must be >= 1")
        out = self.out or self.world_model / "eval"
        report = evaluate_world_model(self.world_model, self.data, episodes=self.episodes,
                                      horizon=self.horizon, success_threshold=self.success_threshold,
                                      sampling_steps=self.sampling_steps, seed=self.seed, out=out,
                                      videos=self.videos)
        table = Table(title=f"{self.world_model} on {self.data} ({report['held_out']['episodes']} episodes)")
        for column in ("start", "replays", "PSNR@1", "PSNR@8", f"PSNR@{self.horizon}", "SSIM@8"):
            table.add_column(column, justify="left" if column == "start" else "right")
        for name in ("episode_start", "keyframe"):
            part = report[name]
            if not part["replays"]:
                continue
            at8 = min(8, len(part["psnr"])) - 1
            table.add_row(name.replace("_", " "), str(part["replays"]), f"{part['psnr'][0]:.2f}",
                          f"{part['psnr'][at8]:.2f}", f"{part['psnr'][-1]:.2f}", f"{part['ssim'][at8]:.3f}")
        console = Console()
        console.print(table)
        s, on_real = report["success"], report["success_head_on_real_frames"]["episode"]
        console.print(f"success agreement at threshold {report['success_threshold']:.3f} (base rate "
                      f"{s['base_rate']:.0%}): accuracy {s['accuracy']:.1%}, balanced {s['balanced_accuracy']:.1%} "
                      f"over {s['episodes']} full replays; from keyframes: "
                      + ", ".join(f"{h}: {r['accuracy']:.1%} (base {r['base_rate']:.0%})"
                                  for h, r in report["success_by_horizon"].items() if r and h != "full")
                      + f"; the head on the real frames: {on_real['accuracy']:.1%} -> {out}")
        contact = report["object_error_after_contact"]
        if contact is not None:
            console.print(f"task object position error after first contact (median of {contact['replays']}, "
                          f"cm on the table): {contact['at_horizon_cm']:.1f} at step "
                          f"{len(contact['imagined_cm']) - 1}; the detector on the real frames: "
                          f"{np.nanmedian(contact['real_cm']):.1f}")
        return report
