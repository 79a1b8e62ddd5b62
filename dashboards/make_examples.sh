#!/bin/bash
# How the example screenshots in this folder were made: five tracked runs of the smoke suite,
# one commit each, into one sqlite store; the fifth commit is a deliberately slower head:
# mlp measured at batch 16 instead of 1 (16x the work, its golden updated with a reason) and
# onnxruntime's graph optimisations turned off (a compiler pin changes on every onnxruntime
# series). Then the dashboard, a compare report, and screenshots in headless chromium.
#   usage: dashboards/make_examples.sh WORKDIR   (needs: apt-get install -y chromium)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W=${1:?work directory}
mkdir -p "$W/repo" && cd "$W"
cp "$HERE/../suites/smoke.yaml" repo/ && cp -r "$HERE/../suites/goldens" repo/
G="git -c user.name=demo -c user.email=demo@example.com"
(cd repo && git init -q && $G add . && $G commit -qm "smoke suite")
export MLFLOW_DISABLE_TELEMETRY=true
URI="sqlite:///$W/mlflow.db"
for i in 1 2 3 4 5; do
  if [ "$i" = 5 ]; then
    sed -i 's/^  threads: 1$/  threads: 1\n  options: {onnxruntime: {graph_optimization_level: disabled}}/' repo/smoke.yaml
    sed -i 's/x: {shape: \[1, 256\]/x: {shape: [16, 256]/' repo/smoke.yaml
    guard golden update repo/smoke.yaml --model mlp --reason "mlp measured at batch 16"
    (cd repo && $G add -A && $G commit -qm "mlp at batch 16; onnxruntime graph optimisations off")
  elif [ "$i" != 1 ]; then
    echo "# run $i" >> repo/smoke.yaml
    (cd repo && $G commit -qam "smoke: note $i")
  fi
  guard run repo/smoke.yaml --tracking-uri "$URI" --json "r$i.json" --html "r$i.html" > "run$i.log" 2>&1 \
    || echo "run $i: exit $?"
done
guard dashboard repo/smoke.yaml --tracking-uri "$URI" --out smoke.html
guard compare r4.json r5.json --html compare.html --quiet || true   # exit 1: mlp regressed
python "$HERE/screenshot.py" smoke.html "$HERE/smoke-dashboard.png" --card "mlp [onnxruntime]" --wait ".plotly-graph-div .scatterlayer .trace"
python "$HERE/screenshot.py" r5.html "$HERE/run-report.png" --height 900
python "$HERE/screenshot.py" compare.html "$HERE/compare-report.png" --height 700
# The same series in MLflow's own chart view (one bar per invocation, per metric).
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
setsid mlflow server --host 127.0.0.1 --port 5057 --workers 1 --backend-store-uri "$URI" \
  --artifacts-destination "$W/mlartifacts" > "$W/server.log" 2>&1 &
SERVER=$!
trap 'kill -- -$SERVER 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf http://127.0.0.1:5057/health > /dev/null && break; sleep 1; done
python "$HERE/screenshot.py" "http://127.0.0.1:5057/#/experiments/1/runs?compareRunsMode=CHART" \
  "$HERE/mlflow-chart-view.png" --width 1500 --height 1000 --settle-ms 3000 \
  --fill "Search metric charts=mlp.onnxruntime.host/latency"
