"""Docstring examples are part of the contract: every one in the package runs as written."""

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where each part of the package lives in the checkout (pyproject's package-dir).
SOURCES = {"worldsim": ROOT / "worldsim", "worldsim.envs": ROOT / "envs",
           "worldsim.world_models": ROOT / "world_models", "worldsim.policies": ROOT / "policies"}


def modules_with_examples() -> list[str]:
    names = []
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            if ">>>" in path.read_text():
                parts = path.relative_to(folder).with_suffix("").parts
                names.append(".".join((package, *parts)).removesuffix(".__init__"))
    return names


def test_the_examples_are_found():
    assert {"worldsim.envs.vector_env", "worldsim.envs.concat"} <= set(modules_with_examples())


# The MJX and Warp examples compile (about a minute each on 2 cores): slow.
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if ".mjx." in name or ".warp." in name
                                  else name for name in modules_with_examples()])
def test_docstring_examples(name, request):
    if ".warp." in name:
        request.getfixturevalue("warp_compiled")  # compiles (or skips when Warp is missing) once
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
