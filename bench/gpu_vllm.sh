#!/usr/bin/env bash
# A distilled adapter served by vLLM gives the same greedy completions as the local backend (issue 16).
#
#   bash bench/gpu_vllm.sh            # on a CUDA machine with the project installed (pip install -e .)
#   N_PROMPTS=20 PORT=8011 bash bench/gpu_vllm.sh
#
# 1. vLLM goes into its own virtual environment (bench/.vllm-venv: it pins its own torch);
# 2. the embedded base model is converted to safetensors (agents.backends.local.ensure_converted);
# 3. a tiny `arena run` + `arena distill` on CUDA make a registered adapter;
# 4. vLLM serves the base model with run-time LoRA loading, `arena adapters serve` loads the adapter;
# 5. greedy completions (temperature 0, 64 tokens) of N_PROMPTS held-out solver prompts from vLLM with the
#    adapter and from the local backend with the same adapter in bf16 are compared; every mismatch is
#    printed with the first differing character, and the JSON result goes to bench/gpu_vllm.json.
# Exit 0 when all match, 1 when any differs (bf16 kernels differ between engines: report the count, do not
# hide it), 2 when a step cannot run. Without a GPU the script stops at once and nothing is recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
PORT=${PORT:-8011}
N_PROMPTS=${N_PROMPTS:-20}
WORK=${WORK:-$(mktemp -d /tmp/gpu-vllm.XXXXXX)}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_vllm.sh: no CUDA device visible; run it on a GPU machine')"

if [ ! -x bench/.vllm-venv/bin/python ]; then
  python3 -m venv bench/.vllm-venv
  bench/.vllm-venv/bin/pip install -q vllm || { echo "gpu_vllm.sh: pip install vllm failed" >&2; exit 2; }
fi

BASE=$("$PY" -c "from agents.backends.local import ensure_converted; print(ensure_converted())")
DB="$WORK/arena.db"
"$PY" -m arena.cli run --db "$DB" --session vllm --train-tasks 16 --heldout-tasks 8 --rounds 1 --rollouts 8 --json >"$WORK/run.json"
"$PY" -m arena.cli distill --db "$DB" --session vllm --out "$WORK/adapter" --steps 40 --json >"$WORK/distill.json"
ADAPTER=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['adapter_id'])" "$WORK/distill.json")
RANK=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]+'/adapter_config.json'))['r'])" "$WORK/adapter")

VLLM_ALLOW_RUNTIME_LORA_UPDATING=True bench/.vllm-venv/bin/python -m vllm.entrypoints.openai.api_server \
  --model "$BASE" --served-model-name smollm2 --dtype bfloat16 --enable-lora --max-lora-rank "$RANK" \
  --host 127.0.0.1 --port "$PORT" --max-model-len 2048 >"$WORK/vllm.log" 2>&1 &
VLLM_PID=$!
trap 'kill $VLLM_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
  curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break
  kill -0 $VLLM_PID 2>/dev/null || { echo "gpu_vllm.sh: vLLM exited; see $WORK/vllm.log" >&2; tail -20 "$WORK/vllm.log" >&2; exit 2; }
  sleep 2
done

"$PY" -m arena.cli adapters serve "$ADAPTER" --db "$DB" --endpoint "http://127.0.0.1:$PORT" --name distilled --json

"$PY" - "$PORT" "$N_PROMPTS" "$WORK/adapter" <<'PYEOF'
import json, sys
from pathlib import Path

import torch
from openai import OpenAI

from agents.backends.local import LocalPolicy
from agents.roles.solver import solver_messages
from arena.config import SessionConfig
from arena.tasks.sources import load_tasks

port, n, adapter = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
family = SessionConfig().families[0]
tasks = load_tasks([family], None, 1, n, 12345).heldout[:n]
chats = [solver_messages(t.question) for t in tasks]
client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
served = [client.chat.completions.create(model="distilled", messages=m, temperature=0, max_tokens=64).choices[0].message.content or "" for m in chats]
local = LocalPolicy(device="cuda", dtype=torch.bfloat16, adapter=adapter)
ours = [local.sample(m, n=1, temperature=0.0, max_tokens=64)[0].text for m in chats]
mismatches = []
for i, (a, b) in enumerate(zip(served, ours)):
    if a != b:
        at = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        mismatches.append({"prompt": i, "first_difference_at": at, "vllm": a, "local": b})
        print(f"prompt {i}: differ at char {at}:\n  vllm : {a!r}\n  local: {b!r}", file=sys.stderr)
result = {"device": torch.cuda.get_device_name(0), "prompts": len(chats), "equal": len(chats) - len(mismatches), "mismatches": mismatches}
Path("bench/gpu_vllm.json").write_text(json.dumps(result, indent=1))
print(f"{result['device']}: {result['equal']}/{result['prompts']} greedy completions equal (vLLM bf16 vs local bf16, same adapter)")
sys.exit(1 if mismatches else 0)
PYEOF
