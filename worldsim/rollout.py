"""The one rollout loop: a policy runs a fixed number of episodes on a vector env, and hooks see
what happens (:func:`run_episodes`, :class:`RolloutHooks`).

Collection (:func:`worldsim.data.collect.collect_task`) records those episodes to a file;
evaluation (:func:`worldsim.evaluation.evaluate.evaluate_task`) measures them. Both need the same
bookkeeping, which is easy to get subtly wrong, so it is written once. It lives here, beside
both packages rather than in either: collection belongs to the data layer and evaluation to
its own, and neither should reach into the other for its loop. It needs only the vector-env
contract and :class:`~worldsim.policies.runner.ChunkQueue`.

The bookkeeping:

- **counting without bias towards short episodes**: with ``N`` episodes wanted from ``M`` envs,
  the first ``N`` episodes *started* are the counted ones, each run to its end, numbered by
  ``slot`` ``0 .. N-1`` in the order they started (a fast env would otherwise contribute more
  episodes, and fast episodes are mostly successes). An env whose episode ends once every slot
  is taken runs on idle; its later episodes are not counted;
- **the policy**, served one action per step by a :class:`~worldsim.policies.runner.ChunkQueue`
  (actions clipped to [-1, 1], as the env executes them); an env's queued actions are dropped
  when its episode restarts;
- **autoreset**, by the env's ``metadata["autoreset_mode"]``: ``SameStep`` (the env restarts an
  ended episode inside ``step``; its last observation and info arrive in ``info["final_obs"]``
  and ``info["final_info"]``) or ``Disabled`` (the loop resets the ended envs with
  ``reset(options={"reset_mask": ended})`` once the hooks have seen them). Hooks read an env's
  observation and info after its action through :meth:`Step.next_obs` and
  :meth:`Step.next_info`: the ended episode's last under either mode;
- **paired starts** (Disabled, with a ``seed``): every counted episode starts from a reset of its
  env seeded by ``(seed, slot)`` (:func:`slot_seed`), so episode ``k`` starts from the same state
  whichever policy runs and however many envs run it: two policies evaluated with one seed are
  compared on the same episodes (a paired comparison, :mod:`worldsim.evaluation.compare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue
from worldsim.runtime.validation import check_int

AUTORESET_MODES = (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


def env_row(obs: Any, i: int) -> Any:
    """Env ``i``'s observation out of a batched one (an array, or a dict with an ``instruction``
    tuple), copied: the env reuses its arrays."""
    if isinstance(obs, dict):
        return {key: (value[i] if isinstance(value, (tuple, list)) else np.array(value[i]))
                for key, value in obs.items()}
    return np.array(obs[i])


@dataclass
class Step:
    """One step of every env, as the hooks see it: what ``env.step(actions)`` returned, and
    ``slots[i]``, the counted episode env ``i`` ran at this step (-1: idle)."""

    actions: np.ndarray
    obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: dict[str, Any]
    slots: np.ndarray
    same_step: bool
    """The env autoresets in ``step`` (SameStep): ended envs' last observations are in ``info``."""
    ended: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.ended = self.terminated | self.truncated

    @property
    def active(self) -> np.ndarray:
        """Envs that ran a counted episode at this step."""
        return self.slots >= 0

    def next_obs(self, i: int) -> Any:
        """Env ``i``'s observation after its action, a copy of its own: the last of its episode
        when the episode ended."""
        if self.same_step and self.ended[i]:
            return self.info["final_obs"][i]
        return env_row(self.obs, i)

    def next_info(self, i: int, key: str) -> Any:
        """Env ``i``'s ``info[key]`` after its action: the last of its episode when it ended."""
        if self.same_step and self.ended[i]:
            return self.info["final_info"][key][i]
        return self.info[key][i]


class RolloutHooks:
    """What a caller of :func:`run_episodes` does as the rollout goes; each method does nothing
    unless overridden.

    Per step, in this order: :meth:`act`, the envs step, :meth:`stepped`, :meth:`finished` for
    each counted episode that ended (in env order), the ended envs restart, :meth:`started` for
    each counted episode that began (after the first reset: once per env given a slot).
    """

    def started(self, slot: int, env: int, obs: Any, info: dict[str, Any]) -> None:
        """Counted episode ``slot`` began in env ``env``: its first observation and info are row
        ``env`` of the batched ``obs`` and ``info``."""

    def act(self, obs: Any, actions: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """The actions the envs execute on ``obs``, given the policy's (clipped, float32,
        ``(num_envs, A)``) and each env's slot (-1: idle); by default the policy's, idle envs
        included."""
        return actions

    def stepped(self, step: Step) -> None:
        """Every env took ``step.actions``."""

    def finished(self, slot: int, env: int, step: Step) -> None:
        """Counted episode ``slot`` ended in env ``env`` at ``step``. Under Disabled autoreset
        the env still holds the episode's last state (for ``render()``) until this returns."""


def slot_seed(seed: int, slot: int) -> int:
    """The seed of counted episode ``slot``'s start in a rollout seeded by ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(slot)]).generate_state(1)[0])


def _start_slots(env: gym.vector.VectorEnv, seed: int, slots: dict[int, int]) -> tuple[Any, dict[str, Any]]:
    """Reset each env ``i`` of ``slots`` (env -> slot) alone, seeded by its slot."""
    obs: Any = None
    info: dict[str, Any] = {}
    for i, slot in slots.items():
        mask = np.zeros(env.num_envs, bool)
        mask[i] = True
        obs, info = env.reset(seed=slot_seed(seed, slot), options={"reset_mask": mask})
    return obs, info


def run_episodes(env: gym.vector.VectorEnv, policy: Policy, episodes: int, hooks: RolloutHooks, *,
                 seed: int | None = None, execute_steps: int | None = None, deterministic: bool = False,
                 paired: bool = True) -> int:
    """Run ``policy`` on ``env`` until the first ``episodes`` episodes started have finished,
    telling ``hooks`` what happens (see the module docstring); returns the env steps taken
    (``num_envs`` per step, idle envs included).

    ``seed`` seeds the env's first reset and, under Disabled autoreset with ``paired``, every
    counted episode's start (paired starts); ``execute_steps`` and ``deterministic`` are the
    :class:`~worldsim.policies.runner.ChunkQueue`'s. ``ValueError`` for ``episodes`` < 1 or an
    env whose autoreset mode is not SameStep or Disabled.
    """
    check_int("episodes", episodes)
    mode = env.metadata.get("autoreset_mode")
    if mode not in AUTORESET_MODES:
        raise ValueError(f"the env's autoreset_mode is {mode!r}; run_episodes drives envs made with "
                         "autoreset_mode='SameStep' or 'Disabled'")
    num_envs = env.num_envs
    queue = ChunkQueue(policy, num_envs, execute_steps, deterministic)
    paired = paired and seed is not None and mode == AutoresetMode.DISABLED
    obs, info = env.reset(seed=seed)
    slots = np.where(np.arange(num_envs) < episodes, np.arange(num_envs), -1)
    started = int((slots >= 0).sum())
    if paired and seed is not None:
        obs, info = _start_slots(env, seed, {i: i for i in range(started)})
    for i in range(started):
        hooks.started(i, i, obs, info)
    finished = env_steps = 0
    while finished < episodes:
        actions = hooks.act(obs, np.clip(queue(obs), -1.0, 1.0).astype(np.float32), slots.copy())
        obs, reward, terminated, truncated, info = env.step(actions)
        env_steps += num_envs
        step = Step(actions, obs, reward, terminated, truncated, info, slots.copy(),
                    mode == AutoresetMode.SAME_STEP)
        hooks.stepped(step)
        begun = []
        for i in np.flatnonzero(step.ended & step.active).tolist():
            hooks.finished(int(slots[i]), int(i), step)
            finished += 1
            slots[i] = -1
            if started < episodes:
                slots[i] = started
                started += 1
                begun.append(int(i))
        if step.ended.any():
            if mode == AutoresetMode.DISABLED:  # idle envs restart too: Disabled refuses to step them
                obs, info = env.reset(options={"reset_mask": step.ended})
                if paired and seed is not None and begun:
                    obs, info = _start_slots(env, seed, {i: int(slots[i]) for i in begun})
            queue.restart(step.ended)
            for i in begun:
                hooks.started(int(slots[i]), i, obs, info)
    return env_steps
