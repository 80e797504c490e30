"""jsonargparse's nested error report as one line (``<option>: <innermost reason>``): what the parser of
``python -m ssl_app`` says (``ssl_app.cli.parsing``) and what the early checks say for the same input
(``ssl_app.cli.early_values``), so both are worded by one function. Imports no more than jsonargparse's ranges."""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

from ssl_app.checks import in_words

#: First reasons that only say a value is no class path (nor a config file) for a union that also takes a
#: number: the number's own reason (``must be > 0 and finite, got -1``) is the one that helps.
NOT_A_CLASS_PATH = (
    "Expected a path but",
    "Expected a dot import path string",
    "Unexpected import path format",
    "Not a valid subclass of",
)

#: A range type's refusal of text that is no number (``Not of type PositiveInt: invalid literal for int() …: 'abc'``).
NO_NUMBER = r"Not of type (\w+): (?:invalid literal for int\(\) with base 10|could not convert string to float): (.*)"


def condense_parser_error(message: str) -> str:
    """jsonargparse's nested report → ``<option>: <innermost reason>`` (one line).

    ``Parser key "model": ... Problem with given class_path 'X': Parser key "loss": ...
    Expected a <class 'float'>. Got value: nan`` becomes
    ``model.init_args.loss.init_args.temperature: Expected a <class 'float'>. Got value: nan``.
    Alternatives that merely say a value is not ``None`` are ignored. A message without that
    structure is returned with its lines joined.
    """
    lines = [line for line in message.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Parser key"):
        return " ".join(line.strip() for line in lines)
    keys: list[str] = []
    depth_of: list[int] = []
    reason = ""
    class_path = ""
    item_class = ""  # the class of a list's item (``trainer.callbacks``): its options' path does not tell which
    skipping_indent: int | None = None
    for index, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if skipping_indent is not None:
            if indent > skipping_indent:
                continue
            skipping_indent = None
        if text.startswith(("- Expected a <class 'NoneType'>", "Given value")):
            skipping_indent = indent
            continue
        while depth_of and indent <= depth_of[-1]:
            depth_of.pop()
            keys.pop()
        match = re.match(r'(?:- )?Parser key "([^"]+)":', text)
        if match:
            prefix = "init_args." if class_path and keys else ""
            keys.append(prefix + match.group(1))
            depth_of.append(indent)
            class_path = ""
            continue
        match = re.match(r"(?:- )?Problem with given class_path '([^']+)':", text)
        if match:
            class_path = match.group(1)
            if not item_class and _in_a_list(lines, index, indent):
                item_class = class_path
            continue
        if text.startswith("Does not validate against any of the Union subtypes") and not reason:
            canonical = union_reason(lines[index + 1 :])
            if canonical is not None:
                reason = canonical
                break
        if text.startswith(("Does not validate against", "Subtypes:", "Errors:", "- Problem with")):
            continue
        if not reason:
            reason = text.lstrip("- ")
            if class_path and reason.startswith("Option"):
                reason += f" by {class_path}"
            if reason.startswith(NOT_A_CLASS_PATH):
                reason = _number_reason(lines) or reason
            if re.match(r"Not of type \w+: does not conform to restriction", reason):  # in a union: no value
                reason = _number_reason(lines) or reason
            restricted = re.match(r"Not of type (\w+): (.*) does not conform to restriction", reason)
            if restricted:  # a range of ssl_app.checks, said in words
                reason = in_words(*restricted.groups()) or reason
            no_number = re.match(NO_NUMBER, reason)
            if no_number:  # text given to a range: its words too (not Python's "invalid literal for int()")
                name, given = no_number.groups()
                reason = in_words(name, _unquoted_number(given)) or reason
            break
    option = ".".join(keys)
    if not reason:
        return " ".join(line.strip() for line in lines)
    if item_class and item_class not in reason:
        option = list_item_option(option, item_class)
    return f"{option}: {reason}" if option else reason


def list_item_option(option: str, class_path: str) -> str:
    """An option of a list's item named with the item's class: ``trainer.callbacks.init_args.every_n_epochs
    (callbacks.KNNMonitor)``, since ``EmbeddingMetrics`` in the same list has an ``every_n_epochs`` too."""
    return f"{option} ({class_path})"


#: What a union of ``list[Callback]`` and ``Callback`` is given for a list's item: the list (a config's), or one
#: item's option (``--trainer.callbacks+=callbacks.KNNMonitor --trainer.callbacks.k=0``).
LIST_GIVEN = ("Given value type: <class 'list'>", "Given value type: <class 'jsonargparse._util.NestedArg'>")


def _in_a_list(lines: list[str], index: int, indent: int) -> bool:
    """Whether the alternative whose error starts at ``lines[index]`` (at ``indent``) is of a union that takes a list
    (``Subtypes: [list[...], ...]``) and was given a list's item."""
    before = [line.strip() for line in lines[:index] if len(line) - len(line.lstrip()) < indent]
    after = [line.strip() for line in lines[index + 1 :] if len(line) - len(line.lstrip()) < indent]
    subtypes = next((line for line in reversed(before) if line.startswith("Subtypes: [")), "")
    given = next((line for line in after if line.startswith("Given value type: ")), "")
    return "list[" in subtypes and given in LIST_GIVEN


def _number_reason(lines: list[str]) -> str:
    """A restricted number type's reason among a union's alternatives, when the value is a number out of its range
    (not when it is no number: then it may be a misspelled class path, whose reason the parser words itself), with
    the given value (jsonargparse leaves it out there): ``Not of type PositiveFinite: -1 does not conform to …``."""
    for index, line in enumerate(lines):
        found = re.match(r"- Not of type (\w+): (?:.* )?does not conform to restriction", line.strip())
        if not found:
            continue
        given = next((later.strip() for later in lines[index:] if later.strip().startswith("Given value: ")), None)
        if given is None:
            return ""
        value = given.removeprefix("Given value: ")
        return f"Not of type {found.group(1)}: {value} does not conform to restriction"
    return ""


#: The plain types a union's alternatives are named by, in the order they are listed (``null`` last).
PLAIN_TYPES = ("bool", "int", "float", "str")


def union_reason(block: list[str]) -> Optional[str]:
    """A union's refusal in words that do not depend on the order of its alternatives (``typing`` caches unions
    ignoring order, so jsonargparse's first reason, ``Expected a <class 'int'>``, may name ``float`` in another
    process): ``expected one of: int, float, null; got '0.x'``, a ``Literal``'s choices listed. Only for a union of
    plain types and literals with two alternatives or more besides ``None``, or a literal; else None (its own words).
    ``block``: the lines after ``Does not validate against any of the Union subtypes``."""
    subtypes = next((line.strip() for line in block if line.strip().startswith("Subtypes: [")), None)
    given = next((line.strip() for line in block if line.strip().startswith("Given value: ")), None)
    if subtypes is None or given is None:
        return None
    parts = _union_parts(subtypes.removeprefix("Subtypes: [").removesuffix("]"))
    if parts is None:
        return None
    names, choices, none = parts
    if len(names) < 2 and not choices:
        return None  # Optional[int]: "Expected a <class 'int'>" is already the one reading
    numbers = sorted({choice for choice in choices if not isinstance(choice, str)}, key=float)
    texts = sorted({choice for choice in choices if isinstance(choice, str)})
    shown = [name for name in PLAIN_TYPES if name in names] + [repr(choice) for choice in [*numbers, *texts]]
    shown += ["null"] if none else []
    return f"expected one of: {', '.join(shown)}; got {given.removeprefix('Given value: ')!r}"


def _union_parts(text: str) -> Optional[tuple[set[str], list[Any], bool]]:
    """The plain type names, the literal choices and whether ``None`` is among a ``Subtypes: [...]`` list; None
    when any alternative is something else (a class, a container)."""
    names: set[str] = set()
    choices: list[Any] = []
    none = False
    pattern = re.compile(r"<class '(\w+)'>|typing\.Literal\[(.*?)\](?=, <class|, typing|$)")
    position = 0
    while position < len(text):
        found = pattern.match(text, position)
        if found is None:
            return None
        if found.group(1) == "NoneType":
            none = True
        elif found.group(1) in PLAIN_TYPES:
            names.add(found.group(1))
        elif found.group(1):
            return None
        else:
            try:
                literal = ast.literal_eval(f"[{found.group(2)}]")
            except (ValueError, SyntaxError):
                return None
            if not all(isinstance(choice, (int, str)) for choice in literal):
                return None
            choices += literal
        position = found.end()
        if text.startswith(", ", position):
            position += 2
        elif position < len(text):
            return None
    return names, choices, none


def _unquoted_number(text: str) -> str:
    """``'1.5'`` → ``1.5`` (a number refused by an int range reads as one); other text stays quoted."""
    inner = text[1:-1] if len(text) > 1 and text[0] == text[-1] == "'" else None
    if inner is None:
        return text
    try:
        float(inner)
    except ValueError:
        return text
    return inner
