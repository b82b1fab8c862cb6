#!/bin/sh
# tests/test_train.sh — tools/aah_train.py through its command line, on a tiny shape: the AAH mask, a 40-file corpus
# and its tokenizer, 60-step runs (what they write, that the loss falls, that the same seed gives the same tensors),
# score and eval, refusals, and that aahd's SentencePiece loader encodes text exactly as the trainer does.
set -eu
PY=${PYTHON:-/usr/bin/python3}
B=${AAH_BUILD:-build}
T=tools/aah_train.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# aahd's tokenizer (models/tokenizer.c over libsentencepiece) against the trainer's spm_encode path, BOS included:
# the tiny tokenizer on its held-out texts, and the committed runs' tokenizer on theirs
[ -x "$B/aah-tokenize" ] || fail "$B/aah-tokenize is not built"
same_ids() {   # same_ids RUN_OR_TOKENIZER_DIR TEXT
	"$B/aah-tokenize" --tokenizer "$1" --add-special - <"$2" >"$tmp/aahd.ids"
	$PY $T encode "$1" "$2" >"$tmp/ref.ids"
	cmp -s "$tmp/aahd.ids" "$tmp/ref.ids" || fail "aahd encodes $2 unlike the trainer ($1)"
	echo "ok    aahd encodes $2 as the trainer does ($(tr ',' '\n' <"$tmp/ref.ids" | wc -l) ids)"
}

# The sanitizer pass (AAH_BUILD=build/san) repeats only what depends on the build: aahd's tokenizer.
if [ "${B%/san}" != "$B" ]; then
	same_ids runs/aah runs/text/test.txt
	same_ids runs/aah runs/text/valid.txt
	echo "test_train: all passed (tokenizer only, sanitizer build)"
	exit 0
fi

$PY tests/train_checks.py mask

$PY $T data --out "$tmp/data" --max_files=40 --vocab_size=512 --heldout_bytes=20000 >"$tmp/data.log"
TINY="--vocab_size=512 --hidden_size=32 --intermediate_size=64 --num_hidden_layers=2 --num_attention_heads=4
--num_key_value_heads=2 --head_dim=8 --block_size=64 --candidate_windows=8,16,32,64 --aah_windows=8,32;16,64
--max_iters=60 --save_steps=20,60 --eval_interval=20 --eval_chunks=4 --warmup_iters=10 --learning_rate=0.01"
# shellcheck disable=SC2086
$PY $T train --data "$tmp/data" --out "$tmp/aah" --aah=shallow_freeze $TINY >"$tmp/aah.log"
$PY tests/train_checks.py run "$tmp/aah" 20,60

# the same seed and settings again: the same tensors, model and optimizer
# shellcheck disable=SC2086
$PY $T train --data "$tmp/data" --out "$tmp/again" --aah=shallow_freeze $TINY >"$tmp/again.log"
# shellcheck disable=SC2086
$PY $T train --data "$tmp/data" --out "$tmp/base" --aah=none $TINY --save_steps=20 >"$tmp/base.log"
$PY - "$tmp" <<'EOF'
import sys, torch
d = sys.argv[1]
a, b = (torch.load(f"{d}/{r}/checkpoint-60.pt") for r in ("aah", "again"))
same = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]) and all(
    torch.equal(x[k], y[k]) for x, y in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values())
    for k in x)
print("ok    the same seed gives the same tensors" if same else "FAIL  a second run differs")
base = torch.load(f"{d}/base/checkpoint-20.pt")
ok = base["aah"] is None and torch.equal(base["model"]["model.embed_tokens.weight"],
                                         torch.load(f"{d}/aah/checkpoint-20.pt")["model"]["model.embed_tokens.weight"]) is False
print("ok    a full-attention run has aah None (and trains apart from the AAH run)" if ok else "FAIL  base run's aah")
sys.exit(0 if same and ok else 1)
EOF

# score: the prompt's log-probabilities in float64 and a greedy continuation; eval on the same text must agree
head -c 60 "$tmp/data/valid.txt" >"$tmp/prompt.txt"
$PY $T score "$tmp/aah/checkpoint-60.pt" --regime shallow_freeze --text "$tmp/prompt.txt" --max-tokens 4 >"$tmp/s.json"
ids=$($PY $T encode "$tmp/aah" "$tmp/prompt.txt")
$PY $T score "$tmp/aah/checkpoint-60.pt" --regime shallow_freeze --ids "$ids" --max-tokens 4 >"$tmp/s2.json"
$PY $T eval "$tmp/aah/checkpoint-60.pt" --text "$tmp/prompt.txt" >"$tmp/e.txt"
$PY - "$tmp" <<'EOF'
import json, math, sys
d = sys.argv[1]
s, s2 = (json.load(open(f"{d}/{n}")) for n in ("s.json", "s2.json"))
ev = {r["regime"]: r for r in json.loads(open(f"{d}/e.txt").read().splitlines()[-1])}
lp = s["token_logprobs"]
checks = [
    (s["dtype"] == "float64" and s["regime"] == "shallow_freeze" and s["step"] == 60, "score: dtype, regime, step"),
    (s["tokens"][0] == 1 and len(lp) == len(s["tokens"]) and lp[0] is None and all(x <= 0 for x in lp[1:]),
     "score: BOS first, one log-probability per token, the first null"),
    (len(s["greedy_tokens"]) == 4 and len(s["greedy_logprobs"]) == 4 and isinstance(s["greedy_text"], str),
     "score: 4 greedy tokens"),
    (s2["tokens"] == s["tokens"] and s2["token_logprobs"] == lp and s2["greedy_tokens"] == s["greedy_tokens"],
     "score --ids gives what --text gives"),
    (set(ev) == {"full_attention", "shallow_freeze"} and ev["full_attention"]["acr"] == 1.0
     and abs(ev["shallow_freeze"]["acr"] - (8 + 32 + 16 + 64) / 4 / 64) < 1e-4, "eval: both regimes, their ACR"),
    (abs(ev["shallow_freeze"]["loss"] + sum(lp[1:]) / (len(lp) - 1)) < 1e-4,
     "eval's loss is the mean of score's log-probabilities"),
]
for ok, what in checks:
    print(("ok    " if ok else "FAIL  ") + what)
sys.exit(0 if all(ok for ok, _ in checks) else 1)
EOF

# several checkpoints, every regime, prompts from a file: one JSON line each, the same numbers as one at a time
printf '%s\n\n1,5,6\n' "$ids" >"$tmp/prompts.ids"
$PY $T score "$tmp/aah/checkpoint-60.pt" "$tmp/base/checkpoint-20.pt" --regime all --ids-file "$tmp/prompts.ids" \
	--max-tokens 4 >"$tmp/many.json"
$PY - "$tmp" <<'EOF2'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/many.json")]
one = json.load(open(f"{d}/s2.json"))
got = [(r["step"], r["regime"], len(r["tokens"])) for r in rows]
want = [(60, "full_attention", len(one["tokens"])), (60, "full_attention", 3), (60, "shallow_freeze", len(one["tokens"])),
        (60, "shallow_freeze", 3), (20, "full_attention", len(one["tokens"])), (20, "full_attention", 3)]
ok = got == want and {k: v for k, v in rows[2].items() if k != "checkpoint"} == \
    {k: v for k, v in one.items() if k != "checkpoint"} and rows[2]["acr"] < 1 and rows[0]["windows"] is None
print("ok    score: checkpoint by checkpoint, regime by regime, prompt by prompt" if ok else f"FAIL  score lines {got}")
sys.exit(0 if ok else 1)
EOF2

# refusals: a clear message and a non-zero status
refuse() {   # refuse WORDS-EXPECTED COMMAND...
	want=$1
	shift
	if "$@" >"$tmp/out" 2>&1; then fail "accepted: $*"; fi
	grep -qF -- "$want" "$tmp/out" || fail "'$*' said: $(cat "$tmp/out")"
	echo "ok    refused: $want"
}
refuse "no regime 'nope'" $PY $T score "$tmp/aah/checkpoint-60.pt" --regime nope --ids 1,2
refuse "no such file" $PY $T score "$tmp/missing.pt" --ids 1,2
refuse "must be a non-empty list" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids 1,99999
refuse "exceed the context" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids 1,2 --max-tokens 100
refuse "no such file" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids-file "$tmp/missing.ids"
printf '1,2\nx,y\n' >"$tmp/bad.ids"
refuse "bad.ids line 2: 'x,y' is not" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids-file "$tmp/bad.ids"
refuse "usage: aah_train.py score" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids 1,2 --ids-file "$tmp/bad.ids"
refuse "usage: aah_train.py score" $PY $T score "$tmp/aah/checkpoint-60.pt" --ids 1,2 --bogus
refuse "--chunk '0' is not a number" $PY $T eval "$tmp/aah/checkpoint-60.pt" --chunk 0
refuse "--chunk '65' is not a number" $PY $T eval "$tmp/aah/checkpoint-60.pt" --chunk 65
refuse "unknown setting 'bogus'" $PY $T train --data "$tmp/data" --out "$tmp/x" --bogus=1
refuse "'ten' is not a number" $PY $T train --data "$tmp/data" --out "$tmp/x" --max_iters=ten
refuse "must be int, not '1.5'" $PY $T train --data "$tmp/data" --out "$tmp/x" --max_iters=1.5
refuse "aah must be none or shallow_freeze" $PY $T train --data "$tmp/data" --out "$tmp/x" --vocab_size=512 --aah=adaptive

same_ids "$tmp/aah" "$tmp/data/valid.txt"
same_ids "$tmp/aah" "$tmp/data/test.txt"
same_ids runs/aah runs/text/test.txt
same_ids runs/aah runs/text/valid.txt
echo "test_train: all passed"
