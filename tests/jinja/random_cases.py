#!/usr/bin/python3
"""tests/jinja/random_cases.py — writes N random templates (seeded: the same ones each run) in aah-jinja --cases'
format, over the variables of tests/jinja/language_vars.json: expressions mixing every operator, filter, test and
method the interpreter has, inside for, if and set, with whitespace control around them. tests/test_jinja.sh renders
them in C and with python3-jinja2 and compares (render_ref.py --lenient). Usage: random_cases.py SEED N"""
import random
import sys

random.seed(int(sys.argv[1]))
atoms = ["s", "u", "ws", "n", "neg", "f", "big", "tiny", "t", "no", "nil", "empty", "zero", "lst", "words", "mixed",
         "nested", "d", "quotes", "ctrl", "msgs", "tools", "missing", "1", "0", "-1", "2.5", "'x'", "''", "'a b'",
         "[1, 2]", "[]", "{}", "{'k': 1}", "(1, 2)", "none", "true", "false", "msgs[0]", "d.m", "lst[0]", "'é日'",
         "'  sp  '", "'a,b'", "3", "10", "0.5", "1e20", "'\\n'", "[none]", "['b', 'a']"]
names = [a for a in atoms if a[0].isalpha() and a not in ("none", "true", "false")]
# filters that give generators are followed by | list: a generator prints with its address
filters = ["length", "trim", "tojson", "first", "last", "join", "join(',')", "default('D')", "capitalize", "list",
           "upper", "lower", "title", "string", "int", "float", "abs", "round", "reverse | list", "sort | list", "unique | list",
           "items | list", "tojson(indent=2)", "default('D', true)", "replace('a', 'b')", "sum", "min", "max",
           "selectattr('role') | list", "map(attribute='role') | list", "reject('none') | list", "select('string') | list", "count",
           "join(attribute='role')", "indent(2)", "wordcount", "tojson(sort_keys=true)"]
tests = ["defined", "undefined", "none", "string", "mapping", "sequence", "number", "integer", "float", "boolean",
         "true", "false", "iterable", "odd", "even", "callable", "lower", "upper", "eq 1", "in lst", "divisibleby 2"]
methods = ["upper()", "lower()", "strip()", "split()", "split(',')", "startswith('a')", "endswith('d')",
           "replace('l', 'L')", "title()", "capitalize()", "find('o')", "items()", "keys()", "values()", "get('a')",
           "count('a')", "index(1)", "lstrip()", "rstrip('d')", "rsplit(' ', 1)", "isdigit()", "splitlines()"]
binops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or", "**"]
def expr(d=0):
    r = random.random()
    if d > 3 or r < 0.3:
        return random.choice(atoms)
    if r < 0.45:
        return f"({expr(d+1)} {random.choice(binops)} {expr(d+1)})"
    if r < 0.6:
        return f"({expr(d+1)} | {random.choice(filters)})"
    if r < 0.7:
        return f"({expr(d+1)} is {random.choice(['', 'not '])}{random.choice(tests)})"
    if r < 0.8:
        return f"{random.choice(atoms)}.{random.choice(methods)}"
    if r < 0.85:
        # subscripts of names only: Jinja folds constant expressions with other rules than it runs them by
        sub = random.choice(['0', '-1', '1:', ':2', '::-1', '"role"', '"a"', '5'])
        return f"{random.choice(names)}[{sub}]"
    if r < 0.9:
        return f"(not {expr(d+1)})"
    if r < 0.95:
        return f"({expr(d+1)} if {expr(d+1)} else {expr(d+1)})"
    return f"[{expr(d+1)}, {expr(d+1)}]"
def ws():
    return random.choice(["", "", " ", "\n", "  \n  ", "\t", "\n\n"])


def tag(body):
    """A block tag with random whitespace control on either side."""
    return "{%" + random.choice(["", "", "-", "+"]) + " " + body + " " + random.choice(["", "", "-", "+"]) + "%}"


def stmt(d=0):
    r = random.random()
    if d <= 2 and r < 0.06:
        return (tag("set ns = namespace(k=0, s='')") + ws() + tag("for x in " + random.choice(names)) + ws() +
                tag("set ns.k = ns.k + 1") + tag("set ns.s = ns.s ~ x") + ws() + tag("endfor") + "{{ ns.k }}|{{ ns.s }}")
    if d <= 2 and r < 0.12:
        return (tag("macro m(a, b=" + random.choice(atoms) + ")") + ws() + "{{ a }}/{{ b }}" + stmt(d + 1) + ws() +
                tag("endmacro") + "{{ m(" + expr(2) + ") }}" + ws() + "{{ m(b=" + expr(2) + ", a=1) }}")
    if d <= 2 and r < 0.18:
        return (tag("for x in " + expr(2) + " if " + expr(3)) + ws() + "{{ loop.index0 }}{{ loop.cycle('a', 'b') }}" +
                tag("if loop.index > 2") + tag("break") + tag("endif") + ws() + stmt(d + 1) + tag("else") + "none" +
                tag("endfor"))
    if d <= 2 and r < 0.22:
        return tag("filter " + random.choice(["upper", "trim", "title", "length"])) + ws() + stmt(d + 1) + tag("endfilter")
    if d <= 2 and r < 0.26:
        return tag("set blk") + ws() + stmt(d + 1) + ws() + tag("endset") + "[{{ blk }}]"
    if d > 2 or r < 0.4:
        return "{{" + random.choice(["", "-"]) + " " + expr() + " " + random.choice(["", "-"]) + "}}"
    if r < 0.55:
        return "{% for x in " + expr(2) + " %}[{{ x }}{{ loop.index }}]" + stmt(d+1) + "{% endfor %}"
    if r < 0.7:
        return "{% if " + expr(2) + " %}" + stmt(d+1) + "{% else %}" + stmt(d+1) + "{% endif %}"
    if r < 0.8:
        return "{% set y = " + expr(2) + " %}{{ y }}"
    return random.choice(["\n  ", " ", "text", "\n"]) + random.choice(["{%- if true %}a{% endif -%}", "{# c #}", "  {% if 1 %}\n  b\n  {% endif %}\n"])
for i in range(int(sys.argv[2])):  # noqa: E305
    print(f"### r{i}")
    print("".join(stmt() for _ in range(random.randint(1, 3))))
