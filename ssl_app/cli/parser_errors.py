"""jsonargparse's nested error report as one line (``<option>: <innermost reason>``): what the parser of
``python -m ssl_app`` says (``ssl_app.cli.parsing``) and what the early checks say for the same input
(``ssl_app.cli.early_values``), so both are worded by one function. Imports no more than jsonargparse's ranges."""

from __future__ import annotations

import re

from ssl_app.checks import in_words

#: First reasons that only say a value is no class path (nor a config file) for a union that also takes a
#: number: the number's own reason (``must be > 0 and finite, got -1``) is the one that helps.
NOT_A_CLASS_PATH = (
    "Expected a path but",
    "Expected a dot import path string",
    "Unexpected import path format",
    "Not a valid subclass of",
)


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
    skipping_indent: int | None = None
    for line in lines:
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
            continue
        if text.startswith(("Does not validate against", "Subtypes:", "Errors:", "- Problem with")):
            continue
        if not reason:
            reason = text.lstrip("- ")
            if class_path and reason.startswith("Option"):
                reason += f" by {class_path}"
            if reason.startswith(NOT_A_CLASS_PATH):
                reason = _number_reason(lines) or reason
            restricted = re.match(r"Not of type (\w+): (.*) does not conform to restriction", reason)
            if restricted:  # a range of ssl_app.checks, said in words
                reason = in_words(*restricted.groups()) or reason
            break
    option = ".".join(keys)
    if not reason:
        return " ".join(line.strip() for line in lines)
    return f"{option}: {reason}" if option else reason


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
