"""The EDM denoiser of the next frame's change (Karras et al. 2022), around the config's frame
network: a diffusers UNet with the context on its channels (``backbone="unet"``) or the video
transformer over the clip (``"wan"``, :mod:`~worldsim.world_models.video_backbone`)."""

from __future__ import annotations

import torch
from torch import nn

from worldsim.envs.observations import ENTITIES
from worldsim.world_models.config import SPATIAL_CHANNELS, WorldModelConfig
from worldsim.world_models.layers import randn
from worldsim.world_models.video_backbone import ClipInputs, VideoBackbone

# What the frame network reads besides the noisy frame: the UNet's stacked channels and
# conditioning vector, or the video transformer's clip.
Context = tuple[torch.Tensor, torch.Tensor] | ClipInputs


def context_frames(config: WorldModelConfig) -> int:
    """How many context frames the UNet reads besides the noisy and the first frame: none when
    each frame is drawn from the first (``anchor="first"``)."""
    return 0 if config.anchor == "first" else config.context


class Denoiser(nn.Module):
    """EDM denoiser ``D(x; sigma, context)`` around the config's frame network."""

    def __init__(self, config: WorldModelConfig) -> None:
        from diffusers import UNet2DModel  # here, not at import: diffusers costs seconds to import

        super().__init__()
        self.config = config
        if config.backbone == "wan":
            self.video = VideoBackbone(config)
            return
        c = config.latent_channels
        blocks = len(config.channels)
        self.embed_dim = 4 * config.channels[0]  # UNet2DModel's time-embedding width
        self.unet = UNet2DModel(
            sample_size=config.latent_size, in_channels=c * (context_frames(config) + 2) + SPATIAL_CHANNELS
            + (2 * len(ENTITIES) if config.object_pathway else 0) + (2 if config.gripper_planes else 0),
            out_channels=c,
            block_out_channels=config.channels, layers_per_block=config.layers_per_block,
            down_block_types=("DownBlock2D",) * blocks, up_block_types=("UpBlock2D",) * blocks,
            norm_num_groups=config.norm_groups, class_embed_type="identity",
            resnet_time_scale_shift="scale_shift", add_attention=False)

    # Karras et al. 2022, Table 1 (EDM column): one method per preconditioning equation.
    def c_skip(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.config.sigma_data**2 / (sigma**2 + self.config.sigma_data**2)

    def c_out(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma * self.config.sigma_data / (sigma**2 + self.config.sigma_data**2).sqrt()

    def c_in(self, sigma: torch.Tensor) -> torch.Tensor:
        return 1.0 / (sigma**2 + self.config.sigma_data**2).sqrt()

    def c_noise(self, sigma: torch.Tensor) -> torch.Tensor:
        # ln(sigma)/4 as in EDM, scaled so the UNet's sinusoidal (DDPM-style) embedding resolves it
        return 250.0 * sigma.log()

    def network(self, x_noisy: torch.Tensor, sigma: torch.Tensor, context: Context) -> torch.Tensor:
        """``F(c_in x; c_noise, context)``: the frame network's raw output."""
        scale = self.c_in(sigma)[:, None, None, None]
        if isinstance(context, ClipInputs):
            return self.video(x_noisy * scale, sigma, context)
        stack, cond = context
        # diffusers' models are nn.Modules, callable, whatever its stubs say
        return self.unet(torch.cat([x_noisy * scale, stack], dim=1), self.c_noise(sigma),  # type: ignore[operator]
                         class_labels=cond).sample

    def denoise(self, x_noisy: torch.Tensor, sigma: torch.Tensor, context: Context) -> torch.Tensor:
        """``D(x; sigma) = c_skip x + c_out F(c_in x; c_noise)``."""
        s = sigma[:, None, None, None]
        return self.c_skip(s) * x_noisy + self.c_out(s) * self.network(x_noisy, sigma, context)

    def training_noise(self, target: torch.Tensor, generator: torch.Generator | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """The draws of one :meth:`loss` on ``target``: a standard normal per sample (its noise
        level's) and standard normal noise shaped like ``target``, from ``generator``."""
        return randn((len(target),), generator, target), randn(target.shape, generator, target)

    def loss(self, target: torch.Tensor, context: Context, noise: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """EDM training loss: sigma ~ logN(p_mean, p_std^2), the network regresses the
        preconditioned target ``(x0 - c_skip x) / c_out`` (the lambda-weighted denoising loss),
        with the draws of :meth:`training_noise` (drawn apart, so that the loss is a function of tensors
        alone, which ``torch.compile`` can fuse). Also returns the detached estimate
        ``D(x; sigma)`` of ``x0``."""
        level_noise, frame_noise = noise
        sigma = (self.config.p_mean + self.config.p_std * level_noise).exp()
        s = sigma[:, None, None, None]
        x_noisy = target + s * frame_noise
        wanted = (target - self.c_skip(s) * x_noisy) / self.c_out(s)
        output = self.network(x_noisy, sigma, context)
        with torch.no_grad():
            estimate = self.c_skip(s) * x_noisy + self.c_out(s) * output
        return ((output - wanted) ** 2).mean(), estimate

    def sigmas(self, steps: int, device: torch.device) -> torch.Tensor:
        """The Karras schedule from sigma_max down to sigma_min in ``steps`` levels, then 0."""
        cfg = self.config
        ramp = torch.linspace(0, 1, steps, device=device)
        inv = 1.0 / cfg.rho
        levels = (cfg.sigma_max**inv + ramp * (cfg.sigma_min**inv - cfg.sigma_max**inv)) ** cfg.rho
        return torch.cat([levels, torch.zeros(1, device=device)])

    def sample(self, context: Context, steps: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Euler sampling of the probability-flow ODE over :meth:`sigmas`."""
        like = context.frames if isinstance(context, ClipInputs) else context[0]
        b = len(like)
        shape = (b, self.config.latent_channels, self.config.latent_size, self.config.latent_size)
        sigmas = self.sigmas(steps, like.device)
        x = sigmas[0] * randn(shape, generator, like)
        for sigma, following in zip(sigmas[:-1], sigmas[1:], strict=True):
            denoised = self.denoise(x, sigma.expand(b), context)
            x = x + (following - sigma) * (x - denoised) / sigma  # dx/dsigma = (x - D) / sigma
        return x
