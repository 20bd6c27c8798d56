"""The static check of LLM-written tool code: a vetted allow-list, checked on the syntax tree.

It refuses, with a readable message for the LLM to fix its code:

- imports other than the modules of ``ALLOWED`` and, from each, names other than its vetted public names
  (``from random import shuffle``; ``from random import _os`` or ``Random`` subclasses' internals are not
  there). ``import x.y`` binds ``x``, so a dotted module is imported ``as`` a name or ``from`` it;
- an imported module used as anything but ``module.name`` with ``name`` in its allow-list (no ``random._os``,
  no ``uuid.os``, no ``getattr(random, ...)``, no ``m = random``, no assigning or deleting its attributes, no
  rebinding its name);
- every attribute that starts with ``_`` (``().__class__``, ``x._private``), and the attributes that reach the
  interpreter's machinery without one: frames, code objects and generator internals (``gi_frame``,
  ``f_globals``, ``tb_frame``, ``co_code``, ...) and ``mro``;
- names that start with ``__`` (``__builtins__``, ``__import__``, ``__class__``) and the builtins that run
  code or reach namespaces (``eval``, ``exec``, ``compile``, ``globals``, ``vars``, ``setattr``, ...);
- ``getattr`` but as ``getattr(obj, "literal")`` with a literal name that passes the attribute rules;
  ``type`` but with one argument;
- ``str.format`` / ``format_map`` but on a string literal whose fields look up no attribute or item
  (``"{0.__class__}".format(x)`` walks attributes from inside the format string); ``string.Formatter`` and
  ``operator.attrgetter`` / ``methodcaller`` (attribute walks by string) are not in the allow-list, nor is
  anything that evaluates a string as code (``typing.get_type_hints``, ``functools.singledispatch``);
- ``match`` class patterns that look up such attributes.

It is defence in depth, not the boundary: the sandbox is (see ``_sandbox_code``), and the runner gives the
tool's code a restricted set of builtins as well (imports from ``ALLOWED`` only, ``open`` inside the tool's
folder only).
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterator

from minihermes.context.redact import secret_kinds

MAX_CODE_CHARS = 20_000


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


ALLOWED: dict[str, frozenset[str]] = {
    "base64": _names(
        "a85decode a85encode b16decode b16encode b32decode b32encode b32hexdecode b32hexencode b64decode "
        "b64encode b85decode b85encode decodebytes encodebytes standard_b64decode standard_b64encode "
        "urlsafe_b64decode urlsafe_b64encode"
    ),
    "bisect": _names("bisect bisect_left bisect_right insort insort_left insort_right"),
    "calendar": _names(
        "Calendar TextCalendar HTMLCalendar IllegalMonthError IllegalWeekdayError MONDAY TUESDAY WEDNESDAY "
        "THURSDAY FRIDAY SATURDAY SUNDAY calendar day_abbr day_name firstweekday isleap leapdays month "
        "month_abbr month_name monthcalendar monthrange timegm weekday weekheader"
    ),
    "collections": _names(
        "ChainMap Counter OrderedDict UserDict UserList UserString defaultdict deque namedtuple"
    ),
    "collections.abc": _names(
        "AsyncGenerator AsyncIterable AsyncIterator Awaitable ByteString Callable Collection Container "
        "Coroutine Generator Hashable ItemsView Iterable Iterator KeysView Mapping MappingView "
        "MutableMapping MutableSequence MutableSet Reversible Sequence Set Sized ValuesView"
    ),
    "copy": _names("Error copy deepcopy"),
    "csv": _names(
        "Dialect DictReader DictWriter Error QUOTE_ALL QUOTE_MINIMAL QUOTE_NONE QUOTE_NONNUMERIC Sniffer "
        "excel excel_tab field_size_limit get_dialect list_dialects reader register_dialect unix_dialect "
        "unregister_dialect writer"
    ),
    "dataclasses": _names(
        "Field FrozenInstanceError InitVar KW_ONLY MISSING asdict astuple dataclass field fields "
        "is_dataclass replace"
    ),
    "datetime": _names("MAXYEAR MINYEAR UTC date datetime time timedelta timezone tzinfo"),
    "decimal": _names(
        "BasicContext Clamped Context ConversionSyntax Decimal DecimalException DecimalTuple DefaultContext "
        "DivisionByZero DivisionImpossible DivisionUndefined ExtendedContext FloatOperation Inexact "
        "InvalidContext InvalidOperation MAX_EMAX MAX_PREC MIN_EMIN MIN_ETINY Overflow ROUND_05UP "
        "ROUND_CEILING ROUND_DOWN ROUND_FLOOR ROUND_HALF_DOWN ROUND_HALF_EVEN ROUND_HALF_UP ROUND_UP "
        "Rounded Subnormal Underflow getcontext localcontext setcontext"
    ),
    "difflib": _names(
        "Differ HtmlDiff IS_CHARACTER_JUNK IS_LINE_JUNK Match SequenceMatcher context_diff diff_bytes "
        "get_close_matches ndiff restore unified_diff"
    ),
    "enum": _names(
        "Enum EnumMeta EnumType Flag FlagBoundary IntEnum IntFlag ReprEnum StrEnum auto member nonmember "
        "unique verify EnumCheck CONTINUOUS NAMED_FLAGS UNIQUE STRICT CONFORM EJECT KEEP"
    ),
    "fractions": _names("Fraction"),
    "functools": _names(
        "WRAPPER_ASSIGNMENTS WRAPPER_UPDATES cache cached_property cmp_to_key lru_cache partial "
        "partialmethod reduce total_ordering update_wrapper wraps"
    ),
    "hashlib": _names(
        "algorithms_available algorithms_guaranteed blake2b blake2s md5 new pbkdf2_hmac sha1 sha224 sha256 "
        "sha384 sha3_224 sha3_256 sha3_384 sha3_512 sha512 shake_128 shake_256"
    ),
    "heapq": _names("heapify heappop heappush heappushpop heapreplace merge nlargest nsmallest"),
    "html": _names("escape unescape"),
    "itertools": _names(
        "accumulate batched chain combinations combinations_with_replacement compress count cycle "
        "dropwhile filterfalse groupby islice pairwise permutations product repeat starmap takewhile tee "
        "zip_longest"
    ),
    "json": _names("JSONDecodeError JSONDecoder JSONEncoder dump dumps load loads"),
    "math": _names(
        "acos acosh asin asinh atan atan2 atanh cbrt ceil comb copysign cos cosh degrees dist e erf erfc "
        "exp exp2 expm1 fabs factorial floor fmod frexp fsum gamma gcd hypot inf isclose isfinite isinf "
        "isnan isqrt lcm ldexp lgamma log log10 log1p log2 modf nan nextafter perm pi pow prod radians "
        "remainder sin sinh sqrt sumprod tan tanh tau trunc ulp"
    ),
    "operator": _names(
        "abs add and_ concat contains countOf delitem eq floordiv ge getitem gt iadd iand iconcat "
        "ifloordiv ilshift imatmul imod imul index indexOf inv invert ior ipow irshift is_ is_not isub "
        "itemgetter itruediv ixor le length_hint lshift lt matmul mod mul ne neg not_ or_ pos pow rshift "
        "setitem sub truediv truth xor"
    ),
    "random": _names(
        "Random SystemRandom betavariate binomialvariate choice choices expovariate gammavariate gauss "
        "getrandbits getstate lognormvariate normalvariate paretovariate randbytes randint random "
        "randrange sample seed setstate shuffle triangular uniform vonmisesvariate weibullvariate"
    ),
    "re": _names(
        "A ASCII DOTALL I IGNORECASE L LOCALE M MULTILINE Match NOFLAG Pattern RegexFlag S U UNICODE "
        "VERBOSE X compile error escape findall finditer fullmatch match purge search split sub subn"
    ),
    "statistics": _names(
        "NormalDist StatisticsError correlation covariance fmean geometric_mean harmonic_mean "
        "linear_regression mean median median_grouped median_high median_low mode multimode pstdev "
        "pvariance quantiles stdev variance"
    ),
    "string": _names(
        "Template ascii_letters ascii_lowercase ascii_uppercase capwords digits hexdigits octdigits "
        "printable punctuation whitespace"
    ),
    "textwrap": _names("TextWrapper dedent fill indent shorten wrap"),
    "typing": _names(
        "AbstractSet Annotated Any AnyStr Awaitable Callable ClassVar Collection Container Counter "
        "DefaultDict Deque Dict Final FrozenSet Generator Generic Hashable Iterable Iterator List Literal "
        "LiteralString Mapping MutableMapping MutableSequence MutableSet NamedTuple Never NewType NoReturn "
        "NotRequired Optional OrderedDict Protocol Required Self Sequence Set Sized Tuple Type TypeAlias "
        "TypeGuard TypeVar TypedDict Union assert_never cast final get_args get_origin overload "
        "runtime_checkable"
    ),
    "unicodedata": _names(
        "bidirectional category combining decimal decomposition digit east_asian_width is_normalized "
        "lookup mirrored name normalize numeric unidata_version"
    ),
    "uuid": _names(
        "NAMESPACE_DNS NAMESPACE_OID NAMESPACE_URL NAMESPACE_X500 RESERVED_FUTURE RESERVED_MICROSOFT "
        "RESERVED_NCS RFC_4122 SafeUUID UUID uuid3 uuid4 uuid5"
    ),
    "zoneinfo": _names("ZoneInfo ZoneInfoNotFoundError available_timezones"),
}
"""Module -> the names tool code may use from it. Vetted by hand: public functions, classes and constants;
never a module object (``uuid.os``, ``json.decoder``, ``re.enum``), nothing that runs a command
(``uuid.getnode``), evaluates a string as code (``typing.get_type_hints``, ``functools.singledispatch``),
walks attributes by name (``operator.attrgetter``, ``string.Formatter``) or changes other modules
(``enum.global_enum``). A name missing in the sandbox's Python version fails at run time as usual."""

ALLOWED_IMPORTS = frozenset(m.split(".")[0] for m in ALLOWED)

FORBIDDEN_NAMES = frozenset(
    "eval exec compile breakpoint globals locals vars setattr delattr input help memoryview".split()
)
"""Builtins that run code, reach namespaces or wait on a terminal."""

DENIED_ATTRS = frozenset(
    "mro f_back f_builtins f_code f_globals f_locals f_trace f_trace_lines f_trace_opcodes f_lasti "
    "f_lineno cell_contents func_globals func_code im_func im_self".split()
)
DENIED_ATTR_PREFIXES = ("gi_", "cr_", "ag_", "tb_", "co_")
"""Frames, tracebacks, code objects and generator/coroutine internals: how code reaches globals and the
builtins without an underscore."""

_FORMAT_METHODS = ("format", "format_map")


class CodeRejected(Exception):
    """What ``check_code`` refused, in words for the LLM."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_code(code: str, *, what: str = "code", needs_run: bool = True) -> None:
    """Raise ``CodeRejected`` naming the first problem (see the module docstring)."""
    if not code.strip():
        raise CodeRejected(f"{what} is empty")
    if len(code) > MAX_CODE_CHARS:
        raise CodeRejected(f"{what} is longer than {MAX_CODE_CHARS} characters")
    try:
        tree = ast.parse(code, filename=f"{what}.py")
    except SyntaxError as e:
        raise CodeRejected(f"{what}: syntax error at line {e.lineno}: {e.msg}") from None
    _Checker(what).check(tree)
    if needs_run and not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        raise CodeRejected(f"{what} must define a top-level function run(...) that returns JSON data")


def check_test(test: str, code: str) -> None:
    """Check a test of ``code`` (already checked). The test runs in the code's namespace, so it is checked
    once more together with the code: the modules the code imported are modules in the test too."""
    check_code(test, what="test", needs_run=False)
    both = ast.Module(body=[*ast.parse(code).body, *ast.parse(test).body], type_ignores=[])
    _Checker("test").check(both)  # the code passed alone: what fails now is the test's (its line numbers)


def attribute_problem(attr: str) -> str | None:
    """Why an attribute name may not be used, or None."""
    if attr.startswith("__"):
        return f"dunder attributes ('{attr}') and other attributes starting with '_' are not allowed"
    if attr.startswith("_"):
        return f"attributes starting with '_' ('{attr}') are not allowed"
    if attr in DENIED_ATTRS or attr.startswith(DENIED_ATTR_PREFIXES):
        return f"the attribute '{attr}' reaches the interpreter's internals and is not allowed"
    return None


class _Checker:
    def __init__(self, what: str) -> None:
        self.what = what
        self.modules: dict[str, str] = {}
        """Names bound by ``import`` -> the module they are."""
        self.parents: dict[int, ast.AST] = {}

    def fail(self, node: ast.AST, message: str) -> CodeRejected:
        return CodeRejected(f"{self.what} line {getattr(node, 'lineno', 0)}: {message}")

    def check(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        imported_names = self._imports(tree)
        for node, name in _bindings(tree):
            if name in self.modules and (node, name) not in imported_names:
                raise self.fail(
                    node, f"'{name}' is the module {self.modules[name]}: it cannot be rebound or shadowed"
                )
        for node in ast.walk(tree):
            self._node(node)

    def _imports(self, tree: ast.Module) -> set[tuple[ast.AST, str]]:
        """Check every import; record module names. Returns the (node, name) bindings they make."""
        made: set[tuple[ast.AST, str]] = set()
        seen: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._module(node, alias.name)
                    if "." in alias.name and not alias.asname:
                        raise self.fail(
                            node,
                            f"write 'import {alias.name} as name' or 'from {alias.name} import ...' "
                            f"(plain 'import {alias.name}' binds '{alias.name.split('.')[0]}')",
                        )
                    bound = alias.asname or alias.name
                    self._bind(node, bound, f"module {alias.name}", seen)
                    self.modules[bound] = alias.name
                    made.add((node, bound))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    raise self.fail(node, "relative imports are not allowed")
                module = node.module or ""
                self._module(node, module)
                for alias in node.names:
                    if alias.name == "*":
                        raise self.fail(node, f"'from {module} import *' is not allowed: name what you use")
                    if alias.name not in ALLOWED[module]:
                        raise self.fail(node, _not_in_module(module, alias.name))
                    bound = alias.asname or alias.name
                    self._bind(node, bound, f"{module}.{alias.name}", seen)
                    made.add((node, bound))
        return made

    def _bind(self, node: ast.AST, name: str, what: str, seen: dict[str, str]) -> None:
        if name.startswith("__"):
            raise self.fail(node, f"names starting with '__' ('{name}') are not allowed")
        if seen.setdefault(name, what) != what:
            raise self.fail(node, f"'{name}' is imported twice, as {seen[name]} and as {what}")

    def _module(self, node: ast.AST, module: str) -> None:
        if module not in ALLOWED:
            allowed = ", ".join(sorted(ALLOWED))
            raise self.fail(node, f"import of '{module}' is not allowed (allowed: {allowed})")

    def _node(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self._name(node)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                problem = attribute_problem(attr)
                if problem is not None:
                    raise self.fail(node, f"{problem} (in a class pattern)")
        elif isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                if name.startswith("__"):
                    raise self.fail(node, f"names starting with '__' ('{name}') are not allowed")

    def _name(self, node: ast.Name) -> None:
        name = node.id
        if name.startswith("__"):
            raise self.fail(node, f"names starting with '__' ('{name}') are not allowed")
        if name in FORBIDDEN_NAMES:
            raise self.fail(node, f"'{name}' is not allowed")
        parent = self.parents.get(id(node))
        if name in self.modules:
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                raise self.fail(
                    node,
                    f"the module '{name}' can only be used as {name}.<name> (not passed, stored or "
                    "looked into with getattr)",
                )
        elif name in ("getattr", "type", "hasattr"):
            if not (isinstance(parent, ast.Call) and parent.func is node):
                raise self.fail(node, f"'{name}' can only be called directly")

    def _attribute(self, node: ast.Attribute) -> None:
        problem = attribute_problem(node.attr)
        if problem is not None:
            raise self.fail(node, problem)
        base = node.value
        if isinstance(base, ast.Name) and base.id in self.modules:
            module = self.modules[base.id]
            if not isinstance(node.ctx, ast.Load):
                raise self.fail(
                    node, f"the attributes of the module '{base.id}' cannot be assigned or deleted"
                )
            if node.attr not in ALLOWED[module]:
                raise self.fail(node, _not_in_module(module, node.attr))
        if node.attr in _FORMAT_METHODS:
            if not (isinstance(base, ast.Constant) and isinstance(base.value, str)):
                raise self.fail(
                    node,
                    f"'.{node.attr}' is allowed on a string literal only (\"...\".format(x)); "
                    "use an f-string otherwise",
                )
            field = _looked_up_field(base.value)
            if field is not None:
                raise self.fail(
                    node,
                    f"the format field '{{{field}}}' looks up an attribute or item inside the format "
                    "string; compute the value first and format that",
                )

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name):
            return
        if func.id == "getattr":
            name = node.args[1] if len(node.args) >= 2 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)) or node.keywords:
                raise self.fail(
                    node, "getattr needs the attribute's name as a string literal: getattr(x, 'name')"
                )
            problem = attribute_problem(name.value)
            if problem is None and name.value in _FORMAT_METHODS:
                problem = f"'{name.value}' is allowed on a string literal only"
            if problem is not None:
                raise self.fail(node, problem)
        elif func.id == "type" and (len(node.args) != 1 or node.keywords):
            raise self.fail(node, "type() takes one argument here (it tells an object's type)")


def _not_in_module(module: str, name: str) -> str:
    if name.startswith("_"):
        return f"'{module}.{name}' is not allowed (names starting with '_' are private)"
    return f"'{module}.{name}' is not allowed (allowed from {module}: {', '.join(sorted(ALLOWED[module]))})"


def _looked_up_field(text: str) -> str | None:
    """The first replacement field of a ``str.format`` string that looks up an attribute or an item (nested
    fields in format specs included), or None."""
    try:
        fields = list(_fields(text))
    except ValueError:
        return None  # not a valid format string: .format raises at run time, nothing is looked up
    for field in fields:
        if "." in field or "[" in field:
            return field
    return None


def _fields(text: str) -> Iterator[str]:
    for _literal, field, spec, _conversion in string.Formatter().parse(text):
        if field is not None:
            yield field
        if spec:
            yield from _fields(spec)


def _bindings(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    """Every place a name is bound: assignments, deletions, parameters, definitions, imports, handlers,
    patterns, loop and comprehension targets."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node, node.id
        elif isinstance(node, ast.arg):
            yield node, node.arg
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node, node.name
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                yield node, (alias.asname or alias.name).split(".")[0]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node, node.name
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            yield node, node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node, node.rest
        elif isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                yield node, name


# -- secrets ---------------------------------------------------------------------------------------------------

_SHAPE_KINDS_ONLY = re.compile(r"^value of ")
_SECRET_NAME = (
    r"(?:[A-Za-z]+[_\-])?(?:pass(?:word|wd|phrase)?|pwd|secret|client[_\-]?secret|api[_\-]?key|apikey|"
    r"access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|private[_\-]?key|token|credentials?)"
)
_CODE_ASSIGNED = re.compile(
    rf"(?i)\b(?P<name>{_SECRET_NAME})\b[\"']?\s*[:=]\s*(?P<quote>[\"'])(?P<value>[^\s\"']{{4,}})(?P=quote)"
)
_TEXT_ASSIGNED = re.compile(
    rf"(?i)\b(?P<name>{_SECRET_NAME})\b[\"']?\s*[:=]\s*[\"']?(?P<value>[^\s\"',;}}]{{4,}})"
)
_PLACEHOLDER = re.compile(
    r"^(?:[A-Z][A-Z0-9_]*|<.*>|\{.*\}|\$.*|.*(?i:x{3}|\*{3}|example|your|dummy|placeholder).*)$"
)


def secret_problem(text: str, what: str, *, code: bool) -> str | None:
    """Why ``text`` (a tool's code or test, ``code=True``, or its description) may not be stored: it holds
    something shaped like a credential, or a value written as a secret (``api_key = "..."``, ``password:
    ...``). The message names the kind and the line, never the secret. None when it holds none.

    In code a value counts when it is a quoted literal (``token = data["token"]`` is code, not a secret);
    obvious placeholders (``"YOUR_API_KEY"``, ``"<key>"``, ``"xxxx"``) do not count."""
    kinds = [k for k in secret_kinds(text) if not _SHAPE_KINDS_ONLY.match(k)]
    pattern = _CODE_ASSIGNED if code else _TEXT_ASSIGNED
    lines: list[int] = []
    for m in pattern.finditer(text):
        if _PLACEHOLDER.match(m.group("value")):
            continue
        kind = f"value of {m.group('name').lower()}"
        if kind not in kinds:
            kinds.append(kind)
        lines.append(text.count("\n", 0, m.start()) + 1)
    if not kinds:
        return None
    where = f" (line {lines[0]})" if lines and code else ""
    return (
        f"the {what} holds what looks like a secret: {', '.join(kinds)}{where}. Secrets never go into a "
        "tool's code, test or description (they are stored and shown in plain text): keep them in the "
        "credential vault (an admin registers a provider credential or a service link's secret) and call "
        "the service through a tool that uses it, or take the value as an input at run time"
    )
