"""The part of DRA's CEL device selectors that kubesage evaluates itself.

When kubesage allocates a ResourceClaim (the secondary scheduler, the control loop's
binds), the devices it writes into the claim's status must satisfy the claim's
requests exactly as kube-scheduler's allocator would check them: the DeviceClass's
selectors and the request's own ``selectors[].cel.expression``. The API server does
not check an allocation against the selectors, so an allocation that ignores them
would hand a pod a device it did not ask for.

kubesage has no CEL runtime. It evaluates the subset DRA selectors are written in
(the Kubernetes DRA documentation's and NVIDIA's DeviceClasses' examples):

- ``device.driver``, ``device.attributes["domain"].name``,
  ``device.capacity["domain"].name`` (``.compareTo(quantity("40Gi"))``);
- string, int and bool literals (either quote), lists ``[a, b]`` and ``x in [...]``;
- ``== != < <= > >=``, ``&&``, ``||``, ``!`` and parentheses.

An attribute a device does not have is CEL's "no such key" runtime error, carried as
CEL carries errors: ``!`` keeps it, ``false && error`` is false and ``true || error`` is
true (either order), anything else stays an error. A selector whose result is an error is
:class:`SelectorRuntimeError`, as kube-scheduler's allocator fails on it: never a silent
match (``!(…index in [0, 1])`` on a device without ``index`` is no "yes"). A ``version``
attribute is a semver in CEL, which compares only through ``semver()`` functions kubesage
does not evaluate. Anything else outside the subset is :class:`UnsupportedSelectorError`:
the caller refuses to allocate rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.k8s.translate import TranslateError, parse_quantity


class UnsupportedSelectorError(InputError):
    """A CEL selector outside the subset kubesage evaluates (module docstring)."""


class SelectorRuntimeError(UnsupportedSelectorError):
    """A selector that evaluates to CEL's runtime error on a device (a missing key)."""


class _MissingError(Exception):
    """An attribute or capacity the device does not have: CEL's "no such key"."""


class _Error:
    """CEL's error value inside an expression (see the module docstring)."""


_ERROR = _Error()
Truth = bool | _Error


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<number>-?[0-9]+)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\].,])
    )""",
    re.VERBOSE,
)


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise UnsupportedSelectorError(
                f"cannot read CEL selector {expression!r} at {text[position:][:20]!r}"
            )
        tokens.append(match.group(match.lastgroup or "op"))
        position = match.end()
    return tokens


Value = str | int | bool | Decimal | list[Any]


class _Evaluator:
    """Recursive descent over the tokens, evaluating against one device as it goes."""

    def __init__(self, expression: str, device: Mapping[str, Any], driver: str) -> None:
        self.expression = expression
        self.tokens = _tokens(expression)
        self.position = 0
        self.device = device
        self.driver = driver
        self.missing = ""
        """The first key the device lacks (what a runtime error names)."""

    def unsupported(self, what: str) -> UnsupportedSelectorError:
        return UnsupportedSelectorError(f"CEL selector {self.expression!r}: {what}")

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise self.unsupported(f"expected {expected or 'more'}, found {token or 'the end'}")
        self.position += 1
        return token

    def run(self) -> bool:
        result = self.disjunction()
        if self.peek() is not None:
            raise self.unsupported(f"unexpected {self.peek()!r}")
        if isinstance(result, _Error):
            raise SelectorRuntimeError(
                f"CEL selector {self.expression!r}: the device has no {self.missing} "
                "(a CEL runtime error, on which kube-scheduler's allocator fails too)"
            )
        return result

    def disjunction(self) -> Truth:
        result = self.conjunction()
        while self.peek() == "||":
            self.take()
            right = self.conjunction()  # evaluated anyway: the whole selector is parsed
            if result is True or right is True:
                result = True
            elif isinstance(result, _Error) or isinstance(right, _Error):
                result = _ERROR
        return result

    def conjunction(self) -> Truth:
        result = self.negation()
        while self.peek() == "&&":
            self.take()
            right = self.negation()
            if result is False or right is False:
                result = False
            elif isinstance(result, _Error) or isinstance(right, _Error):
                result = _ERROR
        return result

    def negation(self) -> Truth:
        if self.peek() == "!":
            self.take()
            inner = self.negation()
            return inner if isinstance(inner, _Error) else not inner
        if self.peek() == "(":
            self.take()
            result = self.disjunction()
            self.take(")")
            return result
        return self.comparison()

    def comparison(self) -> Truth:
        left = self.operand_or_missing()
        operator = self.peek()
        if operator not in ("==", "!=", "<", "<=", ">", ">=", "in"):
            if left is None:
                return _ERROR
            if isinstance(left, bool):
                return left  # a bool attribute on its own
            raise self.unsupported(f"expected a comparison, found {operator!r}")
        self.take()
        right = self.operand_or_missing()
        if left is None or right is None:
            return _ERROR
        if isinstance(left, _Semver) or isinstance(right, _Semver):
            raise self.unsupported(
                "a version attribute is a semver, compared only through semver() functions "
                "kubesage does not evaluate"
            )
        return _compare(left, operator, right, self)

    def operand_or_missing(self) -> Value | None:
        """An operand; None for a key the device does not have (noted for the message)."""
        try:
            return self.operand()
        except _MissingError as exc:
            self.missing = self.missing or str(exc)
            return None

    def operand(self) -> Value:
        token = self.take()
        if token[0] in "\"'":
            return bytes(token[1:-1], "utf-8").decode("unicode_escape")
        if token.lstrip("-").isdecimal():
            return int(token)
        if token in ("true", "false"):
            return token == "true"
        if token == "[":
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.operand())
                if self.peek() == ",":
                    self.take()
            self.take("]")
            return items
        if token == "device":
            return self.device_field()
        raise self.unsupported(f"unsupported operand {token!r}")

    def device_field(self) -> Value:
        self.take(".")
        field = self.take()
        if field == "driver":
            return str(self.device.get("driver") or self.driver)
        if field not in ("attributes", "capacity"):
            raise self.unsupported(f"device.{field} is not evaluated by kubesage")
        self.take("[")
        domain = self.operand()
        self.take("]")
        self.take(".")
        name = self.take()
        if not isinstance(domain, str):
            raise self.unsupported("a domain must be a string")
        if field == "attributes":
            return _attribute(self.device, self.driver, domain, name)
        value = _capacity(self.device, self.driver, domain, name)
        if self.peek() != ".":
            return value
        self.take(".")
        self.take("compareTo")
        self.take("(")
        self.take("quantity")
        self.take("(")
        text = self.operand()
        self.take(")")
        self.take(")")
        try:
            other = parse_quantity(text, "quantity")
        except TranslateError as exc:
            raise self.unsupported(str(exc)) from exc
        return (value > other) - (value < other)


def _compare(left: Value, operator: str, right: Value, where: _Evaluator) -> bool:
    if operator == "in":
        if not isinstance(right, list):
            raise where.unsupported("'in' needs a list")
        return left in right
    if operator == "==":
        return left == right
    if operator == "!=":
        return left != right
    if isinstance(left, bool) or isinstance(right, bool) or isinstance(left, list):
        raise where.unsupported(f"{operator} compares numbers or strings")
    if type(left) is not type(right) and not (
        isinstance(left, int | Decimal) and isinstance(right, int | Decimal)
    ):
        return False
    ordered: dict[str, bool] = {
        "<": left < right,  # type: ignore[operator]
        "<=": left <= right,  # type: ignore[operator]
        ">": left > right,  # type: ignore[operator]
        ">=": left >= right,  # type: ignore[operator]
    }
    return ordered[operator]


class _Semver(str):
    """A ``version`` attribute's value: a semver in CEL, not a string."""


def _qualified(entries: Mapping[str, Any], driver: str, domain: str, name: str) -> Any:
    """The entry ``domain/name``; an unqualified name belongs to the driver's domain."""
    if f"{domain}/{name}" in entries:
        return entries[f"{domain}/{name}"]
    if domain == driver and name in entries:
        return entries[name]
    raise _MissingError(f"key {domain}/{name}")


def _attribute(device: Mapping[str, Any], driver: str, domain: str, name: str) -> Value:
    attribute = _qualified(device.get("attributes") or {}, driver, domain, name)
    if isinstance(attribute, Mapping) and "version" in attribute:
        return _Semver(attribute["version"])
    for kind in ("string", "int", "bool"):
        if isinstance(attribute, Mapping) and kind in attribute:
            value = attribute[kind]
            return value if isinstance(value, str | int | bool) else str(value)
    raise _MissingError(f"value in attribute {domain}/{name}")


def _capacity(device: Mapping[str, Any], driver: str, domain: str, name: str) -> Decimal:
    capacity = _qualified(device.get("capacity") or {}, driver, domain, name)
    value = capacity.get("value") if isinstance(capacity, Mapping) else None
    try:
        return parse_quantity(value, f"capacity {domain}/{name}")
    except TranslateError as exc:
        raise _MissingError(f"readable capacity {domain}/{name}") from exc


def matches(expression: str, device: Mapping[str, Any], driver: str) -> bool:
    """Whether ``device`` (a ResourceSlice device, ``driver``'s) satisfies the selector.

    Raises :class:`UnsupportedSelectorError` for CEL outside the evaluated subset, and
    :class:`SelectorRuntimeError` where the selector is CEL's runtime error on the device.
    """
    return _Evaluator(expression, device, driver).run()


def selectors_match(selectors: object, device: Mapping[str, Any], driver: str) -> bool:
    """Whether ``device`` satisfies every ``{cel: {expression}}`` selector of a list."""
    for selector in selectors if isinstance(selectors, list) else []:
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            raise UnsupportedSelectorError(
                f"a device selector without a CEL expression: {selector}"
            )
        if not matches(expression, device, driver):
            return False
    return True
