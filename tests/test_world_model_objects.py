"""The world model's object pathway (objects first, then the frame)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import NO_PATHWAY, small_config

from worldsim.envs.observations import ENTITIES
from worldsim.world_models import WorldModel
from worldsim.world_models.anchor import background_image
from worldsim.world_models.config import PRESETS, UNetConfig, build_config
from worldsim.world_models.latents import frames_to_latents, latents_to_frames
from worldsim.world_models.layers import masked_mean, masked_step_mean
from worldsim.world_models.objects import (
    HEIGHT_RANGE_M,
    ObjectDynamics,
    carry_objects,
    keypoint_planes,
    object_loss,
)

E = len(ENTITIES)


def pathway(carry: bool = True, outcome: str = "rule", clear: bool = False, **changes):
    """The small config with a 32-wide object pathway (``carry``: the anchor's objects carried;
    ``clear``: the spots they leave cleared to the learned table)."""
    return small_config(objects={"hidden": 32, "carry": carry, "clear": clear}, judge={"outcome": outcome}, **changes)


def ungated(dynamics: ObjectDynamics) -> ObjectDynamics:
    """``dynamics`` with its contact gate open (every object may move), for tests of the
    pathway's own arithmetic; the gate has its own test."""
    dynamics.contact_gate = lambda points, heights, tcp: torch.ones_like(points[:, -1, :, 0])
    return dynamics


def batch(b: int = 4, with_objects: bool = True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {"context": torch.rand(b, 2, 48, 8, 8, generator=g) * 2 - 1, "first": torch.rand(b, 48, 8, 8, generator=g),
           "proprio": torch.rand(b, 2, 4, generator=g), "action": torch.rand(b, 4, generator=g),
           "task": torch.zeros(b, dtype=torch.long), "target": torch.rand(b, 48, 8, 8, generator=g) * 2 - 1,
           "next_proprio": torch.rand(b, 4, generator=g), "success": torch.zeros(b, dtype=torch.bool)}
    if with_objects:
        out["entity_pixels"] = torch.rand(b, E, 2, generator=g) * 32
        out["context_entity_pixels"] = torch.rand(b, 2, E, 2, generator=g) * 32
    return out


def test_keypoint_planes_peak_at_the_object_and_pathway_starts_from_nothing_moves():
    points = torch.tensor([[[10.0, 22.0], [2.0, 2.0]]])  # pixels (column, row); patch 4 -> cells (2.5, 5.5)
    planes = keypoint_planes(points, 8, 4)
    assert planes.shape == (1, 2, 8, 8) and planes.max() <= 1
    row, col = divmod(int(planes[0, 0].argmax()), 8)
    assert (row, col) == (5, 2)
    dynamics = ungated(ObjectDynamics(pathway()))
    context, heights = torch.rand(3, 2, E, 2) * 32, torch.rand(3, 2, E) * 0.1
    tcp = torch.rand(3, 2, 3)
    out, lifted = dynamics(context, heights, torch.rand(3, 2, 4), torch.rand(3, 4), torch.rand(3, 4), torch.ones(3, 1),
                           tcp)
    assert torch.equal(out, context[:, -1]) and torch.equal(lifted, heights[:, -1])  # untrained: nothing moves
    with torch.no_grad():  # a wild pathway still keeps the objects where they can be: no runaway over long rollouts
        dynamics.net[-1].bias.fill_(1e6)
    out, lifted = dynamics(context, heights, torch.rand(3, 2, 4), torch.rand(3, 4), torch.rand(3, 4), torch.ones(3, 1),
                           tcp)
    assert out.max() == 2 * 32 and lifted.max() == HEIGHT_RANGE_M[1]
    static = slice(3, None)  # zones and bin
    assert torch.equal(out[:, static], context[:, -1, static])
    assert torch.equal(lifted[:, static], heights[:, -1, static])


def test_an_object_at_rest_moves_only_where_the_gripper_passes_near_it():
    """The contact gate: a pathway that pushes the red cube 1.6 px right every step moves it only
    when the TCP's path this step comes within 8 cm of its centre, or the cube was already moving."""
    dynamics = ObjectDynamics(pathway())
    with torch.no_grad():
        dynamics.net[-1].bias[0] = 1.0
    red = ENTITIES.index("red_cube")
    cube = torch.tensor([0.0, 0.0, 0.02])
    world = cube.repeat(1, 2, E, 1)  # (1, C=2, E, 3): every object at the cube's place, at rest
    points, heights = dynamics.camera.project(world).float(), world[..., 2]

    def step(tcp_from: list[float], tcp_to: list[float], context: torch.Tensor = points) -> float:
        with torch.no_grad():
            moved, _ = dynamics(context, heights, torch.zeros(1, 2, 4), torch.zeros(1, 4), torch.zeros(1, 4),
                                torch.ones(1, 1), torch.tensor([[tcp_from, tcp_to]]))
        return float(moved[0, red, 0] - context[0, -1, red, 0])

    assert step([0.3, 0.3, 0.02], [0.3, 0.27, 0.02]) == 0.0  # 30 cm away: untouched, it stays put
    assert step([0.0, 0.0, 0.15], [0.03, 0.0, 0.15]) == 0.0  # 13 cm above it: stays put
    assert step([-0.15, 0.05, 0.02], [0.15, 0.05, 0.02]) == pytest.approx(1.6)  # the path sweeps 5 cm past it
    sliding = points.clone()
    sliding[0, 0, red] -= torch.tensor([1.0, 0.0])  # a px (about a cm) further left on the step before
    assert step([0.3, 0.3, 0.02], [0.3, 0.27, 0.02], sliding) == pytest.approx(1.6)  # already moving: slides on
    dynamics.gated = False  # [model.objects] gate = false: the learned pathway alone decides
    assert ObjectDynamics(small_config(objects={"hidden": 32, "gate": False})).gated is False
    assert step([0.3, 0.3, 0.02], [0.3, 0.27, 0.02]) == pytest.approx(1.6)  # 30 cm away, it moves all the same


def test_the_pathway_reads_each_object_relative_to_the_gripper():
    """Besides positions, proprio, action and task, the MLP reads each object's offset from the
    TCP before and after the step (tens of cm) and the TCP's move (control steps), from the
    unprojected positions."""
    dynamics = ObjectDynamics(pathway())
    assert dynamics.net[0].in_features == 2 * (3 * E + 4) + 4 + 4 + 1 + 6 * E + 3
    world = torch.tensor([0.05, -0.1, 0.02]).repeat(1, 2, E, 1)  # every object at one place
    points, heights = dynamics.camera.project(world).float(), world[..., 2]
    tcp = torch.tensor([[[0.0, 0.0, 0.02], [0.03, 0.0, 0.02]]])
    offsets, move = dynamics.relation_features(points, heights, tcp)
    offsets = offsets.view(1, E, 6)
    assert torch.allclose(offsets[0, :, :3], torch.tensor([0.5, -1.0, 0.0]).expand(E, 3), atol=1e-4)
    assert torch.allclose(offsets[0, :, 3:], torch.tensor([0.2, -1.0, 0.0]).expand(E, 3), atol=1e-4)
    assert torch.allclose(move, torch.tensor([[1.0, 0.0, 0.0]]))


def test_object_loss_counts_only_objects_in_view():
    target = torch.tensor([[[4.0, 4.0], [-5.0, 3.0]]])
    assert object_loss(torch.tensor([[[4.0, 4.0], [100.0, 100.0]]]), target, 32).item() == 0.0
    assert object_loss(torch.tensor([[[6.0, 4.0], [-5.0, 3.0]]]), target, 32).item() > 0.5
    # heights count in centimetres: 2 cm off is 1.5 (smooth L1), the object out of view not at all
    heights = torch.tensor([[0.02, 0.0]])
    assert object_loss(target, target, 32, heights + torch.tensor([[0.02, 5.0]]), heights).item() == pytest.approx(1.5)


def windows(b: int = 16, horizon: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    valid = torch.ones(b, horizon, dtype=torch.bool)
    valid[0, 1:] = False  # an episode that ends after one step
    return {"points": torch.rand(b, 2, E, 2, generator=g) * 32, "heights": torch.full((b, 2, E), 0.02),
            "proprio": torch.rand(b, 2 + horizon, 4, generator=g), "actions": torch.rand(b, horizon, 4, generator=g),
            "target": torch.rand(b, horizon, E, 2, generator=g) * 32,
            "target_heights": torch.full((b, horizon, E), 0.02),
            "valid": valid, "task": torch.zeros(b, dtype=torch.long)}


@pytest.mark.filterwarnings("ignore:Dynamo detected")
def test_the_training_losses_trace_as_one_graph_each_for_torch_compile():
    """``train-wm --compile`` fuses a step only where dynamo traces each loss whole: a graph break
    (the camera's height read back as a float once cut the pathway's rollout into 26 graphs) hands
    the step back to launching its operations one by one."""
    model = WorldModel(pathway(carry=True, outcome="head"))
    w, b = windows(), batch()
    noise = model.training_noise(b, torch.Generator().manual_seed(0))
    explained = [torch._dynamo.explain(model.frame_loss)(b, noise, 1.0),
                 torch._dynamo.explain(model.dynamics_losses)(w, torch.randn(w["points"].shape))]
    assert [(e.graph_count, e.graph_break_count) for e in explained] == [(1, 0)] * 2


def test_the_dynamics_learn_from_their_own_loss_and_the_frame_from_the_true_state():
    model = WorldModel(pathway(carry=False, outcome="head"))
    dynamics, terms = model.dynamics_loss(windows(), torch.Generator().manual_seed(1))
    dynamics.backward()
    assert set(terms) == {"proprio", "objects"} and all(t.ndim == 0 and not t.requires_grad for t in terms.values())
    assert dynamics.item() == pytest.approx(sum(t.item() for t in terms.values()), rel=1e-5)
    assert model.objects.net[-1].weight.grad.abs().sum() > 0 and model.proprio.head[-1].weight.grad.abs().sum() > 0
    assert model.frames.unet.conv_in.weight.grad is None  # the dynamics' loss trains them alone
    owned = {id(p) for p in model.dynamics_parameters()}
    assert owned == {id(p) for p in [*model.proprio.parameters(), *model.objects.parameters()]}
    model.zero_grad(set_to_none=True)
    loss, terms = model.loss(batch(), torch.Generator().manual_seed(1))
    loss.backward()
    assert torch.isfinite(loss) and not {"objects", "proprio"} & set(terms)
    # the frame is teacher-forced on the true proprio and positions: the dynamics get no gradient from it
    assert all(p.grad is None for p in model.dynamics_parameters())
    with pytest.raises(ValueError, match="needs the 'state' observation"):
        model.loss(batch(with_objects=False), torch.Generator().manual_seed(1))
    no_objects = {k: v for k, v in windows().items() if k in ("proprio", "actions", "valid", "task")}
    with pytest.raises(ValueError, match="needs the 'state' observation"):
        model.dynamics_loss(no_objects)
    assert set(WorldModel(small_config(NO_PATHWAY)).dynamics_loss(no_objects)[1]) == {"proprio"}


def test_proprio_rollout_feeds_the_head_its_own_predictions():
    """A head that adds 0.1 (normalised) to the commanded TCP x each step, rolled out 3 steps
    against recorded proprio that does the same, is exact only if each step starts from its own
    last prediction; past an episode's end nothing counts."""
    from worldsim.world_models.layers import task_one_hot
    from worldsim.world_models.proprio import commanded_proprio

    model = WorldModel(small_config(NO_PATHWAY))
    with torch.no_grad():
        model.proprio.head[-1].bias[0] = 0.1
    b, horizon = 4, 3
    actions = torch.rand(b, horizon, 4, generator=torch.Generator().manual_seed(3)) * 2 - 1
    proprio = [torch.zeros(b, 4), torch.zeros(b, 4)]
    for k in range(horizon):
        proprio.append(commanded_proprio(proprio[-1], actions[:, k]) + torch.tensor([0.1, 0.0, 0.0, 0.0]))
    w = {"proprio": torch.stack(proprio, 1), "actions": actions, "valid": torch.ones(b, horizon, dtype=torch.bool),
         "task": torch.zeros(b, dtype=torch.long)}

    def loss(w):
        return model.proprio.rollout_loss(w, task_one_hot(w["task"], len(model.config.tasks)), model.scale).item()

    assert loss(w) < 1e-10
    w["proprio"][:, -1] += 1.0  # the last step off by 1 in every coordinate
    assert loss(w) == pytest.approx(1 / 3, rel=1e-4)
    w["valid"][:, -1] = False  # ... but past the episode's end
    assert loss(w) < 1e-10


def test_a_gripper_that_sees_the_cubes_reads_the_recorded_ones_in_training_and_the_pathways_imagining():
    """``[model.proprio] sees_cubes``: the correction reads each cube's offset from the TCP (a cube
    between the fingers stops them); in training the recorded cubes before each step, in imagination
    where the pathway carries them; a model without the pathway has no cubes to read."""
    from worldsim.world_models.imagined_step import Rollout
    from worldsim.world_models.proprio import CUBES

    with pytest.raises(ValueError, match="sees_cubes reads the cubes the object pathway carries"):
        small_config(NO_PATHWAY, proprio={"sees_cubes": True})
    model = WorldModel(pathway(carry=False, outcome="head", proprio={"sees_cubes": True}))
    blind = WorldModel(pathway(carry=False, outcome="head"))
    assert model.proprio.head[0].in_features == blind.proprio.head[0].in_features + 3 * len(CUBES) == \
        blind.proprio.head[0].in_features + 9
    w = windows()
    seen = []
    forward = model.proprio.forward

    def spy(*args, **kwargs):
        seen.append(args[4])
        return forward(*args, **kwargs)

    model.proprio.forward = spy
    with torch.no_grad():  # past its "as commanded" start, so that the gradient reaches the inputs
        model.proprio.head[-1].weight.normal_(0.0, 0.01, generator=torch.Generator().manual_seed(4))
    dynamics, terms = model.dynamics_loss(w, torch.Generator().manual_seed(1))
    before = torch.cat([w["points"][:, -1:], w["target"][:, :-1]], dim=1)[:, :, CUBES]
    heights = torch.cat([w["heights"][:, -1:], w["target_heights"][:, :-1]], dim=1)[:, :, CUBES]
    recorded = model.objects.camera.unproject(before, heights)
    assert len(seen) == w["actions"].shape[1]
    for k, cubes in enumerate(seen):  # step k reads the cubes as recorded before it, never noised
        torch.testing.assert_close(cubes, recorded[:, k])
    dynamics.backward()
    assert model.proprio.head[0].weight.grad[:, -9:].abs().sum() > 0  # the cubes' columns learn
    seen.clear()
    b = 3
    rollout = Rollout(torch.zeros(b, 2, 48, 8, 8), torch.zeros(b, 48, 8, 8), torch.full((b, 2, 4), 0.05),
                      torch.rand(b, 2, len(ENTITIES), 2) * 32, torch.full((b, 2, len(ENTITIES)), 0.02))
    model.step_dynamics(rollout, torch.zeros(b, 4), torch.zeros(b, dtype=torch.long))
    torch.testing.assert_close(seen[0], model.objects.camera.unproject(rollout.points[:, -1, CUBES],
                                                                       rollout.heights[:, -1, CUBES]))
    with pytest.raises(ValueError, match="reads the cubes .sees_cubes.: pass their positions"):
        forward(torch.zeros(b, 4), rollout.proprio, torch.zeros(b, 1), model.scale)


def test_a_detector_that_reads_heights_starts_the_pathway_at_them_and_learns_them_from_the_state():
    """``[model.judge] heights``: the success head's height MLP (on the keypoints and the proprio)
    starts at "every object rests on its plane", learns from the recorded heights, and a start
    found in frames takes its heights (a head without it: the resting heights, a named aid)."""
    from worldsim.envs.imagination import ImaginationConfig, imagination_aids
    from worldsim.envs.observations import ENTITY_HEIGHTS

    model = WorldModel(small_config(objects={"hidden": 32, "carry": False}, judge={"outcome": "head", "heights": True}))
    blind = WorldModel(pathway(carry=False, outcome="head"))
    frames = torch.randint(0, 255, (2, 2, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))
    resting = torch.tensor(ENTITY_HEIGHTS, dtype=torch.float32)
    for m in (model, blind):
        started = m.start(frames, frames[:, 0], torch.zeros(2, 2, 4))
        torch.testing.assert_close(started.heights, resting.expand(2, 2, -1))  # at init both: resting
    with torch.no_grad():  # the height MLP reads 5 cm above for every object
        model.judge.success_head.height_mlp[-1].bias.fill_(5.0)
    started = model.start(frames, frames[:, 0], torch.zeros(2, 2, 4))
    torch.testing.assert_close(started.heights, (resting + 0.05).expand(2, 2, -1))
    b = batch()
    b["entity_heights"] = resting.expand(len(b["task"]), -1) + 0.03
    model.zero_grad(set_to_none=True)
    loss, terms = model.loss(b, torch.Generator().manual_seed(1))
    loss.backward()
    assert terms["height_error_cm"].item() == pytest.approx(2.0, abs=1e-4)  # read 5 cm up, recorded 3
    assert model.judge.success_head.height_mlp[-1].weight.grad.abs().sum() > 0
    assert "height_error_cm" not in blind.loss(b, torch.Generator().manual_seed(1))[1]
    resting_aid = "hand-written: the objects found in the start frames taken to rest on their planes"
    assert resting_aid not in imagination_aids(ImaginationConfig(), model)
    assert resting_aid in imagination_aids(ImaginationConfig(), blind)


def test_learned_gripper_motion_reads_no_formula_and_starts_where_the_gripper_is():
    """With ``[model.proprio] commanded = false`` the next proprio is the last one plus the MLP's
    change: at its zero start the gripper stays whatever the action, where the hand-written
    dynamics send it to the commanded pose; and the MLP is not fed the commanded change."""
    from worldsim.world_models.layers import task_one_hot
    from worldsim.world_models.proprio import commanded_proprio

    learned = WorldModel(small_config(NO_PATHWAY, proprio={"commanded": False}))
    formula = WorldModel(small_config(NO_PATHWAY))
    context = learned.config.context
    assert learned.proprio.head[0].in_features == formula.proprio.head[0].in_features - 4
    proprio = torch.rand(3, context, 4, generator=torch.Generator().manual_seed(1)) * 0.1
    action = torch.ones(3, 4)
    one_hot = task_one_hot(torch.zeros(3, dtype=torch.long), len(learned.config.tasks))
    with torch.no_grad():
        stays = learned.scale.raw(learned.proprio(action, proprio, one_hot, learned.scale))
        moves = formula.scale.raw(formula.proprio(action, proprio, one_hot, formula.scale))
    torch.testing.assert_close(stays, proprio[:, -1])
    torch.testing.assert_close(moves, commanded_proprio(proprio[:, -1], action))
    assert not torch.allclose(moves, stays)


def test_rollout_loss_feeds_the_pathway_its_own_predictions():
    """A pathway that moves the first object 1.6 px right per step, rolled out 3 steps against
    targets 1.6 px further each step, is exact: its own predictions are its next inputs."""
    from worldsim.world_models.objects import rollout_loss

    dynamics = ungated(ObjectDynamics(pathway()))
    with torch.no_grad():
        dynamics.net[-1].bias[0] = 1.0  # 1.0 * 0.1 * half the image (16 px) = 1.6 px per step
    w = windows(b=2)
    w["valid"][:] = True
    w["points"] = w["points"].clamp(4, 24)  # every object in view: all of them count
    w["target"] = w["points"][:, -1:].repeat(1, 3, 1, 1)
    w["target"][..., 0, 0] += 1.6 * torch.arange(1, 4)[None]
    noise = torch.randn(w["points"].shape, generator=torch.Generator().manual_seed(0))
    loss = rollout_loss(dynamics, w, lambda p: p, torch.ones(2, 1), 32, noise)
    assert loss.item() < 0.2  # only the context noise (0.5 px) remains


def test_imagination_carries_the_objects_and_judges_success_by_the_task_rule():
    from worldsim.envs.observations import ENTITY_HEIGHTS
    from worldsim.world_models.data import image_camera

    model = WorldModel(pathway(carry=False)).eval()
    ungated(model.objects)
    with torch.no_grad():
        model.objects.net[-1].bias[0] = 1.0  # the red cube moves right every step (touched or not: no gate)
    frames = torch.randint(0, 256, (2, 2, 32, 32, 3), dtype=torch.uint8)
    rollout = model.start(frames, frames[:, 0], torch.rand(2, 2, 4))  # positions found in the frames
    assert rollout.points.shape == (2, 2, E, 2)
    torch.testing.assert_close(rollout.heights[0, 0], torch.tensor(ENTITY_HEIGHTS, dtype=torch.float32))
    first = rollout.points[:, -1, 0, 0].clone()
    for _ in range(3):
        pred = model.predict(rollout, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))
        rollout = rollout.advance(pred)
    np.testing.assert_allclose(rollout.points[:, -1, 0, 0] - first, 3 * 0.1 * 16, rtol=1e-5)
    assert pred.points.shape == (2, E, 2) and pred.heights.shape == (2, E) and rollout.context.shape == (2, 2, 48, 8, 8)
    # recorded starts: the red cube (entity 0) on the blue zone (entity 3) succeeds; 12 cm away it does not
    camera = image_camera(32, 32)
    world = np.zeros((2, E, 3))
    world[:, :, 2] = ENTITY_HEIGHTS
    world[:, 1:3, 0], world[:, 5, :2] = (-0.2, 0.2), (0.0, 0.25)  # green and yellow cubes, bin: out of the way
    world[1, 0, 0] = 0.12
    points = torch.from_numpy(camera.project(world)).float()[:, None].repeat(1, 2, 1, 1)
    heights = torch.from_numpy(world[..., 2]).float()[:, None].repeat(1, 2, 1)
    with torch.no_grad():
        model.objects.net[-1].bias.zero_()  # nothing moves
    rollout = model.start(frames, frames[:, 0], torch.tensor([0.0, -0.2, 0.2, 0.0]).repeat(2, 2, 1), (points, heights))
    pred = model.predict(rollout, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))
    assert pred.success_prob.tolist() == [1.0, 0.0] and pred.failed.tolist() == [False, False]
    # the success head, asked, judges the same carried positions
    pred = model.predict(rollout, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), outcome="head")
    logit = model.judge.success_head.judge(pred.points, torch.zeros(2, dtype=torch.long),
                                           (pred.proprio - model.scale.mean) / model.scale.std)[0]
    torch.testing.assert_close(torch.sigmoid(logit), pred.success_prob)
    with pytest.raises(ValueError, match="only the object pathway carries"):
        small_config(objects=None, judge={"outcome": "rule"})
    with pytest.raises(ValueError, match="outcome='guess'; allowed: head, rule"):
        pathway(outcome="guess")


def test_carry_objects_moves_a_cube_where_the_pathway_puts_it_and_leaves_its_surroundings():
    frame = np.full((1, 64, 64, 3), 40, np.uint8)
    frame[0, 30:34, 20:24] = (200, 10, 10)  # a 4 px red cube centred at (column 22, row 32)
    frame[0, 30:34, 50:54] = (10, 200, 10)  # a second cube, not moving
    frame[0, 24:40, 27:40] = (20, 20, 220)  # a zone beside the red cube
    points = torch.tensor([[[22.0, 32.0], [52.0, 32.0]]])
    movable = torch.tensor([0, 1])  # both cubes can move
    latent = frames_to_latents(torch.from_numpy(frame), 4)
    still = carry_objects(latent, points, points, movable, 4)
    torch.testing.assert_close(still, latent)  # nothing moves: the frame is kept exactly
    moved = points.clone()
    moved[0, 0] += torch.tensor([3.0, -2.0])
    out = latents_to_frames(carry_objects(latent, points, moved, movable, 4), 4)[0].numpy()
    np.testing.assert_array_equal(out[28:32, 23:27], frame[0, 30:34, 20:24])  # the cube, whole, 3 px right, 2 up
    rows, columns = np.mgrid[0:64, 0:64] + 0.5
    kept = np.hypot(rows - 30.0, columns - 25.0) > 4.5  # beyond the cube's new footprint...
    kept[30:34, 20:24] = False  # ...and the spot it left, the denoiser's to fill
    np.testing.assert_array_equal(out[kept], frame[0][kept])  # the zone, the other cube and the rest stay put
    # objects that cannot move (zones, bin) carry nothing, wherever their points say they go
    np.testing.assert_array_equal(latents_to_frames(carry_objects(latent, points, moved, torch.tensor([1]), 4),
                                                    4)[0].numpy(), frame[0])


def test_a_cleared_carry_shows_the_learned_table_where_the_cube_was_and_nothing_else_changes():
    """The empty table is learned as the per-pixel median of frames whose cube stands somewhere
    else each time; with it, the spot a moved cube leaves shows the table (no second cube), the
    cube lands whole, and a cube that does not move is kept exactly."""
    table = (90, 80, 70)
    frames = np.tile(np.array(table, np.uint8), (9, 64, 64, 1))
    for k in range(9):  # a cube at a different place in each frame: never where the median looks
        frames[k, 4 + 6 * k:8 + 6 * k, 10:14] = (200, 10, 10)
    background = background_image(frames, 4)
    assert background.shape == (3, 64, 64)
    np.testing.assert_array_equal(latents_to_frames(F.pixel_unshuffle(background[None], 4), 4)[0].numpy(),
                                  np.tile(np.array(table, np.uint8), (64, 64, 1)))
    frame = np.tile(np.array(table, np.uint8), (1, 64, 64, 1))
    frame[0, 30:34, 20:24] = (200, 10, 10)  # the red cube centred at (column 22, row 32)
    frame[0, 30:34, 50:54] = (10, 200, 10)  # a second cube, not moving
    points = torch.tensor([[[22.0, 32.0], [52.0, 32.0]]])
    latent = frames_to_latents(torch.from_numpy(frame), 4)
    torch.testing.assert_close(carry_objects(latent, points, points, torch.tensor([0, 1]), 4, background), latent)
    moved = points.clone()
    moved[0, 0] += torch.tensor([8.0, 0.0])  # far enough that the old and new spots do not touch
    out = latents_to_frames(carry_objects(latent, points, moved, torch.tensor([0, 1]), 4, background), 4)[0].numpy()
    np.testing.assert_array_equal(out[30:34, 28:32], frame[0, 30:34, 20:24])  # the cube, whole, 8 px right
    assert (out[30:34, 20:24] == np.array(table)).all()  # its old spot: the table, not a second cube
    np.testing.assert_array_equal(out[:, 40:], frame[0, :, 40:])  # the other cube and the rest stay put
    uncleared = latents_to_frames(carry_objects(latent, points, moved, torch.tensor([0, 1]), 4), 4)[0].numpy()
    np.testing.assert_array_equal(uncleared[30:34, 20:24], frame[0, 30:34, 20:24])  # without: the old cube stays
    # paste=False: the old spot cleared, nothing pasted where the cube went (the denoiser draws it there)
    unpasted = latents_to_frames(carry_objects(latent, points, moved, torch.tensor([0, 1]), 4, background,
                                               paste=False), 4)[0].numpy()
    assert (unpasted[30:34, 20:32] == np.array(table)).all()
    np.testing.assert_array_equal(unpasted[:, 40:], frame[0, :, 40:])  # the cube at rest keeps its pixels
    with pytest.raises(ValueError, match=r"need uint8 frames \(N, H, W, 3\); got shape \(64, 64, 3\)"):
        background_image(frames[0], 4)


def test_drawing_moved_objects_without_pasting_needs_the_clearing():
    from worldsim.world_models.config import ObjectPathwayConfig

    assert not ObjectPathwayConfig(clear=True, paste=False).paste
    with pytest.raises(ValueError, match="objects.paste=false .* needs carry=true and clear=true"):
        ObjectPathwayConfig(paste=False)
    model = WorldModel(small_config(objects={"hidden": 32, "clear": True, "paste": False}, judge={"outcome": "head"}))
    assert model.frames.paste is False and model.frames.background is not None


def test_the_aids_named_are_the_ones_the_saved_model_was_built_with(tmp_path):
    """An unpasted model still clears the spots its moved cubes leave: hand-written image editing
    that its figures must name, where a pasting model's carried pixels stand for both."""
    from worldsim.envs.imagination import ImaginationConfig, imagination_aids

    built = WorldModel(small_config(objects={"hidden": 32, "clear": True, "paste": False}, judge={"outcome": "head"}))
    unpasted = WorldModel.from_pretrained(built.save_pretrained(tmp_path / "a"))
    assert unpasted.aid_flags() == {"camera": True, "fitted_camera": False, "arm_cleared": False, "gated": True,
                                    "commanded": True, "pasted": False, "cleared": True, "resting": True}
    named = imagination_aids(ImaginationConfig(), unpasted)
    assert named[0] == "the simulator's state as training supervision"  # the pixels rung's own
    assert not any("pixels carried" in aid for aid in named)
    assert "hand-written: the spots the moved cubes leave cleared to the empty table (learned from the frames)" in named
    assert "hand-written: the task's success rule as the judge" not in named  # the model's own judge: its head
    resting = "hand-written: the objects found in the start frames taken to rest on their planes"
    assert resting in named  # the pixels rung finds its starts in the frames
    assert resting not in imagination_aids(ImaginationConfig(rung="sim-seeded"), unpasted)  # seeded: recorded heights
    assert "hand-written: the task's success rule as the judge" in imagination_aids(ImaginationConfig(judge="rule"),
                                                                                   unpasted)
    pasting = WorldModel(small_config(objects={"hidden": 32}, judge={"outcome": "head"}))
    assert pasting.aid_flags()["pasted"] and not pasting.aid_flags()["cleared"]
    uncarried = WorldModel(small_config(objects={"hidden": 32, "carry": False}, judge={"outcome": "head"}))
    assert not uncarried.aid_flags()["pasted"]  # nothing carried, so nothing pasted either
    arm_only = WorldModel(small_config(objects={"hidden": 32, "clear_arm": True}, judge={"outcome": "head"}))
    assert arm_only.aid_flags()["cleared"]  # its empty table clears the moved cubes' spots as well
    dense = imagination_aids(ImaginationConfig(reward_type="dense"), pasting)
    assert "hand-written: the cube's pixels carried from the start frame" in dense
    assert not any("cleared" in aid for aid in dense)
    assert dense[-1] == "hand-written: the task's dense reward shaping"


def test_a_clearing_model_learns_its_background_in_training_and_saves_it(tmp_path):
    model = WorldModel(pathway(carry=True, outcome="head", clear=True))
    assert model.frames.background is not None and not model.frames.background.any()
    frames = np.tile(np.array((90, 80, 70), np.uint8), (4, 32, 32, 1))
    model.learn_scene(frames, np.zeros((4, 4), np.float32), np.array([0, 2]))
    table = torch.tensor([90, 80, 70]).float().div(127.5).sub(1.0)[:, None, None]
    assert torch.allclose(model.frames.background, table.expand(3, 32, 32))
    loaded = WorldModel.from_pretrained(model.save_pretrained(tmp_path / "wm"))
    torch.testing.assert_close(loaded.frames.background, model.frames.background)
    assert WorldModel(pathway(carry=True, outcome="head")).frames.background is None  # the default: nothing kept


def test_the_denoiser_corrects_the_carried_frame_in_training_and_imagination():
    model = WorldModel(pathway(carry=True, outcome="head")).eval()
    ungated(model.objects)
    loss, terms = model.loss(batch(), torch.Generator().manual_seed(1))
    assert torch.isfinite(loss) and terms["denoise"] > 0
    with torch.no_grad():
        model.objects.net[-1].bias[0] = 2.0  # the red cube moves 3.2 px right per step
        for p in model.frames.unet.parameters():
            p.zero_()  # a denoiser that changes nothing: the frame is the carried one
    frames = torch.full((1, 2, 32, 32, 3), 40, dtype=torch.uint8)
    frames[:, :, 15:17, 9:11] = torch.tensor([200, 10, 10], dtype=torch.uint8)  # a 2 px cube
    points = torch.tensor([28.0, 4.0]).repeat(1, 2, E, 1)  # the other objects far from the cube
    points[:, :, 0] = torch.tensor([10.0, 16.0])
    rollout = model.start(frames, frames[:, 0], torch.rand(1, 2, 4), (points, torch.full((1, 2, E), 0.02)))
    pred = model.predict(rollout, torch.zeros(1, 4), torch.zeros(1, dtype=torch.long))
    image = latents_to_frames(pred.latent, 4)[0].numpy()
    carried = image[12:20, 11:17]  # where the pathway put it (the spot it left is the denoiser's to fill)
    red = np.argwhere((carried[..., 0] > 150) & (carried[..., 1] < 50))
    assert len(red) and red[:, 1].mean() + 11.5 == pytest.approx(10.0 + 3.2, abs=0.3)


@pytest.mark.slow
def test_train_wm_with_the_pathway_and_imagine_with_it(tmp_path):
    import gymnasium as gym

    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.world_models import EpisodeBank, TrainWMConfig, train_world_model
    from worldsim.world_models.replay import pathway_replay

    data = tmp_path / "push.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3)), 4, data,
                     num_envs=4, image_size=32, progress=False)
    summary = train_world_model(TrainWMConfig(
        data=data, out=tmp_path / "run", steps=4, batch_size=4, val_fraction=0.25, val_every=4, val_horizon=2,
        video_every=0, checkpoint_every=4, torch_threads=1, device="cpu", progress=False,
        model={"dynamics": {"horizon": 5}}))
    assert summary["steps"] == 4
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"train/objects"' in logged
    model = WorldModel.from_pretrained(tmp_path / "run")
    assert model.config.objects is not None and model.config.dynamics.horizon == 5
    env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=2, world_model=tmp_path / "run", keyframes=data,
                       device="cpu")
    env.reset(seed=0)
    before = env.unwrapped.get_state()["points"].clone()
    env.step(np.zeros((2, 4), np.float32))
    assert env.unwrapped.get_state()["points"].shape == before.shape
    env.close()
    with pytest.raises(ValueError, match="shape a new model"):
        TrainWMConfig(data=data, init=tmp_path / "run", model={"dynamics": {"horizon": 5}})

    # the pathway alone, moved by the recorded gripper: it starts from the recorded objects and reads that motion
    bank = EpisodeBank(data)
    episodes, starts = np.arange(2), np.array([0, 3])
    points, heights = pathway_replay(model, bank, episodes, starts, 3)
    assert points.shape == (2, 4, E, 2) and heights.shape == (2, 4, E)
    recorded = bank.recorded_objects(bank.obs_start[episodes] + starts)
    assert recorded is not None
    np.testing.assert_allclose(points[:, 0], recorded[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(heights[:, 0], recorded[1].numpy(), rtol=1e-6)
    bank.proprio = bank.proprio + np.float32(0.05)
    assert not np.allclose(pathway_replay(model, bank, episodes, starts, 3)[0][:, 1:], points[:, 1:])
    with pytest.raises(ValueError, match="no object pathway"):
        WorldModel(small_config(NO_PATHWAY)).move_objects(*recorded, torch.zeros(1, 2, 4),
                                                                          torch.zeros(1, 4),
                                                            torch.zeros(1, 4), torch.zeros(1, dtype=torch.long))


def test_the_tiny_preset_has_the_pathway_and_drops_it_without_state(tmp_path, capsys):
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.world_models import EpisodeBank, TrainWMConfig
    from worldsim.world_models.train import build_model

    assert all(build_config(name).objects is not None and build_config(name).objects.carry for name in PRESETS)
    pixels = tmp_path / "pixels.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 2, pixels, num_envs=2,
                     image_size=32, obs_mode="pixels+state", progress=False)
    with_state = build_model(TrainWMConfig(data=pixels, out=tmp_path / "a"), EpisodeBank(pixels))
    assert with_state.config.objects is not None and with_state.config.objects.carry
    assert with_state.config.frames.anchor == "first"  # the tiny preset's
    bank = EpisodeBank(pixels)
    bank.state = bank.entity_pixels = None  # as a file recorded without 'state' reads
    without = build_model(TrainWMConfig(data=pixels, out=tmp_path / "b"), bank)
    assert with_state.config.judge.outcome == "rule"
    assert without.config.objects is None and without.config.judge.outcome == "head"
    assert without.config.frames.anchor == "last" and not without.config.state_supervision  # drawn from the last
    assert "without its object pathway" in capsys.readouterr().err


def test_masked_means_equal_the_means_over_the_selected_entries():
    """The losses select valid windows and objects in view with masks, not boolean indexing (which
    would make the host wait for a GPU): same numbers, 0 when nothing is selected."""
    g = torch.Generator().manual_seed(0)
    values, mask = torch.rand(6, 5, generator=g), torch.rand(6, 5, generator=g) > 0.5
    torch.testing.assert_close(masked_mean(values, mask), values[mask].mean())
    assert masked_mean(values, torch.zeros(6, 5, dtype=torch.bool)).item() == 0.0
    steps = [values[mask[:, k], k].mean() for k in range(5) if mask[:, k].any()]
    torch.testing.assert_close(masked_step_mean(values, mask), torch.stack(steps).mean())
    target = torch.tensor([[[4.0, 4.0], [40.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]]])  # one object out of view
    predicted = target + torch.tensor([[[1.0, 0.0], [9.0, 9.0]], [[2.0, 2.0], [0.0, 0.0]]])
    only_first = object_loss(predicted, target, 32, valid=torch.tensor([True, False]))
    torch.testing.assert_close(only_first, object_loss(predicted[:1, :1], target[:1, :1], 32))



def test_a_frame_drawn_from_the_first_frame_reads_no_context_frame():
    with pytest.raises(ValueError, match="anchor='latest'; allowed: last, first"):
        UNetConfig(anchor="latest")
    with pytest.raises(ValueError, match=r"frames.anchor='latest'; allowed: first, last"):
        pathway(frames={"anchor": "latest"})
    # the UNet's: the video transformer has none
    with pytest.raises(ValueError, match=r"unknown setting\(s\) anchor in \[frames\]"):
        build_config("video-tiny", frames={"anchor": "first"})
    with pytest.raises(ValueError, match="nothing carries where the objects went"):
        small_config(NO_PATHWAY, frames={"anchor": "first"})
    model = WorldModel(pathway(frames={"anchor": "first"})).eval()
    last = WorldModel(pathway())
    # the UNet reads the noisy frame and the first, not the two context frames (48 channels each)
    assert last.frames.unet.conv_in.in_channels - model.frames.unet.conv_in.in_channels == 2 * 48
    data = batch() | {"first_entity_pixels": torch.rand(4, E, 2, generator=torch.Generator().manual_seed(2)) * 32}
    loss, terms = model.loss(data, torch.Generator().manual_seed(1))
    assert torch.isfinite(loss) and terms["denoise"] > 0
    ungated(model.objects)
    with torch.no_grad():
        model.objects.net[-1].bias[0] = 2.0  # the red cube moves 3.2 px right per step
        for p in model.frames.unet.parameters():
            p.zero_()  # a denoiser that changes nothing: the frame is the carried first frame
    first = torch.full((1, 32, 32, 3), 40, dtype=torch.uint8)
    first[:, 15:17, 9:11] = torch.tensor([200, 10, 10], dtype=torch.uint8)  # a 2 px cube at (10, 16)
    points = torch.tensor([28.0, 4.0]).repeat(1, 2, E, 1)
    points[:, :, 0] = torch.tensor([10.0, 16.0])
    drawn = []
    for seed in (0, 1):  # two different last frames behind the same first frame and state
        context = torch.randint(0, 256, (1, 2, 32, 32, 3), dtype=torch.uint8,
                                generator=torch.Generator().manual_seed(seed))
        rollout = model.start(context, first, torch.full((1, 2, 4), 0.5), (points, torch.full((1, 2, E), 0.02)))
        assert rollout.first_points is not None and rollout.first_points.shape == (1, E, 2)  # found by the detector
        rollout.first_points = points[:, 0].clone()
        pred = model.predict(rollout, torch.zeros(1, 4), torch.zeros(1, dtype=torch.long),
                             generator=torch.Generator().manual_seed(3))
        drawn.append(latents_to_frames(pred.latent, 4)[0].numpy())
        assert rollout.advance(pred).first_points is rollout.first_points  # carried along unchanged
    np.testing.assert_array_equal(drawn[0], drawn[1])
    carried = drawn[0][12:20, 11:17]  # carried from the first frame (the spot it left is the denoiser's to fill)
    red = np.argwhere((carried[..., 0] > 150) & (carried[..., 1] < 50))
    assert len(red) and red[:, 1].mean() + 11.5 == pytest.approx(10.0 + 3.2, abs=0.3)
