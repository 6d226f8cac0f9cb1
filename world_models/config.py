"""The world model's architecture: :class:`WorldModelConfig` and the ``tiny``/``base`` presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ACTION_DIM = 4
PROPRIO_DIM = 4
SPATIAL_CHANNELS = 2 + 2 * PROPRIO_DIM  # x and y coordinates, current and next proprio
OFFSET_WEIGHT = 0.1  # the success head's goal-offset regression, against its cross-entropy
SUCCESS_PRIOR = 0.02  # the success head's initial probability
OUTCOMES = ("head", "rule")  # what decides an imagined frame's success (WorldModelConfig.outcome)
BACKBONES = ("unet", "wan")  # the frame network (WorldModelConfig.backbone)
ANCHORS = ("last", "first")  # what each imagined frame is drawn from (WorldModelConfig.anchor)
KEYPOINT_L1 = 0.1  # the detector's soft-argmax distance (pixels), against its heatmap cross-entropy

@dataclass
class WorldModelConfig:
    """Architecture of a :class:`WorldModel`; the tasks and image size come from the data."""

    tasks: tuple[str, ...] = ("PushCube-v0",)
    """Task names the model was trained on (index = task id in the conditioning)."""
    instructions: tuple[str, ...] = ("push the red cube onto the blue square",)
    """The instruction of each task, in the order of ``tasks``."""
    image_size: int = 64
    """Side of the square ``image`` observation, in pixels."""
    patch: int = 4
    """Space-to-depth factor: the UNet works on (image_size / patch)^2 cells of 3 * patch^2 channels."""
    context: int = 4
    """Latest frames the model sees (C), besides the episode's first frame."""
    backbone: Literal["unet", "wan"] = "unet"
    """The frame network: ``"unet"``, a diffusers ``UNet2DModel`` with the context frames stacked
    on its channels (:mod:`~worldsim.world_models.denoiser`); ``"wan"``, a diffusers
    ``WanTransformer3DModel`` over the clip of first frame, context frames and the frame being
    made, each frame modulated by its own proprio and action
    (:mod:`~worldsim.world_models.video_backbone`)."""
    channels: tuple[int, ...] = (32, 64, 64)
    """UNet block widths; each block but the last halves the resolution."""
    layers_per_block: int = 1
    """ResNet layers per UNet block."""
    norm_groups: int = 16
    """Group-norm groups (must divide every width)."""
    heads: int = 2
    """wan: attention heads."""
    head_dim: int = 64
    """wan: width of each head (even; the model's width is ``heads * head_dim``)."""
    layers: int = 3
    """wan: transformer blocks."""
    ffn_dim: int = 512
    """wan: feed-forward width."""
    token_patch: int = 4
    """wan: a token covers ``token_patch`` x ``token_patch`` space-to-depth cells (must divide image_size / patch)."""
    freq_dim: int = 256
    """wan: width of the sinusoidal timestep features."""
    lora_rank: int = 0
    """wan: 0 trains the whole backbone; ``r > 0`` freezes it but its input and output layers and
    trains rank-``r`` LoRA adapters (``peft``) on its attention and feed-forward projections: the
    way to fine-tune a pretrained backbone (``train-wm --init-from``) on little data or memory."""
    cond_hidden: int = 128
    """Hidden width of the conditioning and proprio MLPs."""
    sigma_data: float = 0.1
    """EDM: standard deviation of the data (the frame-to-frame change, in [-1, 1] units)."""
    sigma_min: float = 2e-3
    """EDM sampling: the last noise level."""
    sigma_max: float = 2.0
    """EDM sampling: the first noise level."""
    rho: float = 7.0
    """EDM sampling: the schedule's curvature."""
    p_mean: float = -1.2
    """EDM training: mean of log(sigma) (EDM's -1.2 suits many sampling steps). A one-step
    sampler uses the network only at ``sigma_max``, which EDM's levels reach in about one
    training sample of twenty: the ``tiny`` preset centres them nearer (0.3, std 0.6)."""
    p_std: float = 1.2
    """EDM training: std of log(sigma)."""
    sampling_steps: int = 1
    """Euler denoising steps per imagined frame (1-5)."""
    context_noise: float = 0.1
    """Training: the largest std of the Gaussian noise added to context frames (0: none)."""
    success_channels: int = 32
    """Width of the success head's keypoint-detector convolutions."""
    object_pathway: bool = True
    """Predict where the scene's objects go first and draw the frame there
    (:mod:`~worldsim.world_models.objects`); needs ``state`` in the training data."""
    state_supervision: bool = True
    """Trained with the data's simulator ``state`` as supervision (the object pathway's
    positions, the detector's keypoint and the goal-offset targets). False: frames, proprio,
    actions and success flags only, as from a real robot's cameras; such a model has no object
    pathway and the success head judges it (``train-wm`` sets it False for data without
    ``state``). The ``video`` imagination rung needs False."""
    gripper_planes: bool = False
    """UNet: show the denoiser where the gripper is and where it goes, as one blob plane each at
    the TCP's current and next proprio projected into the calibrated camera, as the object
    pathway shows it the objects; without them the denoiser has to infer the arm's image motion
    from the proprio's constant planes, and a one-step sample averages the places it might be
    (a ghost of the gripper). On in the ``tiny`` and ``base`` presets; False here only so that a
    model saved before the option existed loads as it was built."""
    anchor: Literal["last", "first"] = "last"
    """UNet: what each imagined frame is drawn from. ``"last"``: the change from the last frame
    (DIAMOND's way), which sees the context frames; a one-step sample's blur of the moving
    gripper is then read back as the next step's context, and the drawing errors compound over
    a rollout. ``"first"``: the change from the episode's first (real) frame, with the objects
    carried from where they were in it to where the pathway puts them; the network sees no
    context frame, only the first frame and the planes of the imagined state (the objects at
    their first and next positions, the gripper now and next), so each frame is drawn afresh
    from the imagined state and a drawing error stays in its own frame."""
    object_hidden: int = 256
    """Width of the object pathway's MLP."""
    dynamics_batch: int = 512
    """State windows per update of the low-dimensional dynamics, the proprio head and the object
    pathway (:meth:`~worldsim.world_models.model.WorldModel.dynamics_loss`; states are cheap)."""
    dynamics_horizon: int = 16
    """Steps the proprio head and the object pathway are rolled out on their own predictions in
    training: the horizon imagination rolls from a keyframe, so that they learn to keep their
    errors from compounding over it."""
    carry_objects: bool = True
    """With the object pathway: the denoiser corrects the last frame with the moving objects'
    pixels already carried to where the pathway puts them
    (:func:`~worldsim.world_models.objects.carry_objects`), instead of the last frame as it is."""
    success_threshold: float = 0.5
    """Success probability at or above which a frame counts as a success (the imagined env's
    cut); ``train-wm`` calibrates it on its validation episodes."""
    outcome: Literal["head", "rule"] = "rule"
    """What decides an imagined frame's success: ``"rule"``, each task's own success rule on the
    objects' imagined positions and heights (needs the object pathway; see
    :mod:`~worldsim.world_models.outcome`), or ``"head"``, the success head (on the positions the
    object pathway carries, else on the frame). The head, which reads the gripper beside the
    objects, can call a failure a success wherever the gripper ends near the goal; the rule judges
    the objects alone."""

    def __post_init__(self) -> None:
        self.tasks, self.instructions = tuple(self.tasks), tuple(self.instructions)
        self.channels = tuple(int(c) for c in self.channels)
        if not self.tasks or len(self.tasks) != len(self.instructions):
            raise ValueError(f"tasks={self.tasks!r} and instructions={self.instructions!r} must be non-empty "
                             "and of equal length")
        if self.patch < 1 or self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must be >= 1 and divide image_size={self.image_size}")
        cells = self.image_size // self.patch
        if cells % 2 ** (len(self.channels) - 1):
            raise ValueError(f"channels={self.channels}: {len(self.channels) - 1} halvings do not divide "
                             f"the {cells}x{cells} latent (image_size / patch); use fewer blocks or a "
                             "smaller patch")
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone={self.backbone!r}; allowed: {', '.join(BACKBONES)}")
        for name in ("context", "layers_per_block", "norm_groups", "cond_hidden", "success_channels",
                     "object_hidden", "dynamics_batch", "dynamics_horizon", "heads", "layers", "ffn_dim",
                     "token_patch", "freq_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.head_dim < 6 or self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim!r} must be even and >= 6 (Wan's rotary embedding splits it "
                             "over time, rows and columns)")
        if self.backbone == "wan" and cells % self.token_patch:  # the UNet has no tokens
            raise ValueError(f"token_patch={self.token_patch} must divide the {cells}x{cells} latent "
                             "(image_size / patch)")
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor={self.anchor!r}; allowed: {', '.join(ANCHORS)}")
        if self.anchor == "first" and not self.object_pathway:
            raise ValueError("anchor='first' draws each frame from the imagined state, and without the object pathway "
                             "nothing carries where the objects went: set object_pathway=True or anchor='last'")
        if self.anchor == "first" and self.backbone != "unet":
            raise ValueError("anchor='first' draws the UNet's frame from the first frame (backbone='unet'); the video "
                             "transformer reads its context frames as a clip")
        if self.gripper_planes and self.backbone != "unet":
            raise ValueError("gripper_planes=True is a UNet input (backbone='unet')")
        if self.lora_rank < 0 or (self.lora_rank and self.backbone != "wan"):
            raise ValueError(f"lora_rank={self.lora_rank!r} must be >= 0, and > 0 only with backbone='wan' "
                             "(LoRA adapts the video transformer)")
        if any(c % self.norm_groups for c in self.channels):
            raise ValueError(f"norm_groups={self.norm_groups} must divide every width of "
                             f"channels={self.channels}")
        if not 1 <= self.sampling_steps <= 50:
            raise ValueError(f"sampling_steps={self.sampling_steps!r} must be in [1, 50] (1-5 is the design)")
        if not 0 < self.sigma_min < self.sigma_max:
            raise ValueError(f"need 0 < sigma_min < sigma_max; got {self.sigma_min}, {self.sigma_max}")
        if self.context_noise < 0:
            raise ValueError(f"context_noise={self.context_noise!r} must be >= 0")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome={self.outcome!r}; allowed: {', '.join(OUTCOMES)}")
        if self.carry_objects and not self.object_pathway:
            raise ValueError("carry_objects moves the objects where the object pathway puts them: set "
                             "object_pathway=True or carry_objects=False")
        if self.outcome == "rule" and not self.object_pathway:
            raise ValueError("outcome='rule' judges the objects' imagined positions, which only the object "
                             "pathway carries: set object_pathway=True or outcome='head'")
        if not 0.0 < self.success_threshold < 1.0:
            raise ValueError(f"success_threshold={self.success_threshold!r} must be in (0, 1)")

    @property
    def latent_channels(self) -> int:
        return 3 * self.patch**2

    @property
    def latent_size(self) -> int:
        return self.image_size // self.patch


PRESETS: dict[str, dict[str, Any]] = {
    # CPU: ~0.9M-parameter UNet at 16x16, one denoising step: WorldModelConfig's defaults, with the
    # gripper planes, each frame drawn from the first (anchor) and training's noise levels centred
    # where its one step samples (off or elsewhere by default only so that models saved before
    # them load as they were).
    "tiny": {"gripper_planes": True, "anchor": "first", "p_mean": 0.3, "p_std": 0.6},
    # GPU: tiny wider and deeper, with three denoising steps (DIAMOND's count).
    "base": {"channels": (128, 256, 256), "layers_per_block": 2, "norm_groups": 32, "cond_hidden": 512,
             "sampling_steps": 3, "success_channels": 64, "object_hidden": 512, "gripper_planes": True},
    # CPU: the video transformer (1.25M parameters, as the tiny UNet) over the first frame, 2
    # context frames and the new one, 16 tokens each.
    "video-tiny": {"backbone": "wan", "context": 2},
    # GPU: the video transformer at 512 wide, 8 blocks, 64 tokens a frame, 4 context frames.
    "video-base": {"backbone": "wan", "heads": 8, "head_dim": 64, "layers": 8, "ffn_dim": 2048, "token_patch": 2,
                   "cond_hidden": 512, "sampling_steps": 3, "success_channels": 64, "object_hidden": 512},
}
"""Each preset's settings besides :class:`WorldModelConfig`'s defaults."""


def preset(name: str, **fields: Any) -> WorldModelConfig:
    """A preset architecture (``tiny``, ``video-tiny`` on a CPU; ``base``, ``video-base`` on a
    GPU), with data-given ``fields`` (tasks, instructions, image_size) and any overrides."""
    if name not in PRESETS:
        raise ValueError(f"config={name!r} is not a preset; allowed: {', '.join(PRESETS)}")
    return WorldModelConfig(**{**PRESETS[name], **fields})


