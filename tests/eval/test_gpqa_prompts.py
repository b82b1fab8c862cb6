"""tests/eval/test_gpqa_prompts.py — aah-eval's GPQA-Diamond n-shot prompts against the harness's, byte for byte:
for k = 1, 3 and 5 and the first 20 items, the prompt (description, k examples, item), the continuations, the choice
strings (the shuffled answers) and the gold letter that `aah-eval --write-prompts` renders equal those that
harness_reference.py builds with Python's own random from the same file: gpqa_diamond.full.jsonl, the whole Diamond
split (../shared/benchmarks, or AAH_BENCHMARKS=DIR), shuffled by one random.Random(42) stream in CSV order, examples
drawn k + 1 at a time by random.Random(1234).sample over all 198 rows with the item itself dropped. Without that
file the test says so and passes (skipped). Also: the comparison fails for another sampler seed or another shuffle
seed; without the full file the pool is marked partial (5 of 198 rows); an items file that is not the split's first
rows is refused.
The dataset's authors ask that GPQA's examples stay off the public web: nothing here prints or writes a row's text
(a difference is reported by item, offset, length and SHA-256), and every temporary file is removed.
Run by tests/test_eval_gpqa.sh; prints one line per check and exits non-zero on the first failure."""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True   # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_reference as ref  # noqa: E402

BUILD = os.environ.get("AAH_BUILD", "build")
BENCH = os.environ.get("AAH_BENCHMARKS", "../shared/benchmarks")
TASK = "gpqa_diamond"
N = 20
SPLIT_ROWS = 198
checks = 0


def check(cond, what, detail=""):
    global checks
    if not cond:
        print(f"test_gpqa_prompts: FAILURE: {what}\n{detail}", flush=True)
        sys.exit(1)
    checks += 1
    print(f"ok {checks} - {what}", flush=True)


def digest(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()[:16]


def where(a, b):
    """Where two strings differ, without their text: the first differing UTF-8 byte, lengths and digests."""
    x, y = a.encode("utf-8"), b.encode("utf-8")
    i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
    return f"first difference at byte {i}; {len(x)} / {len(y)} bytes; sha256 {digest(a)} / {digest(b)}"


def aah_prompts(data, k, expect=0):
    r = subprocess.run([f"{BUILD}/aah-eval", "--data", data, "--tasks", TASK, "--num-fewshot", f"{TASK}={k}",
                        "--limit", str(N), "--write-prompts", "-"], capture_output=True, text=True, timeout=300)
    check(r.returncode == expect, f"aah-eval --write-prompts, {TASK} {k}-shot, exits {expect}",
          f"exit {r.returncode}\nstderr:\n{r.stderr[-2000:]}")
    return [json.loads(line) for line in r.stdout.split("\n") if line], r.stderr


CHOICE_FIELDS = ("choice1", "choice2", "choice3", "choice4", "answer")


def differences(got, want):
    """Per item: what of aah-eval's differs from the reference's (described without the text)."""
    bad = []
    if len(got) != len(want):
        return [f"{len(got)} items != {len(want)}"]
    for g, w in zip(got, want):
        d = g["doc_id"]
        if g["file_index"] != w["index"] or d != w["doc_id"]:
            bad.append(f"item {d}: file index {g['file_index']} != {w['index']}")
        if g["context"] != w["context"]:
            bad.append(f"item {d}: prompt differs: {where(g['context'], w['context'])}")
        if g["continuations"] != w["continuations"] or g["choices"] != w["choices"] or g["gold"] != w["gold"]:
            bad.append(f"item {d}: continuations {g['continuations']} / choices {g['choices']} / gold {g['gold']} != "
                       f"{w['continuations']} / {w['choices']} / {w['gold']}")
        for f in CHOICE_FIELDS:
            if g["doc"].get(f) != w["doc"].get(f):
                bad.append(f"item {d}: {f} differs: {where(str(g['doc'].get(f)), str(w['doc'].get(f)))}")
    return bad


def main():
    full = f"{BENCH}/{TASK}.full.jsonl"
    if not os.path.exists(full):
        print(f"test_gpqa_prompts: SKIPPED: {full} is absent (AAH_BENCHMARKS=DIR names the benchmarks directory): "
              f"GPQA-Diamond's n-shot prompts are not compared with the harness's", flush=True)
        return
    if not os.path.exists(f"{BUILD}/aah-eval"):
        check(False, f"{BUILD}/aah-eval is built")
    rows = ref.load(full)
    check(len(rows) == SPLIT_ROWS and ref.load(f"{BENCH}/{TASK}.jsonl") == rows[:len(ref.load(f"{BENCH}/{TASK}.jsonl"))],
          f"{full}: the {SPLIT_ROWS} rows of the split, split on \\n only; {TASK}.jsonl is its first rows",
          f"{len(rows)} rows")

    for k in (1, 3, 5):
        got, _ = aah_prompts(BENCH, k)
        want = ref.prepare(BENCH, TASK, k=k, limit=N)
        check(len(want) == N and all(w["context"].count("\nAnswer: (") == k for w in want),
              f"{k}-shot: the reference's {N} prompts each hold {k} examples")
        pool = got[0]["fewshot_pool"] if got else {}
        check(pool.get("file") == f"{TASK}.full.jsonl" and pool.get("rows") == SPLIT_ROWS
              and pool.get("split_rows") == SPLIT_ROWS and pool.get("whole_split") is True
              and pool.get("partial") is False, f"{k}-shot: aah-eval's pool is the whole split, not marked partial",
              json.dumps(pool))
        bad = differences(got, want)
        check(not bad, f"{k}-shot: every prompt, continuation, choice string and gold letter of the first {N} items is "
              "the harness's, byte for byte", "\n".join(bad[:10]))
        # the items that drew themselves among the k + 1 (the harness drops them; the comparison above covers them)
        rnd = random.Random(1234)
        own = [i for i in range(N) if i in rnd.sample(range(SPLIT_ROWS), k + 1)]
        print(f"test_gpqa_prompts: {k}-shot: items that drew themselves (dropped): {own or 'none'}", flush=True)

    # the comparison can fail: another sampler seed, another shuffle seed
    got, _ = aah_prompts(BENCH, 5)
    other = differences(got, ref.prepare(BENCH, TASK, k=5, limit=N, fewshot_seed=1235))
    check(len(other) >= N // 2, f"the comparison fails for random.Random(1235) in place of 1234 ({len(other)} "
          "differences)")
    other = differences(got, ref.prepare(BENCH, TASK, k=5, limit=N, shuffle_seed=43))
    check(len(other) >= N // 2, f"the comparison fails for random.Random(43) in place of 42 ({len(other)} differences)")

    tmp = tempfile.mkdtemp(prefix="aah-gpqa-prompts-")
    try:
        # without the whole split: the 5-row few-shot file (4-shot: the harness's k + 1 draw needs k + 1 rows), marked
        # partial, on stderr and in every line
        part = f"{tmp}/partial"
        os.makedirs(part)
        for f in (f"{TASK}.jsonl", f"{TASK}.fewshot.jsonl"):
            os.symlink(os.path.abspath(f"{BENCH}/{f}"), f"{part}/{f}")
        got, err = aah_prompts(part, 4)
        pool = got[0]["fewshot_pool"] if got else {}
        check(pool.get("partial") is True and pool.get("rows") == 5 and pool.get("file") == f"{TASK}.fewshot.jsonl"
              and pool.get("note") == "5 of 198 rows, not the harness's draw"
              and "partial few-shot pool: gpqa_diamond.fewshot.jsonl holds 5 of 198 rows, not the harness's draw" in err
              and f"{TASK}.full.jsonl, that whole split, is not in the data directory" in err,
              "without the whole split: the pool is marked partial (5 of 198 rows, not the harness's draw)",
              json.dumps(pool) + "\n" + err[-1500:])
        bad = differences(got, ref.prepare(part, TASK, k=4, limit=N))
        check(not bad, "…and its prompts are still the reference's over that file", "\n".join(bad[:10]))
        # items that are not the split's first rows are refused, with the file and line
        wrong = f"{tmp}/wrong"
        os.makedirs(wrong)
        os.symlink(os.path.abspath(f"{BENCH}/{TASK}.fewshot.jsonl"), f"{wrong}/{TASK}.jsonl")
        os.symlink(os.path.abspath(full), f"{wrong}/{TASK}.full.jsonl")
        _, err = aah_prompts(wrong, 1, expect=1)
        check(f"{TASK}.jsonl:1 is not row 1 of" in err and "the items must be the first rows of the whole split" in err,
              "items that are not the whole split's first rows are refused", err[-1500:])
    finally:
        shutil.rmtree(tmp)
    print(f"test_gpqa_prompts: {checks} checks passed")


if __name__ == "__main__":
    main()
