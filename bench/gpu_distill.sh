#!/usr/bin/env bash
# LoRA training throughput on a CUDA machine, bf16, same model, LoRA config, data and batch: our sft
# trainer vs TRL's SFTTrainer, our grpo / guide-grpo vs TRL's GRPOTrainer fed the same stored rollouts;
# prints tokens/s of each pair, the ratio, and our trainer's MFU
# (4·N·tokens/s over the GPU's dense bf16 peak; set ARENA_PEAK_TFLOPS for a GPU not in the table).
#
#   bash bench/gpu_distill.sh                 # defaults: 30 steps of 16 sequences
#   STEPS=50 BATCH=32 bash bench/gpu_distill.sh
#
# Needs the project installed with the bench extra (pip install -e '.[bench]') and a CUDA build
# of torch. Writes the JSON result to bench/gpu_distill.json as well. Put the figures in
# bench/RESULTS.md with the GPU's name.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" - <<'PYEOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_distill.sh: no CUDA device visible (torch %s); run it on a GPU machine" % torch.__version__)
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, file=sys.stderr)
PYEOF
"$PY" -c "import trl" 2>/dev/null || { echo "gpu_distill.sh: TRL missing; pip install -e '.[bench]'" >&2; exit 2; }
"$PY" -m arena.cli bench distill --device cuda --steps "${STEPS:-30}" --batch-size "${BATCH:-16}" --json | tee bench/gpu_distill.json
"$PY" - <<'PYEOF'
import json
r = json.load(open("bench/gpu_distill.json"))
for name, row in r["objectives"].items():
    theirs = row["trl"]["tokens_per_s"] if row["trl"] else float("nan")
    print(f"{r['device']} {r['dtype']} {name}: ours {row['ours']['tokens_per_s']:.0f} tok/s, "
          f"{row['baseline']} {theirs:.0f} tok/s, ratio {row['ratio']}, MFU {row['mfu']}")
PYEOF
