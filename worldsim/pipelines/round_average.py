"""The uniform average of the weights of a co-evolution run's round policies.

Each round of a co-evolution run fine-tunes one base policy at a small learning rate, so the
average of the rounds' weights is a policy of the same architecture too, with each round's noise
averaged out (``benchmarks/coevolve_test_curve.py --average`` evaluates it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def average_of_rounds(run: Path, policies: dict[str, str]) -> Path:
    """The uniform average of the weights of ``policies``' rounds 1 to R (keys ``"round <k>"``;
    round 0, the base, and any other key are left out), saved once under ``run`` as
    ``average_of_rounds_1-R/policy`` (an extended run gets a new one) with round R's config; its folder."""
    rounds = sorted((int(k.split()[1]), Path(v)) for k, v in policies.items()
                    if k.startswith("round ") and k != "round 0")
    if not rounds:
        raise ValueError("no round policies to average (keys 'round 1' on)")
    folder = run / f"average_of_rounds_1-{rounds[-1][0]}" / "policy"
    if not folder.exists():
        weights = [load_file(str(policy / "model.safetensors")) for _, policy in rounds]
        average = {name: torch.stack([w[name].double() for w in weights]).mean(0).to(tensor.dtype)
                   for name, tensor in weights[-1].items()}
        staging = folder.with_name(".policy.tmp")
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "config.json").write_bytes((rounds[-1][1] / "config.json").read_bytes())
        save_file(average, str(staging / "model.safetensors"))
        staging.replace(folder)
    return folder
