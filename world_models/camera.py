"""The world model's camera: the scene's calibrated one, or one fitted to the training data.

Everything the object pathway does in metres goes through a camera: the recorded positions it
learns from are projected into the image, the contact gate and the relation features put its
image positions back on the table, the task's rule judges them there, and the gripper's planes
and the arm's clearing place the TCP in the frame. With ``camera = "scene"`` that camera is the
scene's own (:func:`~worldsim.world_models.data.image_camera`, read from the MJCF): exact, but
something a model of a real robot's camera would not be given. With ``camera = "fitted"`` the
model fits it to its training frames instead (:func:`fitted_camera`): each cube is found in
the frames by its colour (:func:`cube_sightings`: the centroid of the pixels of that hue), paired
with where the recorded state puts its centre, and a pinhole camera is fitted to those pairs
(:meth:`~worldsim.envs.camera.PinholeCamera.fit`). The state is already the pathway's training
supervision; the fit adds the cubes' colours, which the scene's materials give.
"""

from __future__ import annotations

import numpy as np

from worldsim.envs.camera import PinholeCamera
from worldsim.envs.observations import ENTITIES, entity_positions

CUBE_COLOUR_TOLERANCE = 0.12  # largest L1 distance of a pixel's chromaticity from its cube's
MIN_BRIGHTNESS = 60  # darker pixels (the arm, the shadowed sides) have no reliable hue
CLEAR_OF_GRIPPER_M = 0.1  # a cube counts only with the TCP this far away: the gripper hides part of it
WHOLE_SHARE = (0.8, 1.2)  # ... and seen with 80-120% of its typical pixel count: whole, and alone
MIN_SIGHTINGS = 50
MIN_PLACES = 6  # distinct places (5 mm apart) the cubes must be seen at: fewer leave the camera undetermined
FIT_FRAMES = 2000  # frames the camera is fitted on, evenly spread over the data (each gives up to one sighting a cube)


def cube_colours() -> dict[str, np.ndarray]:
    """Each cube's material colour (RGB in [0, 1]) from the scene."""
    from worldsim.envs.scene import Scene

    model = Scene.load().model
    return {name: model.geom_rgba[model.geom(name).id][:3].astype(np.float64)
            for name in ENTITIES if name.endswith("_cube")}


def cube_sightings(images: np.ndarray, state: np.ndarray, proprio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of a cube's centre in the world (from ``state`` ``(N, STATE_DIM)``) and where uint8
    ``images`` ``(N, H, W, 3)`` show it: ``(M, 3)`` metres and ``(M, 2)`` pixels (column, row).

    A cube's pixels are those whose chromaticity lies within :data:`CUBE_COLOUR_TOLERANCE` of
    its material's and bright enough to have a hue; a sighting counts only with the gripper's TCP
    (``proprio`` ``(N, 4)``) clear of the cube and the cube seen whole (its pixel count near the
    typical one), since a partly hidden cube's centroid is not its centre's image."""
    image = images.astype(np.float32)
    chroma = image / np.maximum(image.sum(-1, keepdims=True), 1.0)
    bright = image.max(-1) > MIN_BRIGHTNESS
    h, w = images.shape[1:3]
    cols, rows = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    positions = entity_positions(state)
    world, pixels = [], []
    for name, colour in cube_colours().items():
        k = ENTITIES.index(name)
        mask = (np.abs(chroma - colour / colour.sum()).sum(-1) < CUBE_COLOUR_TOLERANCE) & bright
        count = mask.sum((1, 2))
        if not count.any():
            continue
        typical = np.median(count[count > 0])
        seen = ((count >= WHOLE_SHARE[0] * typical) & (count <= WHOLE_SHARE[1] * typical)
                & (np.linalg.norm(proprio[:, :3] - positions[:, k], axis=-1) > CLEAR_OF_GRIPPER_M))
        centroid = np.stack([(mask * cols).sum((1, 2)), (mask * rows).sum((1, 2))], -1) / np.maximum(count, 1)[:, None]
        world.append(positions[seen, k])
        pixels.append(centroid[seen])
    return np.concatenate(world or [np.zeros((0, 3))]), np.concatenate(pixels or [np.zeros((0, 2))])


def fitted_camera(images: np.ndarray, state: np.ndarray, proprio: np.ndarray) -> tuple[PinholeCamera, str]:
    """The camera fitted to the cubes' sightings (:func:`cube_sightings`) in up to
    :data:`FIT_FRAMES` of uint8 ``images`` ``(N, H, W, 3)``, spread evenly over them, and a line
    saying how well it fits. ``ValueError`` when fewer than :data:`MIN_SIGHTINGS` are found or
    they show the cubes at fewer than :data:`MIN_PLACES` places."""
    rows = np.unique(np.linspace(0, len(images) - 1, min(len(images), FIT_FRAMES)).round().astype(np.int64))
    world, pixels = cube_sightings(images[rows], state[rows], proprio[rows])
    places = len(np.unique(np.round(world / 0.005).astype(np.int64), axis=0))
    if len(world) < MIN_SIGHTINGS or places < MIN_PLACES:
        raise ValueError(f"camera='fitted' needs at least {MIN_SIGHTINGS} sightings of a whole cube clear of the "
                         f"gripper, at {MIN_PLACES} places or more, in the training frames; found {len(world)} at "
                         f"{places} (train on more episodes, or with [model] camera = 'scene')")
    camera = PinholeCamera.fit(world, pixels, *images.shape[1:3])
    error = np.linalg.norm(camera.project(world) - pixels, axis=1)
    return camera, (f"camera fitted to {len(world)} sightings of the cubes in {len(rows)} frames: field of view "
                    f"{camera.fovy:.1f} degrees, the sightings {np.median(error):.2f} px from it (median; 95th "
                    f"percentile {np.percentile(error, 95):.2f})")


def camera_vector(camera: PinholeCamera) -> np.ndarray:
    """``camera``'s pose and field of view as 13 numbers: position, rotation (row-major), fovy."""
    return np.concatenate([camera.position, camera.rotation.ravel(), [camera.fovy]])


def camera_from_vector(vector: np.ndarray, size: int) -> PinholeCamera:
    """The camera :func:`camera_vector` wrote, for a ``size`` x ``size`` image."""
    vector = np.asarray(vector, np.float64)
    return PinholeCamera(vector[:3].copy(), vector[3:12].reshape(3, 3).copy(), float(vector[12]), size, size)
