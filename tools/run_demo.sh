#!/bin/sh
# tools/run_demo.sh — `make run`: serves the demo model (built into the cache folder by the Makefile) with aahd on
# 127.0.0.1:8080 in the foreground, after printing a curl line to paste into another terminal. Usage:
# run_demo.sh BUILD CACHE (PORT=… to move it, MODEL=DIR for another model). Ctrl-C stops it, after the running requests finish.
set -eu
BUILD=${1:-build}
CACHE=${2:-.cache}
MODEL=${MODEL:-$CACHE/demo-model}   # make eval-demo evaluates the same model
PORT=${PORT:-8080}
cat <<MSG
demo model: $MODEL (random weights, so the text is noise; the point is the path from a request to tokens and back)
aahd serves it on http://127.0.0.1:$PORT — paste this into another terminal:

  curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' -d '{"prompt": "The quick brown fox", "max_tokens": 32, "temperature": 0.8, "seed": 7}'

(also: curl -s http://127.0.0.1:$PORT/v1/models ; curl -s http://127.0.0.1:$PORT/metrics). Ctrl-C stops it.

MSG
exec "$BUILD/aahd" --model "$MODEL" --host 127.0.0.1 --port "$PORT"
