#!/usr/bin/python3
# tests/chat_render.py — the reference rendering of a chat template: Debian's python3-jinja2 set up as Hugging Face
# transformers' apply_chat_template sets it up (an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
# the loopcontrols extension, tojson with ensure_ascii=False, raise_exception). Usage: chat_render.py TEMPLATE VARS.json
# (the variables as one JSON object); prints the rendered prompt to stdout, byte for byte, or exits 3 with the
# template's exception on stderr. With VARS.json a JSON array of such objects, prints a JSON array of the renderings
# (one Python start for many conversations).
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(sys.argv[1], encoding="utf-8") as f:
    template = env.from_string(f.read())
with open(sys.argv[2], encoding="utf-8") as f:
    variables = json.load(f)
try:
    if isinstance(variables, list):
        out = json.dumps([template.render(**v) for v in variables], ensure_ascii=False)
    else:
        out = template.render(**variables)
except TemplateError as e:
    sys.stderr.write(f"{e}\n")
    sys.exit(3)
sys.stdout.buffer.write(out.encode("utf-8"))
