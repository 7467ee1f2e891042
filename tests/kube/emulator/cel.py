"""A small subset of CEL, enough for the x-kubernetes-validations rules our CRDs use.

Supported: literals (int, double, string, bool, null, lists), `self`, field selection, indexing, `has(x.f)`,
`size()`, `startsWith/endsWith/contains/matches`, `all/exists` macros, `! - * / % + -`, comparisons, `in`, `&&`,
`||` and `?:`. Anything else raises Unsupported when the CRD is registered, so a rule the emulator cannot check is
reported loudly instead of being skipped.
"""
import re

_TOKEN = re.compile(r"""\s*(?:(?P<num>\d+\.\d+|\d+)|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|"""
                    r"""(?P<op>\|\||&&|==|!=|<=|>=|[<>!+\-*/%().,\[\]?:])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))""")


class Unsupported(Exception):
    pass


class EvalError(Exception):
    pass


def tokenize(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise Unsupported("cannot parse CEL at %r" % text[pos:])
        pos = m.end()
        if m.group("num"):
            n = m.group("num")
            out.append(("lit", float(n) if "." in n else int(n)))
        elif m.group("str"):
            s = m.group("str")[1:-1]
            out.append(("lit", bytes(s, "utf-8").decode("unicode_escape")))
        elif m.group("op"):
            out.append(("op", m.group("op")))
        else:
            word = m.group("id")
            lits = {"true": True, "false": False, "null": None}
            out.append(("lit", lits[word]) if word in lits else ("op", "in") if word == "in" else ("id", word))
    return out


class Parser(object):
    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, value=None):
        if self.i >= len(self.toks):
            return None
        t = self.toks[self.i]
        if value is None or (t[0] == "op" and t[1] == value):
            return t
        return None

    def take(self, value=None):
        t = self.peek(value)
        if t is None:
            raise Unsupported("expected %r" % (value,))
        self.i += 1
        return t

    def parse(self):
        e = self.ternary()
        if self.i != len(self.toks):
            raise Unsupported("unexpected %r" % (self.toks[self.i],))
        return e

    def ternary(self):
        c = self.binary(0)
        if self.peek("?"):
            self.take("?")
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            return ("?", c, a, b)
        return c

    LEVELS = [["||"], ["&&"], ["==", "!=", "<", "<=", ">", ">=", "in"], ["+", "-"], ["*", "/", "%"]]

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() and self.peek()[0] == "op" and self.peek()[1] in self.LEVELS[level]:
            op = self.take()[1]
            left = (op, left, self.binary(level + 1))
        return left

    def unary(self):
        if self.peek("!"):
            self.take()
            return ("!", self.unary())
        if self.peek("-"):
            self.take()
            return ("neg", self.unary())
        return self.member()

    def member(self):
        e = self.primary()
        while True:
            if self.peek("."):
                self.take()
                name = self.take()
                if name[0] != "id":
                    raise Unsupported("expected a field name")
                if self.peek("("):
                    e = ("call", name[1], e, self.args())
                else:
                    e = ("sel", e, name[1])
            elif self.peek("["):
                self.take()
                idx = self.ternary()
                self.take("]")
                e = ("idx", e, idx)
            else:
                return e

    def args(self):
        self.take("(")
        out = []
        while not self.peek(")"):
            out.append(self.ternary())
            if not self.peek(")"):
                self.take(",")
        self.take(")")
        return out

    def primary(self):
        t = self.take()
        if t[0] == "lit":
            return ("lit", t[1])
        if t[0] == "id":
            if self.peek("("):
                return ("call", t[1], None, self.args())
            if t[1] == "self":
                return ("self",)
            return ("var", t[1])
        if t[1] == "(":
            e = self.ternary()
            self.take(")")
            return e
        if t[1] == "[":
            items = []
            while not self.peek("]"):
                items.append(self.ternary())
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return ("list", items)
        raise Unsupported("unexpected %r" % (t,))


_FUNCS = {"has", "size", "startsWith", "endsWith", "contains", "matches", "all", "exists", "int", "string"}


def compile_rule(text):
    ast = Parser(text).parse()
    _check(ast)
    if _uses(ast, "oldSelf"):
        raise Unsupported("transition rules (oldSelf) are not emulated")
    return ast


def _check(node):
    if node[0] == "call" and node[1] not in _FUNCS:
        raise Unsupported("function %s is not emulated" % node[1])
    for child in node[1:]:
        if isinstance(child, tuple):
            _check(child)
        elif isinstance(child, list):
            for c in child:
                _check(c)


def _uses(node, name):
    if node[0] == "var" and node[1] == name:
        return True
    for child in node[1:]:
        if isinstance(child, tuple) and _uses(child, name):
            return True
        if isinstance(child, list) and any(_uses(c, name) for c in child):
            return True
    return False


def evaluate(ast, self_value, env=None):
    env = env or {}
    t = ast[0]
    if t == "lit":
        return ast[1]
    if t == "self":
        return self_value
    if t == "var":
        if ast[1] not in env:
            raise EvalError("undeclared reference to '%s'" % ast[1])
        return env[ast[1]]
    if t == "list":
        return [evaluate(x, self_value, env) for x in ast[1]]
    if t == "sel":
        obj = evaluate(ast[1], self_value, env)
        if not isinstance(obj, dict) or ast[2] not in obj:
            raise EvalError("no such key: %s" % ast[2])
        return obj[ast[2]]
    if t == "idx":
        obj, idx = evaluate(ast[1], self_value, env), evaluate(ast[2], self_value, env)
        try:
            return obj[idx]
        except (KeyError, IndexError, TypeError):
            raise EvalError("no such key: %s" % idx)
    if t == "!":
        return not _bool(evaluate(ast[1], self_value, env))
    if t == "neg":
        return -evaluate(ast[1], self_value, env)
    if t == "?":
        return evaluate(ast[2] if _bool(evaluate(ast[1], self_value, env)) else ast[3], self_value, env)
    if t == "||":
        return _bool(evaluate(ast[1], self_value, env)) or _bool(evaluate(ast[2], self_value, env))
    if t == "&&":
        return _bool(evaluate(ast[1], self_value, env)) and _bool(evaluate(ast[2], self_value, env))
    if t == "call":
        return _call(ast, self_value, env)
    a, b = evaluate(ast[1], self_value, env), evaluate(ast[2], self_value, env)
    try:
        if t == "==":
            return a == b
        if t == "!=":
            return a != b
        if t == "in":
            return a in b
        ops = {"<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
               "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
               "/": lambda: a // b if isinstance(a, int) and isinstance(b, int) else a / b, "%": lambda: a % b}
        return ops[t]()
    except (TypeError, ZeroDivisionError) as e:
        raise EvalError("no such overload: %s" % e)


def _bool(v):
    if not isinstance(v, bool):
        raise EvalError("no such overload")
    return v


def _call(ast, self_value, env):
    unused, name, target, args = ast
    if name == "has":
        arg = args[0]
        if arg[0] != "sel":
            raise EvalError("invalid argument to has() macro")
        obj = evaluate(arg[1], self_value, env)
        return isinstance(obj, dict) and arg[2] in obj
    if name in ("all", "exists"):
        coll = evaluate(target, self_value, env)
        var = args[0][1]
        items = list(coll) if isinstance(coll, (list, dict)) else []
        results = (_bool(evaluate(args[1], self_value, dict(env, **{var: x}))) for x in items)
        return all(results) if name == "all" else any(results)
    values = [evaluate(a, self_value, env) for a in args]
    subject = evaluate(target, self_value, env) if target is not None else None
    if name == "size":
        v = subject if target is not None else values[0]
        return len(v)
    if name == "int":
        return int(values[0])
    if name == "string":
        return str(values[0])
    if not isinstance(subject, str):
        raise EvalError("no such overload")
    if name == "startsWith":
        return subject.startswith(values[0])
    if name == "endsWith":
        return subject.endswith(values[0])
    if name == "contains":
        return values[0] in subject
    if name == "matches":
        return re.search(values[0], subject) is not None
    raise EvalError("unknown function %s" % name)
