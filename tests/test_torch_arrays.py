"""Array kits beyond numpy, without any physics: the torch kit of the Warp backend
(:class:`TorchArrays`) on CPU tensors, and the numpy kit taking torch and JAX actions (copied to
the host), which the MuJoCo and imagined backends use."""

import importlib.util

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from worldsim.envs.arrays import Arrays
from worldsim.envs.warp.arrays import TorchArrays

N = 4


def test_torch_kit_makes_device_tensors_and_takes_every_array_library():
    kit = TorchArrays("cpu")
    assert [kit.zeros(N, t).dtype for t in (bool, int, float)] == [torch.bool, torch.int64, torch.float32]
    assert torch.equal(kit.where(torch.tensor([True, False]), 0.0, torch.ones(2)), torch.tensor([0.0, 1.0]))
    assert kit.maybe_any(torch.zeros(N, dtype=torch.bool))  # no host read on masks
    given = np.random.default_rng(0).uniform(-2, 2, (N, 4))
    expected = np.clip(given, -1, 1).astype(np.float32)[:, None]
    for actions in (given, torch.from_numpy(given).requires_grad_(), jnp.asarray(given, jnp.float32)):
        chunk = kit.actions(actions, N)
        assert isinstance(chunk, torch.Tensor) and chunk.dtype == torch.float32 and chunk.shape == (N, 1, 4)
        np.testing.assert_allclose(chunk.numpy(), expected, atol=1e-7)
    assert kit.actions(torch.zeros(N, 3, 4, dtype=torch.float64), N).shape == (N, 3, 4)  # a chunk


def test_torch_kit_refuses_bad_actions_with_the_numpy_kits_messages():
    kit = TorchArrays("cpu")
    bad = torch.zeros(N, 4)
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match=r"actions for envs \[2\] contain NaN or inf"):
        kit.actions(bad, N)
    with pytest.raises(ValueError, match=r"actions must have shape \(num_envs, 4\) = \(4, 4\)"):
        kit.actions(torch.zeros(N, 3), N)
    with pytest.raises(TypeError, match="got dtype bool"):
        kit.actions(torch.zeros(N, 4, dtype=torch.bool), N)


def test_numpy_kit_copies_torch_and_jax_actions_to_the_host():
    kit = Arrays()
    given = np.full((N, 4), 0.5, np.float32)
    for actions in (torch.from_numpy(given).requires_grad_(), jnp.asarray(given)):
        chunk = kit.actions(actions, N)
        assert isinstance(chunk, np.ndarray) and chunk.shape == (N, 1, 4) and (chunk == 0.5).all()
    with pytest.raises(ValueError, match=r"actions for envs \[0, 1, 2, 3\] contain NaN"):
        kit.actions(torch.full((N, 4), float("nan")), N)


def test_the_mujoco_backend_steps_on_torch_actions(make_vec):
    env = make_vec("ReachCube-v0", N)
    env.reset(seed=0)
    snapshot = env.unwrapped.get_state()
    actions = np.random.default_rng(0).uniform(-1, 1, (N, 4)).astype(np.float32)
    obs, reward, *_ = env.step(actions)
    env.unwrapped.set_state(snapshot)
    obs_t, reward_t, *_ = env.step(torch.from_numpy(actions))
    np.testing.assert_array_equal(obs_t, obs)
    np.testing.assert_array_equal(reward_t, reward)


def test_missing_mujoco_warp_gives_an_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mujoco_warp" else real(name, *a))
    with pytest.raises(ImportError, match=r'mujoco_warp not installed\): pip install "worldsim\[warp\]"'):
        gym.make_vec("worldsim/ReachCube-v0", num_envs=2, backend="warp", device="cpu")


def test_constants_are_copied_to_an_accelerator_once_and_kept():
    """A copy from the host in every call would wait for the device and could not be recorded in a
    CUDA graph; the meta device stands in for a GPU here."""
    from worldsim.envs.xp import constant

    like = torch.zeros(2, device="meta")
    first = constant(np.array([1.0, 2.0]), like)
    assert first.device.type == "meta" and first.dtype == torch.float32
    assert constant(np.array([1.0, 2.0]), like) is first  # an equal array, not only the same object
    assert constant(np.array([1.0, 3.0]), like) is not first
    assert constant(np.array([1.0, 2.0]), like.double()) is not first
    on_cpu = torch.zeros(2)
    assert constant(np.array([1.0, 2.0]), on_cpu) is not constant(np.array([1.0, 2.0]), on_cpu)  # the CPU's are fresh
