#!/bin/sh
# tools/run_demo.sh — `make run`: serves the demo model with aahd on 127.0.0.1:8080 in the foreground, after printing
# curl lines to paste into another terminal. The demo model is the trained AAH run, runs/aah, that the Makefile
# imports with aah-convert into a run directory (aahd serves its highest step). Usage: run_demo.sh BUILD MODEL
# (PORT=… to move it, MODEL=DIR for another model). Ctrl-C stops it, after the running requests finish.
set -eu
BUILD=${1:-build}
MODEL=${MODEL:-${2:-.cache/demo-run}}   # make eval-demo evaluates the same model
PORT=${PORT:-8080}
cat <<MSG
demo model: $MODEL, imported from runs/aah (docs/training.md): a 566 k-parameter Qwen3-shaped model trained
for 10000 steps on the Python 3.11 documentation's reStructuredText sources, with static AAH windows (regime
shallow_freeze, its default; full_attention is offered too). Small and briefly trained: it writes reST-flavoured
Python-documentation prose, not sense.
aahd serves it on http://127.0.0.1:$PORT — paste into another terminal:

  curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' -d '{"prompt": "The Python interpreter", "max_tokens": 64, "temperature": 0.8, "seed": 7}'
  curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' -d '{"prompt": "The Python interpreter", "max_tokens": 64, "temperature": 0.8, "seed": 7, "aah_regime": "full_attention"}'

(also: curl -s http://127.0.0.1:$PORT/v1/models ; curl -s http://127.0.0.1:$PORT/metrics). Ctrl-C stops it.

MSG
exec "$BUILD/aahd" --model "$MODEL" --host 127.0.0.1 --port "$PORT"
