"""The ``wan`` frame generator: a diffusers ``WanTransformer3DModel`` over a short clip, each frame
modulated by its own conditioning.

The clip is the episode's first frame, the ``C`` context frames and the frame being denoised,
each a grid of space-to-depth cells (with the object pathway, one blob plane per object at
that frame's positions beside them), cut into ``token_patch`` x ``token_patch`` tokens; Wan's
3-D rotary embedding tells the frames and cells apart. Conditioning, per frame (IRASim's
per-frame adaptive layer norm, through Wan's own modulation, which Wan 2.2 already applies per
token):

- the frame's noise level, through Wan's timestep embedding: the denoised frame's EDM sigma,
  the context frames' augmentation level, 0 for the first frame; each as flow-matching time
  ``1000 s / (1 + s)`` of ``s = sigma / sigma_data``, the scale a pretrained Wan was trained on;
- plus an MLP of the frame's normalised proprio and, for the frame being made, the action that
  makes it (zero-initialised, so a pretrained backbone starts unchanged);
- the task's instruction embedding (MiniLM, :mod:`~worldsim.policies.language`) as the one
  token Wan's cross-attention reads, where its text encoder's tokens would be.

:func:`load_pretrained_backbone` starts it from a diffusers-format Wan folder; ``lora_rank``
trains LoRA adapters (``peft``) on its attention and feed-forward layers instead of all of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WanConfig, WorldModelConfig
from worldsim.world_models.frames import Conditions, FrameGenerator
from worldsim.world_models.layers import mlp
from worldsim.world_models.objects import keypoint_planes

WAN_CLASS = "WanTransformer3DModel"
FRAME_FEATURES = PROPRIO_DIM + ACTION_DIM + 1  # proprio, action, "proprio known" flag
# Wan's attention and feed-forward projections: the layers LoRA adapts.
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2")
# Layers that read or write worldsim's own inputs and outputs (space-to-depth cells with object
# planes, the instruction embedding, the modulation of the output): trained under LoRA as well.
OWN_LAYERS = ("patch_embedding", "proj_out", "condition_embedder.text_embedder", "scale_shift_table")
# Settings every worldsim Wan shares with Wan 2.1/2.2's text-to-video checkpoints.
WAN_FIXED = {"cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6}


@dataclass
class ClipInputs:
    """What the ``wan`` network reads besides the noisy frame, for ``B`` windows of ``F`` given
    frames (the first frame, then the context): ``frames`` ``(B, F, c, h, w)`` (cells, plus
    object planes), ``target_planes`` ``(B, E, h, w)`` (the new frame's object planes; ``E = 0``
    without the pathway), ``levels`` ``(B, F)`` (each given frame's noise level, data units),
    ``features`` ``(B, F + 1, 9)`` (each frame's proprio, action and flag) and ``task`` ``(B,)``."""

    frames: torch.Tensor
    target_planes: torch.Tensor
    levels: torch.Tensor
    features: torch.Tensor
    task: torch.Tensor


def wan_settings(config: WorldModelConfig, planes: int, text_dim: int) -> dict[str, Any]:
    """The ``WanTransformer3DModel`` arguments of a worldsim ``config`` whose frames carry
    ``planes`` object planes."""
    own = config.frames
    assert isinstance(own, WanConfig)  # the assembler gives each generator its own config
    return {"patch_size": (1, own.token_patch, own.token_patch), "num_attention_heads": own.heads,
            "attention_head_dim": own.head_dim, "in_channels": config.latent_channels + planes,
            "out_channels": config.latent_channels, "text_dim": text_dim, "freq_dim": own.freq_dim,
            "ffn_dim": own.ffn_dim, "num_layers": own.layers, "rope_max_seq_len": 1024, **WAN_FIXED}


def pretrained_folder(path: str | Path) -> Path:
    """The folder holding a diffusers Wan transformer's ``config.json``: ``path`` itself or its
    ``transformer/`` (a pipeline folder); ``ValueError`` naming what is missing or wrong."""
    path = Path(path)
    for folder in (path / "transformer", path):
        config = folder / "config.json"
        if config.is_file():
            try:
                kind = json.loads(config.read_text()).get("_class_name")
            except (json.JSONDecodeError, AttributeError) as err:
                raise ValueError(f"init_from={str(path)!r}: {config} is not a diffusers config ({err})") from None
            if kind != WAN_CLASS:
                raise ValueError(f"init_from={str(path)!r}: {config} holds a {kind!r}; worldsim's video backbone "
                                 f"loads a {WAN_CLASS}")
            return folder
    raise ValueError(f"init_from={str(path)!r}: no config.json in it or in its transformer/ (give a diffusers-format "
                     f"{WAN_CLASS} folder, e.g. a Wan pipeline's)")


def pretrained_architecture(path: str | Path) -> dict[str, Any]:
    """The :class:`~worldsim.world_models.config.WanConfig` fields a pretrained Wan folder fixes
    (heads, head width, layers, feed-forward width, token patch, timestep-embedding width)."""
    folder = pretrained_folder(path)
    wan = json.loads((folder / "config.json").read_text())
    patch = tuple(wan.get("patch_size", (1, 2, 2)))
    if patch[0] != 1 or patch[1] != patch[2]:
        raise ValueError(f"init_from={str(path)!r}: patch_size={list(patch)}; worldsim needs (1, p, p) (one frame "
                         "per token)")
    return {"heads": int(wan.get("num_attention_heads", 40)), "head_dim": int(wan.get("attention_head_dim", 128)),
            "layers": int(wan.get("num_layers", 40)), "ffn_dim": int(wan.get("ffn_dim", 13824)),
            "token_patch": int(patch[1]), "freq_dim": int(wan.get("freq_dim", 256))}


def flow_time(level: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """A noise level (data units) as Wan's timestep: flow-matching time ``1000 s / (1 + s)``,
    ``s = level / sigma_data``."""
    s = level / sigma_data
    return 1000.0 * s / (1.0 + s)


class WanFrames(FrameGenerator):
    """The video transformer's frame generator: the clip of first frame, context frames and the
    frame being made (see the module docstring), drawn by :class:`VideoBackbone`."""

    def __init__(self, config: WorldModelConfig, planes: int, carry: bool) -> None:
        super().__init__(config, planes, carry)
        self.video = VideoBackbone(config, planes)

    def network(self, x_scaled: torch.Tensor, sigma: torch.Tensor, inputs: Any) -> torch.Tensor:
        return self.video(x_scaled, sigma, inputs)

    def sample_like(self, inputs: Any) -> torch.Tensor:
        return inputs.frames

    def inputs(self, context: torch.Tensor, first: torch.Tensor, level: torch.Tensor, conditions: Conditions,
               points: torch.Tensor | None, next_points: torch.Tensor | None) -> ClipInputs:
        """The clip of first and context frames (with one blob plane per object at each frame's
        positions), each frame's noise level (``level`` for the context, 0 for the first frame) and
        features (its normalised proprio; for the new frame, the next proprio and the action)."""
        b, c = context.shape[:2]
        size, patch = self.model_config.latent_size, self.model_config.patch
        frames = torch.cat([first[:, None], context], dim=1)
        target_planes = context.new_zeros(b, 0, size, size)
        if self.planes:
            assert points is not None and next_points is not None  # the pathway's positions come with it
            planes = keypoint_planes(points.flatten(0, 1), size, patch).view(b, c, -1, size, size)
            planes = torch.cat([torch.zeros_like(planes[:, :1]), planes], dim=1)  # the first frame's are unknown
            frames = torch.cat([frames, planes], dim=2)
            target_planes = keypoint_planes(next_points, size, patch)
        known = context.new_ones(b, c, 1)
        no_action = torch.zeros_like(known).expand(-1, -1, ACTION_DIM)
        given = torch.cat([conditions.proprio, no_action, known], dim=2)
        made = torch.cat([conditions.next_proprio, conditions.action, known[:, 0]], dim=1)
        features = torch.cat([torch.zeros_like(given[:, :1]), given, made[:, None]], dim=1)
        levels = torch.cat([torch.zeros_like(level[:, None]), level[:, None].expand(-1, c)], dim=1)
        return ClipInputs(frames, target_planes, levels, features, conditions.task)


class VideoBackbone(nn.Module):
    """The ``wan`` network ``F(c_in x; sigma, clip)``: see the module docstring."""

    def __init__(self, config: WorldModelConfig, planes: int) -> None:
        from diffusers import WanTransformer3DModel  # here, not at import: diffusers costs seconds to import

        from worldsim.policies.language import InstructionEncoder, resolve_language

        super().__init__()
        own = config.frames
        assert isinstance(own, WanConfig)  # the assembler gives each generator its own config
        self.config, self.token_patch, self.sigma_data = own, own.token_patch, config.diffusion.sigma_data
        self.instructions = InstructionEncoder(config.instructions, resolve_language("auto"))
        self.instructions.ensure_ready()  # now, not inside a recorded or compiled step
        # Any: diffusers' models are nn.Modules whose submodules its type stubs do not declare
        self.transformer: Any = WanTransformer3DModel(**wan_settings(config, planes, self.instructions.dim))
        width = own.heads * own.head_dim
        self.frame_mlp = mlp(FRAME_FEATURES, own.cond_hidden, width)
        last = self.frame_mlp[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)  # a pretrained backbone starts as it was
        nn.init.zeros_(last.bias)
        if own.lora_rank:
            self.add_lora(own.lora_rank)

    def add_lora(self, rank: int) -> None:
        """Freeze the transformer but :data:`OWN_LAYERS` and give its :data:`LORA_TARGETS`
        rank-``rank`` adapters (peft)."""
        try:
            from peft import LoraConfig
        except ImportError as err:
            raise ImportError("lora_rank > 0 needs peft (pip install peft)") from err
        self.transformer.requires_grad_(False)
        self.transformer.add_adapter(LoraConfig(r=rank, lora_alpha=rank, target_modules=list(LORA_TARGETS),
                                                init_lora_weights=True))
        for name, parameter in self.transformer.named_parameters():
            if name.startswith(OWN_LAYERS):
                parameter.requires_grad_(True)

    def load_pretrained(self, path: str | Path) -> dict[str, list[str]]:
        """Copy a diffusers Wan folder's weights into the transformer, wherever name and shape
        match (a LoRA-wrapped layer's ``base_layer`` too); returns the transformer's tensors
        left as built (``new``: worldsim's own input/output layers where the shapes differ) and
        the folder's tensors not used (``unused``)."""
        from diffusers import WanTransformer3DModel

        folder = pretrained_folder(path)
        pretrained: Any = WanTransformer3DModel.from_pretrained(folder)
        weights = pretrained.state_dict()
        own = self.transformer.state_dict()
        matched: dict[str, torch.Tensor] = {}
        for name, tensor in weights.items():
            head, _, leaf = name.rpartition(".")
            for candidate in (name, f"{head}.base_layer.{leaf}"):
                if candidate in own and own[candidate].shape == tensor.shape:
                    matched[candidate] = tensor
                    break
        self.transformer.load_state_dict(matched, strict=False)
        adapters = ("lora_A", "lora_B")
        new = sorted(n for n in own if n not in matched and not any(a in n for a in adapters))
        used = {n.replace(".base_layer", "") for n in matched}
        return {"new": new, "unused": sorted(n for n in weights if n not in used)}

    def forward(self, x_scaled: torch.Tensor, sigma: torch.Tensor, clip: ClipInputs) -> torch.Tensor:
        """The raw output for the frame being made, ``(B, c, h, w)``, from its preconditioned
        noisy cells ``x_scaled``, its noise level ``sigma`` ``(B,)`` and the ``clip``."""
        wan = self.transformer
        b, given = clip.frames.shape[:2]
        target = torch.cat([x_scaled, clip.target_planes], dim=1)
        video = torch.cat([clip.frames, target[:, None]], dim=1).transpose(1, 2)  # (B, c, F + 1, h, w)
        rotary = wan.rope(video)
        tokens = wan.patch_embedding(video).flatten(2).transpose(1, 2).contiguous()
        per_frame = tokens.shape[1] // (given + 1)
        embedder = wan.condition_embedder
        times = flow_time(torch.cat([clip.levels, sigma[:, None]], dim=1), self.sigma_data)
        steps = embedder.timesteps_proj(times.flatten()).unflatten(0, (b, given + 1))
        temb = embedder.time_embedder(steps.to(tokens.dtype)) + self.frame_mlp(clip.features)  # (B, F + 1, D)
        # one modulation per frame, given to each of its tokens
        modulation = embedder.time_proj(embedder.act_fn(temb)).unflatten(2, (6, -1))
        modulation = modulation.repeat_interleave(per_frame, dim=1)
        text = embedder.text_embedder(self.instructions(clip.task)[:, None].to(tokens.dtype))
        for block in wan.blocks:
            tokens = block(tokens, text, modulation, rotary)
        tokens = tokens[:, -per_frame:]  # the frame being made, modulated by its own embedding
        shift, scale = (wan.scale_shift_table[None] + temb[:, -1:, None]).chunk(2, dim=2)
        tokens = (wan.norm_out(tokens.float()) * (1 + scale.squeeze(2)) + shift.squeeze(2)).type_as(tokens)
        tokens = wan.proj_out(tokens)
        p, h, w = self.token_patch, x_scaled.shape[-2], x_scaled.shape[-1]
        cells = tokens.reshape(b, h // p, w // p, p, p, -1).permute(0, 5, 1, 3, 2, 4)
        return cells.reshape(b, -1, h, w)
