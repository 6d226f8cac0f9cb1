"""One world-model training step split into its draws and its update, and the update recorded as
a CUDA graph (``train-wm --cuda-graph``). The recording itself needs a CUDA GPU: those tests skip
without one (run them on a GPU machine); everything around it is checked on the CPU."""

import numpy as np
import pytest
import torch

from worldsim.runtime.distributed import init_distributed
from worldsim.world_models import WorldModel
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.train import TrainWMConfig, build_model, generators, train_world_model, warmup_cosine
from worldsim.world_models.train_step import (
    StepGraph,
    copied,
    draw_step,
    optimisers,
    prepare_optimizer,
    take_step,
    tensors,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="records a CUDA graph: needs a CUDA GPU")


# WorldModelConfig's defaults (the tiny preset without its gripper planes, first-frame anchor and noise levels)
DEFAULTS = {"frames": {"gripper_planes": False, "anchor": "last"}, "diffusion": {"p_mean": -1.2, "p_std": 1.2},
            "dynamics": {"horizon": 4}}


def config(episodes, out, **kwargs) -> TrainWMConfig:
    base = dict(data=episodes, out=out, steps=8, batch_size=4, val_fraction=0.0, video_every=0, checkpoint_every=100,
                torch_threads=1, device="cpu", progress=False, model=DEFAULTS)
    return TrainWMConfig(**{**base, **kwargs})


def setup(episodes, tmp_path, device="cpu"):
    cfg = config(episodes, tmp_path, device=device)
    bank = EpisodeBank(episodes)
    model = build_model(cfg, bank).to(device)
    ids = {t: model.task_index(t) for t in bank.tasks}
    return cfg, bank, model, ids


def test_the_draws_are_those_of_one_eager_step_in_its_order(push_episodes, tmp_path):
    """Drawing the whole step first takes from each generator what the eager step took, in the same
    order: the frame batch and then each update's state windows from the CPU generator, the
    frame noise and then each update's keypoint noise from the device's."""
    _, bank, model, ids = setup(push_episodes, tmp_path)
    cpu = torch.device("cpu")
    windows, noise = generators(5, cpu)
    draws = draw_step(model, bank, 4, 0.25, ids, windows, noise, cpu, updates=2)
    windows, noise = generators(5, cpu)
    batch = bank.sample(4, model.config.context, model.config.patch, ids, windows, 0.25, cpu)
    frame_noise = model.training_noise(batch, noise)
    cfg = model.config
    for update in range(2):
        state = bank.state_windows(cfg.dynamics.batch, cfg.context, cfg.dynamics.horizon, ids, windows, cpu)
        drawn, point_noise = draws["dynamics"][update]
        assert all(torch.equal(drawn[k], state[k]) for k in state)
        assert torch.equal(point_noise, torch.randn(state["points"].shape, generator=noise))
    assert all(torch.equal(draws["frames"][0][k], batch[k]) for k in batch)
    assert all(torch.equal(draws["frames"][1][k], frame_noise[k]) for k in frame_noise)


def test_a_step_trains_both_halves_and_logs_without_reading_the_device(push_episodes, tmp_path):
    _, bank, model, ids = setup(push_episodes, tmp_path)
    frame_optimizer, dynamics_optimizer = optimisers(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    draws = draw_step(model, bank, 4, 0.25, ids, *generators(0, torch.device("cpu")), torch.device("cpu"), updates=2)
    logs = take_step(model, frame_optimizer, dynamics_optimizer, draws, 1.0, init_distributed("cpu"))
    assert {"loss", "denoise", "grad_norm", "proprio", "objects"} <= set(logs)
    assert all(v.ndim == 0 and not v.requires_grad for v in logs.values())
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert any(n.startswith("frames.") for n in changed) and any(n.startswith("objects.") for n in changed)
    assert all(p.grad is None for p in model.dynamics_parameters())  # nothing stale for the next frame step


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)` before")
def test_a_recorded_steps_optimiser_reads_the_schedules_rate_from_one_tensor():
    """A number would be recorded into the graph as it was: the rate must be a tensor that the
    schedule writes in place, and a resumed run may switch back."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, 1000))
    prepare_optimizer(optimizer, torch.device("cpu"), recorded=True)
    rate = optimizer.param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor) and optimizer.param_groups[0]["capturable"]
    for step in range(1, 4):
        schedule.step()
        assert optimizer.param_groups[0]["lr"] is rate  # written in place, never replaced
        assert float(rate) == pytest.approx(1e-3 * warmup_cosine(step, 1000))
    prepare_optimizer(optimizer, torch.device("cpu"), recorded=False)
    group = optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(1e-3 * warmup_cosine(3, 1000)) and not group["capturable"]
    assert isinstance(group["lr"], float)


def test_copied_and_tensors_walk_nested_inputs_with_none():
    inputs = {"frames": ({"a": torch.ones(2)}, {"b": torch.zeros(1)}), "dynamics": [({"c": torch.arange(3)}, None)]}
    copy = copied(inputs)
    assert copy["dynamics"][0][1] is None and isinstance(copy["frames"], tuple)
    assert [t.tolist() for t in tensors(copy)] == [[1.0, 1.0], [0.0], [0, 1, 2]]
    assert all(a is not b and a.data_ptr() != b.data_ptr() for a, b in zip(tensors(copy), tensors(inputs), strict=True))


def test_cuda_graph_errors_name_what_to_change(push_episodes, tmp_path):
    with pytest.raises(ValueError, match="compile='reduce-overhead' records each loss as its own"):
        config(push_episodes, tmp_path / "a", cuda_graph=True, compile="reduce-overhead")
    with pytest.raises(ValueError, match="records the step on one CUDA device; this run has 1 process"):
        train_world_model(config(push_episodes, tmp_path / "b", cuda_graph=True))


@cuda
def test_a_step_graph_replays_the_eager_steps_exactly():
    """A linear model's steps (fused AdamW, a schedule, fresh inputs each step): recorded after
    its warm-up and replayed, it ends where eager steps end."""
    def run(recorded: bool) -> torch.Tensor:
        torch.manual_seed(0)
        layer = torch.nn.Linear(16, 4).cuda()
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2, fused=True)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, 10))
        prepare_optimizer(optimizer, torch.device("cuda"), recorded)

        def step(inputs):
            optimizer.zero_grad(set_to_none=True)
            loss = ((layer(inputs["x"]) - inputs["y"]) ** 2).mean()
            loss.backward()
            optimizer.step()
            return {"loss": loss.detach()}

        take = StepGraph(step) if recorded else step
        data = torch.Generator(device="cuda").manual_seed(1)
        losses = []
        for _ in range(10):
            inputs = {"x": torch.randn(8, 16, device="cuda", generator=data),
                      "y": torch.randn(8, 4, device="cuda", generator=data)}
            losses.append(take(inputs)["loss"].clone())
            schedule.step()
        return torch.cat([torch.stack(losses), layer.weight.detach().flatten()])

    eager, replayed = run(False), run(True)
    assert torch.allclose(eager, replayed, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="shapes it was recorded with"):
        graph = StepGraph(lambda inputs: {"y": inputs["x"] * 2}, warmup=0)
        graph({"x": torch.ones(2, device="cuda")})
        graph({"x": torch.ones(3, device="cuda")})


@cuda
def test_train_wm_with_a_cuda_graph_trains_as_the_eager_run_does(push_episodes, tmp_path):
    """Eight steps, the last five replayed: the same loss and weights as eager training, to the
    rounding of the GPU's atomics (gathers' backward); a replay that did not update, or updated at
    a stale rate, would be a step's rate (1e-3) off."""
    eager = train_world_model(config(push_episodes, tmp_path / "eager", device="cuda"))
    graph = train_world_model(config(push_episodes, tmp_path / "graph", device="cuda", cuda_graph=True))
    assert graph["steps"] == 8 and np.isfinite(graph["train_loss"])
    assert graph["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-3)
    a = WorldModel.from_pretrained(tmp_path / "eager").state_dict()
    b = WorldModel.from_pretrained(tmp_path / "graph").state_dict()
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) < 1e-4
