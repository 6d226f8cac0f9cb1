"""EDM (Karras et al. 2022): the preconditioning, training loss and Euler sampler of the frame
generators' denoiser ``D(x; sigma, inputs)`` around their network ``F``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from worldsim.world_models.config import DiffusionConfig
from worldsim.world_models.layers import randn

Network = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``F(c_in x, sigma, inputs)``: a frame generator's network on the preconditioned noisy frame."""


class EDM:
    """EDM's equations for the noise schedule ``config`` (Karras et al. 2022, Table 1, EDM column:
    one method per preconditioning equation)."""

    def __init__(self, config: DiffusionConfig) -> None:
        self.config = config

    def c_skip(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.config.sigma_data**2 / (sigma**2 + self.config.sigma_data**2)

    def c_out(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma * self.config.sigma_data / (sigma**2 + self.config.sigma_data**2).sqrt()

    def c_in(self, sigma: torch.Tensor) -> torch.Tensor:
        return 1.0 / (sigma**2 + self.config.sigma_data**2).sqrt()

    def denoise(self, network: Network, x_noisy: torch.Tensor, sigma: torch.Tensor, inputs: Any) -> torch.Tensor:
        """``D(x; sigma) = c_skip x + c_out F(c_in x; sigma)``."""
        s = sigma[:, None, None, None]
        return self.c_skip(s) * x_noisy + self.c_out(s) * network(x_noisy * self.c_in(s), sigma, inputs)

    def training_noise(self, target: torch.Tensor, generator: torch.Generator | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """The draws of one :meth:`loss` on ``target``: a standard normal per sample (its noise
        level's) and standard normal noise shaped like ``target``, from ``generator``."""
        return randn((len(target),), generator, target), randn(target.shape, generator, target)

    def loss(self, network: Network, target: torch.Tensor, inputs: Any, noise: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """EDM training loss: sigma ~ logN(p_mean, p_std^2), the network regresses the
        preconditioned target ``(x0 - c_skip x) / c_out`` (the lambda-weighted denoising loss),
        with the draws of :meth:`training_noise` (drawn apart, so that the loss is a function of
        tensors alone, which ``torch.compile`` can fuse). Also returns the detached estimate
        ``D(x; sigma)`` of ``x0``."""
        level_noise, frame_noise = noise
        sigma = (self.config.p_mean + self.config.p_std * level_noise).exp()
        s = sigma[:, None, None, None]
        x_noisy = target + s * frame_noise
        wanted = (target - self.c_skip(s) * x_noisy) / self.c_out(s)
        output = network(x_noisy * self.c_in(s), sigma, inputs)
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

    def sample(self, network: Network, inputs: Any, shape: tuple[int, ...], like: torch.Tensor, steps: int,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Euler sampling of the probability-flow ODE over :meth:`sigmas`: a sample ``shape`` on
        ``like``'s device and dtype."""
        sigmas = self.sigmas(steps, like.device)
        x = sigmas[0] * randn(shape, generator, like)
        for sigma, following in zip(sigmas[:-1], sigmas[1:], strict=True):
            denoised = self.denoise(network, x, sigma.expand(shape[0]), inputs)
            x = x + (following - sigma) * (x - denoised) / sigma  # dx/dsigma = (x - D) / sigma
        return x
