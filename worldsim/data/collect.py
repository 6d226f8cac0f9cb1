"""Rollout collection: record episodes of any policy on worldsim vector envs to one episode file.

:func:`collect_episodes` runs each task on its own vector env (``autoreset_mode="Disabled"``:
the loop restarts ended envs itself, each counted episode from a start seeded by its number,
so the same seed records the same episode starts whatever ``num_envs``) through the rollout
loop shared with evaluation
(:func:`worldsim.rollout.run_episodes`: the policy served one action per step, episodes counted
without bias towards short ones, the first ``N`` started recorded, each to its end), and writes
every finished episode through :class:`~worldsim.data.writer.EpisodeWriter` (the file appears
only when all tasks are done).

With ``record_features=True`` each episode also carries what failure detectors read, so that
they can be fitted and scored offline: at every observation an action was taken at, the
policy's ``features`` ``(D,)`` and ``num_samples`` sampled action chunks ``(S, K, A)`` (stored
as ``policy/features`` and ``policy/action_samples``, see :mod:`worldsim.data.episode`). This
needs a learned policy; the scripted expert is refused.

Randomness flows from ``seed``: task ``k`` (in the order given) runs its envs with seed
``seed + k`` and the policy's torch sampling under ``torch.manual_seed(seed + k)``; each episode
records that env seed, its env index and a description of the policy (for the scripted
expert this includes its noise settings and seed). The recorded action samples come from a
separate torch stream derived from the same seed, so recording does not change the actions
taken (on CPU). Same seed, same file contents.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from worldsim.data.episode import Episode
from worldsim.data.writer import EpisodeWriter
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.observations import OBS_MODES
from worldsim.envs.registration import make_task_envs, task_env_id
from worldsim.envs.tasks import TaskSpec, get_suite, get_task
from worldsim.policies.base import Policy
from worldsim.policies.expert import ScriptedExpert
from worldsim.rollout import RolloutHooks, Step, env_row, run_episodes
from worldsim.runtime.run_logging import to_jsonable
from worldsim.runtime.threads import use_torch_threads
from worldsim.runtime.validation import check_int


@dataclass
class TaskCollectStats:
    """What collecting one task produced and cost."""

    task: str
    episodes: int
    successes: int
    steps: int  # env steps in the recorded episodes (sum of T)
    env_steps: int  # env steps run, including episodes discarded after the quota
    seconds: float

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes

    @property
    def mean_length(self) -> float:
        return self.steps / self.episodes

    @property
    def steps_per_second(self) -> float:
        """Env steps per wall-clock second (policy, physics, rendering and writing included)."""
        return self.env_steps / max(self.seconds, 1e-9)


@dataclass
class CollectStats:
    """The result of :func:`collect_episodes`: the file written and per-task figures."""

    path: Path
    tasks: dict[str, TaskCollectStats] = field(default_factory=dict)
    seconds: float = 0.0
    file_bytes: int = 0

    @property
    def episodes(self) -> int:
        return sum(s.episodes for s in self.tasks.values())

    @property
    def success_rate(self) -> float:
        return sum(s.successes for s in self.tasks.values()) / self.episodes


def describe_policy(policy: Policy) -> str:
    """A short description stored with each episode: the policy type and its config as JSON."""
    config = json.dumps(to_jsonable(policy.config), sort_keys=True, separators=(",", ":"))
    return f"{policy.policy_type} {config}"


def check_policy_observations(policy: Policy, env_kwargs: dict[str, Any]) -> None:
    """Raise ``ValueError`` if envs made with ``env_kwargs`` do not give ``policy`` the
    observations it reads (its :meth:`~worldsim.policies.base.Policy.env_kwargs`)."""
    wanted = policy.env_kwargs()
    mode = env_kwargs["obs_mode"]
    if wanted["obs_mode"] == "state" and mode == "pixels":
        raise ValueError(f"{type(policy).__name__} reads the 'state' observation; obs_mode='pixels' has none "
                         f"(use 'pixels+state' or 'state')")
    if wanted["obs_mode"] != "state":
        if mode == "state":
            raise ValueError(f"{type(policy).__name__} reads pixels; obs_mode='state' has none "
                             f"(use 'pixels' or 'pixels+state')")
        if wanted["image_size"] != env_kwargs["image_size"]:
            raise ValueError(f"{type(policy).__name__} was built for {wanted['image_size']}-pixel images; "
                             f"image_size={env_kwargs['image_size']} "
                             f"(pass image_size={wanted['image_size']})")
        if wanted["wrist_camera"] and not env_kwargs["wrist_camera"]:
            raise ValueError(f"{type(policy).__name__} reads the wrist camera; pass wrist_camera=True "
                             "(--wrist)")


def check_feature_recording(policy: Policy, num_samples: int) -> None:
    """Raise ``ValueError`` unless ``policy``'s features and ``num_samples`` action samples per
    step can be recorded: ``num_samples`` must be an int >= 1 and the policy a learned one."""
    check_int("num_samples", num_samples)
    # The expert's "features" are the raw state, nothing a detector learns from. A ValueError, not a
    # TypeError: the policy is valid, only not with record_features (and the CLI reports ValueErrors).
    if isinstance(policy, ScriptedExpert):
        raise ValueError("record_features=True (--record-features) needs a learned policy that "  # noqa: TRY004
                         "exposes features (TinyVLA, MLP, adapters); the scripted expert has none")


class OutputRecorder:
    """What failure detectors read, computed for every env at every step: the policy's features
    ``(B, D)`` and ``num_samples`` sampled chunks ``(B, S, K, A)``, as float32 numpy arrays.

    Sampling draws from a torch CPU stream of its own, seeded from ``seed`` but distinct from
    the stream the acting policy samples from: the actions taken are the same with and without
    recording, and the samples are not the very noise the executed chunk was drawn with.
    """

    def __init__(self, policy: Policy, num_samples: int, seed: int) -> None:
        self.policy, self.num_samples = policy, int(num_samples)
        stream_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
        self._rng_state = torch.Generator().manual_seed(stream_seed).get_state()

    @torch.no_grad()
    def __call__(self, obs: Any) -> dict[str, np.ndarray]:
        with torch.random.fork_rng(devices=[]):  # restores the acting policy's stream on exit
            torch.set_rng_state(self._rng_state)
            batch = self.policy.preprocess(obs)
            features = self.policy.features(batch)
            samples = self.policy.sample(batch, self.num_samples)
            self._rng_state = torch.get_rng_state()
        return {"features": features.float().cpu().numpy(), "action_samples": samples.float().cpu().numpy()}


class _EpisodeBuffer:
    """The growing record of one env's current episode."""

    def __init__(self, obs: dict[str, np.ndarray], success: bool) -> None:
        self.obs = {key: [value] for key, value in obs.items()}
        self.success = [success]
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.outputs: dict[str, list[np.ndarray]] = {}

    def add(self, action: np.ndarray, reward: float, terminated: bool, truncated: bool,
            obs: dict[str, np.ndarray], success: bool, outputs: dict[str, np.ndarray]) -> None:
        """Record action ``t``, what followed it, and the policy's ``outputs`` at observation ``t``."""
        for key, value in outputs.items():
            self.outputs.setdefault(key, []).append(value)
        self.actions.append(action)
        self.rewards.append(reward)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        for key, value in obs.items():
            self.obs[key].append(value)
        self.success.append(success)

    def episode(self, spec: TaskSpec, seed: int, env_index: int, policy: str, env_id: str) -> Episode:
        return Episode(obs={key: np.stack(frames) for key, frames in self.obs.items()},
                       actions=np.stack(self.actions), rewards=np.array(self.rewards, np.float32),
                       terminated=np.array(self.terminated), truncated=np.array(self.truncated),
                       success=np.array(self.success), instruction=spec.instruction, task=spec.name,
                       seed=seed, policy=policy, env_index=env_index, env_id=env_id,
                       policy_outputs={key: np.stack(rows) for key, rows in self.outputs.items()})


def _stored(obs: Any) -> dict[str, np.ndarray]:
    """The keys stored of one env's observation (the instruction is an episode attribute)."""
    if isinstance(obs, np.ndarray):
        return {"state": obs}
    return {key: value for key, value in obs.items() if key != "instruction"}


class _Recording(RolloutHooks):
    """Collection's hooks: each counted episode grows in a buffer of its env and goes to
    ``writer`` when it ends, with the policy's outputs at every step when ``outputs`` is given."""

    def __init__(self, writer: EpisodeWriter, spec: TaskSpec, seed: int, policy: str, env_id: str,
                 outputs: OutputRecorder | None, progress: tqdm | None) -> None:
        self.writer, self.spec, self.seed, self.policy, self.env_id = writer, spec, seed, policy, env_id
        self.outputs, self.progress = outputs, progress
        self.buffers: dict[int, _EpisodeBuffer] = {}
        self.stats = TaskCollectStats(spec.name, 0, 0, 0, 0, 0.0)
        self._step_outputs: dict[str, np.ndarray] = {}

    def started(self, slot: int, env: int, obs: Any, info: dict[str, Any]) -> None:
        self.buffers[env] = _EpisodeBuffer(_stored(env_row(obs, env)), bool(info["success"][env]))

    def act(self, obs: Any, actions: np.ndarray, slots: np.ndarray) -> np.ndarray:
        # every step, not only when the queue re-plans: detectors score each observation
        self._step_outputs = self.outputs(obs) if self.outputs is not None else {}
        return actions

    def stepped(self, step: Step) -> None:
        for i in np.flatnonzero(step.active).tolist():
            self.buffers[i].add(step.actions[i], float(step.reward[i]), bool(step.terminated[i]),
                                bool(step.truncated[i]), _stored(step.next_obs(i)), bool(step.next_info(i, "success")),
                                {key: value[i] for key, value in self._step_outputs.items()})

    def finished(self, slot: int, env: int, step: Step) -> None:
        episode = self.buffers.pop(env).episode(self.spec, self.seed, env, self.policy, self.env_id)
        self.writer.add_episode(episode)
        self.stats.episodes += 1
        self.stats.successes += episode.succeeded
        self.stats.steps += episode.num_samples
        if self.progress is not None:
            self.progress.update(1)
            self.progress.set_postfix(task=self.spec.name, success=f"{self.stats.success_rate:.0%}", refresh=False)


def collect_task(writer: EpisodeWriter, spec: TaskSpec, policy: Policy, episodes: int, *, num_envs: int,
                 seed: int, env_kwargs: dict[str, Any], execute_steps: int | None = None,
                 progress: tqdm | None = None, record_features: bool = False,
                 num_samples: int = 8, deterministic: bool = False,
                 imagination: ImaginationConfig | None = None) -> TaskCollectStats:
    """Record the first ``episodes`` episodes started on ``num_envs`` envs of one task into
    ``writer`` (in the order they finish), through the rollout loop shared with evaluation
    (:func:`worldsim.rollout.run_episodes`, Disabled autoreset, paired starts). ``seed`` seeds the
    envs' starts and torch's sampling. ``record_features``: also record the policy's features and
    ``num_samples`` action samples at every step (``ValueError`` for the scripted expert,
    before any env runs). ``deterministic``: execute the policy's mean action chunk instead of
    sampling it. ``imagination``: roll out in the task's imagined twin instead of physics."""
    if record_features:
        check_feature_recording(policy, num_samples)
    num_envs = min(num_envs, episodes)  # more envs than episodes would only run discarded ones
    env_id = task_env_id(spec.name, imagined=imagination is not None)
    env = make_task_envs(spec.name, num_envs, imagination=imagination, autoreset_mode="Disabled", **env_kwargs)
    start = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            outputs = OutputRecorder(policy, num_samples, seed) if record_features else None
            recording = _Recording(writer, spec, seed, describe_policy(policy), env_id, outputs, progress)
            env_steps = run_episodes(env, policy, episodes, recording, seed=seed, execute_steps=execute_steps,
                                     deterministic=deterministic)
    finally:
        env.close()
    recording.stats.env_steps = env_steps
    recording.stats.seconds = time.perf_counter() - start
    return recording.stats


def collect_episodes(tasks: Sequence[str], policy_factory: Callable[[str], Policy], episodes: int,
                     out: str | Path, num_envs: int = 16, seed: int = 0, image_size: int = 64,
                     wrist_camera: bool = False, obs_mode: str = "pixels+state",
                     execute_steps: int | None = None, overwrite: bool = False, progress: bool = True,
                     record_features: bool = False, num_samples: int = 8,
                     deterministic: bool = False, imagination: ImaginationConfig | None = None,
                     continue_after_success: bool = False) -> CollectStats:
    """Collect ``episodes`` complete episodes per task into one episode file ``out`` (torch on the
    idle cores unless this process chose a thread count, :func:`~worldsim.runtime.threads.use_torch_threads`).

    Args:
        tasks: task names (see ``worldsim list-envs``), each at most once.
        policy_factory: builds the policy for a task name (may return the same policy for
            every task). Each policy must accept the task's instruction (``check_task``) and
            read what ``obs_mode`` provides; both are checked before anything runs.
        episodes: episodes per task (>= 1).
        out: the ``.h5`` file to write (atomically: it appears when every task is done).
        num_envs: parallel envs per task (capped at ``episodes``).
        seed: task ``k`` uses seed ``seed + k`` for its envs and torch sampling.
        image_size: the env's image side in pixels (stored, like the next two, in the file's
            ``env_kwargs``).
        wrist_camera: also record the wrist camera's images.
        obs_mode: the env's observation mode.
        execute_steps: actions executed per predicted chunk before re-planning (default: all).
        overwrite: replace an existing ``out``; otherwise it is refused (``FileExistsError``).
        progress: show a progress bar.
        record_features: also store, for every step, the policy's features and ``num_samples``
            sampled action chunks (``policy/features`` ``(T, D)``, ``policy/action_samples``
            ``(T, S, K, A)``) for offline failure detection. Needs a learned policy: the
            scripted expert is refused with ``ValueError`` before anything runs.
        num_samples: action chunks sampled per step when recording (``S``, >= 1).
        deterministic: execute each policy's mean (mode) action chunk instead of a sample, as
            a deployed policy does (recorded samples are still drawn).
        imagination: roll out in imagination instead (when it names a world model): the task's
            imagined env (``worldsim/Imagined-<task>``, ``obs_mode="pixels"``), its episodes
            starting from the real states of its keyframes; each episode records that env id.
        continue_after_success: run every episode to the time limit instead of ending it at
            success (the env's ``terminate_on_success=False``, stored in the file's
            ``env_kwargs``): the file then holds many success frames per successful episode, not
            one at its end (where the cube sits at the goal's edge), and shows what the policy
            does once it has succeeded. An episode's outcome stays its final observation's
            success flag.

    Returns per-task episodes, success rate, mean length and steps/s.
    """
    use_torch_threads()
    specs = [get_task(name) for name in tasks]
    names = [spec.name for spec in specs]
    if not names:
        raise ValueError("tasks is empty; name at least one task")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"tasks {duplicates} are named more than once")
    check_int("episodes", episodes)
    check_int("num_envs", num_envs)
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode={obs_mode!r} is not a mode; allowed: {', '.join(OBS_MODES)}")
    env_kwargs: dict[str, Any] = {"obs_mode": obs_mode}
    if continue_after_success:
        env_kwargs["terminate_on_success"] = False
    if obs_mode != "state":
        env_kwargs.update(image_size=image_size, wrist_camera=wrist_camera)
    if imagination is not None and not imagination.imagined:
        imagination = None
    if imagination is not None:
        if obs_mode != "pixels" or wrist_camera:
            raise ValueError(f"imagined envs give obs_mode='pixels' without a wrist camera; got obs_mode="
                             f"{obs_mode!r}, wrist_camera={wrist_camera} (pass --obs-mode pixels)")
        env_kwargs.pop("wrist_camera")
    out = Path(out)
    writer = EpisodeWriter(out, env_kwargs=env_kwargs, overwrite=overwrite)  # refuses `out` before any work
    policies = {}
    for spec in specs:
        policy = policy_factory(spec.name)
        policy.check_task(spec.instruction)
        check_policy_observations(policy, {"image_size": image_size, "wrist_camera": wrist_camera,
                                           **env_kwargs})
        if record_features:
            check_feature_recording(policy, num_samples)
        policies[spec.name] = policy.eval()

    stats = CollectStats(out)
    start = time.perf_counter()
    with writer, tqdm(total=episodes * len(specs), desc="collect", unit="ep", disable=not progress) as bar:
        for k, spec in enumerate(specs):
            stats.tasks[spec.name] = collect_task(writer, spec, policies[spec.name], episodes,
                                                  num_envs=num_envs, seed=seed + k, env_kwargs=env_kwargs,
                                                  execute_steps=execute_steps, progress=bar,
                                                  record_features=record_features, num_samples=num_samples,
                                                  deterministic=deterministic, imagination=imagination)
    stats.seconds = time.perf_counter() - start
    stats.file_bytes = out.stat().st_size
    return stats


# ---------------------------------------------------------------------------- a policy by name
@dataclass
class CollectConfig:
    """What :func:`collect` records: a policy (the scripted expert, or a checkpoint) on tasks, to
    one episode file, optionally with the policy's features and action samples at every step
    (for failure detectors)."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = (
        "out", "task", "suite", "policy", "episodes", "noise", "epsilon", "num_envs", "seed", "image_size", "wrist",
        "obs_mode", "overwrite", "record_features", "deterministic", "imagination")
    """The fields that are flags; the rest a config file sets."""

    out: Path
    """The episode file to write (.h5); all tasks go into it."""
    task: tuple[str, ...] = ()
    """Task to collect (repeat --task for several; see `worldsim list-envs`)."""
    suite: str | None = None
    """Collect every task of this suite (added to --task)."""
    policy: Literal["expert"] | Path = "expert"
    """"expert" for the scripted expert, else a policy checkpoint or run folder."""
    episodes: int = 200
    """Episodes per task."""
    noise: float = 0.0
    """Expert only: std of Gaussian noise added to every action."""
    epsilon: float = 0.0
    """Expert only: probability of a uniformly random action, per step."""
    num_envs: int = 16
    """Parallel envs per task."""
    seed: int = 0
    """Task k uses seed + k (envs, policy sampling, expert noise)."""
    image_size: int = 64
    """Side of the camera images in pixels."""
    wrist: bool = False
    """Also record the wrist camera."""
    obs_mode: Literal["pixels+state", "pixels", "state"] = "pixels+state"
    """Observations to record."""
    execute_steps: int | None = None
    """Actions executed per predicted chunk before re-planning (default: the whole chunk)."""
    overwrite: bool = False
    """Replace --out if it exists."""
    record_features: bool = False
    """Also store the policy's features and sampled action chunks at every step, for failure
    detectors run offline (SAFE, FIPER, ...). Needs a learned policy (not the expert)."""
    num_samples: int = 8
    """With --record-features: action chunks sampled per step."""
    deterministic: bool = False
    """Execute the policy's mean action chunk instead of sampling it (as deployed)."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """Roll out in imagination instead of physics: with --world-model, --keyframes and --obs-mode
    pixels."""
    continue_after_success: bool = False
    """Run episodes to the time limit instead of ending them at success: many success frames
    per episode, and what the policy does after succeeding (see collect_episodes)."""

    @property
    def tasks(self) -> list[str]:
        """The tasks of --task and --suite, each once, in order."""
        names = [get_task(t).name for t in self.task]
        if self.suite:
            names += get_suite(self.suite).tasks
        return list(dict.fromkeys(names))


def collect(config: CollectConfig) -> CollectStats:
    """:func:`collect_episodes` with the policy ``config`` names: the scripted expert (with its
    noise, seeded per task) or one checkpoint for every task."""
    from worldsim.policies import ScriptedExpertConfig, load_policy

    names = config.tasks
    if not names:
        raise ValueError("name the tasks to collect with --task (repeatable) or --suite")
    if config.out.exists() and not config.overwrite:
        raise ValueError(f"--out {config.out} already exists; pass --overwrite to replace it")
    if config.policy == "expert":
        def factory(task: str) -> Policy:
            return ScriptedExpert(ScriptedExpertConfig(task, config.noise, config.epsilon,
                                                       config.seed + names.index(task)))
    else:
        if config.noise or config.epsilon:
            raise ValueError("--noise and --epsilon apply to --policy expert only")
        if not Path(config.policy).is_dir():
            raise ValueError(f"--policy {str(config.policy)!r} is neither 'expert' nor a checkpoint folder")
        loaded = load_policy(config.policy)

        def factory(task: str) -> Policy:
            return loaded

    return collect_episodes(names, factory, config.episodes, config.out, num_envs=config.num_envs,
                            seed=config.seed, image_size=config.image_size, wrist_camera=config.wrist,
                            obs_mode=config.obs_mode, execute_steps=config.execute_steps,
                            overwrite=config.overwrite, record_features=config.record_features,
                            num_samples=config.num_samples, deterministic=config.deterministic,
                            imagination=config.imagination, continue_after_success=config.continue_after_success)
