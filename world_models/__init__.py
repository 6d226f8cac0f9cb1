"""Learned video world models, wrapped as imagined Gymnasium environments (``worldsim.world_models``).

- :class:`WorldModel` (:mod:`~worldsim.world_models.model`): next-frame EDM diffusion on a
  diffusers UNet with first-frame anchoring and action conditioning, a proprio head and a
  frame-level success head; ``save_pretrained`` / ``from_pretrained``;
- :func:`train_world_model` (:mod:`~worldsim.world_models.train`): training and fine-tuning,
  under ``torchrun`` too;
- :class:`ImaginedVectorEnv` (:mod:`~worldsim.world_models.env`): the registered
  ``worldsim/Imagined-<Task>`` envs, with keyframe-initialised resets
  (:mod:`~worldsim.world_models.keyframes`);
- :func:`evaluate_world_model` (:mod:`~worldsim.world_models.evaluate`): open-loop fidelity.
"""

from worldsim.world_models.config import PRESETS, WorldModelConfig, build_config
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.env import ImaginedEnv, ImaginedVectorEnv
from worldsim.world_models.evaluate import evaluate_world_model
from worldsim.world_models.keyframes import KeyframeRule, select_keyframes
from worldsim.world_models.model import WorldModel
from worldsim.world_models.replay import open_loop
from worldsim.world_models.train import TrainWMConfig, train_world_model

__all__ = [
    "PRESETS", "EpisodeBank", "ImaginedEnv", "ImaginedVectorEnv", "KeyframeRule", "TrainWMConfig",
    "WorldModel", "WorldModelConfig", "build_config", "evaluate_world_model", "open_loop", "select_keyframes",
    "train_world_model",
]
