#!/usr/bin/python3
"""tests/jinja/render_ref.py — the reference for server/jinja/jinja.h: renders TEMPLATE with the JSON object VARS as
Hugging Face transformers' apply_chat_template renders a chat template (its _compile_jinja_template): python3-jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols extension and {% generation %}, tojson replaced by
json.dumps with ensure_ascii=False, raise_exception and strftime_now. Usage and exit status as aah-jinja's:
render_ref.py TEMPLATE VARS.json (TEMPLATE a template file or a tokenizer_config.json); 0 rendered, 2 the template
does not parse, 3 raise_exception, 5 any other render error. The output goes to stdout as UTF-8, nothing added.

render_ref.py --cases CASES VARS.json --compare C.jsonl renders each case of a cases file (aah-jinja --cases's
format) and compares it with aah-jinja's line for it: the same output where Python renders, a failure where Python
fails (raise_exception's message the same). Prints each difference; exit status 1 when there is one."""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker as rendering sees it: {% generation %}…{% endgeneration %} is a call block
    whose body renders as it is (transformers also records where, for its assistant mask)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(format):
    return datetime.now().strftime(format)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def template_source(path):
    text = open(path, encoding="utf-8", newline="").read()
    try:
        cfg = json.loads(text)
    except ValueError:
        return text
    if not isinstance(cfg, dict) or "chat_template" not in cfg:
        return text
    t = cfg["chat_template"]
    if isinstance(t, list):
        t = next(row["template"] for row in t if row.get("name") == "default")
    return t


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    """(rc, output or error message) as aah-jinja reports them."""
    try:
        template = env.from_string(source)
    except (jinja2.exceptions.TemplateSyntaxError, jinja2.exceptions.TemplateAssertionError) as e:
        return 2, str(e)
    try:
        return 0, template.render(**variables)
    except RaisedByTemplate as e:
        return 3, e.message
    except Exception as e:  # any other render error: the C renderer must fail too
        return 5, f"{type(e).__name__}: {e}"


def read_cases(path):
    cases, name, lines = [], None, []
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    for line in text.split("\n"):
        if line.startswith("### "):
            if name is not None:
                cases.append((name, "\n".join(lines)))
            name, lines = line[4:], []
        elif name is not None:
            lines.append(line)
    if name is not None:
        cases.append((name, "\n".join(lines)))
    return cases


# What --lenient leaves out: templates that use printf-style % formatting, which aahd refuses and Python may take
# (docs/chat-templates.md lists the differences).


def compare_cases(cases_path, vars_path, c_path, lenient=False):
    with open(vars_path, encoding="utf-8") as f:
        variables = json.load(f)
    with open(c_path, encoding="utf-8") as f:
        got = [json.loads(line) for line in f if line.strip()]
    env = make_env()
    cases = read_cases(cases_path)
    bad = 0
    if len(got) != len(cases):
        print(f"aah-jinja rendered {len(got)} cases, the file has {len(cases)}")
        return 1
    skipped = 0
    for (name, source), c in zip(cases, got):
        # a fresh copy for each case: a template can change a list in place (indent's s += "\n" on a list)
        rc, text = render(env, source, json.loads(json.dumps(variables)))
        if c["name"] != name:
            print(f"case order differs: {name} / {c['name']}")
            return 1
        if lenient and "printf-style" in c.get("err", ""):
            skipped += 1
            continue
        if rc == 0 and (c["rc"] != 0 or c["out"] != text):
            bad += 1
            print(f"DIFFERS {name}:\n  python: {text[:2000]!r}\n  C:      {c.get('out', c.get('err'))[:2000]!r}")
        elif rc != 0 and c["rc"] == 0:
            bad += 1
            print(f"DIFFERS {name}: python fails ({text}), C renders {c['out']!r}")
        elif rc == 3 and (c["rc"] != 3 or c["err"] != text):
            bad += 1
            print(f"DIFFERS {name}: python raises {text!r}, C says {c['err']!r} (rc {c['rc']})")
    note = f" ({skipped} left out: % formatting)" if skipped else ""
    print(f"{len(cases) - skipped - bad} of {len(cases) - skipped} cases as python3-jinja2 renders them{note}")
    return 1 if bad else 0


def special_token(value):
    return value.get("content") if isinstance(value, dict) else value


def make_batch(out_path, data_dir, cache):
    import os
    with open(os.path.join(data_dir, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)["templates"]
    conv_dir = os.path.join(data_dir, "conversations")
    items = []
    for t in templates:
        if "config" in t:
            path = os.path.join(cache, t["config"])
            with open(path, encoding="utf-8") as f:
                cfg = json.load(f)
            tokens = {k: special_token(cfg.get(k)) for k in ("bos_token", "eos_token")}
        else:
            path = os.path.join(data_dir, t["template"])
            tokens = {k: t.get(k) for k in ("bos_token", "eos_token")}
        tokens = {k: v for k, v in tokens.items() if v is not None}
        for name in sorted(os.listdir(conv_dir)):
            with open(os.path.join(conv_dir, name), encoding="utf-8") as f:
                conv = json.load(f)
            expect = conv.pop("_expect", {}).get(t["name"], "ok")
            items.append({"name": f"{t['name']}/{name}", "template": path, "vars": {**tokens, **conv},
                          "expect": expect})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False)
    return 0


def compare_batch(list_path, c_path):
    with open(list_path, encoding="utf-8") as f:
        items = json.load(f)
    with open(c_path, encoding="utf-8") as f:
        got = [json.loads(line) for line in f if line.strip()]
    if len(got) != len(items):
        print(f"aah-jinja rendered {len(got)} items, the list has {len(items)}")
        return 1
    env = make_env()
    sources = {}
    bad = 0
    for item, c in zip(items, got):
        path = item["template"]
        if path not in sources:
            sources[path] = template_source(path)
        rc, text = render(env, sources[path], item["vars"])
        name = item["name"]
        want = 3 if item["expect"] == "raise" else 0
        if rc != want:
            bad += 1
            print(f"FIXTURE {name}: python3-jinja2 gives rc {rc} ({text[:200]!r}), the fixture expects {item['expect']}")
        elif rc == 0 and (c["rc"] != 0 or c["out"] != text):
            bad += 1
            print(f"DIFFERS {name}:\n  python: {text[:2000]!r}\n  C:      {c.get('out', c.get('err'))[:2000]!r}")
        elif rc == 3 and (c["rc"] != 3 or c["err"] != text):
            bad += 1
            print(f"DIFFERS {name}: python raises {text!r}, C says {c.get('err', c.get('out'))!r} (rc {c['rc']})")
    print(f"{len(items) - bad} of {len(items)} chat renders as python3-jinja2 renders them")
    return 1 if bad else 0


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--make-batch":
        return make_batch(sys.argv[2], sys.argv[3], sys.argv[4])
    if len(sys.argv) == 5 and sys.argv[1] == "--batch" and sys.argv[3] == "--compare":
        return compare_batch(sys.argv[2], sys.argv[4])
    if len(sys.argv) in (6, 7) and sys.argv[1] == "--cases" and sys.argv[4] == "--compare":
        if len(sys.argv) == 7 and sys.argv[6] != "--lenient":
            return 1
        return compare_cases(sys.argv[2], sys.argv[3], sys.argv[5], lenient=len(sys.argv) == 7)
    if len(sys.argv) != 3:
        print("usage: render_ref.py TEMPLATE VARS.json", file=sys.stderr)
        return 1
    with open(sys.argv[2], encoding="utf-8") as f:
        variables = json.load(f)
    rc, text = render(make_env(), template_source(sys.argv[1]), variables)
    if rc != 0:
        print(f"render_ref: {'raise_exception: ' if rc == 3 else ''}{text}", file=sys.stderr)
        return rc
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
