"""The README and the docs are part of the contract: every ```python block on every page runs as
written, and every repository path they name exists.

A page's examples read the files its shell commands write (``data/push.h5``, ``runs/wm_push``, ...).
The tests cannot run those commands at full size, so :func:`workspace` makes the same files, small
and untrained (4 episodes at 32x32, a world model and a TinyVLA of a few channels, a detector fitted
on 8 rollouts): the examples run against the real API on real files, only not on trained weights.
Each page runs in its own copy of that folder, its blocks in order in one namespace, as a reader
runs them. A block preceded by ``<!-- docs-test: skip (reason) -->`` is not run (a GPU-only
example); the reason is required and the skips are counted.
"""

import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(<!-- docs-test: skip \((?P<reason>[^)]*)\) -->\s*\n)?^```python\n(?P<code>.*?)^```", re.M | re.S)
MAX_SKIPPED = 3
"""GPU-only examples (MJX and Warp at scale) that CPU tests cannot run in time."""
INSTRUCTION = "push the red cube onto the blue square"


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """The page's python blocks: (code, skip reason or None)."""
    return [(m["code"], m["reason"]) for m in BLOCK.finditer(page.read_text())]


PAGES_WITH_CODE = [page for page in PAGES if blocks(page)]


@pytest.fixture(scope="session")
def workspace(tmp_path_factory, push_episodes, untrained_world_model):
    """The files the pages' shell commands write, small: see the module docstring."""
    from worldsim.data.collect import collect_episodes
    from worldsim.failure import Rollout, load_rollouts, make_detector
    from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

    root = tmp_path_factory.mktemp("docs")
    (root / "data").mkdir()
    shutil.copy(push_episodes, root / "data/push.h5")
    shutil.copytree(untrained_world_model, root / "runs/wm_push/world_model")
    policy = TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), tasks=("PushCube-v0",), image_size=32,
                                   language="learned", channels=(8, 8), hidden_dim=32, feature_dim=32))
    policy.save_pretrained(root / "runs/bc_push/policy")
    collect_episodes(["PushCube-v0"], lambda t: policy, 8, root / "data/rollouts.h5", num_envs=8, obs_mode="pixels",
                     image_size=32, record_features=True, num_samples=4, progress=False)
    # An untrained policy rarely succeeds: the rollouts are labelled by a feature statistic so that
    # the detector has both classes to fit and successes to calibrate on (only the plumbing matters).
    rollouts = load_rollouts(root / "data/rollouts.h5")
    median = np.median([r.features.mean() for r in rollouts])
    rollouts = [Rollout(r.task, bool(r.features.mean() < median), r.features, r.action_samples, r.index)
                for r in rollouts]
    detector = make_detector("safe-mlp").fit(rollouts)
    detector.calibrate([r for r in rollouts if r.success], alpha=0.3, method="constant")
    detector.save(root / "runs/detect/detectors/safe-mlp")
    return root


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=name)
def test_every_python_example_runs(page, workspace, tmp_path, monkeypatch):
    folder = tmp_path / "work"
    shutil.copytree(workspace, folder)
    monkeypatch.chdir(folder)
    namespace: dict = {"__name__": "__docs__"}
    for k, (code, reason) in enumerate(blocks(page)):
        if reason is not None:
            assert reason.strip(), f"{name(page)}: block {k} is skipped without a reason"
            continue
        exec(compile(code, f"{name(page)}, python block {k}", "exec"), namespace)  # noqa: S102


def test_the_pages_have_examples_and_few_skips():
    assert blocks(ROOT / "README.md"), "the README shows no python example"
    assert len(PAGES_WITH_CODE) >= 5
    skipped = [(name(page), reason) for page in PAGES for _, reason in blocks(page) if reason is not None]
    assert len(skipped) <= MAX_SKIPPED, skipped


def commands(page: Path) -> list[str]:
    """The ``worldsim <command> ...`` lines of the page's bash blocks, continuations joined."""
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            match = re.search(r"(?:^|&& |-m )(worldsim [^#]*)", line)
            if match:
                found.append(match.group(1).strip())
    return found


FLAG_ERRORS = ("unrecognized", "invalid choice", "required", "expected")
"""What a usage error says when the flags themselves are wrong (a missing input file is not)."""


LOG_PAGES = {ROOT / "docs" / "results.md", ROOT / "docs" / "results-archive.md"}
"""The results log records each command as it ran at the commit its entry names (a record, not an
instruction): its commands parse with the command line of that commit, not always of today."""


@pytest.mark.parametrize("page", [page for page in PAGES if commands(page) and page not in LOG_PAGES], ids=name)
def test_every_command_line_parses(page, workspace, monkeypatch):
    from worldsim.commands.cli import COMMANDS, load
    from worldsim.commands.parsing import parse

    monkeypatch.chdir(workspace)
    for line in commands(page):
        command, *args = shlex.split(line)[1:]
        assert command in COMMANDS, f"{name(page)}: `{line}` names no command"
        try:
            parse(load(command), args, prog=f"worldsim {command}")
        except SystemExit as exit:  # tyro's own usage message
            pytest.fail(f"{name(page)}: `{line}` does not parse (exit {exit.code})")
        except ValueError as err:  # the command's one-line usage errors, and checks of its inputs
            assert not any(word in str(err) for word in FLAG_ERRORS), f"{name(page)}: `{line}`: {err}"


# A repository path: under a top-level folder of the repository, naming a file (with its extension)
# or a folder (with a trailing slash). Gym ids such as worldsim/PushCube-v0 have neither.
TOP = ("benchmarks", "worldsim", "envs", "world_models", "policies", "assets", "tests", "notebooks", "docs", ".ci")
FOLDERS = "|".join(re.escape(t) for t in TOP)
PATH = re.compile(r"(?<![\w./-])((?:" + FOLDERS + r")/(?:[\w.*-]+/)*"
                  r"(?:[\w*-][\w.*-]*\.(?:py|json|md|xml|sh|ipynb|toml|yml|h5))?)(?=[\s`)'\",;:.]|$)")


def repository_paths(text: str) -> set[str]:
    return set(PATH.findall(text))


def test_the_path_pattern():
    found = repository_paths("see `benchmarks/results/x.json`, [a](worldsim/rollout.py), `worldsim/PushCube-v0`, "
                             "`world_models/`, [b](policies.md) and benchmarks/results/policy_ranking_*.json.")
    assert found == {"benchmarks/results/x.json", "worldsim/rollout.py", "world_models/",
                     "benchmarks/results/policy_ranking_*.json"}


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_repository_path_exists(page):
    missing = sorted(p for p in repository_paths(page.read_text())
                     if not (any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))
    assert not missing, f"{name(page)} names paths that do not exist: {missing}"
