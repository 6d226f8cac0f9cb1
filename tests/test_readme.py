"""The README and the docs are part of the contract: every module and name they point at imports from there."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = "\n".join(page.read_text() for page in sorted((ROOT / "docs").rglob("*.md")))
# Dotted names the README gives that are LeRobot feature keys, not Python names.
DATA_KEYS = {"worldsim.policy_features", "worldsim.action_samples"}


def dotted_names(text: str = README + DOCS) -> list[str]:
    """``worldsim.x.y`` references in the text and ``from worldsim.x import a, b`` lines in code."""
    names = set(re.findall(r"`(worldsim(?:\.[A-Za-z_]\w*)+)", text))
    for module, imported in re.findall(r"^\s*from (worldsim[\w.]*) import ([\w, ]+)$", text, re.M):
        names |= {f"{module}.{name.strip()}" for name in imported.split(",")}
    return sorted(names - DATA_KEYS)


def test_the_readme_names_modules():
    assert len(dotted_names(README)) >= 5
    assert len(dotted_names()) > 20


@pytest.mark.parametrize("name", dotted_names())
def test_every_name_the_readme_gives_imports(name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(target, attribute), f"README or docs name {name}, but {target} has no {attribute}"
            target = getattr(target, attribute)
        return
    pytest.fail(f"README or docs name {name}, which does not import")
