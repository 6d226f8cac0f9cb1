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


@pytest.fixture(scope="session")
def push_episodes(tmp_path_factory):
    """Four noisy-expert PushCube episodes at 32x32 (with ``state``): a world model's smallest data."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    path = tmp_path_factory.mktemp("push") / "push.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3)), 4, path,
                     num_envs=4, image_size=32, progress=False)
    return path


@pytest.fixture(scope="session")
def untrained_world_model(tmp_path_factory):
    """A small untrained frames-only world model for 32x32 episodes (``push_episodes``), saved: the
    imagined env's contract and the commands' plumbing do not depend on the weights."""
    from worldsim.world_models import WorldModel, WorldModelConfig

    folder = tmp_path_factory.mktemp("untrained") / "wm"
    torch.manual_seed(0)
    WorldModel(WorldModelConfig(image_size=32, context=2, channels=(16, 32), norm_groups=8, cond_hidden=32,
                                success_channels=8, object_pathway=False, carry_objects=False, outcome="head")
               ).save_pretrained(folder)
    return folder


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


def zero_actions(num_envs: int) -> np.ndarray:
    return np.zeros((num_envs, 4), np.float32)
