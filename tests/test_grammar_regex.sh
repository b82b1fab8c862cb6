#!/bin/sh
# tests/test_grammar_regex.sh — engine/grammar/regex.h against Python's re: each pattern's GBNF (through
# tests/grammar_regex_cli.c) is read by tests/grammar_ref.py, an independent recognizer, which must accept exactly the
# strings re.fullmatch matches and hold no unbounded repetition of a body that matches the empty string — for a table
# of patterns with hand-picked and random strings, RE2-only forms beside their Python equivalents, and 400 seeded
# random patterns with members generated from them (AAH_REGEX_RANDOM=N, AAH_REGEX_SEED=S for a longer or another
# run); then choices, refusals through the command line, and llama.cpp's sample grammars (tests/data/grammar/gbnf/)
# with their samples.
set -eu
BUILD=${AAH_BUILD:-build}
DATA=${AAH_TESTDATA:-tests/data}
fail() { echo "test_grammar_regex: FAILURE: $*"; exit 1; }
[ -x /usr/bin/python3 ] || fail "needs /usr/bin/python3"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# The command line is built here from the sources (regex.c needs only gbnf_text.c, base/bytebuf.c and models/errf.c), with the
# sanitizers when the sanitizer build is the one under test.
SAN=
case "$BUILD" in */san) SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;; esac
# shellcheck disable=SC2086,SC2046
${CC:-cc} -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -I. $SAN tests/grammar_regex_cli.c \
	engine/grammar/regex.c engine/grammar/gbnf_text.c base/bytebuf.c models/errf.c $(pkg-config --cflags --libs jansson) -o "$tmp/regex-gbnf" ||
	fail "cannot build tests/grammar_regex_cli.c"

/usr/bin/python3 - "$tmp/regex-gbnf" "$DATA/grammar/gbnf" <<'EOF' || fail "see above"
import glob, json, os, random, re, subprocess, sys
sys.path.insert(0, 'tests')
import grammar_ref

CLI, GBNF_DIR = sys.argv[1], sys.argv[2]
failures = []


def gbnf(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, encoding='utf-8')
    return r.returncode, r.stdout, r.stderr.strip()


def compare(pattern, strings, python=None, what='table'):
    """pattern's grammar against re.fullmatch(python or pattern) on every string; the count checked."""
    rc, text, err = gbnf('regex', pattern)
    if rc != 0:
        failures.append(f'{what}: {pattern!r} refused: {err}')
        return 0
    try:
        g = grammar_ref.load(text)
    except grammar_ref.GbnfError as e:
        failures.append(f'{what}: {pattern!r}: grammar_ref cannot read its GBNF ({e}):\n{text}')
        return 0
    if g.nullable_loops:
        failures.append(f'{what}: {pattern!r}: an unbounded repetition of a body that matches the empty string at '
                        f'{g.nullable_loops[0]} (left recursion to a GBNF engine):\n{text}')
        return 0
    py = re.compile(python if python is not None else pattern, re.ASCII)
    for s in strings:
        want = py.fullmatch(s) is not None
        if g.accepts(s) != want:
            failures.append(f'{what}: {pattern!r} on {s!r}: re says {want}, the grammar {not want}\n{text}')
            return 0
    return len(strings)


rng = random.Random(int(os.environ.get('AAH_REGEX_SEED', '20240611')))
POOL = 'ab1 \n.-_Aé\t"\\*日'   # no \v: RE2's \s lacks it, Python's has it


def random_strings(extra, n=120, longest=8):
    pool = sorted(set(POOL) | set(extra))
    return [''.join(rng.choice(pool) for _ in range(rng.randint(0, longest))) for _ in range(n)]


TABLE = [
    ('abc', ['abc', 'ab', 'abcd', '']),
    ('a*b+c?', ['b', 'aabbc', 'ac', 'abcc']),
    ('(ab|cd)*e', ['e', 'abcde', 'abce', 'cdabe', 'ab']),
    (r'[a-z]+@[a-z]+\.(com|org)', ['me@ex.com', 'me@ex.org', 'me@excom', 'Me@ex.com', '@ex.com']),
    (r'\d{3}-\d{4}', ['555-1234', '55-1234', '555-12345', '555 1234']),
    ('^[A-Z][a-z]*$', ['Hello', 'H', 'hello', 'HeLlo']),
    ('(a*)*b', ['b', 'ab', 'aaab', 'aa']),
    ('(a?b?)+', ['', 'a', 'ba', 'abab', 'bbaa', 'c']),
    ('((a|b)*c?)*d', ['d', 'abcd', 'ccd', 'acbcd', 'abc']),
    ('x{2,4}y{0,2}z{3}', ['xxzzz', 'xxxxyyzzz', 'xzzz', 'xxyyyzzz', 'xxxxxzzz']),
    (r'[^\n]*\n', ['\n', 'abc\n', 'a\nb\n', 'abc']),
    ('.+', ['a', '日本', '\n', 'a\nb', '\t']),
    (r'\w+\s\W', ['ab_1 .', 'a\t-', 'é -', 'a  ']),
    (r'[\d.]+', ['1.5', '...', '1a', '']),
    ('(?:foo|bar)?baz', ['baz', 'foobaz', 'barbaz', 'foobarbaz']),
    (r'(?P<year>\d{4})-(?P<m>\d\d)', ['2024-06', '24-06', '2024-6']),
    (r'caf\u00e9|日本', ['café', '日本', 'cafe', '日']),
    (r'\x41\u0043\t\n\r\f\a\0', ['AC\t\n\r\f\a\0', 'AC']),
    (r'[\]\-\\^]+', [']-\\^', '^', 'a', '[']),
    ('a|b|', ['', 'a', 'b', 'ab']),
    ('()', ['', 'a']),
    ('', ['', 'a']),
    (r'"[\"]+"', ['"""', '""', '"a"']),
    ('(a{2}){2,3}', ['aaaa', 'aaaaaa', 'aaaaa', 'aa']),
    (r'-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?', ['0', '-12.5e+3', '01', '1.', '1e5', '-']),
    ('((((a))))+', ['a', 'aaa', '']),
    ('a+?b*?c??d{1,2}?', ['ad', 'abbcdd', 'aaacd', 'abc']),
    ('[^abc]{2}', ['dd', 'ad', '\n\n', 'd']),
    (r'(\d+|[a-f]+)*', ['', '12ab3', 'abg', 'ff00']),
    (r'[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}', ['a.b+c@d-e.fg', 'a@b.c', 'a@@b.cd']),
    (r'\D\S\W', ['a.!', '1.!', 'a !', 'a.a']),
    ('(|a)(b|)', ['', 'a', 'b', 'ab', 'ba']),
    (r'[\s\S]', ['a', '\n', ' ', '日', '']),
    ('a{0}b{1}c{0,0}', ['b', 'ab', '']),
    (r'\.\*\+\?\(\)\[\]\{\}\|\^\$', ['.*+?()[]{}|^$']),
]
checked = 0
for pattern, samples in TABLE:
    extra = ''.join(samples) + pattern
    checked += compare(pattern, samples + random_strings(extra))

# RE2's own forms, compared with a Python pattern that means the same
RE2 = [
    (r'\x{1F600}\x{e9}', '\U0001F600\u00e9', ['😀é', '😀']),
    ('[[:alpha:]][[:digit:]]+[[:^space:]]', '[A-Za-z][0-9]+[^\t\n\v\f\r ]', ['a12x', 'a1 ', 'é1x', 'a1\v']),
    ('[[:punct:][:upper:]]+', '[!-/:-@\\[-`{-~A-Z]+', ['A!', '[`~', 'a', 'Z{']),
    (r'\Aab\z', 'ab', ['ab', 'a']),
    (r'\s+', '[\t\n\f\r ]+', [' \t', '\v', ' \v']),
    (r'[\s]', '[\t\n\f\r ]', ['\v', ' ']),
    ('a{,', 'a\\{,', ['a{,', 'a']),
    ('x{a}', 'x\\{a\\}', ['x{a}']),
    (r'[\b]', '\b', ['\b', 'b']),
    (r'\010\01\0', '\b\x01\x00', ['\b\x01\x00']),
]
for pattern, python, samples in RE2:
    checked += compare(pattern, samples + random_strings(''.join(samples)), python=python, what='RE2 form')

# ---- random patterns: (text, precedence, sampler); precedence 0 alternation, 1 concatenation, 2 repetition, 3 atom
CHARS = ['a', 'b', '1', ' ', r'\.', r'\*', r'\\', r'\n', r'\x41', 'é', r'\u65e5', '"', '-']
CLASSES = ['.', '[ab]', '[^a]', '[a-c]', r'\d', r'\w', r'\s', r'\D', r'[\d.]', r'[^\n]', '[^ab1]', r'[\\"]']
SAMPLE_POOL = sorted(set(POOL) | set('cdA'))


def members_of(atom):
    r = re.compile(atom, re.ASCII)
    return [ch for ch in SAMPLE_POOL if r.fullmatch(ch)]


def gen(depth):
    k = rng.random()
    if depth <= 0 or k < 0.3:
        if rng.random() < 0.6:
            t = rng.choice(CHARS)
            s = members_of(t)[0]   # the one character of the pool it matches
            return t, 3, lambda: s
        t = rng.choice(CLASSES)
        m = members_of(t)
        return t, 3, lambda: rng.choice(m)
    if k < 0.45:
        t, p, f = gen(depth - 1)
        return ('(' if rng.random() < 0.5 else '(?:') + t + ')', 3, f
    if k < 0.7:
        t, p, f = gen(depth - 1)
        if p < 3:
            t, f = '(?:' + t + ')', f
        lo = rng.randint(0, 2)
        q = rng.choice(['*', '+', '?', f'{{{lo}}}', f'{{{lo},}}', f'{{{lo},{lo + rng.randint(0, 2)}}}'])
        if rng.random() < 0.2:
            q += '?'
        if q[0] == '{':
            a, _, b = q.strip('{}?').partition(',')
            lo, hi = int(a), (int(b) if b else int(a) + 2) if _ else int(a)
        else:
            lo, hi = {'*': (0, 2), '+': (1, 3), '?': (0, 1)}[q[0]]
        return t + q, 2, lambda: ''.join(f() for _ in range(rng.randint(lo, hi)))
    if k < 0.87:
        parts = [gen(depth - 1) for _ in range(rng.randint(2, 3))]
        t = ''.join(x if p >= 1 else '(?:' + x + ')' for x, p, _ in parts)
        return t, 1, lambda: ''.join(f() for _, _, f in parts)
    parts = [gen(depth - 1) for _ in range(rng.randint(2, 3))]
    if rng.random() < 0.15:
        parts.append(('', 1, lambda: ''))
    return '|'.join(x for x, _, _ in parts), 0, lambda: rng.choice(parts)[2]()


def mutate(s):
    s = list(s)
    op = rng.randint(0, 2)
    if op == 0 and s:
        del s[rng.randrange(len(s))]
    elif op == 1:
        s.insert(rng.randint(0, len(s)), rng.choice(SAMPLE_POOL))
    elif s:
        s[rng.randrange(len(s))] = rng.choice(SAMPLE_POOL)
    return ''.join(s)


n_random = 0
for _ in range(int(os.environ.get('AAH_REGEX_RANDOM', '400'))):
    t, _, f = gen(rng.randint(1, 4))
    members = [f() for _ in range(8)]
    strings = members + [mutate(m) for m in members] + random_strings(t, n=16, longest=6)
    checked += compare(t, strings, what='random pattern')
    n_random += 1
    if len(failures) > 5:
        break

# ---- choices: members accepted, near misses refused
CHOICES = [['yes', 'no'], ['a"b', 'c\\d', '', '#x', ']', '\t\n', '\x01\x7f', 'é日😀'], ['same', 'same', 'sam']]
for ch in CHOICES:
    rc, text, err = gbnf('choice', *ch)
    if rc != 0:
        failures.append(f'choice {ch!r} refused: {err}')
        continue
    g = grammar_ref.load(text)
    near = [c + 'x' for c in ch] + [c[:-1] for c in ch if c] + ['x' + c for c in ch] + ['YES', 'nope', ' ']
    for s in ch + near:
        if g.accepts(s) != (s in ch):
            failures.append(f'choice {ch!r} on {s!r}: expected {s in ch}\n{text}')
    checked += len(ch) + len(near)
rc, _, err = gbnf('choice')
if rc == 0 or 'no choices' not in err:
    failures.append(f'choice of nothing: rc {rc}, {err!r}')

# ---- refusals through the command line: exit status 1 and the construct named with its offset
REFUSED = [('a(?i)b', "regex flag group '(?i' at offset 1 is not supported"),
           ('(a)\\1', "regex backreference '\\1' at offset 3"), ('x(?=y)', "lookahead '(?=' at offset 1"),
           ('(?<!a)b', "lookbehind '(?<!' at offset 0"), ('ab\\b', "word boundary '\\b' at offset 2"),
           ('a^b', "anchor '^' at offset 1"), ('a$b', "anchor '$' at offset 1"), ('a++', "possessive quantifier '++'"),
           ('\\p{L}', "Unicode class '\\p' at offset 0"), ('a{1001}', 'over 1000'), ('[^\\x00-\\x{10FFFF}]', 'empty'),
           ('(ab', "missing ')' for '(' at offset 0"), ('ab)', "unbalanced ')' at offset 2"),
           ('ab\\', 'trailing backslash at offset 2'), ('*a', 'nothing to repeat')]
for pattern, want in REFUSED:
    rc, out, err = gbnf('regex', pattern)
    if rc != 1 or want not in err or out:
        failures.append(f'refusal of {pattern!r}: exit {rc}, message {err!r}, want {want!r}')
with open(os.path.join(os.path.dirname(CLI), 'bad.re'), 'wb') as f:
    f.write(b'ab\xffc')
rc, _, err = gbnf('regex-file', os.path.join(os.path.dirname(CLI), 'bad.re'))
if rc != 1 or 'not valid UTF-8 at offset 2' not in err:
    failures.append(f'invalid UTF-8: exit {rc}, {err!r}')

# ---- llama.cpp's grammars: each read, its samples accepted and refused as written
n_gbnf = 0
for path in sorted(glob.glob(os.path.join(GBNF_DIR, '*.gbnf'))):
    with open(path, encoding='utf-8') as f:
        try:
            g = grammar_ref.load(f.read())
        except grammar_ref.GbnfError as e:
            failures.append(f'{path}: {e}')
            continue
    with open(path[:-len('.gbnf')] + '.samples.json', encoding='utf-8') as f:
        samples = json.load(f)
    for want, key in ((True, 'accept'), (False, 'reject')):
        for s in samples[key]:
            if g.accepts(s) != want:
                failures.append(f'{path}: {s!r} should be {"accepted" if want else "refused"}')
    n_gbnf += 1
if n_gbnf < 4:
    failures.append(f'only {n_gbnf} sample grammars in {GBNF_DIR}')

for f in failures[:10]:
    print('test_grammar_regex: FAILURE:', f)
print(f'test_grammar_regex: {checked} strings over {len(TABLE)} table patterns, {len(RE2)} RE2 forms, '
      f'{n_random} random patterns, {len(CHOICES)} choice lists; {n_gbnf} llama.cpp grammars')
sys.exit(1 if failures else 0)
EOF

# the reference's own command line: one answer a line, and --check
printf 'root ::= "a"+ | [0-9]\n' >"$tmp/g.gbnf"
printf '"aaa"\n"7"\n""\n"a7"\n' | /usr/bin/python3 tests/grammar_ref.py "$tmp/g.gbnf" >"$tmp/out" || fail "grammar_ref.py failed"
[ "$(tr '\n' ' ' <"$tmp/out")" = "1 1 0 0 " ] || fail "grammar_ref.py answered $(tr '\n' ' ' <"$tmp/out")"
/usr/bin/python3 tests/grammar_ref.py --check "$tmp/g.gbnf" || fail "grammar_ref.py --check refused a good grammar"
printf 'root ::= undefined-rule\n' >"$tmp/bad.gbnf"
if /usr/bin/python3 tests/grammar_ref.py --check "$tmp/bad.gbnf" 2>"$tmp/err"; then
	fail "grammar_ref.py --check took an undefined rule"
fi
grep -q "undefined-rule" "$tmp/err" || fail "grammar_ref.py --check did not name the rule: $(cat "$tmp/err")"

echo "test_grammar_regex: all passed"
