"""Training-state checkpoints: everything needed to resume a run where it stopped.

A checkpoint is one ``torch.save`` file (``checkpoint.pt`` in the run folder) written
atomically, so a run killed at any moment (SIGKILL included) keeps its previous checkpoint
intact and loses only the work done since. It holds the model and optimiser state, the step
counters, the RNG states (python, numpy, torch) and whatever else the trainer adds (env
snapshots, normaliser statistics).
"""

from __future__ import annotations

import pickle
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from worldsim.runtime.atomic import atomic_path

CHECKPOINT_FILE = "checkpoint.pt"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (plus the global RNG states) to ``path`` atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save({**state, "rng": rng_state()}, tmp)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` and restore the global RNG states;
    a missing, truncated or foreign file gets an error that names it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as err:
        raise ValueError(f"{path} is not a readable worldsim checkpoint (truncated or corrupt?): {err}") from err
    if not isinstance(state, dict) or "rng" not in state:
        raise ValueError(f"{path} is not a worldsim training checkpoint")
    set_rng_state(state["rng"])
    return state


# ---------------------------------------------------------------------------- pretrained folders
PRETRAINED_CONFIG = "config.json"
PRETRAINED_WEIGHTS = "model.safetensors"


def save_pretrained_folder(path: str | Path, module: torch.nn.Module, document: dict[str, Any]) -> Path:
    """Write ``document`` to ``path/config.json`` and ``module``'s weights to
    ``path/model.safetensors``, each atomically (the layout of policies and world models)."""
    import json

    from safetensors.torch import save_file

    from worldsim.runtime.atomic import atomic_path

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    with atomic_path(path / PRETRAINED_WEIGHTS) as tmp:
        save_file(tensors, str(tmp))
    with atomic_path(path / PRETRAINED_CONFIG) as tmp:
        tmp.write_text(json.dumps(document, indent=2) + "\n")
    return path


def read_pretrained_config(path: str | Path, run_subfolder: str, type_key: str, what: str,
                           missing_hint: str = "") -> tuple[Path, str, dict[str, Any]]:
    """The folder, the type (``document[type_key]``) and the config fields of the pretrained
    folder ``path``, or of the one a training run folder holds in ``run_subfolder``;
    ``FileNotFoundError`` when there is no config (``missing_hint`` says what to give instead),
    ``ValueError`` naming the file when it is not a worldsim ``what`` config."""
    import json

    path = Path(path)
    if (path / run_subfolder / PRETRAINED_CONFIG).exists():
        path = path / run_subfolder
    config_path = path / PRETRAINED_CONFIG
    if not config_path.exists():
        raise FileNotFoundError(f"no {what} at {path}: {PRETRAINED_CONFIG} is missing{missing_hint}")
    try:
        document = json.loads(config_path.read_text())
        return path, document[type_key], document["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{config_path} is not a worldsim {what} config ({err})") from err


def config_from_dict(config_class: type, fields: dict[str, Any], where: str) -> Any:
    """Build a (nested) config dataclass from JSON fields, rejecting unknown keys and values of the
    wrong kind by name (``where``: the file they came from)."""
    from worldsim.runtime.config_files import build_dataclass

    return build_dataclass(config_class, fields, where)


def load_pretrained_weights(path: str | Path, module: torch.nn.Module, built_from: str) -> None:
    """Load ``path/model.safetensors`` into ``module`` strictly; ``ValueError`` naming the file
    when it cannot be read or does not fit (``built_from`` says what the module was built from)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = Path(path) / PRETRAINED_WEIGHTS
    try:
        state = load_file(str(weights))
    except (FileNotFoundError, SafetensorError, OSError) as err:
        raise ValueError(f"cannot read the weights {weights}: {err}") from err
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"the weights in {weights} do not fit {built_from}:\n{err}") from err


M = TypeVar("M", bound=torch.nn.Module)


def save_pretrained_model(path: str | Path, module: torch.nn.Module, type_key: str, type_name: str) -> Path:
    """:func:`save_pretrained_folder` with the document every policy and world model writes: its
    type ``type_name`` under ``type_key`` and its config dataclass (``module.config``) as JSON."""
    from worldsim.runtime.run_logging import to_jsonable

    return save_pretrained_folder(path, module, {type_key: type_name, "config": to_jsonable(module.config)})


def load_pretrained_model(path: str | Path, run_subfolder: str, type_key: str, what: str,
                          model_class: Callable[[str, Path], type[M]], device: str | torch.device,
                          missing_hint: str = "") -> M:
    """Rebuild the module a :func:`save_pretrained_model` folder ``path`` holds (or the one a
    training run folder holds in ``run_subfolder``; ``what`` and ``missing_hint`` as in
    :func:`read_pretrained_config`): ``model_class(type, config_path)`` gives the class of the saved
    type (or raises ``ValueError`` naming the file), which is built from its ``config_class`` and
    the saved config fields, gets the saved weights strictly, and returns on ``device`` in eval mode."""
    path, kind, fields = read_pretrained_config(path, run_subfolder, type_key, what, missing_hint)
    config_path = path / PRETRAINED_CONFIG
    cls = model_class(kind, config_path)
    upgrade = getattr(cls, "upgrade_config", None)  # a class whose saved configs changed shape reads old ones
    fields = upgrade(fields) if upgrade is not None else fields
    module = cls(config_from_dict(cls.config_class, fields, str(config_path)))  # type: ignore[attr-defined]
    load_pretrained_weights(path, module, f"a {cls.__name__} built from {config_path}")
    return module.to(device).eval()
