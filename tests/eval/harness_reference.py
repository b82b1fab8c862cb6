"""tests/eval/harness_reference.py — an independent reference of how lm-evaluation-harness (local-completions against
a server with /tokenize) prompts and scores the ten tasks of aah-eval, written from the harness's YAML and utils.py
as ../shared/benchmarks/README.md quotes them, in Python itself: Python's str, re and random are the harness's, so
the prompts, few-shot draws, filters and matches here are the harness's by construction. The test (test_eval.py)
asks the same server the same questions and compares every item and every table figure with aah-eval's outputs."""
import contextlib
import faulthandler
import io
import json
import math
import multiprocessing
import os
import random
import re
import signal
import string
import subprocess
import sys
import tempfile
import urllib.request

try:
    import numpy  # noqa: F401  (lm_eval imports it: code_eval's forked child has it loaded before its guard)
except ImportError:
    pass

# ---- the server ----


class Api:
    def __init__(self, base):
        self.base = base.rstrip("/")

    def call(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read().decode())

    def tok(self, text):
        if not text:
            return []
        return self.call("/tokenize", {"content": text, "add_special": False})["tokens"]


# ---- the tasks (templates verbatim from the harness) ----


def hs_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def hellaswag_process(doc, rng, k):
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    doc["query"] = hs_preprocess(doc["activity_label"] + ": " + ctx)
    doc["choices"] = [hs_preprocess(e) for e in doc["endings"]]
    doc["gold"] = int(doc["label"])


def gpqa_pre_zero(text):
    if text is None:
        return " "
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = text.replace("  ", " ")
    return text


def gpqa_process(doc, rng, k):
    pre = gpqa_pre_zero   # n_shot/utils.py's preprocess is the zeroshot one ([title] and double spaces too)
    choices = [pre(doc["Incorrect Answer 1"]), pre(doc["Incorrect Answer 2"]), pre(doc["Incorrect Answer 3"]),
               pre(doc["Correct Answer"])]
    rng.shuffle(choices)
    idx = choices.index(pre(doc["Correct Answer"]))
    doc.update({"choice1": choices[0], "choice2": choices[1], "choice3": choices[2], "choice4": choices[3],
                "answer": f"({chr(65 + idx)})"})


CEVAL_ZH = {"computer_network": "计算机网络", "high_school_mathematics": "高中数学"}


def mmlu_pro_text(ex, k=0):
    letters = "ABCDEFGHIJ"
    prompt = "Question:\n" + ex["question"] + "\n" + "Options:\n"
    for i, opt in enumerate(ex["options"]):
        if i >= len(letters):
            break
        prompt += f"{letters[i]}. {opt.strip()}\n"
    return prompt + "Answer: Let's think step by step."


def arc_gold(d):
    return d["choices"]["label"].index(d["answerKey"])


def humaneval_program(d, completion):
    return d["prompt"] + completion + "\n" + d["test"] + "\n" + f"check({d['entry_point']})"


def mbpp_program(d, completion):
    return completion + "\n" + "\n".join(d["test_list"][:3])


TASKS = {
    "mmlu": dict(kind="mc", k=0, sampler="first_n", key="subject",
                 description=lambda d, k: "The following are multiple choice questions (with answers) about "
                 + " ".join(d["subject"].split("_")) + ".\n\n",
                 text=lambda d, k: f"{d['question'].strip()}\nA. {d['choices'][0]}\nB. {d['choices'][1]}\n"
                 f"C. {d['choices'][2]}\nD. {d['choices'][3]}\nAnswer:",
                 choices=lambda d: ["A", "B", "C", "D"], gold=lambda d: d["answer"], primary="acc", norm=False),
    "mmlu_pro": dict(kind="gen", k=5, sampler="first_n", key="category",
                     description=lambda d, k: f"The following are multiple choice questions (with answers) about "
                     f"{d['category']}. Think step by step and then finish your answer with \"the answer is (X)\" "
                     f"where X is the correct letter choice.\n",
                     text=mmlu_pro_text, fs_target=lambda d: d["cot_content"].replace("A: Let's think step by step. ", ""),
                     target=lambda d: d["answer"], until=["Question:"],
                     filters=[("custom-extract", r"answer is \(?([ABCDEFGHIJ])\)?", 0)], metric="exact_match",
                     rules=dict(ignore_case=True, ignore_punctuation=True, regexes=[])),
    "gpqa_diamond": dict(kind="mc", k=0, sampler="random", same_split=True, full_split=True, process=gpqa_process,
                         seeds=(0, 42),
                         description=lambda d, k: None if k == 0 else "Here are some example questions from experts. "
                         "Answer the final question yourself, following the format of the previous questions exactly.\n",
                         text=lambda d, k: ("What is the correct answer to this question:" if k == 0 else "Question: ")
                         + f"{d['Question']}\nChoices:\n(A) {d['choice1']}\n(B) {d['choice2']}\n(C) {d['choice3']}\n"
                         f"(D) {d['choice4']}\nAnswer:",
                         choices=lambda d: ["(A)", "(B)", "(C)", "(D)"], gold=lambda d: "ABCD".index(d["answer"][1]),
                         fs_target=lambda d: d["answer"], primary="acc", norm=True),
    "arc_challenge": dict(kind="mc", k=0, sampler="random", text=lambda d, k: f"Question: {d['question']}\nAnswer:",
                          choices=lambda d: d["choices"]["text"], gold=arc_gold, primary="acc_norm", norm=True),
    "hellaswag": dict(kind="mc", k=0, sampler="random", same_split=True, process=hellaswag_process,
                      text=lambda d, k: d["query"], choices=lambda d: d["choices"], gold=lambda d: d["gold"],
                      primary="acc_norm", norm=True),
    "triviaqa": dict(kind="gen", k=0, sampler="random", same_split=True,
                     text=lambda d, k: f"Question: {d['question']}?\nAnswer:", fs_target=lambda d: d["answer"]["aliases"][0],
                     target=lambda d: d["answer"]["aliases"], until=["\n", ".", ","], filters=[("remove_whitespace", None, 0)],
                     metric="exact_match", rules=dict(ignore_case=True, ignore_punctuation=True, regexes=[])),
    "ceval": dict(kind="mc", k=0, sampler="first_n", key="subject",
                  description=lambda d, k: (f"以下是中国关于{CEVAL_ZH.get(d['subject'], d['subject'])}的单项选择题，请选出其中的正确答案。\n\n"
                                            if d.get("subject") else None),
                  text=lambda d, k: f"{d['question'].strip()}\nA. {d['A']}\nB. {d['B']}\nC. {d['C']}\nD. {d['D']}\n答案：",
                  choices=lambda d: ["A", "B", "C", "D"], gold=lambda d: ["A", "B", "C", "D"].index(d["answer"]),
                  primary="acc", norm=True),
    "gsm8k": dict(kind="gen", k=5, sampler="random", text=lambda d, k: f"Question: {d['question']}\nAnswer:",
                  fs_target=lambda d: d["answer"], target=lambda d: d["answer"], until=["Question:", "</s>", "<|im_end|>"],
                  filters=[("strict-match", r"#### (\-?[0-9\.\,]+)", 0), ("flexible-extract", r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1)],
                  metric="exact_match", rules=dict(ignore_case=True, ignore_punctuation=False,
                                                    regexes=[",", "\\$", "(?s).*#### ", "\\.$"])),
    "humaneval": dict(kind="gen", k=0, sampler="random", text=lambda d, k: d["prompt"],
                      target=lambda d: d["test"] + "\n" + f"check({d['entry_point']})",
                      until=["\nclass", "\ndef", "\n#", "\nif", "\nprint"], filters=[("create_test", None, 0)],
                      metric="pass@1", program=humaneval_program),
    "mbpp": dict(kind="gen", k=3, sampler="fixed", fixed=[2, 3, 4], delim="",
                 text=lambda d, k: f"You are an expert Python programmer, and here is your task: {d['text']} Your code should "
                 f"pass these tests:\n\n{d['test_list'][0]}\n{d['test_list'][1]}\n{d['test_list'][2]}\n[BEGIN]\n",
                 fs_target=lambda d: f"{d['code']}\n[DONE]", target=lambda d: "\n".join(d["test_list"][:3]),
                 until=["[DONE]"], filters=[("none", None, 0)], metric="pass_at_1", program=mbpp_program),
    "perplexity": dict(kind="rolling"),
}

PRIMARY = {"mmlu": "acc,none", "mmlu_pro": "exact_match,custom-extract", "gpqa_diamond": "acc,none",
           "arc_challenge": "acc_norm,none", "hellaswag": "acc_norm,none", "triviaqa": "exact_match,remove_whitespace",
           "ceval": "acc,none", "gsm8k": "exact_match,strict-match", "humaneval": "pass@1,create_test",
           "mbpp": "pass_at_1,none"}

# ---- subsets: aah-eval's own generator (splitmix64), so any machine selects the same items ----

M64 = (1 << 64) - 1


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def select(n, task, limit=None, sample=None, seed=0):
    idx = list(range(n))
    if sample is not None and sample < n:
        state = [seed ^ fnv1a(task.encode() + b"\0")]

        def nxt():
            state[0] = (state[0] + 0x9e3779b97f4a7c15) & M64
            z = state[0]
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
            return z ^ (z >> 31)

        def below(m):
            lim = M64 - M64 % m
            while True:
                x = nxt()
                if x < lim:
                    return x % m

        for i in range(sample):
            j = i + below(n - i)
            idx[i], idx[j] = idx[j], idx[i]
        return sorted(idx[:sample])
    if sample is None and limit is not None:
        return idx[:limit]
    return idx


# ---- prompts ----


def load(path):
    """JSONL split on "\n" only: some GPQA values hold U+2028/U+2029, at which str.splitlines() would split too."""
    with open(path, encoding="utf-8", newline="") as f:
        return [json.loads(line) for line in f.read().split("\n") if line.strip()]


def full_split(data_dir, name):
    """DIR/NAME.full.jsonl: the whole split a task's items are the first rows of and its few-shot examples are drawn
    from (gpqa_diamond_n_shot draws from the Diamond split it evaluates); None when the task has none or it is absent."""
    path = f"{data_dir}/{name}.full.jsonl"
    return path if TASKS[name].get("full_split") and os.path.exists(path) else None


def prepare(data_dir, name, k=None, limit=None, sample=None, seed=0, fewshot_seed=1234, shuffle_seed=None):
    """The items of a task: (doc_id, file index, doc, context, continuations, choices, gold, target). fewshot_seed
    (the harness's fewshot_random_seed) and shuffle_seed (GPQA n-shot's Random(42)) only change for tests that show
    a comparison can fail."""
    t = TASKS[name]
    if t["kind"] == "rolling":
        with open(f"{data_dir}/{name}.txt", encoding="utf-8") as f:
            text = f.read()
        return [dict(doc_id=0, index=0, doc={"text": text}, context=text)]
    k = t["k"] if k is None else k
    docs = load(f"{data_dir}/{name}.jsonl")
    full = full_split(data_dir, name) if k > 0 else None
    if full:
        # the harness's n-shot GPQA: process_docs over the whole Diamond split in CSV order (utils.py's module-level
        # random.Random(42), one shuffle per row), the sampler's pool is that split, the items its first rows
        fewshot = load(full)
        assert docs == fewshot[:len(docs)], f"{name}.jsonl is not the first rows of {full}"
        if "process" in t:
            rng = random.Random(t["seeds"][1] if shuffle_seed is None else shuffle_seed)
            for d in fewshot:
                t["process"](d, rng, k)
        docs = fewshot[:len(docs)]
    else:
        fewshot = load(f"{data_dir}/{name}.fewshot.jsonl") if k > 0 else []
        if "process" in t:
            rng = random.Random(t["seeds"][k > 0] if "seeds" in t else 0)
            for d in docs + fewshot:
                t["process"](d, rng, k)
    rnd = random.Random(fewshot_seed)
    delim = t.get("delim", " ")
    items = []
    for doc_id, i in enumerate(select(len(docs), name, limit, sample, seed)):
        doc = docs[i]
        ctx = ""
        desc = t.get("description", lambda d, k: None)(doc, k)
        if desc:
            ctx = desc
        if k > 0:
            n = k + 1 if t.get("same_split") else k
            if t["sampler"] == "random":
                ex = rnd.sample(fewshot, n)
            elif t["sampler"] == "first_n":
                pool = [x for x in fewshot if x.get(t["key"]) == doc.get(t["key"])] if t["key"] in doc else fewshot
                ex = pool[:n]
            else:
                ex = [next(x for x in fewshot if x["task_id"] == tid) for tid in t["fixed"]][:n]
            for x in [x for x in ex if x != doc][:k]:
                ctx += t["text"](x, k)
                target = t["fs_target"](x) if "fs_target" in t else t["choices"](x)[t["gold"](x)]
                if target != "":
                    ctx += delim + str(target) + "\n\n"
        ctx += t["text"](doc, k)
        it = dict(doc_id=doc_id, index=i, doc=doc, context=ctx)
        if t["kind"] == "mc":
            it["choices"] = t["choices"](doc)
            it["gold"] = t["gold"](doc)
            it["continuations"] = [delim + c for c in it["choices"]]
        else:
            it["target"] = t["target"](doc)
        items.append(it)
    return items


# ---- scoring ----


def encode_pair(api, context, continuation):
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = api.tok(context + continuation)
    ctx = api.tok(context)
    return ctx, whole[len(ctx):]


def loglikelihood_request(api, pairs, max_length, regime):
    """TemplateAPI: inp = (ctx + cont)[-max_length:], ctxlen as it computes it; all pairs in one request."""
    inputs, ctxlens = [], []
    for ctx, cont in pairs:
        inp = (ctx + cont)[-max_length:]
        inputs.append(inp)
        ctxlens.append(len(ctx) - max(0, len(ctx) + len(cont) - max_length))
    out = api.call("/v1/completions", {"prompt": inputs, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0,
                                        "aah_regime": regime})
    res = []
    for choice, ctxlen, inp in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens, inputs):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:len(inp)]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:len(inp)]
        res.append((sum(lps), all(lp == max(top.values()) for lp, top in zip(lps, tops))))
    return res, out


def regex_filter(pattern, resp, group_select, fallback="[invalid]"):
    match = re.findall(pattern, resp)
    if match:
        match = match[group_select]
        if isinstance(match, tuple):
            match = [m for m in match if m]
            match = match[0] if match else fallback
        return match.strip()
    return fallback


def exact_match(pred, ref, rules):
    for s in rules["regexes"]:
        pred = re.sub(s, "", pred)
        ref = re.sub(s, "", ref)
    if rules["ignore_case"]:
        pred, ref = pred.lower(), ref.lower()
    if rules["ignore_punctuation"]:
        table = str.maketrans("", "", string.punctuation)
        pred, ref = pred.translate(table), ref.translate(table)
    return pred == ref


class _Timeout(Exception):
    pass


class _WriteOnlyStringIO(io.StringIO):
    def read(self, *args, **kwargs):
        raise OSError

    def readline(self, *args, **kwargs):
        raise OSError

    def readlines(self, *args, **kwargs):
        raise OSError

    def readable(self, *args, **kwargs):
        return False


class _redirect_stdin(contextlib._RedirectStream):
    _stream = "stdin"


def _guard():
    """execute.py's reliability_guard(maximum_memory_bytes=None), in the child only."""
    import builtins
    import shutil
    faulthandler.disable()
    builtins.exit = None
    builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                 "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
                 "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


def _unsafe_execute(program, result, timeout):
    """execute.py's unsafe_execute: a fresh temporary directory, the guard, exec in fresh globals with stdio swallowed
    and an ITIMER_REAL limit; the result string appended to the shared list."""
    import shutil
    with tempfile.TemporaryDirectory() as d:
        cwd = os.getcwd()
        os.chdir(d)
        # what the directory's clean-up needs (execute.py restores the first three; os.unlink too here, so that the
        # files a program leaves go with the directory: after the result, so it changes no result)
        rmtree, rmdir, chdir, unlink = shutil.rmtree, os.rmdir, os.chdir, os.unlink
        _guard()
        try:
            stream = _WriteOnlyStringIO()
            with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream), _redirect_stdin(stream):
                def on_alarm(signum, frame):
                    raise _Timeout("Timed out!")
                signal.setitimer(signal.ITIMER_REAL, timeout)
                signal.signal(signal.SIGALRM, on_alarm)
                try:
                    exec(program, {})
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            result.append("passed")
        except _Timeout:
            result.append("timed out")
        except BaseException as e:
            result.append(f"failed: {e}")
        shutil.rmtree, os.rmdir, os.chdir, os.unlink = rmtree, rmdir, chdir, unlink
        os.chdir(cwd)


def code_eval_check(program, timeout=3.0):
    """HF evaluate code_eval's check_correctness (metrics/code_eval/execute.py), which the harness's humaneval and mbpp
    metrics call: the program runs in a forked process, joined for timeout + 1 s and killed after; an empty result is
    "timed out". Returns (passed, result)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        result = manager.list()
        p = ctx.Process(target=_unsafe_execute, args=(program, result, timeout))
        p.start()
        p.join(timeout=timeout + 1)
        if p.is_alive():
            p.kill()
            p.join()
        res = result[0] if len(result) else "timed out"
    return res == "passed", res


def run_program(program):
    """pass@1 of one program as code_eval scores it. A program Python cannot compile fails there without running
    anything, so it is not run here either (the completions of the random test model essentially never compile; the
    passing test item holds the completion inside a string literal)."""
    try:
        compile(program, "program", "exec")
    except (SyntaxError, ValueError):
        return 0.0
    return 1.0 if code_eval_check(program)[0] else 0.0


def rolling_windows(token_list, prefix_token, max_seq_len, context_len=1):
    """lm_eval.utils.get_rolling_token_windows, then make_disjoint_window."""
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first = min(max_seq_len, len(token_list))
    out = [([prefix_token] + token_list[:first - 1], token_list[:first])]
    predicted += first
    while predicted < len(token_list):
        wlen = min(len(token_list) - predicted, pred_len)
        end = predicted + wlen
        out.append((token_list[end - max_seq_len - 1:end - 1], token_list[end - wlen:end]))
        predicted += wlen
    return [(a[:len(a) - (len(b) - 1)], b) for a, b in out]


def aah_of(resp):
    u = resp["usage"]
    t = u["prompt_tokens"] + u["completion_tokens"]
    a = resp.get("aah")
    return dict(tokens=t, acr=t * a["acr"], work=t * a["attention_work_ratio"], kv=t * a["kv_memory_ratio"]) if a else \
        dict(tokens=t, acr=0, work=0, kv=0)


def score_item(api, name, it, regime, L, max_gen, info):
    """The harness's metrics of one item in one regime, with the token-weighted aah sums of its requests."""
    t = TASKS[name]
    maxlen = L - 1   # TemplateAPI keeps one position for the generated token
    aah = []
    if t["kind"] == "mc":
        pairs = [encode_pair(api, it["context"], c) for c in it["continuations"]]
        res, out = loglikelihood_request(api, pairs, maxlen, regime)
        aah.append(aah_of(out))
        lls = [r[0] for r in res]
        lens = [float(len(c)) for c in it["choices"]]
        pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
        norm = [ll / n for ll, n in zip(lls, lens)]
        pred_norm = max(range(len(norm)), key=lambda i: (norm[i], -i))
        metrics = {"acc,none": 1.0 if pred == it["gold"] else 0.0}
        if t["norm"]:
            metrics["acc_norm,none"] = 1.0 if pred_norm == it["gold"] else 0.0
        return dict(metrics=metrics, lls=lls, greedy=[r[1] for r in res], aah=aah)
    if t["kind"] == "gen":
        ids = api.tok(it["context"])[-(maxlen - max_gen):]
        out = api.call("/v1/completions", {"prompt": ids, "max_tokens": max_gen, "temperature": 0, "seed": 1234,
                                            "stop": t["until"][:4], "aah_regime": regime})
        aah.append(aah_of(out))
        text = out["choices"][0]["text"]
        for term in t["until"] + [info["eos_token"]]:
            text = text.split(term)[0]
        metrics, filtered = {}, {}
        for fname, pattern, group in t["filters"]:
            if fname == "remove_whitespace":
                f = text.strip()   # extraction.py WhitespaceFilter: resp.strip()
            elif pattern:
                f = regex_filter(pattern, text, group)
            else:
                f = text
            filtered[fname] = f
            key = f"{t['metric']},{fname}"
            if "program" in t:
                metrics[key] = run_program(t["program"](it["doc"], f))
            else:
                golds = it["target"] if isinstance(it["target"], list) else [it["target"]]
                metrics[key] = 1.0 if any(exact_match(f, g, t["rules"]) for g in golds) else 0.0
        return dict(metrics=metrics, text=text, filtered=filtered, aah=aah)
    # rolling
    prefix = info["bos_token_id"] if info["bos_token_id"] is not None else info["eos_token_id"]
    toks = api.tok(it["context"])
    windows = rolling_windows(toks, prefix, maxlen - 1)
    total = 0.0
    for b in range(0, len(windows), 8):
        res, out = loglikelihood_request(api, windows[b:b + 8], maxlen, regime)
        aah.append(aah_of(out))
        total += sum(r[0] for r in res)
    text = it["context"]
    return dict(metrics={"loglikelihood": total, "tokens": sum(len(w[1]) for w in windows),
                         "bytes": len(text.encode("utf-8")), "words": len(re.split(r"\s+", text))}, aah=aah)


def stderr(xs):
    n = len(xs)
    if n < 2:
        return None
    mu = sum(xs) / n
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)


# the group tasks: the subtask of an item (lm_eval/tasks/mmlu/default/mmlu_<subject>.yaml, mmlu_pro_<category>)
SUBTASK = {"mmlu": lambda d: "mmlu_" + d["subject"], "mmlu_pro": lambda d: "mmlu_pro_" + d["category"].replace(" ", "_")}


def pooled_sample_stderr(stderrs, sizes):
    """lm_eval/api/metrics.py: the pooled variance of the subtasks over the group's size."""
    pooled_var = sum((n - 1) * se ** 2 * n for n, se in zip(sizes, stderrs)) / (sum(sizes) - len(sizes))
    return math.sqrt(pooled_var / sum(sizes))


def group_stderr(xs, subtasks):
    """consolidate_group_results for a group of leaf subtasks: "N/A" (None) when any subtask's stderr is (one item),
    else pooled_sample_stderr over them."""
    by = {}
    for x, st in zip(xs, subtasks):
        by.setdefault(st, []).append(x)
    ses = [stderr(v) for _, v in sorted(by.items())]
    if any(se is None for se in ses):
        return None
    sizes = [len(v) for _, v in sorted(by.items())]
    if sum(sizes) - len(sizes) <= 0:
        return None
    return pooled_sample_stderr(ses, sizes)


def tables(results, regimes, task_names, items=None):
    """Table 9, table 10 and perplexity figures from results[regime][task] = [item result], each item result with
    its metrics and the token-weighted sums of its responses' aah objects (aah: [{tokens, acr, work, kv}]); items
    (prepare's, per task) name the subtasks of a group task, whose stderr is then the harness's pooled one."""
    t9, t10, ppl = {}, {}, {}
    for name in task_names:
        for r in regimes:
            if TASKS[name]["kind"] == "rolling":
                rows = results[r][name]
                ll = sum(i["metrics"]["loglikelihood"] for i in rows)
                tok = sum(i["metrics"]["tokens"] for i in rows)
                byt = sum(i["metrics"]["bytes"] for i in rows)
                ppl[(name, r)] = dict(loss=-ll / tok, bits_per_byte=-ll / byt / math.log(2))
                continue
            xs = [i["metrics"][PRIMARY[name]] for i in results[r][name]]
            if name in SUBTASK and items is not None:
                se = group_stderr(xs, [SUBTASK[name](it["doc"]) for it in items[name]])
            else:
                se = stderr(xs)
            t9[(name, r)] = (100 * sum(xs) / len(xs), None if se is None else 100 * se)
    for r in regimes:
        tok = sum(a["tokens"] for n in task_names for i in results[r][n] for a in i["aah"])
        row = dict(acr=sum(a["acr"] for n in task_names for i in results[r][n] for a in i["aah"]) / tok,
                   attention_work_ratio=sum(a["work"] for n in task_names for i in results[r][n] for a in i["aah"]) / tok,
                   kv_memory_ratio=sum(a["kv"] for n in task_names for i in results[r][n] for a in i["aah"]) / tok)
        if r == "full_attention":
            row.update(max_abs_delta_pp=0.0, max_delta_task=None, flips_right_to_wrong=None, flips_wrong_to_right=None)
        elif "full_attention" in regimes:
            best = None
            for name in task_names:
                if TASKS[name]["kind"] == "rolling":
                    continue
                d = t9[(name, r)][0] - t9[(name, "full_attention")][0]
                if best is None or abs(d) > abs(best[0]):
                    best = (d, name)
            row["max_abs_delta_pp"] = abs(best[0])
            row["max_delta_task"] = best[1]
            f = [i["metrics"][PRIMARY[best[1]]] for i in results["full_attention"][best[1]]]
            x = [i["metrics"][PRIMARY[best[1]]] for i in results[r][best[1]]]
            row["flips_right_to_wrong"] = sum(1 for a, b in zip(f, x) if a > 0.5 and b < 0.5)
            row["flips_wrong_to_right"] = sum(1 for a, b in zip(f, x) if a < 0.5 and b > 0.5)
        t10[r] = row
    return t9, t10, ppl
