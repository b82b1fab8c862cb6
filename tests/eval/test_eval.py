"""tests/eval/test_eval.py — aah-eval through its command line against a real aahd (port 0) serving a small AAH model
with the test tokenizer, on the task files of tests/data/eval (every layout): each item's scores and every table
figure against harness_reference.py's own computation from the same server; a seeded subset; a run killed halfway
that resumes to the same tables; a finished run re-rendered without a request (then with the server gone); bad
input, a server that is down, that answers errors or 429, with nothing lost from the cache; a fleet of two servers.
Run by tests/test_eval.sh; prints one line per check and exits non-zero on the first failure."""
import http.server
import json
import os
import re
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True   # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_reference as ref  # noqa: E402

BUILD = os.environ.get("AAH_BUILD", "build")
TESTDATA = os.environ.get("AAH_TESTDATA", "tests/data")
DATA = f"{TESTDATA}/eval"
TMP = tempfile.mkdtemp(prefix="aah-eval-test-")
REGIMES = ["full_attention", "shallow_freeze", "full_adaptive"]
L = 256          # --max-length: few-shot prompts are left-truncated, the perplexity text spans several windows
MAX_GEN = 12
ALL = list(ref.TASKS)
checks = 0
live = []


def check(cond, what, detail=""):
    global checks
    if not cond:
        print(f"test_eval: FAILURE: {what}\n{detail}", flush=True)
        for p in live:
            p.kill()
        sys.exit(1)
    checks += 1
    print(f"ok {checks} - {what}", flush=True)


def close(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


class Server:
    def __init__(self, model, *args):
        self.proc = subprocess.Popen([f"{BUILD}/aahd", "--model", model, "--port", "0", "--threads", "1", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        live.append(self.proc)
        self.log = ""
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log += line
            m = re.search(r"listening on http://\S*:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return
        raise RuntimeError(f"aahd did not start:\n{self.log}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        live.remove(self.proc)

    def requests_total(self):
        text = urllib.request.urlopen(self.url + "/metrics", timeout=30).read().decode()
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("aahd_requests_total{"))


class Proxy:
    """An HTTP proxy in front of aahd that can answer errors: mode "ok", "error" (500 for completions), "429" (every
    other completion gets 429 with Retry-After 1); counts the completion requests it forwarded."""

    def __init__(self, upstream):
        proxy = self
        self.mode = "ok"
        self.completions = 0
        self.seen_429 = 0
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body, headers=()):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def forward(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.path == "/v1/completions":
                    with proxy.lock:
                        if proxy.mode == "error":
                            return self.reply(500, {"error": {"message": "injected failure", "type": "server_error",
                                                              "param": None, "code": None}})
                        if proxy.mode == "429":
                            proxy.seen_429 += 1
                            if proxy.seen_429 % 2 == 1:
                                return self.reply(429, {"error": {"message": "queue full", "type": "rate_limit_error",
                                                                  "param": None, "code": "queue_full"}},
                                                  [("Retry-After", "1")])
                        proxy.completions += 1
                req = urllib.request.Request(upstream + self.path, data=body, method=method,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        self.reply(r.status, r.read())
                except urllib.error.HTTPError as e:
                    self.reply(e.code, e.read())

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

        class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.httpd = Threaded(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def aah_eval(*args, expect=0):
    r = subprocess.run([f"{BUILD}/aah-eval", *args], capture_output=True, text=True, timeout=900)
    check(r.returncode == expect, f"aah-eval {' '.join(args[:12])}… exits {expect}",
          f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return r


def samples(out, regime, task):
    with open(f"{out}/samples/{regime}/{task}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def tables_without_timing(out):
    with open(f"{out}/tables.json") as f:
        t = json.load(f)
    for row in t["table10"] + t["perplexity"]:
        row.pop("tokens_per_second", None)
    return t


def same_tables(a, b, what):
    """Tables of two runs over the same items: identical, except that the aah figures of a regime in which a
    generation ended at a stop string may differ a little (aahd notices the stop string after the engine has run a
    step or two past it, and counts those steps; how many depends on timing)."""
    ta, tb = tables_without_timing(a), tables_without_timing(b)
    check(open(f"{a}/table9.csv").read() == open(f"{b}/table9.csv").read() and ta["table9"] == tb["table9"]
          and ta["perplexity"] == tb["perplexity"], what + " (table 9, perplexity)")
    bad = []
    for ra, rb in zip(ta["table10"], tb["table10"]):
        stopped = any(s.get("finish_reason") == "stop" for d in (a, b) for t in ALL if os.path.exists(f"{d}/samples/{ra['regime']}/{t}.jsonl")
                      for s in samples(d, ra["regime"], t))
        for k in ra:
            exact = k not in ("acr", "attention_work_ratio", "kv_memory_ratio") or not stopped
            if (ra[k] != rb[k]) if exact else not close(ra[k], rb[k], 1e-2):
                bad.append(f"{ra['regime']} {k}: {ra[k]} != {rb[k]}")
    check(not bad, what + " (table 10)", "\n".join(bad))


def reference(api, info, regimes, tasks, length=L, max_gen=MAX_GEN, **sel):
    items = {t: ref.prepare(DATA, t, **sel) for t in tasks}
    results = {r: {t: [ref.score_item(api, t, it, r, length, max_gen, info) for it in items[t]] for t in tasks}
               for r in regimes}
    return items, results


def compare(out, items, results, regimes, tasks):
    """Every item's metrics and log-likelihoods, then every table figure."""
    for r in regimes:
        for t in tasks:
            got = samples(out, r, t)
            want = results[r][t]
            check(len(got) == len(want) and [g["doc_id"] for g in got] == list(range(len(want))),
                  f"{r} {t}: one sample line per item, doc_id 0…{len(want) - 1}", f"{len(got)} lines")
            bad = []
            for g, w, it in zip(got, want, items[t]):
                if g["file_index"] != it["index"]:
                    bad.append(f"doc {g['doc_id']}: file index {g['file_index']} != {it['index']}")
                if ref.TASKS[t]["kind"] == "mc":
                    lls = [x[0][0] for x in g["resps"]]
                    if not all(close(a, b, 1e-12) for a, b in zip(lls, w["lls"])) or \
                            [x[0][1] for x in g["resps"]] != w["greedy"]:
                        bad.append(f"doc {g['doc_id']}: resps {g['resps']} != {w['lls']} {w['greedy']}")
                    if g["arguments"][0][0] != it["context"] or [a[1] for a in g["arguments"]] != it["continuations"]:
                        bad.append(f"doc {g['doc_id']}: context {g['arguments'][0][0]!r} != {it['context']!r}")
                    for key, v in w["metrics"].items():
                        if g.get(key.split(",")[0]) != v:
                            bad.append(f"doc {g['doc_id']}: {key} {g.get(key.split(',')[0])} != {v}")
                elif ref.TASKS[t]["kind"] == "gen":
                    if g["resps"][0][0] != w["text"] or g["arguments"][0][0] != it["context"]:
                        bad.append(f"doc {g['doc_id']}: generation {g['resps'][0][0]!r} != {w['text']!r}")
                    if g["filtered"] != w["filtered"]:
                        bad.append(f"doc {g['doc_id']}: filtered {g['filtered']} != {w['filtered']}")
                    for key, v in w["metrics"].items():
                        gv = g.get(key) if key in g else g.get(key.split(",")[0])
                        if gv != v:
                            bad.append(f"doc {g['doc_id']}: {key} {gv} != {v}")
                elif not close(g["resps"][0][0], w["metrics"]["loglikelihood"], 1e-12):
                    bad.append(f"loglikelihood {g['resps'][0][0]} != {w['metrics']['loglikelihood']}")
                # the aah figures of the item's responses, token-weighted: a generation that ended at a stop string
                # may have run a step or two past it on the server (its counters then vary from run to run), so
                # there only its tokens are compared
                tok = sum(a["tokens"] for a in w["aah"])
                if g["aah"]["tokens"] != tok:
                    bad.append(f"doc {g['doc_id']}: {g['aah']['tokens']} tokens != {tok}")
                elif g.get("finish_reason") != "stop":
                    for mine, theirs in (("acr", "acr"), ("work", "attention_work_ratio"), ("kv", "kv_memory_ratio")):
                        v = sum(a[mine] for a in w["aah"]) / tok
                        if not close(g["aah"][theirs], v, 1e-12):
                            bad.append(f"doc {g['doc_id']}: aah {theirs} {g['aah'][theirs]} != {v}")
            check(not bad, f"{r} {t}: every item's scores (and aah figures) as the reference computes them",
                  "\n".join(bad[:10]))
    # table 10 from the items' own aah figures as aah-eval recorded them (checked above against the server's)
    recorded = {r: {t: [dict(w, aah=[dict(tokens=g["aah"]["tokens"], acr=g["aah"]["tokens"] * g["aah"]["acr"],
                                          work=g["aah"]["tokens"] * g["aah"]["attention_work_ratio"],
                                          kv=g["aah"]["tokens"] * g["aah"]["kv_memory_ratio"])])
                        for g, w in zip(samples(out, r, t), results[r][t])] for t in tasks} for r in regimes}
    t9, t10, ppl = ref.tables(recorded, regimes, tasks, items)
    with open(f"{out}/tables.json") as f:
        tj = json.load(f)
    bad = []
    for row in tj["table9"]["rows"]:
        for r in regimes:
            s, se = t9[(row["task"], r)]
            if not close(row["scores"][r]["score"], s) or not close(row["scores"][r]["stderr"], se):
                bad.append(f"{row['task']} {r}: {row['scores'][r]} != {s} ± {se}")
    check(not bad and len(tj["table9"]["rows"]) == len([t for t in tasks if t != "perplexity"]),
          "table 9: scores and standard errors", "\n".join(bad))
    bad = []
    for row in tj["table10"]:
        w = t10[row["regime"]]
        for key, v in w.items():
            if isinstance(v, float) and not close(row[key], v) or not isinstance(v, float) and row[key] != v:
                bad.append(f"{row['regime']} {key}: {row[key]} != {v}")
    check(not bad, "table 10: measured ACR, work and KV ratios, largest change and its flips", "\n".join(bad))
    if "perplexity" in tasks:
        bad = [f"{p['regime']}: {p} != {ppl[('perplexity', p['regime'])]}" for p in tj["perplexity"]
               if not close(p["loss"], ppl[("perplexity", p["regime"])]["loss"])
               or not close(p["bits_per_byte"], ppl[("perplexity", p["regime"])]["bits_per_byte"])]
        check(not bad and len(tj["perplexity"]) == len(regimes), "perplexity: loss and bits per byte", "\n".join(bad))
    # bold: the best printed score of each row, ties included
    for row in tj["table9"]["rows"]:
        shown = {r: round(row["scores"][r]["score"], 1) for r in regimes}
        best = max(shown.values())
        if any(row["scores"][r]["best"] != (shown[r] == best) for r in regimes):
            bad.append(row["task"])
    check(not bad, "table 9: the best of each row (and ties) marked", str(bad))


def code_eval_fixtures():
    """The reference runs programs as HF evaluate's code_eval (execute.py) does: every fixture's passed and result,
    the same fixtures check_eval_sandbox holds aah-eval's sandbox to."""
    bad = []
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "code_eval_fixtures.jsonl")) as f:
        for line in f:
            fx = json.loads(line)
            passed, result = ref.code_eval_check(fx["program"], fx["timeout"])
            if passed != fx["passed"] or result != fx["result"]:
                bad.append(f"{fx['name']}: {passed} {result!r} != {fx['passed']} {fx['result']!r}")
    check(not bad, "the reference scores code as code_eval does (exit(), __main__, SystemExit, subprocess, time, memory)",
          "\n".join(bad))


MODES = ["bwrap", "bwrap-noproc", "process", "none"]   # strongest first


def sandbox_modes(srv, api, info, detected):
    """The code tasks in each sandbox mode, and in a place where bubblewrap cannot mount a fresh /proc (a mount
    namespace whose /proc has a masked entry, as a Docker container's has; entered with unshare as root): the same
    scores as the reference, the mode named on stderr and in results.json."""
    items, results = reference(api, info, ["full_attention"], ["humaneval", "mbpp"])
    args = ["--server", srv.url, "--data", DATA, "--tasks", "humaneval,mbpp", "--regimes", "full_attention",
            "--max-length", str(L), "--max-gen-toks", str(MAX_GEN)]
    for mode in MODES[MODES.index(detected):]:
        line = f"sandbox: {mode} (--sandbox {mode})" if mode != "none" else \
            "sandbox: none (--sandbox none): the code tasks' programs run unconfined"
        out = f"{TMP}/sandbox-{mode}"
        r = aah_eval(*args, "--sandbox", mode, "--out", out)
        check(line in r.stderr, f"--sandbox {mode}: named on stderr", r.stderr)
        compare(out, items, results, ["full_attention"], ["humaneval", "mbpp"])
        with open(f"{out}/results.json") as f:
            sb = json.load(f)["config"]["sandbox"]
        check(sb["modes"] == [mode] and sb["note"] in r.stderr, f"--sandbox {mode}: results.json says so", json.dumps(sb))
    r = aah_eval(*args, "--sandbox", "docker", "--out", f"{TMP}/sandbox-bad", expect=2)
    check("bad value for --sandbox" in r.stderr, "an unknown --sandbox mode is refused", r.stderr)
    if os.geteuid() != 0 or not shutil.which("unshare") or detected != "bwrap":
        print(f"test_eval: not root, no unshare or no bwrap here ({detected}): the masked-/proc place is not entered",
              flush=True)
        return
    out = f"{TMP}/sandbox-container"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount --bind /dev/null /proc/uptime && exec "$@"', "sh", f"{BUILD}/aah-eval", *args, "--out", out],
                       capture_output=True, text=True, timeout=600)
    check(r.returncode == 0 and "sandbox: bwrap-noproc: bubblewrap cannot mount a fresh /proc here" in r.stderr
          and "Can't mount proc" in r.stderr, "where /proc cannot be mounted: bwrap-noproc, with the cause on one line",
          r.stderr[-3000:])
    compare(out, items, results, ["full_attention"], ["humaneval", "mbpp"])


def main():
    code_eval_fixtures()
    model = f"{TMP}/model"
    subprocess.run([f"{BUILD}/aah-mkmodel", "--preset", "tiny", "--tokenizer", f"{TESTDATA}/qwen3-small-a", "--aah",
                    "--aah-context", "512", "--aah-windows", "64,128,256,512", "--out", model], check=True,
                   capture_output=True)
    srv = Server(model)
    api = ref.Api(srv.url)
    info = api.call("/tokenizer_info")

    # 1. every task in every layout, three regimes, against the reference
    out = f"{TMP}/full"
    common = ["--data", DATA, "--tasks", ",".join(ALL), "--regimes", ",".join(REGIMES), "--max-length", str(L),
              "--max-gen-toks", str(MAX_GEN)]
    r = aah_eval("--server", srv.url, *common, "--out", out)
    check("Table 9 shape" in r.stdout and "Table 10 shape" in r.stdout and "Table 6 shape" in r.stdout,
          "tables 9, 10 and 6 printed", r.stdout[:2000])
    items, results = reference(api, info, REGIMES, ALL)
    compare(out, items, results, REGIMES, ALL)
    with open(f"{out}/results.json") as f:
        res = json.load(f)
    for reg in REGIMES:
        rr = res["regimes"][reg]
        subtasks = {ref.SUBTASK[n](it["doc"]) for n in ref.SUBTASK for it in items[n]} | {"mmlu_stem"}
        check(set(rr["results"]) == set(ALL) | subtasks and "acc,none" in rr["results"]["mmlu"]
              and "acc_stderr,none" in rr["results"]["mmlu"] and "acc_norm,none" in rr["results"]["arc_challenge"]
              and "exact_match,strict-match" in rr["results"]["gsm8k"] and "pass@1,create_test" in rr["results"]["humaneval"]
              and set(rr["aah"]) >= {"acr", "attention_work_ratio", "kv_memory_ratio", "tokens_per_second"},
              f"results.json {reg}: the harness's keys and the aah object", json.dumps(rr)[:1500])
    # the group tasks as the harness reports them: each subtask's row, the group's stderr pooled over them (MMLU's
    # four categories too), the subtask lists
    bad = []
    for reg in REGIMES:
        rr = res["regimes"][reg]
        for name in ("mmlu", "mmlu_pro"):
            subs = {}
            for it, w in zip(items[name], results[reg][name]):
                subs.setdefault(ref.SUBTASK[name](it["doc"]), []).append(w["metrics"][ref.PRIMARY[name]])
            key = ref.PRIMARY[name]
            sek = key.replace(",", "_stderr,")
            for st, xs in subs.items():
                row = rr["results"].get(st, {})
                if not close(row.get(key), sum(xs) / len(xs)) or not close(row.get(sek), ref.stderr(xs)):
                    bad.append(f"{reg} {st}: {row} != {sum(xs) / len(xs)} ± {ref.stderr(xs)}")
            xs = [w["metrics"][key] for w in results[reg][name]]
            pooled = ref.group_stderr(xs, [ref.SUBTASK[name](it["doc"]) for it in items[name]])
            g = rr["groups"].get(name, {})
            if not close(g.get(sek), pooled) or g.get("samples") != len(xs) or not close(g.get(key), sum(xs) / len(xs)):
                bad.append(f"{reg} group {name}: {g} != {sum(xs) / len(xs)} ± {pooled}")
            if sorted(rr["group_subtasks"].get(name, [])) != sorted(["mmlu_stem"] if name == "mmlu" else subs):
                bad.append(f"{reg} group_subtasks {name}: {rr['group_subtasks'].get(name)}")
        if sorted(rr["group_subtasks"].get("mmlu_stem", [])) != ["mmlu_astronomy", "mmlu_high_school_chemistry"] or \
                not close(rr["groups"]["mmlu_stem"]["acc_stderr,none"], rr["groups"]["mmlu"]["acc_stderr,none"]):
            bad.append(f"{reg} mmlu_stem: {rr['groups'].get('mmlu_stem')} {rr['group_subtasks'].get('mmlu_stem')}")
    check(not bad, "results.json: MMLU and MMLU-Pro per subtask, their groups' stderr pooled as the harness pools it",
          "\n".join(bad))
    he = samples(out, "full_attention", "humaneval")
    check(he[0]["sandbox"]["status"] in ("passed", "failed") and he[1]["pass@1"] == 0.0,
          "humaneval ran in the sandbox (the always-failing test fails)", json.dumps(he[:2])[:1500])
    # code_eval's semantics end to end: sys.exit(0) before the tests is a SystemExit, a failure; an
    # `if __name__ == "__main__":` block never runs under exec (the item passes whenever its completion stays inside
    # the string literal, as the reference finds too)
    check(he[3]["pass@1"] == 0.0 and he[3]["sandbox"]["result"] == "failed: 0",
          "a program that exits 0 before its tests fails, as in code_eval", json.dumps(he[3])[:1500])
    check(he[4]["pass@1"] == 1.0 or '"""' in he[4]["resps"][0][0],
          "a __main__ block does not run (its SystemExit would fail the item)", json.dumps(he[4])[:1500])
    with open(f"{out}/results.json") as f:
        detected = json.load(f)["config"]["sandbox"]["modes"][0]
    check(detected in MODES, f"the code tasks ran in the strongest sandbox here: {detected}")
    sandbox_modes(srv, api, info, detected)
    ET.parse(f"{out}/score_vs_acr.svg")
    check(True, "score_vs_acr.svg is well-formed XML")
    with open(f"{out}/table9.csv") as f:
        head = f.readline().strip()
    check(head == "group,task,benchmark,metric,n," + ",".join(f"{x},{x}_stderr" for x in REGIMES) + ",fewshot_pool",
          "table9.csv header", head)
    # a few-shot pool smaller than the harness's split: GSM8K's 5 shots drawn from the 5 rows here, not its 7473
    # train rows, are marked in every output; MMLU-Pro's first_n and MBPP's fixed ids are not
    note = "5 of 7473 rows, not the harness's draw"
    md = open(f"{out}/tables.md").read()
    with open(f"{out}/tables.json") as f:
        rows = {r["task"]: r for r in json.load(f)["table9"]["rows"]}
    pools = res["config"]["fewshot_pool"]
    check("| GSM8K † |" in md and f"† gsm8k 5-shot: partial few-shot pool: gsm8k.fewshot.jsonl holds {note}" in md
          and "| MMLU-Pro |" in md and "| MBPP |" in md and f',"partial: {note}"' in open(f"{out}/table9.csv").read()
          and rows["gsm8k"]["partial_fewshot_pool"] is True and rows["gsm8k"]["fewshot_pool"]["note"] == note
          and rows["mmlu_pro"]["partial_fewshot_pool"] is False and rows["mmlu"]["fewshot_pool"] is None
          and pools["gsm8k"]["partial"] is True and pools["mbpp"]["partial"] is False and "mmlu" not in pools,
          "a partial few-shot pool is marked in tables.md, table9.csv, tables.json and results.json",
          md + json.dumps(pools))
    table9 = open(f"{out}/table9.csv").read()
    tables1 = tables_without_timing(out)

    # 2. a finished run re-renders from the cache without a request (the server's request counter does not move)
    before = srv.requests_total()
    r = aah_eval("--server", srv.url, *common, "--out", out)
    after = srv.requests_total()
    check(after == before and "0 requests this run" in r.stderr,
          "a finished run re-renders without a request", f"{before} → {after}\n{r.stderr}")
    check(open(f"{out}/table9.csv").read() == table9, "…with the same table 9")

    # 3. a seeded sample: the items aah-eval selects are the ones the documented generator selects
    out_s = f"{TMP}/sample"
    aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu,gsm8k", "--regimes", "shallow_freeze",
             "--max-length", str(L), "--max-gen-toks", str(MAX_GEN), "--sample", "3", "--seed", "5", "--out", out_s)
    items_s, results_s = reference(api, info, ["shallow_freeze"], ["mmlu", "gsm8k"], sample=3, seed=5)
    compare(out_s, items_s, results_s, ["shallow_freeze"], ["mmlu", "gsm8k"])
    r2 = aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu", "--regimes", "full_attention", "--limit", "2",
                  "--out", f"{TMP}/limit")
    check([s["file_index"] for s in samples(f"{TMP}/limit", "full_attention", "mmlu")] == [0, 1], "--limit 2: the first two")
    with open(f"{TMP}/limit/results.json") as f:
        cfg = json.load(f)["config"]
    md = open(f"{TMP}/limit/tables.md").read()
    ctx = api.call("/v1/models")["data"][0].get("max_model_len") or 0
    check(cfg["max_length"] == 2048 and "max_length 2048 (the harness's default for API models)" in md
          and (("below max_length 2048 (the harness's default)" in r2.stderr) == (0 < ctx < 2048)),
          "without --max-length: the harness's 2048, said in the tables and, against a shorter context, on stderr",
          md[:400] + r2.stderr)
    aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu", "--regimes", "full_attention", "--limit", "1",
             "--max-length", "server", "--out", f"{TMP}/limit-server")
    md = open(f"{TMP}/limit-server/tables.md").read()
    check(f"max_length {ctx} (the server's context, --max-length server)" in md, "--max-length server: its context",
          md[:300])
    # GSM8K's default 5-shot prompts with the whole train split (../shared/benchmarks holds it in its original order;
    # never copied here): random.Random(1234).sample over its 7473 rows, one stream consumed item by item, the
    # harness's own prompts item by item
    bench = os.environ.get("AAH_BENCHMARKS", "../shared/benchmarks")
    if os.path.exists(f"{bench}/gsm8k.fewshot.jsonl"):
        out_g = f"{TMP}/gsm8k-train"
        aah_eval("--server", srv.url, "--data", bench, "--tasks", "gsm8k", "--regimes", "full_attention", "--limit", "6",
                 "--max-length", str(L), "--max-gen-toks", "1", "--out", out_g)
        want = ref.prepare(bench, "gsm8k", limit=6)
        got = samples(out_g, "full_attention", "gsm8k")
        n_fs = sum(1 for _ in open(f"{bench}/gsm8k.fewshot.jsonl"))
        with open(f"{out_g}/results.json") as f:
            pool = json.load(f)["config"]["fewshot_pool"]["gsm8k"]
        check(n_fs == 7473 and [g["arguments"][0][0] for g in got] == [w["context"] for w in want]
              and pool["rows"] == 7473 and pool["partial"] is False
              and all(w["context"].count("\n\nQuestion: ") == 5 for w in want),
              "gsm8k 5-shot over the 7473 train rows: every prompt the harness's own",
              "\n---\n".join(g["arguments"][0][0][:300] for g in got[:2]))
    else:
        print(f"test_eval: {bench}/gsm8k.fewshot.jsonl absent: the full-split GSM8K prompts are not checked", flush=True)
    # max_gen_toks at or past max_length - 1: the harness's x[-n:] for n <= 0 (the whole prompt, or all but its first
    # -n tokens), not an empty prompt nor a refusal
    for length, gen in ((13, 12), (12, 12)):
        out_m = f"{TMP}/maxlen-{length}"
        r2 = aah_eval("--server", srv.url, "--data", DATA, "--tasks", "gsm8k,triviaqa", "--regimes", "full_attention",
                      "--max-length", str(length), "--max-gen-toks", str(gen), "--num-fewshot", "0", "--out", out_m)
        check(f"leaves max_length {length} - 1 - {gen} = {length - 1 - gen} tokens" in r2.stderr,
              f"--max-length {length} --max-gen-toks {gen}: said on stderr", r2.stderr)
        it_m, res_m = reference(api, info, ["full_attention"], ["gsm8k", "triviaqa"], length=length, max_gen=gen, k=0)
        compare(out_m, it_m, res_m, ["full_attention"], ["gsm8k", "triviaqa"])

    # 4. a run killed halfway resumes and ends with the same tables
    out_k = f"{TMP}/killed"
    os.makedirs(out_k)
    p = subprocess.Popen([f"{BUILD}/aah-eval", "--server", srv.url, *common, "--concurrency", "2", "--out", out_k],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live.append(p)
    total = len(REGIMES) * sum(len(v) for v in items.values())
    cache = f"{out_k}/cache.jsonl"
    deadline = time.time() + 300
    lines = 0
    while time.time() < deadline and p.poll() is None:
        lines = sum(1 for line in open(cache)) if os.path.exists(cache) else 0
        if lines >= total // 2:
            break
        time.sleep(0.05)
    p.kill()
    p.wait()
    live.remove(p)
    kept = sum(1 for line in open(cache) if '"type":"item"' in line)
    check(0 < kept < total, f"killed with {kept} of {total} results in the cache")
    r = aah_eval("--server", srv.url, *common, "--out", out_k)
    check(f"{kept} of {total} from the cache" in r.stderr or f"{kept + 0} of" in r.stderr, "the resumed run starts from them",
          r.stderr)
    same_tables(out_k, out, "…and ends with the same tables as the uninterrupted run")

    # 5. bad input: clear messages
    empty = f"{TMP}/empty"
    os.makedirs(empty)
    r = aah_eval("--server", srv.url, "--data", empty, "--tasks", "mmlu", "--regimes", "all", "--out", f"{TMP}/o1", expect=1)
    check(f"{empty}/mmlu.jsonl: no such file" in r.stderr, "a missing task file is named", r.stderr)
    broken = f"{TMP}/broken"
    os.makedirs(broken)
    with open(f"{DATA}/arc_challenge.jsonl") as f, open(f"{broken}/arc_challenge.jsonl", "w") as g:
        rows = f.read().splitlines()
        g.write(rows[0] + "\n" + rows[1].replace('"answerKey": "3"', '"answerKey": 3') + "\n")
    r = aah_eval("--server", srv.url, "--data", broken, "--tasks", "arc_challenge", "--regimes", "all", "--out",
                 f"{TMP}/o2", expect=1)
    check("arc_challenge.jsonl:2: field 'answerKey': expected a string (found an integer)" in r.stderr,
          "a malformed line is refused with its line and field", r.stderr)
    r = aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu,mmlx", "--regimes", "all", "--out", f"{TMP}/o3",
                 expect=2)
    check("unknown task 'mmlx'" in r.stderr and "mmlu_pro" in r.stderr, "an unknown task is named", r.stderr)
    r = aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu", "--regimes", "full_attention,nope", "--out",
                 f"{TMP}/o4", expect=1)
    check("unknown regime 'nope'" in r.stderr and "shallow_freeze" in r.stderr, "an unknown regime is named", r.stderr)
    r = aah_eval("--server", "http://127.0.0.1:9", "--data", DATA, "--tasks", "mmlu", "--regimes", "all", "--out",
                 f"{TMP}/o5", expect=1)
    check("cannot reach http://127.0.0.1:9" in r.stderr, "a server that is down is named", r.stderr)
    r = aah_eval("--server", srv.url, "--data", DATA, "--tasks", "mmlu", "--regimes", "all", "--limit", "2",
                 "--sample", "2", "--out", f"{TMP}/o6", expect=2)
    check("exclude each other" in r.stderr, "--limit with --sample is refused", r.stderr)

    # 6. a server answering errors, then 429s, then down: clear messages, nothing lost, the rest run later
    proxy = Proxy(srv.url)
    out_p = f"{TMP}/proxied"
    mc = ["--data", DATA, "--tasks", "mmlu,arc_challenge,hellaswag", "--regimes", "full_attention,shallow_freeze",
          "--max-length", str(L), "--concurrency", "1", "--out", out_p]
    n_mc = 2 * sum(len(items[t]) for t in ("mmlu", "arc_challenge", "hellaswag"))
    aah_eval("--server", proxy.url, *mc[:3], "mmlu", *mc[4:])   # first only mmlu: its results go into the cache
    done_mmlu = 2 * len(items["mmlu"])
    proxy.mode = "error"
    r = aah_eval("--server", proxy.url, *mc, expect=1)
    check("answered HTTP 500: injected failure" in r.stderr and "arc_challenge item 0" in r.stderr
          and f"{done_mmlu} of {n_mc} results are in the cache" in r.stderr,
          "a server answering 500 stops the run with its message; the cache keeps what was done", r.stderr)
    proxy.mode = "429"
    proxy.completions = 0
    r = aah_eval("--server", proxy.url, *mc)
    check(proxy.completions == n_mc - done_mmlu and proxy.seen_429 > 0 and "waits on a full queue" in r.stderr,
          f"429 + Retry-After waited out; only the {n_mc - done_mmlu} missing items were asked for",
          f"{proxy.completions} completions, {proxy.seen_429} 429s\n{r.stderr}")
    want = {(reg, t): [x["metrics"] for x in results[reg][t]] for reg in ("full_attention", "shallow_freeze")
            for t in ("mmlu", "arc_challenge", "hellaswag")}
    with open(f"{out_p}/results.json") as f:
        got = json.load(f)["regimes"]
    check(all(close(got[reg]["results"][t]["acc,none"],
                    sum(m["acc,none"] for m in want[(reg, t)]) / len(want[(reg, t)])) for reg, t in want),
          "…and the scores are the reference's")
    proxy.close()
    r = aah_eval("--server", proxy.url, *mc[:-1], f"{TMP}/proxied2", expect=1)
    check("cannot reach" in r.stderr, "a proxy gone: cannot reach", r.stderr)
    # the server goes away in the middle of a run: a clear error, and what was done is kept
    proxy = Proxy(srv.url)
    out_d = f"{TMP}/dies"
    p = subprocess.Popen([f"{BUILD}/aah-eval", "--server", proxy.url, *mc[:-1], out_d], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    live.append(p)
    deadline = time.time() + 300
    while time.time() < deadline and proxy.completions < 4 and p.poll() is None:
        time.sleep(0.02)
    proxy.close()
    err = p.communicate(timeout=120)[1]
    live.remove(p)
    kept = sum(1 for line in open(f"{out_d}/cache.jsonl") if '"type":"item"' in line)
    check(p.returncode == 1 and "cannot reach" in err and f"{kept} of {n_mc} results are in the cache" in err and kept >= 3,
          f"a server gone mid-run: a clear error, {kept} results kept", err)

    # 7. a fleet: two servers (one behind the proxy), items spread over both, the same scores
    proxy = Proxy(srv.url)
    out_f = f"{TMP}/fleet"
    aah_eval("--server", srv.url, "--server", proxy.url, "--data", DATA, "--tasks", "mmlu,hellaswag,gsm8k", "--regimes",
             "full_attention", "--max-length", str(L), "--max-gen-toks", str(MAX_GEN), "--concurrency", "4", "--out", out_f)
    n_f = sum(len(items[t]) for t in ("mmlu", "hellaswag", "gsm8k"))
    check(proxy.completions == n_f // 2, f"the fleet's second server got every other item ({proxy.completions} of {n_f})")
    sub = {"full_attention": {t: results["full_attention"][t] for t in ("mmlu", "hellaswag", "gsm8k")}}
    compare(out_f, {t: items[t] for t in ("mmlu", "hellaswag", "gsm8k")}, sub, ["full_attention"],
            ["mmlu", "hellaswag", "gsm8k"])
    proxy.close()

    # 8. the server gone: a finished run still re-renders from the cache
    srv.stop()
    r = aah_eval("--server", srv.url, *common, "--out", out)
    check(open(f"{out}/table9.csv").read() == table9 and tables_without_timing(out) == tables1
          and "0 requests this run" in r.stderr, "with the server stopped, a finished run re-renders the same tables",
          r.stderr)
    r = aah_eval("--server", srv.url, *common, "--limit", "1", "--out", f"{TMP}/o7", expect=1)
    check("cannot reach" in r.stderr, "…and a run that needs the server says it cannot reach it", r.stderr)
    print(f"test_eval: {checks} checks passed")


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in live:
            p.kill()
        subprocess.run(["rm", "-rf", TMP])
