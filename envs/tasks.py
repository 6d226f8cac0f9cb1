"""Task variants and suites.

A task is a family (what to do), the object it acts on, the goal, and a layout distribution.
All tasks share one scene, so any mix of them can later be batched over one MjModel.

Suites group variants in the spirit of LIBERO: ``tabletop-object`` varies which object,
``tabletop-goal`` the goal, ``tabletop-spatial`` the layout; ``tabletop-4`` is one task per
family and ``tabletop-16`` (alias of the whole suite) every variant. Each suite names a
seen/unseen split for generalisation experiments: train on ``seen``, test on ``unseen``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

Family = Literal["reach", "push", "pick_place", "stack"]
Layout = Literal["scattered", "row"]
FAMILIES: tuple[str, ...] = ("reach", "push", "pick_place", "stack")
LAYOUTS: tuple[str, ...] = ("scattered", "row")

_GOAL_WORDS = {
    "blue": "the blue square",
    "orange": "the orange square",
    "bin": "the bin",
    "red": "the red cube",
    "green": "the green cube",
    "yellow": "the yellow cube",
}


@dataclass(frozen=True)
class TaskSpec:
    """One task variant.

    Attributes:
        name: registered name without namespace, e.g. ``"PushCube-v0"``.
        family: ``reach`` (move above ``obj``, or above a zone when ``goal`` is a zone),
            ``push`` (push ``obj`` onto zone ``goal``), ``pick_place`` (put ``obj`` in the bin
            or on a zone) or ``stack`` (put ``obj`` on cube ``goal``).
        obj: colour of the cube acted on; ``None`` for reaching a zone.
        goal: a zone colour, ``"bin"``, a cube colour, or ``None`` (reach a cube).
        layout: initial-state distribution: ``scattered`` (uniform with clearances) or ``row``
            (cubes in a back row, zones and bin in a front row, order shuffled).
        max_episode_steps: time limit in control steps (20 Hz).
    """

    name: str
    family: Family
    obj: str | None
    goal: str | None
    layout: Layout = "scattered"
    max_episode_steps: int = 100

    @property
    def grasping(self) -> bool:
        """Whether the task holds a cube in the gripper (pick-and-place, stack): its grasps are
        precise, and displacement noise that a push recovers from makes most of them fail."""
        return self.family in ("pick_place", "stack")

    @property
    def instruction(self) -> str:
        if self.family == "reach":
            what = f"the {self.obj} cube" if self.obj else _GOAL_WORDS[str(self.goal)]
            return f"move the gripper above {what}"
        if self.family == "push":
            return f"push the {self.obj} cube onto {_GOAL_WORDS[str(self.goal)]}"
        if self.family == "pick_place":
            where = "in" if self.goal == "bin" else "on"
            return f"put the {self.obj} cube {where} {_GOAL_WORDS[str(self.goal)]}"
        return f"stack the {self.obj} cube on {_GOAL_WORDS[str(self.goal)]}"


def _variants() -> list[TaskSpec]:
    t = TaskSpec
    return [
        t("ReachCube-v0", "reach", "red", None, max_episode_steps=50),
        t("ReachCube-Green-v0", "reach", "green", None, max_episode_steps=50),
        t("ReachZone-v0", "reach", None, "blue", max_episode_steps=50),
        t("ReachCube-Row-v0", "reach", "red", None, "row", max_episode_steps=50),
        t("PushCube-v0", "push", "red", "blue"),
        t("PushCube-Green-v0", "push", "green", "blue"),
        t("PushCube-ToOrange-v0", "push", "red", "orange"),
        t("PushCube-Row-v0", "push", "red", "blue", "row"),
        t("PickPlaceCube-v0", "pick_place", "red", "bin"),
        t("PickPlaceCube-Yellow-v0", "pick_place", "yellow", "bin"),
        t("PickPlaceCube-ToBlue-v0", "pick_place", "red", "blue"),
        t("PickPlaceCube-Row-v0", "pick_place", "red", "bin", "row"),
        t("StackCube-v0", "stack", "red", "green", max_episode_steps=120),
        t("StackCube-YellowOnRed-v0", "stack", "yellow", "red", max_episode_steps=120),
        t("StackCube-GreenOnYellow-v0", "stack", "green", "yellow", max_episode_steps=120),
        t("StackCube-Row-v0", "stack", "red", "green", "row", max_episode_steps=120),
    ]


TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in _variants()}


@dataclass(frozen=True)
class Suite:
    """A named group of tasks with a seen/unseen split (``seen`` + ``unseen`` = ``tasks``)."""

    name: str
    seen: tuple[str, ...]
    unseen: tuple[str, ...] = field(default=())

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.seen + self.unseen


SUITES: dict[str, Suite] = {
    s.name: s
    for s in [
        Suite("tabletop-4", ("ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0")),
        Suite(
            "tabletop-object",
            ("ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0"),
            ("ReachCube-Green-v0", "PushCube-Green-v0", "PickPlaceCube-Yellow-v0"),
        ),
        Suite(
            "tabletop-goal",
            ("ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0"),
            ("ReachZone-v0", "PushCube-ToOrange-v0", "PickPlaceCube-ToBlue-v0",
             "StackCube-YellowOnRed-v0"),
        ),
        Suite(
            "tabletop-spatial",
            ("ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0"),
            ("ReachCube-Row-v0", "PushCube-Row-v0", "PickPlaceCube-Row-v0", "StackCube-Row-v0"),
        ),
        Suite(
            "tabletop-10",
            ("ReachCube-v0", "ReachZone-v0", "PushCube-v0", "PushCube-ToOrange-v0",
             "PickPlaceCube-v0", "PickPlaceCube-ToBlue-v0", "StackCube-v0"),
            ("PushCube-Green-v0", "PickPlaceCube-Yellow-v0", "StackCube-YellowOnRed-v0"),
        ),
        Suite(
            "tabletop-16",
            tuple(n for n in TASKS if n not in {
                "ReachCube-Green-v0", "PushCube-Row-v0", "PickPlaceCube-Yellow-v0",
                "StackCube-GreenOnYellow-v0"}),
            ("ReachCube-Green-v0", "PushCube-Row-v0", "PickPlaceCube-Yellow-v0",
             "StackCube-GreenOnYellow-v0"),
        ),
    ]
}


def _unknown(kind: str, name: str, known: list[str]) -> KeyError:
    near = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    return KeyError(f"Unknown {kind} {name!r}.{hint} Known: {', '.join(known)}")


def get_task(name: str) -> TaskSpec:
    """Look a task up by name, with or without the ``worldsim/`` namespace."""
    key = name.removeprefix("worldsim/")
    if key not in TASKS:
        raise _unknown("task", name, list(TASKS))
    return TASKS[key]


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise _unknown("suite", name, list(SUITES))
    return SUITES[name]
