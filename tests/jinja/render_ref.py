#!/usr/bin/python3
"""tests/jinja/render_ref.py — the reference for server/jinja.h: renders TEMPLATE with the JSON object VARS as
Hugging Face transformers' apply_chat_template renders a chat template (its _compile_jinja_template): python3-jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension, tojson replaced by
json.dumps with ensure_ascii=False, and raise_exception. Usage and exit status as aah-jinja's:
render_ref.py TEMPLATE VARS.json (TEMPLATE a template file or a tokenizer_config.json); 0 rendered, 2 the template
does not parse, 3 raise_exception, 5 any other render error. The output goes to stdout as UTF-8, nothing added."""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


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


def main():
    if len(sys.argv) != 3:
        print("usage: render_ref.py TEMPLATE VARS.json", file=sys.stderr)
        return 1
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(sys.argv[2], encoding="utf-8") as f:
        variables = json.load(f)
    try:
        template = env.from_string(template_source(sys.argv[1]))
    except jinja2.exceptions.TemplateSyntaxError as e:
        print(f"render_ref: line {e.lineno}: {e.message}", file=sys.stderr)
        return 2
    except jinja2.exceptions.TemplateAssertionError as e:
        print(f"render_ref: {e}", file=sys.stderr)
        return 2
    try:
        out = template.render(**variables)
    except RaisedByTemplate as e:
        print(f"render_ref: raise_exception: {e.message}", file=sys.stderr)
        return 3
    except Exception as e:  # any other render error: the C renderer must fail too
        print(f"render_ref: {type(e).__name__}: {e}", file=sys.stderr)
        return 5
    sys.stdout.buffer.write(out.encode("utf-8", "surrogatepass"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
