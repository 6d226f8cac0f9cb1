"""The world model's architecture: one small config per part, :class:`WorldModelConfig` holding
them, and the presets (``tiny`` and ``video-tiny`` for a CPU, ``base`` and ``video-base`` for a
GPU) as data.

A model is assembled from parts (:class:`~worldsim.world_models.model.WorldModel`), each
configured here and nowhere else:

- the **frame generator** (:class:`UNetConfig` or :class:`WanConfig`, one per backbone) draws
  the next frame by EDM diffusion (:class:`DiffusionConfig`);
- the **object pathway** (:class:`ObjectPathwayConfig`; None: a model without it) predicts where the
  scene's objects go;
- the **proprio dynamics** (:class:`ProprioConfig`) predicts where the gripper goes;
- the **judge** (:class:`JudgeConfig`) decides an imagined step's success;
- :class:`DynamicsConfig`: how the two low-dimensional dynamics learn.

A preset is a nested mapping of the fields it changes (:data:`PRESETS`), built like a config
file's ``[model]`` table (:func:`build_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from worldsim.runtime.validation import check_choice, check_range, positive_ints

ACTION_DIM = 4
PROPRIO_DIM = 4
SPATIAL_CHANNELS = 2 + 2 * PROPRIO_DIM  # x and y coordinates, current and next proprio
OFFSET_WEIGHT = 0.1  # the success head's goal-offset regression, against its cross-entropy
SUCCESS_PRIOR = 0.02  # the success head's initial probability
OUTCOMES = ("head", "rule")  # what decides an imagined frame's success (JudgeConfig.outcome)
ANCHORS = ("last", "first")  # what each imagined frame is drawn from (UNetConfig.anchor)
KEYPOINT_L1 = 0.1  # the detector's soft-argmax distance (pixels), against its heatmap cross-entropy


@dataclass
class DiffusionConfig:
    """EDM (Karras et al. 2022) noise schedule of the frame generator."""

    sigma_data: float = 0.1
    """Standard deviation of the data (the frame-to-frame change, in [-1, 1] units)."""
    sigma_min: float = 2e-3
    """Sampling: the last noise level."""
    sigma_max: float = 2.0
    """Sampling: the first noise level."""
    rho: float = 7.0
    """Sampling: the schedule's curvature."""
    p_mean: float = -1.2
    """Training: mean of log(sigma) (EDM's -1.2 suits many sampling steps). A one-step sampler uses
    the network only at ``sigma_max``, which EDM's levels reach in about one training sample of
    twenty: the ``tiny`` preset centres them nearer (0.3, std 0.6)."""
    p_std: float = 1.2
    """Training: std of log(sigma)."""
    sampling_steps: int = 1
    """Euler denoising steps per imagined frame (1-5)."""

    def __post_init__(self) -> None:
        check_range("sampling_steps", self.sampling_steps, 1, 50, note="1-5 is the design")
        if not 0 < self.sigma_min < self.sigma_max:
            raise ValueError(f"need 0 < sigma_min < sigma_max; got {self.sigma_min}, {self.sigma_max}")


@dataclass
class UNetConfig:
    """The ``unet`` frame generator: a diffusers ``UNet2DModel`` with the context on its channels
    (:mod:`~worldsim.world_models.frames_unet`)."""

    BACKBONE: ClassVar[str] = "unet"
    backbone: Literal["unet"] = "unet"
    """Which frame generator this is (the key a config file or a preset names it by)."""
    channels: tuple[int, ...] = (32, 64, 64)
    """Block widths; each block but the last halves the resolution."""
    layers_per_block: int = 1
    """ResNet layers per block."""
    norm_groups: int = 16
    """Group-norm groups (must divide every width)."""
    cond_hidden: int = 128
    """Hidden width of the conditioning MLP (action, proprio, noise level, task)."""
    context_noise: float = 0.1
    """Training: the largest std of the Gaussian noise added to the context frames (0: none)."""
    gripper_planes: bool = False
    """Show the denoiser where the gripper is and where it goes, as one blob plane each at the TCP's
    current and next proprio projected into the calibrated camera, as the object pathway shows it
    the objects; without them the denoiser has to infer the arm's image motion from the proprio's
    constant planes, and a one-step sample averages the places it might be (a ghost of the gripper).
    On in the ``tiny`` and ``base`` presets; False here only so that a model saved before the option
    existed loads as it was built."""
    anchor: Literal["last", "first"] = "last"
    """What each imagined frame is drawn from. ``"last"``: the change from the last frame
    (DIAMOND's way), which sees the context frames; a one-step sample's blur of the moving gripper
    is then read back as the next step's context, and the drawing errors compound over a rollout.
    ``"first"``: the change from the episode's first (real) frame, with the objects carried from
    where they were in it to where the pathway puts them; the network sees no context frame, only
    the first frame and the planes of the imagined state, so each frame is drawn afresh from the
    imagined state and a drawing error stays in its own frame (needs the object pathway)."""

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        positive_ints(self, ("layers_per_block", "norm_groups", "cond_hidden"))
        check_choice("anchor", self.anchor, ANCHORS)
        if self.context_noise < 0:
            raise ValueError(f"context_noise={self.context_noise!r} must be >= 0")
        if any(c % self.norm_groups for c in self.channels):
            raise ValueError(f"norm_groups={self.norm_groups} must divide every width of channels={self.channels}")

    def check(self, config: WorldModelConfig) -> None:
        """``ValueError`` for what the rest of ``config`` cannot give this generator."""
        halvings = len(self.channels) - 1
        if config.latent_size % 2**halvings:
            raise ValueError(f"channels={self.channels}: {halvings} halvings do not divide the "
                             f"{config.latent_size}x{config.latent_size} latent (image_size / patch); use fewer "
                             "blocks or a smaller patch")
        if self.anchor == "first" and config.objects is None:
            raise ValueError("anchor='first' draws each frame from the imagined state, and without the object pathway "
                             "nothing carries where the objects went: give the object pathway or anchor='last'")

    def without_objects(self) -> UNetConfig:
        """This generator as a model without the object pathway can have it (drawn from the last frame)."""
        return dataclasses.replace(self, anchor="last")

    @property
    def context_frames(self) -> bool:
        """Whether the network reads the context frames (not when drawing from the first)."""
        return self.anchor == "last"


@dataclass
class WanConfig:
    """The ``wan`` frame generator: a diffusers ``WanTransformer3DModel`` over the clip of first
    frame, context frames and the frame being made (:mod:`~worldsim.world_models.video_backbone`)."""

    BACKBONE: ClassVar[str] = "wan"
    backbone: Literal["wan"] = "wan"
    """Which frame generator this is (the key a config file or a preset names it by)."""
    heads: int = 2
    """Attention heads."""
    head_dim: int = 64
    """Width of each head (even; the model's width is ``heads * head_dim``)."""
    layers: int = 3
    """Transformer blocks."""
    ffn_dim: int = 512
    """Feed-forward width."""
    token_patch: int = 4
    """A token covers ``token_patch`` x ``token_patch`` space-to-depth cells (must divide image_size / patch)."""
    freq_dim: int = 256
    """Width of the sinusoidal timestep features."""
    cond_hidden: int = 128
    """Hidden width of each frame's conditioning MLP (proprio and action)."""
    context_noise: float = 0.1
    """Training: the largest std of the Gaussian noise added to the context frames (0: none)."""
    lora_rank: int = 0
    """0 trains the whole backbone; ``r > 0`` freezes it but its input and output layers and trains
    rank-``r`` LoRA adapters (``peft``) on its attention and feed-forward projections: the way to
    fine-tune a pretrained backbone (``train-wm`` with ``init_from``) on little data or memory."""

    def __post_init__(self) -> None:
        positive_ints(self, ("heads", "layers", "ffn_dim", "token_patch", "freq_dim", "cond_hidden"))
        if self.head_dim < 6 or self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim!r} must be even and >= 6 (Wan's rotary embedding splits it "
                             "over time, rows and columns)")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank={self.lora_rank!r} must be >= 0")
        if self.context_noise < 0:
            raise ValueError(f"context_noise={self.context_noise!r} must be >= 0")

    def check(self, config: WorldModelConfig) -> None:
        """``ValueError`` for what the rest of ``config`` cannot give this generator."""
        if config.latent_size % self.token_patch:
            raise ValueError(f"token_patch={self.token_patch} must divide the {config.latent_size}x"
                             f"{config.latent_size} latent (image_size / patch)")

    def without_objects(self) -> WanConfig:
        """This generator as a model without the object pathway has it (unchanged)."""
        return self

    @property
    def context_frames(self) -> bool:
        """Whether the network reads the context frames (the clip always does)."""
        return True


FramesConfig = UNetConfig | WanConfig
BACKBONES: dict[str, type[UNetConfig] | type[WanConfig]] = {"unet": UNetConfig, "wan": WanConfig}


@dataclass
class ObjectPathwayConfig:
    """The object pathway (:mod:`~worldsim.world_models.objects`): the objects' next image
    positions and heights predicted first, the frame drawn there."""

    hidden: int = 256
    """Width of the pathway's MLP."""
    carry: bool = True
    """The frame generator corrects its anchor frame with the moving objects' pixels already
    carried to where the pathway puts them (:func:`~worldsim.world_models.objects.carry_objects`),
    instead of the frame as it is."""
    gate: bool = True
    """Objects move only past the hand-written contact gate
    (:meth:`~worldsim.world_models.objects.ObjectDynamics.contact_gate`: the TCP's path within
    reach of the object, or the object already moving); False leaves which objects move to the
    learned pathway alone."""
    clear: bool = False
    """With ``carry``, the spots the carried objects leave show the empty table (a background the
    model learns from its training frames, :func:`~worldsim.world_models.anchor.background_image`)
    instead of the objects' old pixels, which the denoiser would have to erase (left there, a pale
    second cube). On in the ``tiny`` preset; False here only so that a model saved before the
    option existed loads as it was built."""
    clear_arm: bool = False
    """With ``carry``, a frame drawn from the first (``anchor="first"``) starts from the first frame
    with the starting arm cleared to the empty table (its footprint around the TCP's image position
    and its colours there, learned from the training frames:
    :func:`~worldsim.world_models.anchor.arm_appearance`; a cube under the footprint stays), and
    the denoiser draws the arm where the gripper is; without it the starting arm stays unless the
    denoiser erases it (a pale ghost). A frame drawn from the last has no starting arm to clear:
    there it does nothing. On in the ``tiny`` preset; False here only so that a model
    saved before the option existed loads as it was built."""
    paste: bool = True
    """With ``carry``, each moving object's pixels are pasted where the pathway puts it; False
    (needs ``clear``) only clears the spots the objects leave, and the denoiser draws them where
    they go, from the pathway's blob planes: nothing pasted by hand. False in the ``tiny`` preset;
    True here only so that a model saved before the option existed loads as it was built."""

    def __post_init__(self) -> None:
        positive_ints(self, ("hidden",))
        if not self.paste and not (self.carry and self.clear):
            raise ValueError("objects.paste=false draws the moved objects with the denoiser over the spots they "
                             "left cleared: it needs carry=true and clear=true")


@dataclass
class ProprioConfig:
    """The proprio dynamics (:mod:`~worldsim.world_models.proprio`): the commanded gripper pose
    plus a learned correction."""

    hidden: int = 128
    """Hidden width of the correction's MLP."""
    commanded: bool = True
    """The next proprio is the pose the action commands (the hand-written servo targets,
    :func:`~worldsim.world_models.proprio.commanded_proprio`) plus the learned correction; False
    learns the whole move from the action and the context proprio (the last proprio plus a
    learned change), nothing hand-written."""
    sees_cubes: bool = False
    """The correction also reads where each cube is from the TCP (the recorded cubes in training,
    the object pathway's in imagination): a cube between the fingers stops them closing, one under
    the gripper stops it descending. Blind to the cubes, the correction learns the average of a
    grasp that holds and one that closes on nothing (needs the object pathway)."""

    def __post_init__(self) -> None:
        positive_ints(self, ("hidden",))


@dataclass
class JudgeConfig:
    """Who decides an imagined step's success (:mod:`~worldsim.world_models.judge`)."""

    outcome: Literal["head", "rule"] = "rule"
    """``"rule"``: each task's own success rule on the objects' imagined positions and heights
    (needs the object pathway; see :mod:`~worldsim.world_models.outcome`); ``"head"``: the success
    head (on the positions the object pathway carries, else on the frame). The head, which reads
    the gripper beside the objects, can call a failure a success wherever the gripper ends near the
    goal; the rule judges the objects alone."""
    success_threshold: float = 0.5
    """Success probability at or above which a frame counts as a success (the imagined env's cut);
    ``train-wm`` calibrates it on its validation episodes."""
    detector_channels: int = 32
    """Width of the success head's keypoint-detector convolutions."""
    hidden: int = 128
    """Hidden width of the success head's MLP."""
    heights: bool = False
    """The success head also reads each object's height (an MLP on the detector's keypoints and
    the proprio, trained on the recorded heights), for the objects found in real start frames;
    False takes each to rest on its plane (hand-written: wrong for a cube held in the air)."""

    def __post_init__(self) -> None:
        check_choice("outcome", self.outcome, OUTCOMES)
        positive_ints(self, ("detector_channels", "hidden"))
        if not 0.0 < self.success_threshold < 1.0:
            raise ValueError(f"success_threshold={self.success_threshold!r} must be in (0, 1)")


@dataclass
class DynamicsConfig:
    """How the low-dimensional dynamics (the proprio dynamics and the object pathway) learn:
    on their own batches of state windows (:meth:`~worldsim.world_models.model.WorldModel.dynamics_loss`;
    states are cheap), rolled out on their own predictions."""

    batch: int = 512
    """State windows per update."""
    horizon: int = 16
    """Steps rolled out on their own predictions in training: the horizon imagination rolls from a
    keyframe, so that they learn to keep their errors from compounding over it."""

    def __post_init__(self) -> None:
        positive_ints(self, ("batch", "horizon"))


@dataclass
class WorldModelConfig:
    """Architecture of a :class:`~worldsim.world_models.model.WorldModel`: the data it models and
    its parts' configs; the tasks and image size come from the data."""

    tasks: tuple[str, ...] = ("PushCube-v0",)
    """Task names the model was trained on (index = task id in the conditioning)."""
    instructions: tuple[str, ...] = ("push the red cube onto the blue square",)
    """The instruction of each task, in the order of ``tasks``."""
    image_size: int = 64
    """Side of the square ``image`` observation, in pixels."""
    patch: int = 4
    """Space-to-depth factor: the networks work on (image_size / patch)^2 cells of 3 * patch^2 channels."""
    context: int = 4
    """Latest steps the model sees (C), besides the episode's first frame."""
    frames: UNetConfig | WanConfig = field(default_factory=UNetConfig)
    """The frame generator."""
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    """The frame generator's noise schedule."""
    objects: ObjectPathwayConfig | None = field(default_factory=ObjectPathwayConfig)
    """The object pathway (None: none; it needs ``state`` in the training data)."""
    proprio: ProprioConfig = field(default_factory=ProprioConfig)
    """The proprio dynamics."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    """Who decides success."""
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    """How the low-dimensional dynamics learn."""
    camera: Literal["scene", "fitted"] = "scene"
    """The camera the model places things in the frame with (:mod:`~worldsim.world_models.camera`):
    the scene's calibrated one, or ``"fitted"``, fitted to the training frames (the cubes found
    by colour, paired with the recorded state) and saved with the weights; fitting needs
    ``state_supervision``. ``"fitted"`` in the ``tiny`` preset; ``"scene"`` here only so that a
    model saved before the option existed loads as it was built."""
    state_supervision: bool = True
    """Trained with the data's simulator ``state`` as supervision (the object pathway's positions,
    the detector's keypoint and the goal-offset targets). False: frames, proprio, actions and
    success flags only, as from a real robot's cameras; such a model has no object pathway and the
    success head judges it (``train-wm`` builds it so for data without ``state``). The ``video``
    imagination rung needs False."""

    def __post_init__(self) -> None:
        self.tasks, self.instructions = tuple(self.tasks), tuple(self.instructions)
        if not self.tasks or len(self.tasks) != len(self.instructions):
            raise ValueError(f"tasks={self.tasks!r} and instructions={self.instructions!r} must be non-empty "
                             "and of equal length")
        positive_ints(self, ("context", "image_size"))
        if self.patch < 1 or self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must be >= 1 and divide image_size={self.image_size}")
        self.frames.check(self)
        if self.judge.outcome == "rule" and self.objects is None:
            raise ValueError("outcome='rule' judges the objects' imagined positions, which only the object pathway "
                             "carries: give the object pathway or outcome='head'")
        if self.camera not in ("scene", "fitted"):
            raise ValueError(f"camera={self.camera!r}; allowed: 'scene', 'fitted'")
        if not self.state_supervision and self.camera == "fitted":
            raise ValueError("camera='fitted' pairs the cubes seen in the frames with the data's state: it needs "
                             "state_supervision")
        if self.proprio.sees_cubes and self.objects is None:
            raise ValueError("proprio.sees_cubes reads the cubes the object pathway carries: give the object pathway "
                             "or sees_cubes=false")
        if not self.state_supervision and self.objects is not None:
            raise ValueError("the object pathway learns from the data's state: a model without state_supervision has "
                             "none (objects=None)")

    @property
    def latent_channels(self) -> int:
        return 3 * self.patch**2

    @property
    def latent_size(self) -> int:
        return self.image_size // self.patch

    @property
    def sampling_steps(self) -> int:
        """Denoising steps per imagined frame (the schedule's)."""
        return self.diffusion.sampling_steps

    def without_state(self) -> WorldModelConfig:
        """This architecture as it learns from frames, proprio, actions and success flags alone: no
        object pathway, the success head judging, the frames drawn without the pathway's positions."""
        return dataclasses.replace(self, state_supervision=False, objects=None, camera="scene",
                                   judge=dataclasses.replace(self.judge, outcome="head"),
                                   frames=self.frames.without_objects())


PRESETS: dict[str, dict[str, Any]] = {
    # CPU: ~0.9M-parameter UNet at 16x16, one denoising step, with the gripper planes, each frame
    # drawn from the first (anchor) with what moves taken out of it (the moved cubes' old spots and
    # the starting arm cleared to the learned empty table, nothing pasted: the denoiser draws the
    # cubes where the pathway puts them), training's noise levels centred where its one step
    # samples, and its camera fitted to its training frames rather than read from the scene.
    "tiny": {"frames": {"backbone": "unet", "gripper_planes": True, "anchor": "first"},
             "objects": {"clear": True, "clear_arm": True, "paste": False}, "diffusion": {"p_mean": 0.3, "p_std": 0.6},
             "camera": "fitted"},
    # GPU: tiny wider and deeper (drawn from the last frame), with three denoising steps (DIAMOND's count).
    "base": {"frames": {"backbone": "unet", "channels": (128, 256, 256), "layers_per_block": 2, "norm_groups": 32,
                        "cond_hidden": 512, "gripper_planes": True},
             "diffusion": {"sampling_steps": 3}, "objects": {"hidden": 512}, "proprio": {"hidden": 512},
             "judge": {"detector_channels": 64, "hidden": 512}},
    # CPU: the video transformer (1.25M parameters, as the tiny UNet) over the first frame, 2
    # context frames and the new one, 16 tokens each.
    "video-tiny": {"context": 2, "frames": {"backbone": "wan"}},
    # GPU: the video transformer at 512 wide, 8 blocks, 64 tokens a frame, 4 context frames.
    "video-base": {"frames": {"backbone": "wan", "heads": 8, "head_dim": 64, "layers": 8, "ffn_dim": 2048,
                              "token_patch": 2, "cond_hidden": 512},
                   "diffusion": {"sampling_steps": 3}, "objects": {"hidden": 512}, "proprio": {"hidden": 512},
                   "judge": {"detector_channels": 64, "hidden": 512}},
}
"""Each preset's settings besides :class:`WorldModelConfig`'s defaults, as nested tables."""


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` merged in, table by table (a nested mapping replaces nothing but
    the fields it names; None or a non-mapping value replaces the whole entry)."""
    out = dict(base)
    for name, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = merged(out[name], value)
        else:
            out[name] = value
    return out


def build_config(name: str | None = None, **changes: Any) -> WorldModelConfig:
    """A :class:`WorldModelConfig` from preset ``name`` (None: the defaults) with ``changes``
    merged in table by table (``frames={"anchor": "last"}`` changes one field of the preset's frame
    generator; ``objects=None`` removes the pathway; a part's own config object replaces it whole).
    ``ValueError`` for an unknown preset or field, naming what is allowed."""
    from worldsim.runtime.config_files import build_dataclass

    if name is not None and name not in PRESETS:
        raise ValueError(f"preset={name!r} is not a world-model preset; allowed: {', '.join(PRESETS)}")
    tables = merged(PRESETS[name] if name is not None else {}, {k: _table(v) for k, v in changes.items()})
    return build_dataclass(WorldModelConfig, tables, "the world model's architecture")


def _table(value: Any) -> Any:
    """A part's config object as the table it was built from (so that it merges like one)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value) | ({"backbone": value.BACKBONE} if hasattr(value, "BACKBONE") else {})
    return value


LEGACY_FIELDS: dict[str, tuple[str, ...]] = {
    **{name: ("frames", name) for name in ("channels", "layers_per_block", "norm_groups", "gripper_planes", "anchor",
                                            "heads", "head_dim", "layers", "ffn_dim", "token_patch", "freq_dim",
                                            "lora_rank", "context_noise")},
    **{name: ("diffusion", name) for name in ("sigma_data", "sigma_min", "sigma_max", "rho", "p_mean", "p_std",
                                               "sampling_steps")},
    "success_channels": ("judge", "detector_channels"), "outcome": ("judge", "outcome"),
    "success_threshold": ("judge", "success_threshold"), "object_hidden": ("objects", "hidden"),
    "carry_objects": ("objects", "carry"), "dynamics_batch": ("dynamics", "batch"),
    "dynamics_horizon": ("dynamics", "horizon"),
}
"""Where each field of the flat config that models were saved with before the parts had
configs of their own now lives (``backbone``, ``cond_hidden`` and ``object_pathway`` are
placed by :func:`from_legacy`)."""


def from_legacy(flat: dict[str, Any]) -> dict[str, Any]:
    """A saved model's config fields as the nested tables :class:`WorldModelConfig` takes: as they
    are when nested, else (a model saved before its parts had configs of their own) placed in them."""
    if "frames" in flat:
        return flat
    backbone = flat.get("backbone", "unet")
    known = {f.name for f in dataclasses.fields(BACKBONES[backbone])}
    hidden = flat.get("cond_hidden", 128)
    tables: dict[str, Any] = {"frames": {"backbone": backbone, "cond_hidden": hidden}, "proprio": {"hidden": hidden},
                              "judge": {"hidden": hidden}, "objects": {}, "diffusion": {}, "dynamics": {}}
    for name, value in flat.items():
        if name in LEGACY_FIELDS:
            part, key = LEGACY_FIELDS[name]
            if part != "frames" or key in known:
                tables[part][key] = value
        elif name not in ("backbone", "cond_hidden", "object_pathway"):
            tables[name] = value
    if not flat.get("object_pathway", True):
        tables["objects"] = None
    return tables
