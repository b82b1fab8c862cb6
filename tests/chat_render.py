#!/usr/bin/python3
# tests/chat_render.py — the reference prompts of the chat tests (tests/server/chat.test.mjs): TEMPLATE rendered with
# each JSON object of the array VARS.json by tests/jinja/render_ref.py (python3-jinja2 as transformers'
# apply_chat_template sets it up), printed as one JSON array of strings — one Python start for many conversations.
# Usage: chat_render.py TEMPLATE VARS.json; exits with render_ref's status (and its message on stderr) when a render
# fails.
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "jinja"))
import render_ref  # noqa: E402

env = render_ref.make_env()
source = render_ref.template_source(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    variables = json.load(f)
out = []
for v in variables:
    rc, text = render_ref.render(env, source, v)
    if rc != 0:
        sys.stderr.write(f"{text}\n")
        sys.exit(rc)
    out.append(text)
sys.stdout.buffer.write(json.dumps(out, ensure_ascii=False).encode("utf-8"))
