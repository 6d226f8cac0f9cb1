import gymnasium as gym
import numpy as np
import pytest
import torch

import worldsim  # noqa: F401  (registers the envs)

# Backends whose first use compiles (MJX's XLA, Warp's kernels: about a minute each on 2 cores)
# or trains a world model (imagined): their conformance runs are left out of `-m "not slow"`.
SLOW_BACKENDS = {"mjx", "warp", "imagined"}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(item, "callspec", None)
        if "warp_compiled" in item.fixturenames or "mjx_compiled" in item.fixturenames or (
                params is not None and params.params.get("backend") in SLOW_BACKENDS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tests' networks are tiny: one torch thread is fastest and does not oversubscribe the
    two cores under ``pytest -n 2``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def mjx_compiled(tmp_path_factory, worker_id):
    """Under pytest-xdist each worker would compile the MJX step (about a minute on a CPU) for
    the 4-env batches the tests use: the first compiles it into a JAX compilation cache in this
    run's own temporary folder (fresh every run), under a lock, and the others load it."""
    import jax
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root
    jax.config.update("jax_compilation_cache_dir", str(root / "jax-cache"))
    with FileLock(str(root / "mjx-compile.lock")):
        env = gym.make_vec("worldsim/ReachCube-v0", num_envs=4, backend="mjx")
        env.reset(seed=0)
        jax.block_until_ready(env.step(np.zeros((4, 4), np.float32)))
        env.close()


WARP_MISSING = ("MuJoCo Warp is not installed (pip install 'worldsim[warp]'); the Warp backend's tests "
                "need it")


@pytest.fixture(scope="session")
def warp_compiled(tmp_path_factory, worker_id):
    """MuJoCo Warp runs on Warp's CPU device, so its tests run here. Its kernels compile (about
    a minute on 2 cores) into Warp's content-hashed kernel cache on first use: the first worker
    compiles the physics and the renderer under a lock, and the others load them. Skips, with
    the reason, where MuJoCo Warp is not installed."""
    import importlib.util

    if importlib.util.find_spec("mujoco_warp") is None:
        pytest.skip(WARP_MISSING)
    import warp as wp
    from filelock import FileLock

    wp.config.quiet = True
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root
    with FileLock(str(root / "warp-compile.lock")):
        env = gym.make_vec("worldsim/ReachCube-v0", num_envs=4, backend="warp", device="cpu", obs_mode="pixels",
                           wrist_camera=True)
        env.reset(seed=0)
        env.step(np.zeros((4, 4), np.float32))
        env.close()


def noisy_push_episodes(path, episodes: int, **expert):
    """``episodes`` PushCube episodes of the scripted expert with noise 0.3 (``expert``: other
    :class:`~worldsim.policies.ScriptedExpertConfig` fields), one env each, at 32x32 with
    ``state``, written to ``path`` (returned)."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, **{"noise": 0.3, **expert})),
                     episodes, path, num_envs=episodes, image_size=32, progress=False)
    return path


@pytest.fixture(scope="session")
def push_episodes(tmp_path_factory):
    """Four noisy-expert PushCube episodes at 32x32 (with ``state``): a world model's smallest data."""
    return noisy_push_episodes(tmp_path_factory.mktemp("push") / "push.h5", 4)


@pytest.fixture(scope="session")
def untrained_world_model(tmp_path_factory):
    """A small untrained frames-only world model for 32x32 episodes (``push_episodes``), saved: the
    imagined env's contract and the commands' plumbing do not depend on the weights."""
    from worldsim.world_models import WorldModel

    folder = tmp_path_factory.mktemp("untrained") / "wm"
    torch.manual_seed(0)
    WorldModel(small_config(NO_PATHWAY)).save_pretrained(folder)
    return folder


SMALL = {"image_size": 32, "context": 2, "frames": {"channels": (16, 32), "norm_groups": 8, "cond_hidden": 32},
         "proprio": {"hidden": 32}, "judge": {"hidden": 32, "detector_channels": 8}}
"""A small world model for 32x32 episodes (as nested tables of
:func:`~worldsim.world_models.config.build_config`): a 2-block UNet, 32-wide MLPs."""
NO_PATHWAY = {"objects": None, "judge": {"outcome": "head"}}
"""A model of frames alone: no object pathway, judged by its success head."""


def small_config(*parts: dict, preset: str | None = None, **changes):
    """``build_config(preset, ...)`` of :data:`SMALL` with each of ``parts`` (nested tables such as
    :data:`NO_PATHWAY`) and ``changes`` merged in, in order."""
    from worldsim.world_models.config import build_config, merged

    tables = SMALL
    for part in (*parts, changes):
        tables = merged(tables, part)
    return build_config(preset, **tables)


def write_toml(path, text: str):
    """Write the TOML ``text`` (dedented) to ``path`` (returned): a command's ``--config-file``."""
    import textwrap

    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def make_vec():
    """gym.make_vec that closes what it made."""
    made = []

    def make(task: str = "PushCube-v0", num_envs: int = 4, **kwargs):
        env = gym.make_vec(f"worldsim/{task}", num_envs=num_envs, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def backend_envs(make_vec, backend: str):
    """``make(task="ReachCube-v0", backend=backend, **kwargs)``: 4 envs of ``task`` from
    :func:`make_vec` (Warp's on its CPU device unless told), the batch a backend's compiled step
    serves."""
    def make(task="ReachCube-v0", backend=backend, **kwargs):
        if backend == "warp":
            kwargs.setdefault("device", "cpu")
        return make_vec(task, 4, backend=backend, **kwargs)
    return make


def zero_actions(num_envs: int) -> np.ndarray:
    return np.zeros((num_envs, 4), np.float32)


def host(x):
    """Outputs as numpy (JAX arrays and torch tensors copied to the host), recursively."""
    if isinstance(x, dict):
        return {k: host(v) for k, v in x.items()}
    if isinstance(x, tuple) and not (x and isinstance(x[0], str)):
        return tuple(host(v) for v in x)
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, (str, tuple)) or x is None:
        return x
    return np.asarray(x) if not (isinstance(x, np.ndarray) and x.dtype == object) else x


def same_start(cpu, other, seed: int) -> None:
    """Reset MuJoCo vector env ``cpu`` and ``other`` (an accelerated backend's) with ``seed``, then
    put ``other`` in ``cpu``'s physical state."""
    cpu.reset(seed=seed)
    other.reset(seed=seed)
    snapshot = other.unwrapped.get_state()
    snapshot.update(qpos=cpu.unwrapped.physics.qpos, qvel=cpu.unwrapped.physics.qvel,
                    warmstart=np.zeros_like(snapshot["warmstart"]), elapsed=cpu.unwrapped._elapsed)
    other.unwrapped.set_state(snapshot)


def assert_follows_mujoco(cpu, other, convert=lambda actions: actions, seed: int = 3, steps: int = 6) -> None:
    """Start vector env ``other`` (an accelerated backend's) in MuJoCo env ``cpu``'s physical
    state after ``reset(seed)``, step both with ``cpu``'s expert actions (``convert`` makes
    ``other``'s from them; the expert's actions make contacts happen): positions within 1.5 cm,
    rewards within 0.05, the same success and termination flags and the same reward terms. An
    env is compared until its episode ends: the layouts the two backends then draw come from
    different random numbers. Cube quaternions are left out: under a pushing paddle a cube's yaw
    is the first thing two contact pipelines disagree on."""
    from worldsim.envs.observations import STATE_LAYOUT

    same_start(cpu, other, seed)
    positions = [n for n in STATE_LAYOUT if not n.endswith("_quat") and not n.endswith("_vel")]
    live = np.ones(cpu.num_envs, bool)
    for step in range(steps):
        actions = cpu.unwrapped.expert_action()
        obs_c, rew_c, term_c, trunc_c, info_c = cpu.step(actions)
        obs_o, rew_o, term_o, trunc_o, info_o = host(other.step(convert(actions)))
        for name in positions:
            sl = STATE_LAYOUT[name]
            np.testing.assert_allclose(obs_o[live, sl], obs_c[live, sl], atol=0.015, err_msg=f"{name} at step {step}")
        np.testing.assert_allclose(rew_o[live], rew_c[live], atol=0.05)
        np.testing.assert_array_equal(info_o["success"][live], info_c["success"][live])
        np.testing.assert_array_equal(term_o[live], term_c[live])
        np.testing.assert_array_equal(trunc_o[live], trunc_c[live])
        assert sorted(info_o["reward_terms"]) == sorted(info_c["reward_terms"])
        live &= ~(term_c | trunc_c)
    assert live.any()
