"""A LeRobot policy checkpoint (ACT, SmolVLA, pi0, ...) as a worldsim policy, for evaluation.

``worldsim evaluate --policy runs/act/checkpoints/last/pretrained_model`` (or ``load_policy`` on
such a folder, or on the ``lerobot-train`` output folder holding it) loads the policy with
lerobot's own classes and processors and acts as ``lerobot-eval`` does: each observation is
given the names of :mod:`worldsim.envs.lerobot` (``observation.images.front``,
``observation.state``, ``observation.environment_state``, the instruction as ``task``), run
through the checkpoint's preprocessor, and the policy's action chunk (its first
``n_action_steps`` actions, what its ``select_action`` queues) is un-normalised by its
postprocessor, action by action. worldsim executes the whole chunk before asking again, as
lerobot's action queue does, so the two run the same actions on the same episodes.

It needs lerobot installed (its own environment, ``docs/lerobot.md``). It evaluates and does not
train: it has no log-probabilities, values or features for worldsim's RL and detectors, and acts
only deterministically. Policies that read an observation history (``n_obs_steps`` > 1, e.g.
Diffusion Policy) are refused, since worldsim asks for a chunk only when the last one is spent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldsim.data.episode import IMAGE_KEYS
from worldsim.policies.adapters import decode_instructions, encode_instructions
from worldsim.policies.base import CHECKPOINT_READERS, Batch, Policy, PolicyOutput

PREPROCESSOR_FILE = "policy_preprocessor.json"
"""The file that marks a LeRobot (0.4 and later) policy checkpoint."""


def lerobot_checkpoint(path: str | Path) -> Path | None:
    """The LeRobot policy checkpoint at ``path``: the folder itself, or a ``lerobot-train`` output
    folder's last checkpoint; None when ``path`` holds neither."""
    path = Path(path)
    for folder in (path, path / "pretrained_model", path / "checkpoints" / "last" / "pretrained_model"):
        if (folder / PREPROCESSOR_FILE).is_file():
            return folder
    return None


class LeRobotPolicy(Policy):
    """The LeRobot checkpoint in ``path`` (see the module docstring), on ``device``."""

    policy_type = "lerobot"

    def __init__(self, path: str | Path, device: str | torch.device = "cpu") -> None:
        super().__init__()
        if importlib.util.find_spec("lerobot") is None:
            raise ImportError(f"{path} is a LeRobot policy checkpoint; loading it needs lerobot installed "
                              "(an environment of its own: see docs/lerobot.md)")
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        from worldsim.data.lerobot import OBS_FEATURES  # the columns worldsim export writes

        self.path = Path(path)
        config = PreTrainedConfig.from_pretrained(str(self.path))
        config.device = str(device)
        if getattr(config, "n_obs_steps", 1) != 1:
            raise ValueError(f"{self.path}: {config.type} reads {config.n_obs_steps} observations per action; "
                             "worldsim evaluates LeRobot policies that read one (ACT, SmolVLA, pi0, ...)")
        self.config = config
        self.model = get_policy_class(config.type).from_pretrained(str(self.path), config=config)
        self.model.eval()
        self.preprocessor, self.postprocessor = make_pre_post_processors(
            config, pretrained_path=str(self.path),
            preprocessor_overrides={"device_processor": {"device": str(device)}})
        inputs = set(config.input_features)
        self.reads = {key: name for key, name in OBS_FEATURES.items() if name in inputs}
        unknown = sorted(inputs - set(self.reads.values()))
        if unknown:
            raise ValueError(f"{self.path}: the policy reads {unknown}, which worldsim's envs do not give; they give "
                             f"{sorted(OBS_FEATURES.values())}")
        self.chunk_size = int(getattr(config, "n_action_steps", 1))
        self.action_dim = int(config.output_features["action"].shape[0])
        self._image_size = int(config.input_features[self.reads["image"]].shape[-1]) if "image" in self.reads else None

    # ---------------------------------------------------------------- what the env gives
    def env_kwargs(self) -> dict[str, Any]:
        """The obs mode (``pixels+state`` where the policy reads the simulator's state) and camera."""
        if "image" not in self.reads:
            return {"obs_mode": "state"}
        return {"obs_mode": "pixels+state" if "state" in self.reads else "pixels", "image_size": self._image_size,
                "wrist_camera": "wrist_image" in self.reads}

    def preprocess(self, obs: Any) -> Batch:
        if not isinstance(obs, dict):
            obs = {"state": obs}
        missing = sorted(key for key in self.reads if key not in obs)
        if missing:
            raise ValueError(f"the policy reads {[self.reads[k] for k in missing]}, which need the env's "
                             f"{missing} observations; make the env with policy.env_kwargs() ({self.env_kwargs()})")
        batch = {key: torch.as_tensor(np.asarray(obs[key])) for key in self.reads}
        if "instruction" in obs:
            batch["instruction"] = encode_instructions(list(obs["instruction"]))
        return batch

    def observation(self, batch: Batch) -> dict[str, Any]:
        """``batch`` under LeRobot's names and types, as ``lerobot-eval`` hands it to the preprocessor:
        images float in [0, 1], channels first; vectors float32; the instructions as ``task``."""
        out: dict[str, Any] = {}
        for key, name in self.reads.items():
            value = batch[key]
            out[name] = value.permute(0, 3, 1, 2).float() / 255 if key in IMAGE_KEYS else value.float()
        size = len(next(iter(batch.values())))
        out["task"] = decode_instructions(batch["instruction"]) if "instruction" in batch else [""] * size
        return out

    # ---------------------------------------------------------------- acting
    @torch.no_grad()
    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        """The policy's next ``n_action_steps`` actions ``(B, K, A)``, in the env's units."""
        if not deterministic:
            raise ValueError("a LeRobot policy acts deterministically here (as lerobot-eval runs it); "
                             "pass deterministic=True")
        inputs = self.preprocessor(self.observation(batch))
        chunk = self.model.predict_action_chunk(inputs)[:, : self.chunk_size]
        actions = torch.stack([self.postprocessor(chunk[:, k]) for k in range(chunk.shape[1])], dim=1).float().cpu()
        zeros = torch.zeros(len(actions))
        return PolicyOutput(actions=actions, log_prob=zeros, value=zeros, features=torch.zeros(len(actions), 0))

    def evaluate(self, batch: Batch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise self._evaluation_only("post-training (it has no log-probabilities)")

    def features(self, batch: Batch) -> torch.Tensor:
        raise self._evaluation_only("failure detectors (it exposes no features)")

    def save_pretrained(self, path: str | Path) -> Path:
        raise self._evaluation_only(f"saving (lerobot saved it, in {self.path})")

    def _evaluation_only(self, what: str) -> ValueError:
        """The one error for what worldsim does not do with a LeRobot policy: it evaluates it."""
        return ValueError(f"{self.config.type} from {self.path} is a LeRobot policy, which worldsim evaluates; "
                          f"it is not available for {what}")


def read_lerobot_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> LeRobotPolicy | None:
    """The LeRobot policy at ``path`` (:func:`lerobot_checkpoint`), None when it holds none: a
    reader of :data:`~worldsim.policies.base.CHECKPOINT_READERS`."""
    checkpoint = lerobot_checkpoint(path)
    return None if checkpoint is None else LeRobotPolicy(checkpoint, device)


CHECKPOINT_READERS.append(read_lerobot_checkpoint)
