"""The MuJoCo Warp backend, run on Warp's CPU device: equivalence with the MuJoCo backend,
pixels against MuJoCo's OpenGL renderer, torch tensors in and out, and bad arguments (the
shared vector-env contract is test_conformance.py's). Skipped, with the reason, where MuJoCo
Warp is not installed."""

import numpy as np
import pytest
import torch
from conftest import assert_follows_mujoco, backend_envs

from worldsim.envs.expert import expert_success
from worldsim.envs.observations import STATE_LAYOUT
from worldsim.envs.rendering import BatchRenderer
from worldsim.envs.reset_schedule import ResetSchedule

N = 4


@pytest.fixture(autouse=True)
def make(warp_compiled, make_vec):
    """Warp envs on Warp's CPU device (``backend=`` for another), 4 each, after MuJoCo Warp's
    kernels are compiled once per test run (every test here skips where it is not installed)."""
    return backend_envs(make_vec, "warp")


@pytest.mark.parametrize("task", ["ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0"])
def test_warp_matches_mujoco_over_a_short_horizon(make, task):
    """Same start, the expert's actions (contacts happen), 6 steps: the MJX backend's bounds —
    positions within 1.5 cm, rewards within 0.05, the same success and termination flags. In
    free space the backends agree to float32 precision (0.3 mm); pushing a cube, Warp's float32
    contact solve drifts by millimetres within these 6 steps."""
    assert_follows_mujoco(make(task, backend="mujoco"), make(task), torch.from_numpy)


@pytest.mark.parametrize("task", ["PickPlaceCube-v0", "StackCube-v0"])
def test_grasping_experts_hold_their_cube_as_on_mujoco(task):
    """The scripted pick-and-place and stack experts grasp, carry and let go on Warp as on MuJoCo:
    a small batch of episodes succeeds (the 200-episode figure per variant is
    ``benchmarks/expert_success.py --backend warp``). A carry whose servo start lands on the force
    limit jolts the gripper and shakes the cube out of the fingers: about half the episodes failed."""
    stats = expert_success(task, 4, seed=0, backend="warp", device="cpu")
    assert stats.success_rate == 1.0, stats


def test_pixels_match_the_opengl_renderer_and_stay_on_the_device(make):
    env = make("PushCube-v0", obs_mode="pixels+state", wrist_camera=True, render_mode="rgb_array", render_size=96)
    obs, _ = env.reset(seed=0)
    assert {k: (tuple(v.shape), v.dtype) for k, v in obs.items() if k != "instruction"} == {
        "image": ((N, 64, 64, 3), torch.uint8), "wrist_image": ((N, 64, 64, 3), torch.uint8),
        "proprio": ((N, 4), torch.float32), "state": ((N, 56), torch.float32)}
    qpos = env.unwrapped.physics.qpos.double().numpy()
    reference = BatchRenderer(env.unwrapped.scene.model, 64, 64)
    for key, camera in (("image", "front"), ("wrist_image", "wrist")):
        difference = np.abs(obs[key].numpy().astype(int) - reference.render(qpos, camera))
        assert difference.mean() < 3 and (difference.max(axis=-1) > 40).mean() < 0.01  # measured: 1.1-1.5, 0.0001
    reference.close()
    frames = env.render()
    assert isinstance(frames, torch.Tensor) and frames.shape == (N, 96, 96, 3) and frames.dtype == torch.uint8


def test_expert_warmup_moves_the_physical_state_with_device_experts(make):
    env = make(max_episode_steps=8, reset_schedule=ResetSchedule("staggered-warmup", warmup_policy="expert"))
    obs, info = env.reset(seed=0)
    assert isinstance(env.unwrapped.expert_action(), torch.Tensor)
    steps = info["episode_step"].numpy()
    moved = obs[:, STATE_LAYOUT["tcp_vel"]].abs().amax(dim=1).numpy() > 1e-3
    np.testing.assert_array_equal(moved, steps > 0)


def test_numpy_torch_and_jax_actions_give_the_same_step(make):
    jnp = pytest.importorskip("jax.numpy")
    env = make("PushCube-v0")
    env.reset(seed=0)
    snapshot = env.unwrapped.get_state()
    actions = np.random.default_rng(0).uniform(-1, 1, (N, 4)).astype(np.float32)
    results = []
    for given in (actions, torch.from_numpy(actions.copy()).requires_grad_(), jnp.asarray(actions)):
        env.unwrapped.set_state(snapshot)
        obs, reward, *_ = env.step(given)
        assert isinstance(obs, torch.Tensor) and isinstance(reward, torch.Tensor)
        results.append((obs, reward))
    for obs, reward in results[1:]:
        assert torch.equal(obs, results[0][0]) and torch.equal(reward, results[0][1])


def test_numpy_outputs_on_request_through_gymnasiums_array_conversion(make):
    from gymnasium.wrappers.vector import ArrayConversion

    env = ArrayConversion(make(), env_xp=torch, target_xp=np)
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(np.zeros((N, 4), np.float32))
    assert isinstance(obs, np.ndarray) and obs.shape == (N, 56)
    assert isinstance(reward, np.ndarray) and isinstance(info["success"], np.ndarray)


def test_bad_arguments_name_what_is_allowed(make):
    with pytest.raises(ValueError, match="device='tpu' is not a device; allowed: 'cuda', 'cuda:<index>' or 'cpu'"):
        make(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda': torch sees no CUDA GPU here; allowed: 'cpu'"):
            make(device="cuda")
    with pytest.raises(TypeError, match="did you mean 'wrist_camera'"):
        make(wrist_camra=True)
    with pytest.raises(ValueError, match="image size 500x500 exceeds"):
        make(obs_mode="pixels", image_size=(480, 480), render_size=500, render_mode="rgb_array").render()
