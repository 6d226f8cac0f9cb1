import imageio.v3 as iio

from worldsim.commands.cli import main


def test_list_envs_prints_every_task_and_the_suites(capsys):
    assert main(["list-envs"]) == 0
    out = capsys.readouterr().out
    assert "worldsim/PushCube-v0" in out and "tabletop-16" in out and "seen" in out


def test_list_envs_of_one_suite(capsys):
    assert main(["list-envs", "--suite", "tabletop-4"]) == 0
    out = capsys.readouterr().out
    assert "worldsim/StackCube-v0" in out and "worldsim/PushCube-Green-v0" not in out


def test_render_writes_a_video_of_a_successful_expert_episode(tmp_path, capsys):
    out = tmp_path / "push.mp4"
    assert main(["render", "--task", "ReachCube-v0", "--out", str(out), "--size", "64"]) == 0
    frames = iio.imread(out)
    assert frames.shape[1:] == (64, 64, 3) and len(frames) >= 3
    assert "success=True" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["push.mp4"]  # no temp files left
    assert out.stat().st_mode & 0o044  # readable by others, like any file the user writes


def test_render_bad_values_fail_clearly(tmp_path, capsys):
    assert main(["render", "--task", "PushCub-v0", "--out", str(tmp_path / "x.mp4")]) == 2
    assert "Did you mean 'PushCube-v0'" in " ".join(capsys.readouterr().out.split())
    assert main(["render", "--out", str(tmp_path / "x.avi")]) == 2
    assert "must end in one of .mp4, .gif" in " ".join(capsys.readouterr().out.split())
    assert list(tmp_path.iterdir()) == []
