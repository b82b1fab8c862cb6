#!/bin/sh
# tools/run_demo.sh — `make run`: runs a prompt through the demo model (built into the cache folder by the
# Makefile) so a newcomer sees the engine answer. Usage: run_demo.sh BUILD CACHE
set -eu
BUILD=${1:-build}
CACHE=${2:-.cache}
MODEL="$CACHE/demo-model"
PROMPT=${PROMPT:-"The quick brown fox"}
echo "demo model: $MODEL (random weights, so the text is noise; the point is the path from text to tokens and back)"
echo "+ $BUILD/aahd --model $MODEL --prompt \"$PROMPT\" -n 32"
"$BUILD/aahd" --model "$MODEL" --prompt "$PROMPT" -n 32
