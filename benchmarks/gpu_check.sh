#!/usr/bin/env bash
# Exercise every GPU path of worldsim on a machine with an NVIDIA GPU, then print one JSON line:
# each check's pass/fail, its seconds and its figures, and whether all passed (kept, with the
# arguments, commit and machine, as benchmarks/results/gpu_check.json).
#
#   pip install -e ".[test,warp]" 'jax[cuda12]<0.10'   # a CUDA build of torch, and JAX on the GPU for MJX
#   bash benchmarks/gpu_check.sh                        # about 10-15 minutes on one H100/H200
#
# Checks (each one's log is kept in the work folder the JSON names):
#   warp_env      Warp env on cuda: state, 64x64 pixels (front + wrist), torch CUDA tensors in and out,
#                 images against MuJoCo's OpenGL renderer, CUDA-graph replay equal to eager stepping
#   throughput    benchmarks/backend_throughput.py: MuJoCo CPU, MJX, Warp; state and pixels; 1,024 /
#                 4,096 / 16,384 envs; ReachCube and PushCube (the issue's goals are in its rows)
#   mjx           MJX env on JAX's GPU backend
#   train_wm      worldsim train-wm, 200 steps, --device cuda (on 32 collected episodes)
#   train_wm_graphs  the same with --compile reduce-overhead (its losses compiled and replayed as CUDA graphs)
#   train_wm_cuda_graph  the same with --cuda-graph (the whole step recorded as one CUDA graph), and the
#                 CUDA tests of tests/test_train_step.py (a recorded step ends where eager steps end)
#   imagined      the imagined env on cuda, stepped with CUDA tensors
#   ppo_state     PPO, 2 iterations, backend warp on cuda, state MLP
#   ppo_pixels    PPO, 2 iterations, backend warp on cuda, a TinyVLA from 64x64 pixels
# Set GPU_CHECK_SKIP="throughput" (space-separated names) to leave checks out.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d -t worldsim-gpu-check-XXXX)
export WORK
SKIP=" ${GPU_CHECK_SKIP:-} "

check() {  # check NAME COMMAND...: run it, keep its log, record pass/fail, seconds and its last JSON line
  local name=$1
  shift
  if [[ "$SKIP" == *" $name "* ]]; then
    echo "{\"name\": \"$name\", \"status\": \"skipped\"}" >"$WORK/$name.result"
    return
  fi
  echo "== $name" >&2
  local start status
  start=$(date +%s.%N)
  if "$@" >"$WORK/$name.log" 2>&1; then status=pass; else status=fail; fi
  python - "$name" "$status" "$start" "$WORK/$name.log" >"$WORK/$name.result" <<'EOF'
import json, sys, time
name, status, start, log = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
lines = open(log, errors="replace").read().splitlines()
figures = None
for line in reversed(lines):
    try:
        figures = json.loads(line)
        break
    except ValueError:
        continue
result = {"name": name, "status": status, "seconds": round(time.time() - start, 1), "figures": figures}
if status == "fail":
    result["log_tail"] = lines[-5:]
print(json.dumps(result))
EOF
  echo "   $status" >&2
}

check warp_env python - <<'EOF'
import json, time
import numpy as np, torch, gymnasium as gym, worldsim
from worldsim.envs.rendering import BatchRenderer
assert torch.cuda.is_available(), "torch sees no CUDA GPU (install a CUDA build of torch)"
env = gym.make_vec("worldsim/PushCube-v0", num_envs=64, backend="warp", device="cuda", obs_mode="pixels+state",
                   wrist_camera=True, autoreset_mode="SameStep")
obs, info = env.reset(seed=0)
assert all(v.is_cuda for k, v in obs.items() if k != "instruction") and info["success"].is_cuda
qpos = env.unwrapped.physics.qpos.double().cpu().numpy()
cpu = BatchRenderer(env.unwrapped.scene.model, 64, 64)
pixel_diff = {cam: float(np.abs(obs[key].cpu().numpy().astype(int) - cpu.render(qpos, cam)).mean())
              for key, cam in (("image", "front"), ("wrist_image", "wrist"))}
snapshot = env.unwrapped.get_state()
actions = [torch.rand(64, 4, device="cuda") * 2 - 1 for _ in range(5)]
replayed = [env.step(a)[0]["state"].clone() for a in actions]  # the first step captures the CUDA graph
env.unwrapped.set_state(snapshot)
again = [env.step(a)[0]["state"] for a in actions]
assert all(torch.equal(a, b) for a, b in zip(replayed, again)), "graph replay is not deterministic"
out = env.step(env.unwrapped.expert_action())
assert out[1].is_cuda and out[4]["final_obs"]["image"].is_cuda
assert max(pixel_diff.values()) < 3, pixel_diff
rates = {}
for obs_mode in ("state", "pixels"):
    big = gym.make_vec("worldsim/PushCube-v0", num_envs=4096, backend="warp", device="cuda", obs_mode=obs_mode)
    big.reset(seed=0)
    big.step(torch.zeros(4096, 4, device="cuda"))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        big.step(torch.rand(4096, 4, device="cuda") * 2 - 1)
    torch.cuda.synchronize()
    rates[obs_mode] = round(4096 * 20 / (time.perf_counter() - start))
print(json.dumps({"gpu": torch.cuda.get_device_name(), "pixel_mean_abs_diff": pixel_diff,
                  "push_4096_env_steps_per_s": rates}))
EOF

check throughput python benchmarks/backend_throughput.py --steps 50 --cpu-steps 5 --out "$WORK/backend_throughput.json"

check mjx python - <<'EOF'
import json, time
import jax, numpy as np, gymnasium as gym, worldsim
assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()}: install jax[cuda12] for MJX on the GPU"
env = gym.make_vec("worldsim/ReachCube-v0", num_envs=1024, backend="mjx")
env.reset(seed=0)
jax.block_until_ready(env.step(np.zeros((1024, 4), np.float32)))
start = time.perf_counter()
for _ in range(20):
    out = env.step(np.random.uniform(-1, 1, (1024, 4)).astype(np.float32))
jax.block_until_ready(out)
print(json.dumps({"reach_1024_env_steps_per_s": round(1024 * 20 / (time.perf_counter() - start))}))
EOF

# validation and video cadence are settings a config file takes (no flags)
printf 'val_every = 100\nvideo_every = 0\n' > "$WORK/train_wm.toml"

check train_wm bash -c '
  worldsim collect --task PushCube-v0 --episodes 32 --num-envs 16 --noise 0.3 --out "$WORK/push.h5" &&
  worldsim train-wm --data "$WORK/push.h5" --preset tiny --steps 200 --device cuda --config-file "$WORK/train_wm.toml" \
    --out "$WORK/wm" --no-progress &&
  python -c "import json; rows=[json.loads(l) for l in open(\"$WORK/wm/metrics.jsonl\")]; \
print(json.dumps({\"steps\": max(r.get(\"step\", 0) for r in rows), \"last\": rows[-1]}))"'

check train_wm_graphs bash -c '
  worldsim train-wm --data "$WORK/push.h5" --preset tiny --steps 200 --device cuda --config-file "$WORK/train_wm.toml" \
    --compile reduce-overhead --out "$WORK/wm_graphs" --no-progress &&
  python -c "import json; rows=[json.loads(l) for l in open(\"$WORK/wm_graphs/metrics.jsonl\")]; \
print(json.dumps({\"steps\": max(r.get(\"step\", 0) for r in rows), \"last\": rows[-1]}))"'

check train_wm_cuda_graph bash -c '
  python -m pytest -q -p no:cacheprovider tests/test_train_step.py &&
  worldsim train-wm --data "$WORK/push.h5" --preset tiny --steps 200 --device cuda --config-file "$WORK/train_wm.toml" \
    --cuda-graph --out "$WORK/wm_cuda_graph" --no-progress &&
  python -c "import json; rows=[json.loads(l) for l in open(\"$WORK/wm_cuda_graph/metrics.jsonl\")]; \
print(json.dumps({\"steps\": max(r.get(\"step\", 0) for r in rows), \"last\": rows[-1]}))"'

check imagined python - <<'EOF'
import json, os, time
import torch, gymnasium as gym, worldsim
work = os.environ["WORK"]
env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=64, world_model=f"{work}/wm",
                   keyframes=f"{work}/push.h5", device="cuda")
env.reset(seed=0)
start = time.perf_counter()
for _ in range(8):
    obs, reward, terminated, truncated, info = env.step(torch.rand(64, 4, device="cuda") * 2 - 1)
seconds = time.perf_counter() - start
assert obs["image"].shape == (64, 64, 64, 3)
print(json.dumps({"imagined_env_steps_per_s": round(64 * 8 / seconds)}))
EOF

check ppo_state python - <<'EOF'
import json, os
from worldsim.training.ppo import PPOConfig, train_ppo
summary = train_ppo(PPOConfig(task="PushCube-v0", backend="warp", device="cuda", num_envs=4096, num_steps=16,
                              total_env_steps=2 * 4096 * 16, eval_every=0, eval_episodes=16, checkpoint_every=0,
                              out=f"{os.environ['WORK']}/ppo_state", progress=False))
assert summary["iterations"] == 2
print(json.dumps({"iterations": summary["iterations"], "train_seconds": round(summary["train_seconds"], 1),
                  "env_steps_per_s": round(summary["global_step"] / summary["train_seconds"])}))
EOF

check ppo_pixels python - <<'EOF'
import json, os
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.training.ppo import PPOConfig, train_ppo
work = os.environ["WORK"]
config = TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned")
TinyVLA(config).save_pretrained(f"{work}/vla")
summary = train_ppo(PPOConfig(task="PushCube-v0", backend="warp", device="cuda", obs_mode="pixels",
                              policy=f"{work}/vla", num_envs=1024, num_steps=16,
                              total_env_steps=2 * 1024 * 16 * config.chunk_size,
                              value_warmup_iters=0, eval_every=0, eval_episodes=16, checkpoint_every=0,
                              out=f"{work}/ppo_pixels", progress=False))
assert summary["iterations"] == 2
print(json.dumps({"iterations": summary["iterations"], "train_seconds": round(summary["train_seconds"], 1),
                  "env_steps_per_s": round(summary["global_step"] / summary["train_seconds"])}))
EOF

python - "$WORK" <<'EOF'
import json, os, sys
from pathlib import Path
work = Path(sys.argv[1])
sys.path.insert(0, "benchmarks")
from common import report
order = ["warp_env", "throughput", "mjx", "train_wm", "train_wm_graphs", "train_wm_cuda_graph", "imagined", "ppo_state",
         "ppo_pixels"]
checks = {r["name"]: r for r in (json.loads((work / f"{n}.result").read_text()) for n in order)}
ran = [c for c in checks.values() if c["status"] != "skipped"]
report("gpu_check", {"checks": checks, "all_pass": all(c["status"] == "pass" for c in ran), "work": str(work)},
       {"GPU_CHECK_SKIP": os.environ.get("GPU_CHECK_SKIP", "")})
EOF
