#!/bin/sh
# tests/test_grammar_schema.sh — engine/grammar/json_schema.c against two independent references: python3-jsonschema
# says which values a schema admits (so the corpus itself is right), and tests/grammar_ref.py, a GBNF recognizer that
# shares no code with engine/grammar/, says which texts the grammar aah-grammar prints admits. For every schema of
# tests/data/grammar/schemas/ each "valid" value must be accepted as json.dumps writes it (default separators,
# compact, indent=2), each "invalid" one rejected, and the raw texts "valid_text"/"invalid_text" likewise; then
# integer ranges and dates are swept against Python's own arithmetic, and every schema of unsupported/ is refused
# with an error naming its keyword.
set -eu
BUILD=${AAH_BUILD:-build}
DATA=${AAH_TESTDATA:-tests/data}
fail() { echo "test_grammar_schema: FAILURE: $*"; exit 1; }
[ -x "$BUILD/aah-grammar" ] || fail "$BUILD/aah-grammar is not built"
[ -f tests/grammar_ref.py ] || fail "tests/grammar_ref.py is missing"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null ||
	fail "needs /usr/bin/python3 with jsonschema (deploy/deps.sh installs python3-jsonschema)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

/usr/bin/python3 - "$BUILD/aah-grammar" "$DATA/grammar" "$tmp" <<'EOF'
import datetime
import glob
import json
import os
import random
import re
import subprocess
import sys

import jsonschema

tool, data, tmp = sys.argv[1:4]
failures = []


def fail(msg):
    failures.append(msg)
    print('test_grammar_schema: FAILURE: ' + msg)


# ---- the formats as RFC 3339 and RFC 4122 write them (python3-jsonschema checks time and date-time only with
# rfc3339-validator, and its date takes whatever datetime.date.fromisoformat takes, e.g. 20230101) ----
checker = jsonschema.FormatChecker(formats=())
TIME = re.compile(r'([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-]([0-9]{2}):([0-9]{2}))', re.ASCII)


@checker.checks('date', raises=ValueError)
def is_date(s):
    if not isinstance(s, str):
        return True
    return bool(re.fullmatch(r'[0-9]{4}-[0-9]{2}-[0-9]{2}', s, re.ASCII)) and bool(datetime.date.fromisoformat(s))


@checker.checks('time')
def is_time(s):
    if not isinstance(s, str):
        return True
    m = TIME.fullmatch(s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    # a leap second (60) is valid only at 23:59 UTC; the grammar admits no leap second at all, and the corpus has none
    if h > 23 or mi > 59 or sec > 59:
        return False
    return not m[6] or (int(m[6]) <= 23 and int(m[7]) <= 59)


@checker.checks('date-time', raises=ValueError)
def is_date_time(s):
    if not isinstance(s, str):
        return True
    parts = re.split('[Tt]', s, maxsplit=1)
    return len(parts) == 2 and is_date(parts[0]) and is_time(parts[1])


@checker.checks('uuid')
def is_uuid(s):
    if not isinstance(s, str):
        return True
    return bool(re.fullmatch(r'[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}', s, re.ASCII))


def validates(schema, value):
    return jsonschema.Draft202012Validator(schema, format_checker=checker).is_valid(value)


def grammar(schema_text, what):
    path = os.path.join(tmp, 'schema.json')
    with open(path, 'w') as f:
        f.write(schema_text)
    r = subprocess.run([tool, 'schema', path], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f'{what}: aah-grammar refused it: {r.stderr.strip()}')
        return None
    again = subprocess.run([tool, 'schema', path], capture_output=True, text=True)
    if again.stdout != r.stdout:
        fail(f'{what}: two conversions of one schema differ')
    gpath = os.path.join(tmp, 'g.gbnf')
    with open(gpath, 'w') as f:
        f.write(r.stdout)
    return gpath


def recognize(gpath, texts, what):
    """1/0 per text from tests/grammar_ref.py, or None when it failed."""
    r = subprocess.run(['/usr/bin/python3', 'tests/grammar_ref.py', gpath],
                       input=''.join(json.dumps(t) + '\n' for t in texts), capture_output=True, text=True)
    out = r.stdout.split()
    if r.returncode != 0 or len(out) != len(texts):
        fail(f'{what}: grammar_ref.py failed: {r.stderr.strip()[-400:]}')
        return None
    return [o == '1' for o in out]


def serializations(v):
    out = [json.dumps(v, ensure_ascii=False), json.dumps(v, ensure_ascii=False, separators=(',', ':')),
           json.dumps(v, ensure_ascii=False, indent=2)]
    return list(dict.fromkeys(out))


# ---- the corpus ----
files = sorted(glob.glob(os.path.join(data, 'schemas', '*.json')))
if len(files) < 32:
    fail(f'only {len(files)} schemas in {data}/schemas')
checked = 0
for path in files:
    name = os.path.basename(path)
    with open(path) as f:
        case = json.load(f)
    schema = case['schema']
    jsonschema.Draft202012Validator.check_schema(schema)
    texts, want = [], []
    for v in case['valid']:
        if not validates(schema, v):
            fail(f'{name}: corpus: {json.dumps(v)} is listed valid but python3-jsonschema rejects it')
        for t in serializations(v):
            texts.append(t)
            want.append(True)
    for v in case['invalid']:
        if validates(schema, v):
            fail(f'{name}: corpus: {json.dumps(v)} is listed invalid but python3-jsonschema accepts it')
        for t in serializations(v):
            texts.append(t)
            want.append(False)
    for t in case.get('valid_text', []):
        if not validates(schema, json.loads(t)):
            fail(f'{name}: corpus: valid_text {t!r} does not validate')
        texts.append(t)
        want.append(True)
    for t in case.get('invalid_text', []):
        texts.append(t)
        want.append(False)
    gpath = grammar(json.dumps(schema, ensure_ascii=False), name)
    if not gpath:
        continue
    got = recognize(gpath, texts, name)
    if got is None:
        continue
    for t, w, g in zip(texts, want, got):
        checked += 1
        if w != g:
            fail(f'{name}: the grammar {"rejects" if w else "accepts"} {t!r}')

# ---- integer ranges: every integer near the bounds and the digit-count steps, against Python ----
rng = random.Random(7)
bounds = [(0, None), (None, 0), (1, 9), (-9, -1), (-50, 1234), (10, 10), (-1, 1), (99, 101), (-100, -99),
          (7, 1000000), (None, -1005), (123, 456789), (-98765, -4321), (0, 9999999999999999),
          (5, None), (None, 5)]
for _ in range(14):
    a = rng.randint(-10 ** rng.randint(0, 7), 10 ** rng.randint(0, 7))
    bounds.append((a, a + rng.randint(0, 10 ** rng.randint(0, 6))))
for lo, hi in bounds:
    for excl in (False, True):
        schema = {'type': 'integer'}
        if lo is not None:
            schema['exclusiveMinimum' if excl else 'minimum'] = lo - 1 if excl else lo
        if hi is not None:
            schema['exclusiveMaximum' if excl else 'maximum'] = hi + 1 if excl else hi
        what = 'integer range ' + json.dumps(schema)
        gpath = grammar(json.dumps(schema), what)
        if not gpath:
            continue
        probe = set(range(-30, 31))
        for b in (lo, hi):
            if b is not None:
                probe.update(range(b - 30, b + 31))
        for p in range(1, 17):
            probe.update((10 ** p - 1, 10 ** p, -(10 ** p) + 1, -(10 ** p)))
        probe.update(rng.randint(-10 ** 8, 10 ** 8) for _ in range(200))
        probe = sorted(x for x in probe if abs(x) < 10 ** 17)
        got = recognize(gpath, [str(x) for x in probe] + ['-0', '00', '01', '-01', '+1', '1.0'], what)
        if got is None:
            continue
        for x, g in zip(probe, got):
            w = (lo is None or x >= lo) and (hi is None or x <= hi) and abs(x) < 10 ** 16
            if w != g:
                fail(f'{what}: {x} is {"accepted" if g else "rejected"}')
        zero = (lo is None or lo <= 0) and (hi is None or hi >= 0)
        if got[len(probe)] != zero or any(got[len(probe) + 1:]):
            fail(f'{what}: -0, 00, 01, -01, +1 or 1.0 wrongly accepted or rejected')

# ---- dates: 29 February of years 1..2800, and every day of 2023 and 2024 with days 29-32 of every month ----
gpath = grammar('{"type": "string", "format": "date"}', 'date sweep')
if gpath:
    texts, want = [], []
    for y in range(0, 2801):
        texts.append(f'"{y:04d}-02-29"')
        want.append(y > 0 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0))
    for y in (2023, 2024):
        for m in range(0, 14):
            for d in range(0, 33):
                texts.append(f'"{y}-{m:02d}-{d:02d}"')
                try:
                    datetime.date(y, m, d)
                    want.append(True)
                except ValueError:
                    want.append(False)
    got = recognize(gpath, texts, 'date sweep')
    for t, w, g in zip(texts, want, got or []):
        if w != g:
            fail(f'date sweep: {t} is {"accepted" if g else "rejected"}')

# ---- refusals ----
unsupported = sorted(glob.glob(os.path.join(data, 'unsupported', '*.json')))
for path in unsupported:
    name = os.path.basename(path)
    with open(path) as f:
        case = json.load(f)
    spath = os.path.join(tmp, 'u.json')
    with open(spath, 'w') as f:
        json.dump(case['schema'], f)
    r = subprocess.run([tool, 'schema', spath], capture_output=True, text=True)
    if r.returncode == 0 or case['expect_error'] not in r.stderr or 'is not supported' not in r.stderr:
        fail(f'{name}: expected a refusal naming {case["expect_error"]}, got rc {r.returncode}: {r.stderr.strip()}')

print(f'test_grammar_schema: {len(files)} schemas, {checked} texts, {len(bounds) * 2} integer ranges, '
      f'{len(unsupported)} refusals checked')
sys.exit(1 if failures else 0)
EOF
echo "test_grammar_schema: all passed"
