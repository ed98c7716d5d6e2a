#!/usr/bin/env bash
# Checks `parkbrake agent` on a real NVIDIA GPU, in under a minute: runs it for at most ~25 s with a
# 10 s idle window and a recorder as the shutdown command (nothing is shut down), scrapes /metrics
# once, and prints the metrics, the agent's events, the samples it read and whether shutdown fired.
#
#   scripts/gpu_check.sh              run the check (on the GPU machine)
#   scripts/gpu_check.sh --prepare    on a machine with network: put the Python packages the check
#                                     needs in build/gpu-deps, to carry to an offline GPU machine
#
# Needs only python3 (3.11+) and the NVIDIA driver; the repository's venv is not required. Packages
# come from the current Python, else build/gpu-deps, else a pip install into a temporary folder.
# When $OUT is set (the device runner's output folder), the log and the samples are copied there.
# Exit status: 0 when /metrics showed every GPU and the idle shutdown fired, 1 otherwise.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$(command -v python3.12 || command -v python3)}"
PACKAGES=(nvidia-ml-py prometheus-client click rich croniter)
DEPS="$REPO/build/gpu-deps"

if [[ "${1:-}" == "--prepare" ]]; then
    "$PY" -m pip install --quiet --upgrade --target "$DEPS" "${PACKAGES[@]}"
    echo "packages in $DEPS; carry build/gpu-deps to the GPU machine"
    exit 0
fi

has_packages() { "$PY" -c "import pynvml, prometheus_client, click" 2>/dev/null; }
if ! has_packages; then
    if [[ -d "$DEPS" ]]; then
        export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
    else
        DEPS="$(mktemp -d)"
        "$PY" -m pip install --quiet --retries 0 --timeout 10 --target "$DEPS" "${PACKAGES[@]}" \
            || { echo "cannot install ${PACKAGES[*]}: run scripts/gpu_check.sh --prepare where there is network"; exit 1; }
        export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO"

WORK="$(mktemp -d)"
cat >"$WORK/record_shutdown.py" <<'EOF'
import json, os, sys, time
with open(sys.argv[1], "a") as file:
    file.write(json.dumps({"argv": sys.argv[2:], "at": time.time(),
                           "env": {k: v for k, v in os.environ.items() if k.startswith("PARKBRAKE_")}}) + "\n")
EOF
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

echo "== $("$PY" --version) on $(hostname)"
if command -v nvidia-smi >/dev/null; then
    echo "== nvidia-smi, for comparison"
    nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,temperature.gpu,power.draw --format=csv || true
fi

echo "== parkbrake agent --idle-after 10s --interval 2s --port $PORT (at most 25 s)"
timeout 25 "$PY" -c "from cli.main import main; main()" agent \
    --idle-after 10s --interval 2s --port "$PORT" --address 127.0.0.1 \
    --shutdown-command "$PY $WORK/record_shutdown.py $WORK/shutdown.jsonl -h now" --api-stop-after off \
    --record "$WORK/samples.jsonl" --output json >"$WORK/agent.log" 2>&1 &
AGENT=$!

sleep 5
echo "== /metrics after 5 s"
"$PY" - "$PORT" >"$WORK/metrics.txt" <<'EOF' || true
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
except OSError as error:
    sys.exit(print(f"cannot scrape /metrics: {error}"))
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        if sample.name.startswith("parkbrake_") and not sample.name.endswith("_created"):
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            print(f"{sample.name}{{{labels}}} {sample.value}")
EOF
cat "$WORK/metrics.txt"

AGENT_STATUS=0
wait "$AGENT" || AGENT_STATUS=$?
echo "== agent events (exit status $AGENT_STATUS; 124 means it was still running after 25 s)"
cat "$WORK/agent.log"
touch "$WORK/samples.jsonl"
echo "== samples read through NVML (first 3 of $(wc -l <"$WORK/samples.jsonl"))"
head -n 3 "$WORK/samples.jsonl"

if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp "$WORK/agent.log" "$WORK/metrics.txt" "$OUT/" 2>/dev/null || true
    cp "$WORK/samples.jsonl" "$OUT/h200-samples.jsonl" 2>/dev/null || true
fi

GPUS_IN_METRICS="$(grep -c '^parkbrake_gpu_utilization_ratio' "$WORK/metrics.txt" || true)"
if [[ -s "$WORK/shutdown.jsonl" ]]; then
    echo "== shutdown fired: $(cat "$WORK/shutdown.jsonl")"
    FIRED=yes
else
    echo "== shutdown did not fire (a GPU busy, its reading unknown: stale, implausible or NVML errors, or the agent failed: see the events above)"
    FIRED=no
fi
echo "== summary: gpus_in_metrics=$GPUS_IN_METRICS shutdown_fired=$FIRED agent_exit=$AGENT_STATUS"
[[ "$FIRED" == yes && "$GPUS_IN_METRICS" -gt 0 && "$AGENT_STATUS" -eq 0 ]]
