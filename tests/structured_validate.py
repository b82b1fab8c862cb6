#!/usr/bin/python3
"""tests/structured_validate.py — the independent judge of constrained outputs (tests/server/structured.test.mjs):
JSON Schema validation by Debian's python3-jsonschema, regular expressions by Python's re.fullmatch, choices by
membership, GBNF by tests/grammar_ref.py (an Earley recognizer that shares no code with engine/grammar/).

    /usr/bin/python3 tests/structured_validate.py < cases.json

cases.json: a list of {"name", "kind": "schema"|"regex"|"choice"|"gbnf", "spec", "outputs": [text, ...]}. Prints one
JSON object: {"checked": N, "failures": [{"name", "text", "why"}, ...]}; exit 0 either way (the caller asserts).
"""
import datetime
import json
import os
import urllib.parse
import re
import subprocess
import sys
import tempfile

import jsonschema


def check_schema(spec, text):
    try:
        value = json.loads(text)
    except ValueError as e:
        return 'not JSON: %s' % e
    try:
        jsonschema.validate(value, spec, format_checker=jsonschema.FormatChecker(formats=['date', 'uuid']))
    except jsonschema.ValidationError as e:
        return 'does not validate: %s' % e.message
    # Debian's jsonschema checks 'date' (calendar included) and 'uuid'; its 'time' is draft 3's HH:MM:SS and it has no
    # 'date-time' without optional packages: RFC 3339's are checked here (ABNF literals are case-insensitive: t, z)
    return check_formats(spec, value, spec)


FORMATS = {
    'date': r'\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])',
    'time': r'([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)',
    'date-time': r'\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?'
                 r'([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)',
    'uuid': r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}',
}


def resolve(root, schema):
    """A local $ref (#, #/$defs/x, #/definitions/x, JSON pointer escapes) followed to its schema."""
    for _ in range(64):
        if not (isinstance(schema, dict) and '$ref' in schema):
            return schema
        node = root
        for part in schema['$ref'][1:].split('/'):
            if part:
                node = node[urllib.parse.unquote(part).replace('~1', '/').replace('~0', '~')]
        schema = node
    return schema


def check_formats(root, value, schema, depth=0):
    """Walks value beside schema (properties, items, prefixItems, anyOf, $ref) and checks string formats."""
    schema = resolve(root, schema)
    if depth > 64 or not isinstance(schema, dict):
        return None
    if isinstance(value, str) and schema.get('format') in FORMATS:
        if not re.fullmatch(FORMATS[schema['format']], value):
            return 'format %s: %r' % (schema['format'], value)
        if schema['format'] in ('date', 'date-time'):
            try:
                datetime.date(int(value[0:4]), int(value[5:7]), int(value[8:10]))
            except ValueError:
                return 'format %s: %r is no calendar date' % (schema['format'], value)
    if isinstance(value, dict):
        for k, v in value.items():
            sub = schema.get('properties', {}).get(k)
            if sub is None and isinstance(schema.get('additionalProperties'), dict):
                sub = schema['additionalProperties']
            if sub is not None:
                why = check_formats(root, v, sub, depth + 1)
                if why:
                    return why
    if isinstance(value, list):
        prefix = schema.get('prefixItems', [])
        for i, v in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get('items')
            if isinstance(sub, dict):
                why = check_formats(root, v, sub, depth + 1)
                if why:
                    return why
    for key in ('anyOf', 'oneOf', 'allOf'):
        if key in schema:
            whys = [check_formats(root, value, s, depth + 1) for s in schema[key]]
            if key == 'allOf' and any(whys):
                return next(w for w in whys if w)
            if key != 'allOf' and all(whys):
                return whys[0]
    return None


def check_gbnf(cases):
    """Runs grammar_ref.py once per grammar over all its outputs."""
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    for c in cases:
        with tempfile.NamedTemporaryFile('w', suffix='.gbnf', delete=False) as g:
            g.write(c['spec'])
        try:
            r = subprocess.run(['/usr/bin/python3', os.path.join(here, 'grammar_ref.py'), g.name],
                               input=''.join(json.dumps(t) + '\n' for t in c['outputs']), capture_output=True,
                               text=True, timeout=600)
        finally:
            os.unlink(g.name)
        verdicts = r.stdout.split()
        if r.returncode != 0 or len(verdicts) != len(c['outputs']):
            out.append({'name': c['name'], 'text': '', 'why': 'grammar_ref.py failed: %s' % r.stderr[-500:]})
            continue
        for t, v in zip(c['outputs'], verdicts):
            if v != '1':
                out.append({'name': c['name'], 'text': t, 'why': 'not in the grammar (grammar_ref.py)'})
    return out


def main():
    cases = json.load(sys.stdin)
    failures = []
    checked = 0
    for c in cases:
        if c['kind'] == 'gbnf':
            continue
        for text in c['outputs']:
            checked += 1
            if c['kind'] == 'schema':
                why = check_schema(c['spec'], text)
            elif c['kind'] == 'regex':
                why = None if re.fullmatch(c['spec'], text) else 'no re.fullmatch'
            elif c['kind'] == 'choice':
                why = None if text in c['spec'] else 'not one of the choices'
            else:
                why = 'unknown kind %r' % c['kind']
            if why:
                failures.append({'name': c['name'], 'text': text, 'why': why})
    gb = [c for c in cases if c['kind'] == 'gbnf']
    checked += sum(len(c['outputs']) for c in gb)
    failures += check_gbnf(gb)
    print(json.dumps({'checked': checked, 'failures': failures}))


if __name__ == '__main__':
    main()
