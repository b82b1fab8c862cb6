#!/usr/bin/python3
"""tests/grammar_ref.py — an independent GBNF recognizer, the reference the C grammar code is tested against: it
parses GBNF text itself (llama.cpp's dialect, as engine/grammar/grammar.h describes it) into a context-free grammar
over Unicode code points and decides membership with an Earley recognizer. It shares no code with engine/grammar/.

    /usr/bin/python3 tests/grammar_ref.py GRAMMAR.gbnf < strings.jsonl   # one JSON string a line in; 1 or 0 a line out
    /usr/bin/python3 tests/grammar_ref.py --check GRAMMAR.gbnf           # parses only: exit 0, or 1 with the error

Semantics: the language of rule `root`, whole strings. `.` is any code point (newline too); string literals and
classes hold code points, escapes \\n \\r \\t \\\\ \\" \\' \\[ \\] \\- \\^ \\/ \\xHH \\uHHHH \\UHHHHHHHH give code points;
a postfix applies to the whole item before it (a whole literal, a group, a class, a rule name); x{m,n} is m copies
of x and then up to n-m more. A rule's body runs until the next `name ::=` or the end (so it may span lines).
Stricter than that it does not try to be: left recursion, nullable repetitions, ambiguity — Earley takes them all.
"""
import json
import sys

MAX_CP = 0x10FFFF
MAX_REPEAT = 10000


class GbnfError(Exception):
    pass


# ---- the text ----

ESCAPES = {'n': 0x0A, 'r': 0x0D, 't': 0x09, '\\': 0x5C, '"': 0x22, "'": 0x27, '[': 0x5B, ']': 0x5D, '-': 0x2D,
           '^': 0x5E, '/': 0x2F}
HEX_DIGITS = {'x': 2, 'u': 4, 'U': 8}


def is_name_char(ch):
    return ch.isascii() and (ch.isalnum() or ch in '-_')


class Lexer:
    """The GBNF text as tokens: (kind, value, offset). Kinds: name, defn (::=), bar, lparen, rparen, lit (a list of
    code points), cls ((negated, [(lo, hi)])), dot, rep ((min, max or None))."""

    def __init__(self, text):
        self.t = text
        self.i = 0
        self.tokens = []
        while True:
            self.skip_space()
            if self.i >= len(self.t):
                break
            self.tokens.append(self.token())

    def where(self, at):
        line = self.t.count('\n', 0, at) + 1
        col = at - (self.t.rfind('\n', 0, at) + 1) + 1
        return f'line {line}, column {col}'

    def fail(self, at, msg):
        raise GbnfError(f'{self.where(at)}: {msg}')

    def skip_space(self):
        while self.i < len(self.t):
            ch = self.t[self.i]
            if ch in ' \t\r\n':
                self.i += 1
            elif ch == '#':
                while self.i < len(self.t) and self.t[self.i] != '\n':
                    self.i += 1
            else:
                break

    def char(self, closing):
        """One code point of a literal or class (escapes decoded)."""
        at = self.i
        if self.i >= len(self.t):
            self.fail(at, f"missing '{closing}'")
        ch = self.t[self.i]
        if ch != '\\':
            self.i += 1
            return ord(ch)
        if self.i + 1 >= len(self.t):
            self.fail(at, 'backslash at the end')
        e = self.t[self.i + 1]
        if e in ESCAPES:
            self.i += 2
            return ESCAPES[e]
        if e in HEX_DIGITS:
            n = HEX_DIGITS[e]
            digits = self.t[self.i + 2:self.i + 2 + n]
            if len(digits) != n or any(d not in '0123456789abcdefABCDEF' for d in digits):
                self.fail(at, f'\\{e} needs {n} hex digits')
            v = int(digits, 16)
            if v > MAX_CP:
                self.fail(at, f'\\{e}{digits} is past U+10FFFF')
            self.i += 2 + n
            return v
        self.fail(at, f'unknown escape \\{e}')

    def count(self):
        j = self.i
        while self.i < len(self.t) and self.t[self.i].isdigit() and self.t[self.i].isascii():
            self.i += 1
        return int(self.t[j:self.i]) if self.i > j else None

    def token(self):
        at = self.i
        t = self.t
        ch = t[at]
        if t.startswith('::=', at):
            self.i += 3
            return ('defn', None, at)
        if is_name_char(ch):
            while self.i < len(t) and is_name_char(t[self.i]):
                self.i += 1
            return ('name', t[at:self.i], at)
        simple = {'|': 'bar', '(': 'lparen', ')': 'rparen', '.': 'dot'}
        if ch in simple:
            self.i += 1
            return (simple[ch], None, at)
        if ch in '*+?':
            self.i += 1
            return ('rep', {'*': (0, None), '+': (1, None), '?': (0, 1)}[ch], at)
        if ch == '"':
            self.i += 1
            cps = []
            while True:
                if self.i >= len(t):
                    self.fail(at, "string literal without its closing '\"'")
                if t[self.i] == '"':
                    self.i += 1
                    return ('lit', cps, at)
                cps.append(self.char('"'))
        if ch == '[':
            self.i += 1
            neg = self.i < len(t) and t[self.i] == '^'
            if neg:
                self.i += 1
            ranges = []
            while True:
                if self.i >= len(t):
                    self.fail(at, "class without its closing ']'")
                if t[self.i] == ']':
                    self.i += 1
                    return ('cls', (neg, ranges), at)
                lo = self.char(']')
                hi = lo
                if self.i + 1 < len(t) and t[self.i] == '-' and t[self.i + 1] != ']':
                    self.i += 1
                    hi = self.char(']')
                    if hi < lo:
                        self.fail(at, f'class range U+{lo:04X}-U+{hi:04X} runs backwards')
                ranges.append((lo, hi))
        if ch == '{':
            self.i += 1
            self.skip_blank()
            lo = self.count()
            self.skip_blank()
            hi = lo
            if self.i < len(t) and t[self.i] == ',':
                self.i += 1
                self.skip_blank()
                hi = self.count()
                self.skip_blank()
                if lo is None:
                    lo = 0
                    if hi is None:
                        self.fail(at, 'repetition {,} needs a count')
            if lo is None or self.i >= len(t) or t[self.i] != '}':
                self.fail(at, 'bad repetition: {m}, {m,}, {m,n} or {,n}')
            self.i += 1
            if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
                self.fail(at, f'repetition count over {MAX_REPEAT}')
            if hi is not None and hi < lo:
                self.fail(at, f'repetition {{{lo},{hi}}} has its minimum over its maximum')
            return ('rep', (lo, hi), at)
        self.fail(at, f'unexpected {ch!r}')

    def skip_blank(self):
        while self.i < len(self.t) and self.t[self.i] in ' \t':
            self.i += 1


# ---- the grammar: nonterminals numbered, each a list of alternatives, each a tuple of symbols ----
# A symbol is ('t', (negated, ranges)) — one code point — or ('n', index).

ANY = ('t', (True, ()))


class Grammar:
    def __init__(self, text, root='root'):
        lx = Lexer(text)
        self.lx = lx
        self.toks = lx.tokens
        self.k = 0
        self.rules = []          # index -> list of alternatives
        self.names = {}          # rule name -> index
        self.name_at = {}        # rule name -> offset of its first use, for the message
        self.defined = set()
        self.loops = []          # (symbol repeated without bound, offset of its `*`, `+` or `{m,}`)
        while self.k < len(self.toks):
            self.rule()
        for name, at in self.name_at.items():
            if name not in self.defined:
                lx.fail(at, f"rule '{name}' is used but not defined")
        if root not in self.defined:
            raise GbnfError(f"no rule '{root}'")
        self.root = self.names[root]
        self.nullable = self.find_nullable()
        # Unbounded repetitions whose body matches the empty string: Earley takes them, but an engine that compiles
        # x* to `r ::= x r | ""` sees left recursion there and refuses the grammar (llama.cpp does).
        self.nullable_loops = [lx.where(at) for g, at in self.loops if g[0] == 'n' and self.nullable[g[1]]]

    def peek(self, ahead=0):
        return self.toks[self.k + ahead] if self.k + ahead < len(self.toks) else (None, None, len(self.lx.t))

    def new_nt(self, alts=None):
        self.rules.append(alts if alts is not None else [])
        return len(self.rules) - 1

    def ref(self, name, at):
        if name not in self.names:
            self.names[name] = self.new_nt()
            self.name_at[name] = at
        return self.names[name]

    def rule(self):
        kind, name, at = self.peek()
        if kind != 'name' or self.peek(1)[0] != 'defn':
            self.lx.fail(at, 'expected a rule: name ::= …')
        if name in self.defined:
            self.lx.fail(at, f"rule '{name}' is defined twice")
        self.defined.add(name)
        nt = self.ref(name, at)
        self.k += 2
        self.rules[nt] = self.alternatives(top=True)

    def at_rule_end(self, top):
        kind = self.peek()[0]
        if kind is None:
            return True
        return top and kind == 'name' and self.peek(1)[0] == 'defn'

    def alternatives(self, top):
        alts = [self.sequence(top)]
        while self.peek()[0] == 'bar':
            self.k += 1
            alts.append(self.sequence(top))
        return alts

    def sequence(self, top):
        seq = []
        while not self.at_rule_end(top):
            kind, val, at = self.peek()
            if kind in ('bar', 'rparen'):
                if kind == 'rparen' and top:
                    self.lx.fail(at, "')' without '('")
                break
            self.k += 1
            if kind == 'lit':
                item = [('t', (False, ((cp, cp),))) for cp in val]
            elif kind == 'cls':
                item = [('t', (val[0], tuple(val[1])))]
            elif kind == 'dot':
                item = [ANY]
            elif kind == 'name':
                item = [('n', self.ref(val, at))]
            elif kind == 'lparen':
                inner = self.alternatives(top=False)
                if self.peek()[0] != 'rparen':
                    self.lx.fail(at, "'(' without ')'")
                self.k += 1
                item = [('n', self.new_nt(inner))]
            elif kind == 'rep':
                self.lx.fail(at, 'a repetition with nothing before it')
            else:
                self.lx.fail(at, f'unexpected {kind}')
            while self.peek()[0] == 'rep':
                item = self.repeat(item, *self.peek()[1], at=self.peek()[2])
                self.k += 1
            seq.extend(item)
        return tuple(seq)

    def repeat(self, item, lo, hi, at):
        """item{lo,hi} (hi None: no bound) as symbols: lo copies, then a chain of optional ones or a star."""
        g = item[0] if len(item) == 1 else ('n', self.new_nt([tuple(item)]))
        out = [g] * lo
        if hi is None:
            self.loops.append((g, at))
            star = self.new_nt()
            self.rules[star] = [(g, ('n', star)), ()]
            out.append(('n', star))
        else:
            tail = None
            for _ in range(hi - lo):
                nt = self.new_nt()
                self.rules[nt] = [(g,) + ((tail,) if tail else ()), ()]
                tail = ('n', nt)
            if tail:
                out.append(tail)
        return out

    def find_nullable(self):
        nullable = [False] * len(self.rules)
        changed = True
        while changed:
            changed = False
            for nt, alts in enumerate(self.rules):
                if not nullable[nt] and any(all(s[0] == 'n' and nullable[s[1]] for s in alt) for alt in alts):
                    nullable[nt] = True
                    changed = True
        return nullable

    def accepts(self, s):
        """Whether s (a str) is a sentence of the grammar: Earley over its code points, nullable nonterminals handled
        as Aycock and Horspool do (predicting one also steps over it)."""
        n = len(s)
        rules, nullable = self.rules, self.nullable
        sets = [set() for _ in range(n + 1)]
        waiting = [dict() for _ in range(n + 1)]   # position -> nonterminal -> items whose next symbol it is
        start = [(self.root, a, 0, 0) for a in range(len(rules[self.root]))]
        sets[0].update(start)
        work = list(start)
        for i in range(n + 1):
            cp = ord(s[i]) if i < n else None
            if i > 0:
                work = list(sets[i])
            while work:
                item = work.pop()
                nt, a, dot, origin = item
                alt = rules[nt][a]
                if dot == len(alt):
                    for w in waiting[origin].get(nt, ()):
                        adv = (w[0], w[1], w[2] + 1, w[3])
                        if adv not in sets[i]:
                            sets[i].add(adv)
                            work.append(adv)
                    continue
                kind, v = alt[dot]
                if kind == 't':
                    if cp is not None and match(v, cp):
                        sets[i + 1].add((nt, a, dot + 1, origin))
                    continue
                lst = waiting[i].setdefault(v, [])
                first = not lst
                lst.append(item)
                if first:
                    for b in range(len(rules[v])):
                        p = (v, b, 0, i)
                        if p not in sets[i]:
                            sets[i].add(p)
                            work.append(p)
                # v may have completed at i already, before this item waited for it: only a nullable v can have
                if nullable[v]:
                    adv = (nt, a, dot + 1, origin)
                    if adv not in sets[i]:
                        sets[i].add(adv)
                        work.append(adv)
            if i < n and not sets[i + 1]:
                return False
        return any(nt == self.root and dot == len(rules[nt][a]) and origin == 0 for nt, a, dot, origin in sets[n])


def match(cls, cp):
    neg, ranges = cls
    for lo, hi in ranges:
        if lo <= cp <= hi:
            return not neg
    return neg


def load(text, root='root'):
    return Grammar(text, root)


def main(argv):
    check = '--check' in argv
    args = [a for a in argv[1:] if a != '--check']
    if len(args) != 1:
        print('usage: grammar_ref.py [--check] GRAMMAR.gbnf < strings.jsonl', file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding='utf-8') as f:
            text = f.read()
        g = load(text)
    except (GbnfError, OSError, UnicodeDecodeError) as e:
        print(f'grammar_ref: {args[0]}: {e}', file=sys.stderr)
        return 1
    if check:
        return 0
    out = []
    for line in sys.stdin:
        if not line.strip():
            continue
        s = json.loads(line)
        if not isinstance(s, str):
            print(f'grammar_ref: not a JSON string: {line.strip()}', file=sys.stderr)
            return 2
        out.append('1' if g.accepts(s) else '0')
    sys.stdout.write(''.join(x + '\n' for x in out))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
