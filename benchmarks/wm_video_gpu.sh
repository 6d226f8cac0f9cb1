#!/usr/bin/env bash
# The video transformer world model (video-base) on one GPU, in about 9 minutes:
#   train          train-wm speed: steps/s, GPU busy share and peak memory at batch 256, fp32 and bf16
#   imagine        imagined frames/s at batch 1/16/64
#   wan13b_lora    a Wan2.1-T2V-1.3B-sized transformer (random weights, its published config) brought in
#   wan13b_full    with --init-from: peak memory and step time of LoRA (rank 16) and full fine-tuning, bf16
#   cuda_graph     the whole step recorded as one CUDA graph (bf16)
# One record, benchmarks/results/wm_video_gpu.json: metrics.<part> is each part's benchmark record
# (wm_train_throughput.py's or wm_throughput.py's metrics, with its args). Each part has its own
# time limit, so one that fails or runs long leaves the others' results.
#
#   bash benchmarks/wm_video_gpu.sh [OUT_DIR]     # OUT_DIR also receives each result as it is written
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-}
WORK=$(mktemp -d -t worldsim-video-gpu-XXXX)
keep() { [[ -n "$OUT_DIR" ]] && cp benchmarks/results/"$1".json "$OUT_DIR"/ 2>/dev/null; true; }
log() { echo "== $(date +%T) $*" >&2; }

log collect
worldsim collect --task PushCube-v0 --episodes 64 --num-envs 16 --noise 0.3 --out "$WORK/push.h5" >/dev/null

log "train-wm video-base fp32 and bf16"
timeout 150 python benchmarks/wm_train_throughput.py --data "$WORK/push.h5" --config video-base --device cuda \
  --batch-sizes 256 --precision fp32 bf16 --seconds 45 --skip 20 --name wm_video_gpu_train
keep wm_video_gpu_train

log "imagined frames/s"
timeout 90 python benchmarks/wm_throughput.py --config video-base --device cuda --threads 0 \
  --name wm_video_gpu_imagine
keep wm_video_gpu_imagine

log "Wan2.1-1.3B-sized transformer"
timeout 60 python - "$WORK/wan13b" <<'EOF'
import sys, torch
from diffusers import WanTransformer3DModel
# Wan2.1-T2V-1.3B's transformer config (its diffusers folder's config.json)
with torch.device("cuda"):
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                                  out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")
model.save_pretrained(sys.argv[1] + "/transformer")
EOF
for rank in 16 0; do
  name=wm_video_gpu_wan13b_$([[ $rank == 0 ]] && echo full || echo lora)
  timeout 140 python benchmarks/wm_train_throughput.py --data "$WORK/push.h5" --config video-base --device cuda \
    --batch-sizes 16 --precision bf16 --seconds 40 --skip 10 --init-from "$WORK/wan13b" --lora-rank $rank --name "$name"
  keep "$name"
done

log "CUDA graph"
timeout 120 python benchmarks/wm_train_throughput.py --data "$WORK/push.h5" --config video-base --device cuda \
  --batch-sizes 256 --precision bf16 --seconds 40 --skip 20 --cuda-graph --name wm_video_gpu_cuda_graph
keep wm_video_gpu_cuda_graph
python - <<'EOF'
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from common import report
parts = {}
for name in ("train", "imagine", "wan13b_lora", "wan13b_full", "cuda_graph"):
    path = Path(f"benchmarks/results/wm_video_gpu_{name}.json")
    if path.exists():
        record = json.loads(path.read_text())
        parts[name] = {"args": record["args"], **record["metrics"]}
        path.unlink()
report("wm_video_gpu", parts, {"parts": list(parts)})
EOF
keep wm_video_gpu
log done
