"""Foresight: what the world model imagines the policy doing next, as a failure detector's input.

At step ``t`` of an episode the world model starts from the real frames seen so far (its context
ending at the observation of step ``t``, the episode's first frame and the proprio), the policy
acts for ``look_ahead`` steps on the imagined observations (its mean chunk, as deployed), and the
world model's judge gives each imagined step's success probability (the rule's 0 or 1 with the
object pathway, by default). Those ``look_ahead``
probabilities are step ``t``'s *foresight* vector. A look-ahead runs every ``every`` steps; in
between, the last one's vector holds, so step ``t`` only ever reads frames up to ``t``.

Imagination runs on the ``pixels`` rung (``video`` for a model trained without state): nothing
from the simulator while imagining; the model finds the objects in the real frames itself. What
that rung still takes from hand-written code (the contact gate, the gripper's commanded motion,
the camera) is listed in the imagination docs.

Offline, :func:`record_foresight` adds the vectors to an episode file of rollouts as the
per-step output ``foresight`` ``(T, look_ahead)`` (``worldsim foresight``); the ``foresight``
detector (:class:`~worldsim.failure.detectors.safe.ForesightMLP`) learns which imagined futures
precede real failures. Online, :meth:`Foresight.observe` computes the same vectors inside
:class:`~worldsim.failure.DetectorWrapper` from the frames the env returns; both run
:meth:`Foresight.look_ahead`, so offline and online vectors are the same numbers.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np
import torch
from tqdm.auto import tqdm

from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import PIXELS, VIDEO
from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.validation import check_int
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.latents import latents_to_frames
from worldsim.world_models.model import WorldModel

KEY = "foresight"
"""The per-step output :func:`record_foresight` writes and the ``foresight`` detector reads."""


@dataclass
class ForesightConfig:
    """How far, how often and by whose verdict the world model looks ahead."""

    look_ahead: int = 8
    """Imagined steps per look-ahead (the foresight vector's length)."""
    every: int = 4
    """A look-ahead every this many real steps (the last one's vector holds in between)."""
    judge: Literal["head", "rule"] | None = None
    """Who judges the imagined steps: the learned success head (a probability), with the object
    pathway the task's rule on the imagined positions (0 or 1), or None, the model's own judge
    (the rule with the pathway: it separates failures a little better than the head does)."""
    batch_size: int = 128
    """Look-aheads imagined side by side."""
    seed: int = 0
    """Seed of the imagined frames' noise (a generator of the look-aheads' own, so the caller's
    torch random stream is left as it was)."""

    def __post_init__(self) -> None:
        check_int("look_ahead", self.look_ahead)
        check_int("every", self.every)
        check_int("batch_size", self.batch_size)
        if self.judge not in ("head", "rule", None):
            raise ValueError(f"judge={self.judge!r}; allowed: head, rule, None (the model's own)")


class Foresight:
    """A world model and a policy, looking ahead from real frames (see the module docstring).

    Args:
        world_model: a world model or its folder (a ``worldsim train-wm`` run).
        policy: the policy whose next steps are imagined (one that reads pixels).
        config: how far, how often and by whose verdict.
    """

    def __init__(self, world_model: WorldModel | str | Path, policy: Policy,
                 config: ForesightConfig | None = None) -> None:
        self.config = config or ForesightConfig()
        model = world_model if isinstance(world_model, WorldModel) else WorldModel.from_pretrained(world_model)
        self.source = None if isinstance(world_model, WorldModel) else str(world_model)
        self.model = model.eval()
        self.rung = PIXELS if model.config.state_supervision else VIDEO
        self.rung.check(model)
        self.outcome = model.judge.check(self.config.judge)
        self.policy = policy.eval()
        self._generator = torch.Generator(device=model.device).manual_seed(self.config.seed)
        self._history: dict[str, np.ndarray] | None = None

    @property
    def context(self) -> int:
        return int(self.model.config.context)

    def task_indices(self, tasks: list[str]) -> torch.Tensor:
        """The world model's ids of ``tasks``; ``ValueError`` naming the ones it was not trained on."""
        unknown = sorted(set(tasks) - set(self.model.config.tasks))
        if unknown:
            raise ValueError(f"the world model was trained on {', '.join(self.model.config.tasks)}; it cannot look "
                             f"ahead on {', '.join(unknown)}")
        return torch.tensor([self.model.config.tasks.index(t) for t in tasks], device=self.model.device)

    @torch.no_grad()
    def look_ahead(self, frames: np.ndarray, first: np.ndarray, proprio: np.ndarray, tasks: list[str],
                   instructions: list[str], first_proprio: np.ndarray | None = None) -> np.ndarray:
        """Success probabilities ``(B, look_ahead)`` of the imagined steps after real context frames
        ``(B, C, H, W, 3)`` uint8 (the last is now), the episodes' first frames ``(B, H, W, 3)``
        and raw context proprio ``(B, C, 4)`` (and the first frames' ``(B, 4)``, where the arm is
        carried from), with the policy acting on each imagined frame."""
        model, steps = self.model, self.config.look_ahead
        task = self.task_indices(tasks)
        rollout = model.start(torch.from_numpy(np.ascontiguousarray(frames)), torch.from_numpy(first),
                              torch.from_numpy(np.asarray(proprio, np.float32)),
                              first_proprio=None if first_proprio is None
                              else torch.from_numpy(np.asarray(first_proprio, np.float32)))
        queue = ChunkQueue(self.policy, len(frames), deterministic=True)
        image, out = frames[:, -1], np.zeros((len(frames), steps), np.float32)
        for k in range(steps):
            obs = {"image": image, "proprio": rollout.proprio[:, -1].cpu().numpy(), "instruction": tuple(instructions)}
            action = torch.from_numpy(np.clip(queue(obs), -1.0, 1.0).astype(np.float32)).to(model.device)
            pred = model.predict(rollout, action, task, generator=self._generator, outcome=self.outcome)
            rollout = rollout.advance(pred)
            assert pred.latent is not None  # drawn: this rung denoises every frame
            image = latents_to_frames(pred.latent, model.config.patch).cpu().numpy()
            out[:, k] = pred.success_prob.cpu().numpy()
        return out

    # ------------------------------------------------------------------ online
    def observe(self, obs: dict[str, Any], steps: np.ndarray) -> np.ndarray:
        """The foresight vectors ``(N, look_ahead)`` of a vector env's current observations
        (``image``, ``proprio``, ``instruction``) at episode steps ``steps`` ``(N,)``: the frames
        are kept per env, and envs at a multiple of ``every`` look ahead."""
        image, proprio = np.asarray(obs["image"]), np.asarray(obs["proprio"], np.float32)
        instructions = list(obs["instruction"])
        steps = np.asarray(steps)
        n, c = len(image), self.context
        if self._history is None or len(self._history["frames"]) != n:
            self._history = {"frames": np.repeat(image[:, None], c, 1), "first": image.copy(),
                             "proprio": np.repeat(proprio[:, None], c, 1), "first_proprio": proprio.copy(),
                             "held": np.zeros((n, self.config.look_ahead), np.float32)}
        h = self._history
        new = steps == 0
        h["frames"] = np.concatenate([h["frames"][:, 1:], image[:, None]], 1)
        h["proprio"] = np.concatenate([h["proprio"][:, 1:], proprio[:, None]], 1)
        h["frames"][new], h["proprio"][new] = image[new, None], proprio[new, None]
        h["first"][new], h["first_proprio"][new] = image[new], proprio[new]
        due = np.flatnonzero(steps % self.config.every == 0)
        if len(due):
            tasks = [self.model.config.tasks[self._task_of(i)] for i in instructions]
            for begin in range(0, len(due), self.config.batch_size):
                rows = due[begin:begin + self.config.batch_size]
                h["held"][rows] = self.look_ahead(h["frames"][rows], h["first"][rows], h["proprio"][rows],
                                                  [tasks[i] for i in rows], [instructions[i] for i in rows],
                                                  h["first_proprio"][rows])
        return h["held"].copy()

    def _task_of(self, instruction: str) -> int:
        if instruction not in self.model.config.instructions:
            raise ValueError(f"no task of the world model has the instruction {instruction!r}; it knows "
                             f"{', '.join(repr(i) for i in self.model.config.instructions)}")
        return self.model.config.instructions.index(instruction)

    # ------------------------------------------------------------------ offline
    def episode_vectors(self, bank: EpisodeBank, progress: bool = True) -> list[np.ndarray]:
        """Per episode of ``bank``, its foresight ``(T, look_ahead)``: look-aheads at steps
        ``0, every, 2 every, ...`` from its recorded frames, each held until the next."""
        every, c = self.config.every, self.context
        pairs = np.array([(j, t) for j in range(len(bank)) for t in range(0, int(bank.lengths[j]), every)])
        vectors = np.zeros((len(pairs), self.config.look_ahead), np.float32)
        batches = range(0, len(pairs), self.config.batch_size)
        for begin in tqdm(batches, desc="foresight", unit="batch", disable=not progress):
            j, t = pairs[begin:begin + self.config.batch_size].T
            rows = bank.context_rows(j, t, c)
            vectors[begin:begin + len(j)] = self.look_ahead(
                bank.images[rows], bank.images[bank.obs_start[j]], bank.proprio[rows],
                [bank.infos[e].task for e in j], [bank.infos[e].instruction for e in j],
                bank.proprio[bank.obs_start[j]])
        out, cursor = [], 0
        for j in range(len(bank)):
            length = int(bank.lengths[j])
            looks = (length + every - 1) // every
            out.append(np.repeat(vectors[cursor:cursor + looks], every, axis=0)[:length])
            cursor += looks
        return out


def record_foresight(data: str | Path, foresight: Foresight, out: str | Path | None = None,
                     progress: bool = True) -> Path:
    """Add each episode's foresight (:meth:`Foresight.episode_vectors`) to the rollouts in
    ``data`` as the per-step output ``foresight``, written to ``out`` (default: ``data`` itself,
    replaced atomically once every episode is done; an earlier ``foresight`` is replaced).
    ``ValueError`` for a file whose tasks the world model does not know."""
    data = Path(data)
    out = Path(out) if out is not None else data
    with EpisodeReader(data) as reader:
        foresight.task_indices(reader.tasks)
        file_indices = [info.index for info in reader.episode_info()]
    bank = EpisodeBank(data, argument="data", state=False)
    vectors = foresight.episode_vectors(bank, progress)
    with atomic_path(out) as tmp:
        shutil.copyfile(data, tmp)
        with h5py.File(tmp, "r+") as f:
            for index, array in zip(file_indices, vectors, strict=True):
                group = f[f"data/demo_{index}"].require_group("policy")
                if KEY in group:
                    del group[KEY]
                group.create_dataset(KEY, data=array)
            f["data"].attrs["foresight"] = json.dumps({"look_ahead": foresight.config.look_ahead,
                                                       "every": foresight.config.every, "judge": foresight.outcome,
                                                       "rung": foresight.rung.name, "world_model": foresight.source})
    return out


@dataclass
class ForesightRun:
    """``worldsim foresight``: the world model's foresight added to recorded rollouts."""

    data: Path
    """Episode file of the policy's rollouts (``worldsim collect --policy P --record-features``); the
    per-step output ``foresight`` is added to it (an earlier one replaced)."""
    world_model: Path
    """World model folder (a ``worldsim train-wm`` run) that looks ahead; it must know the file's tasks."""
    policy: Path
    """The policy the rollouts are of (checkpoint or run folder): it acts in the imagined steps."""
    look: ForesightConfig = field(default_factory=ForesightConfig)
    """How far, how often and by whose verdict the model looks ahead."""
    torch_threads: int | None = None
    """Torch CPU threads (None: the cores idle when the run starts)."""
