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
(:meth:`~worldsim.envs.camera.PinholeCamera.fit`). The cubes' colours are learned too
(:func:`cube_colours`): of the distinct colours the frames show, those under which one camera
places the cubes' recorded centres where the frames show them. The state is already the pathway's training supervision;
nothing else is read from the scene.
"""

from __future__ import annotations

import numpy as np

from worldsim.envs.camera import PinholeCamera, plane_camera
from worldsim.envs.observations import ENTITIES, entity_positions

CUBE_COLOUR_TOLERANCE = 0.12  # largest L1 distance of a pixel's chromaticity from its cube's
MIN_BRIGHTNESS = 60  # darker pixels (the arm, the shadowed sides) have no reliable hue
MIN_SATURATION = 0.2  # ... and greyer ones (the table, the bin's wood) none worth telling apart
COLOUR_BIN = 0.025  # the chromaticity histogram's cells, in which the frames' colours are peaks
COLOUR_SHARE = 0.005  # a colour counts with at least this share of the coloured pixels
CLEAR_OF_GRIPPER_M = 0.1  # a cube counts only with the TCP this far away: the gripper hides part of it
WHOLE_SHARE = (0.8, 1.2)  # ... and seen with 80-120% of its typical pixel count: whole, and alone
MIN_SIGHTINGS = 50
MIN_PLACES = 6  # distinct places (PLACE_M apart) the cubes must be seen at: fewer leave the camera undetermined
PLACE_M = 0.005
# A sighting is where a camera places it when within this share of the image's width (2 px at
# 64 x 64, where another object's colour misses by 10 px or more).
COLOUR_FIT_SHARE = 1 / 32
FIT_FRAMES = 2000  # frames the camera is fitted on, evenly spread over the data (each gives up to one sighting a cube)


def places(world: np.ndarray) -> int:
    """How many distinct places (cells of :data:`PLACE_M`) points ``(M, 3)`` metres lie at."""
    return len(np.unique(np.round(world / PLACE_M).astype(np.int64), axis=0))


def frame_colours(chroma: np.ndarray, bright: np.ndarray) -> np.ndarray:
    """The distinct colours ``(K, 3)`` (chromaticities) that frames show on their bright,
    saturated pixels (``chroma`` and ``bright``: :func:`chromaticity`): the peaks of their chromaticity histogram
    (cells of :data:`COLOUR_BIN`, smoothed over a cell), each the mean of the pixels within half
    of :data:`CUBE_COLOUR_TOLERANCE` of its peak, where they are at least :data:`COLOUR_SHARE` of
    those pixels."""
    from scipy import ndimage

    coloured = chroma[bright & (chroma.max(-1) - chroma.min(-1) > MIN_SATURATION)]
    if not len(coloured):
        return np.zeros((0, 3))
    cells = int(round(1 / COLOUR_BIN))
    histogram = ndimage.gaussian_filter(np.histogram2d(coloured[:, 0], coloured[:, 1], bins=cells,
                                                       range=[[0, 1], [0, 1]])[0], 1.0)
    peaks = (histogram == ndimage.maximum_filter(histogram, size=5)) & (histogram > 0)
    colours = []
    for red, green in (np.argwhere(peaks) + 0.5) * COLOUR_BIN:
        near = np.abs(coloured[:, 0] - red) + np.abs(coloured[:, 1] - green) < CUBE_COLOUR_TOLERANCE / 2
        if near.sum() >= COLOUR_SHARE * len(coloured):
            colours.append(coloured[near].mean(0))
    return np.array(colours).reshape(-1, 3)


def chromaticity(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pixel's chromaticity ``(N, H, W, 3)`` (RGB over its sum) of uint8 ``images`` and
    whether it is bright enough to have a hue ``(N, H, W)`` (:data:`MIN_BRIGHTNESS`)."""
    image = images.astype(np.float32)
    return image / np.maximum(image.sum(-1, keepdims=True), 1.0), image.max(-1) > MIN_BRIGHTNESS


def colour_pixels(chroma: np.ndarray, bright: np.ndarray, colour: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many pixels ``(N,)`` of each frame are of chromaticity ``colour`` (within
    :data:`CUBE_COLOUR_TOLERANCE`, bright: :func:`chromaticity`) and their centroid ``(N, 2)``
    (column, row)."""
    mask = (np.abs(chroma - colour).sum(-1) < CUBE_COLOUR_TOLERANCE) & bright
    h, w = mask.shape[1:]
    cols, rows = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    count = mask.sum((1, 2))
    return count, np.stack([(mask * cols).sum((1, 2)), (mask * rows).sum((1, 2))], -1) / np.maximum(count, 1)[:, None]


def whole_and_clear(count: np.ndarray, centres: np.ndarray, proprio: np.ndarray) -> np.ndarray:
    """The frames ``(N,)`` where an object's pixels (``count`` per frame, :func:`colour_pixels`)
    show it whole and alone (near its typical count: a partly hidden object's centroid is not its
    centre's image) with the gripper's TCP (``proprio`` ``(N, 4)``) clear of where it is
    (``centres`` ``(N, 3)`` metres)."""
    if not count.any():
        return np.zeros(len(count), bool)
    typical = np.median(count[count > 0])
    return ((count >= WHOLE_SHARE[0] * typical) & (count <= WHOLE_SHARE[1] * typical)
            & (np.linalg.norm(proprio[:, :3] - centres, axis=-1) > CLEAR_OF_GRIPPER_M))


def cube_colours(images: np.ndarray, state: np.ndarray, proprio: np.ndarray) -> dict[str, np.ndarray]:
    """Each cube's colour (chromaticity) learned from the frames: :func:`learned_sightings`' colours."""
    return learned_sightings(images, state, proprio)[0]


def learned_sightings(images: np.ndarray, state: np.ndarray, proprio: np.ndarray
                      ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Each cube's colour (chromaticity), learned from uint8 ``images`` ``(N, H, W, 3)`` and the
    recorded ``state`` ``(N, STATE_DIM)``: of the frames' colours (:func:`frame_colours`), the
    share among the cubes under which one camera (:func:`~worldsim.envs.camera.plane_camera`, in
    closed form) places the most sightings (each colour's
    whole pixels clear of the gripper paired with its cube's recorded centre,
    :func:`whole_and_clear`) within :data:`COLOUR_FIT_SHARE` of the image's width: a colour that
    is not the cube's (a zone's, another cube's) is seen where the camera puts no cube. A cube
    whose colour is seen there on fewer than half its sightings is left out (the camera is fitted
    on the others); ``ValueError`` when no share fits or the frames show fewer colours than cubes.
    Also returns the sightings of the cubes so told, as :func:`cube_sightings` would find them
    with those colours: ``(M, 3)`` metres and ``(M, 2)`` pixels."""
    from itertools import permutations

    chroma, bright = chromaticity(images)
    colours, positions = frame_colours(chroma, bright), entity_positions(state)
    cubes = [name for name in ENTITIES if name.endswith("_cube")]
    seen: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}  # (colour, cube): centres, centroids
    for i, colour in enumerate(colours):
        count, centroid = colour_pixels(chroma, bright, colour)
        for name in cubes:
            centres = positions[:, ENTITIES.index(name)]
            whole = whole_and_clear(count, centres, proprio)
            seen[i, name] = centres[whole], centroid[whole]
    limit = COLOUR_FIT_SHARE * images.shape[2]
    best: tuple[int, dict[str, int]] = (0, {})  # the most sightings placed, and each kept cube's colour
    for share in permutations(range(len(colours)), len(cubes)):
        pairs = [seen[i, name] for i, name in zip(share, cubes, strict=True)]
        world, pixels = np.concatenate([w for w, _ in pairs]), np.concatenate([p for _, p in pairs])
        if places(world) < MIN_PLACES:
            continue
        with np.errstate(all="ignore"):  # a share too degenerate to fit places nothing
            camera = plane_camera(world, pixels, *images.shape[1:3])
        placed = [np.linalg.norm(camera.project(w) - p, axis=1) <= limit for w, p in pairs]
        if (inliers := int(sum(k.sum() for k in placed))) > best[0]:
            best = (inliers, {name: i for i, name, k in zip(share, cubes, placed, strict=True)
                              if len(k) and k.mean() >= 0.5})
    if not best[1]:
        raise ValueError(f"camera='fitted' finds the cubes by their colours, learned as those under which one camera "
                         f"places the cubes' recorded centres where the frames show them (within {limit:.1f} px); no "
                         f"such colours for the {len(cubes)} cubes among the {len(colours)} the frames show, at "
                         f"{MIN_PLACES} places or more (train on more episodes, or with [model] camera = 'scene')")
    told = [seen[i, name] for name, i in best[1].items()]
    return ({name: colours[i] for name, i in best[1].items()}, np.concatenate([w for w, _ in told]),
            np.concatenate([p for _, p in told]))


def cube_sightings(images: np.ndarray, state: np.ndarray, proprio: np.ndarray,
                   colours: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of a cube's centre in the world (from ``state`` ``(N, STATE_DIM)``) and where uint8
    ``images`` ``(N, H, W, 3)`` show it, whole and clear of the gripper's TCP (``proprio``
    ``(N, 4)``: :func:`whole_and_clear`), found by its colour (``colours``: chromaticity by cube,
    :func:`cube_colours`): ``(M, 3)`` metres and ``(M, 2)`` pixels (column, row)."""
    chroma, bright = chromaticity(images)
    positions = entity_positions(state)
    world, pixels = [], []
    for name, colour in colours.items():
        centres = positions[:, ENTITIES.index(name)]
        count, centroid = colour_pixels(chroma, bright, colour)
        seen = whole_and_clear(count, centres, proprio)
        world.append(centres[seen])
        pixels.append(centroid[seen])
    return np.concatenate(world or [np.zeros((0, 3))]), np.concatenate(pixels or [np.zeros((0, 2))])


def fitted_camera(images: np.ndarray, state: np.ndarray, proprio: np.ndarray) -> tuple[PinholeCamera, str]:
    """The camera fitted to the cubes' sightings (:func:`learned_sightings`) in up to
    :data:`FIT_FRAMES` of uint8 ``images`` ``(N, H, W, 3)``, spread evenly over them, and a line
    saying how well it fits. ``ValueError`` when fewer than :data:`MIN_SIGHTINGS` are found or
    they show the cubes at fewer than :data:`MIN_PLACES` places."""
    rows = np.unique(np.linspace(0, len(images) - 1, min(len(images), FIT_FRAMES)).round().astype(np.int64))
    images, state, proprio = images[rows], state[rows], proprio[rows]
    colours, world, pixels = learned_sightings(images, state, proprio)
    seen_at = places(world)
    if len(world) < MIN_SIGHTINGS or seen_at < MIN_PLACES:
        raise ValueError(f"camera='fitted' needs at least {MIN_SIGHTINGS} sightings of a whole cube clear of the "
                         f"gripper, at {MIN_PLACES} places or more, in the training frames; found {len(world)} at "
                         f"{seen_at} (train on more episodes, or with [model] camera = 'scene')")
    camera = PinholeCamera.fit(world, pixels, *images.shape[1:3])
    error = np.linalg.norm(camera.project(world) - pixels, axis=1)
    named = ", ".join(name.removesuffix("_cube") for name in colours)
    return camera, (f"camera fitted to {len(world)} sightings of the cubes in {len(rows)} frames (found by their "
                    f"colours, learned from the frames: {named}): field of view "
                    f"{camera.fovy:.1f} degrees, the sightings {np.median(error):.2f} px from it (median; 95th "
                    f"percentile {np.percentile(error, 95):.2f})")


def camera_vector(camera: PinholeCamera) -> np.ndarray:
    """``camera``'s pose and field of view as 13 numbers: position, rotation (row-major), fovy."""
    return np.concatenate([camera.position, camera.rotation.ravel(), [camera.fovy]])


def camera_from_vector(vector: np.ndarray, size: int) -> PinholeCamera:
    """The camera :func:`camera_vector` wrote, for a ``size`` x ``size`` image."""
    vector = np.asarray(vector, np.float64)
    return PinholeCamera(vector[:3].copy(), vector[3:12].reshape(3, 3).copy(), float(vector[12]), size, size)
