"""One settings schema: typed models (pydantic v2) for every file the lab reads, the
``--set`` overrides derived from the same models, and errors that name the file, the key
and the bad value.

Why pydantic: one declaration per setting gives the type, the default, the validation, the
help text (``description=``) and the JSON Schema editors use (``scenario schema``); the
hand-written validators it replaces disagreed with each other about keys and defaults.

Errors stay as good as before: ``to_input_error`` turns the first validation error into an
``InputError`` ("FILE: key 'fs.disk_size' = '8M': xfs needs a disk of at least 300M"),
with the closest valid key for a typo and the validator's own hint. A validator that has a
hint raises ``problem(msg, hint)``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harness.errors import InputError


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file's data.

    :raise InputError: missing, unreadable or not TOML, naming the file.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(
            f"{path}: not valid TOML: {e}", hint="see https://toml.io for the syntax"
        ) from None


def canonical_json(value: Mapping[str, Any]) -> str:
    """JSON with sorted keys, so equal settings are equal strings (a run's parameters and a
    campaign element's key are matched on it when resuming)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# Every integer setting ends up in the SQLite store (a run's parameters, a seed column),
# which holds 64-bit integers: a larger one is bad input, not an OverflowError later.
MAX_INT = 2**63 - 1
# Timeouts reach threading and select, which refuse very large ones (OverflowError); no
# step of the lab is meant to wait longer than this.
MAX_SECONDS = 30 * 86400


def parse_size(value: Any) -> int:
    """'256M', '1G', '4096', 4096 -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("a size must be positive")
        if value > MAX_INT:
            raise ValueError(f"a size must be at most {MAX_INT} bytes")
        return value
    if not isinstance(value, str):
        raise ValueError("expected a size such as '256M' or '1G'")
    s = value.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        n = float(s[:-1]) * units[s[-1]] if s and s[-1] in units else float(s)
    except ValueError:
        raise ValueError("expected a size such as '256M' or '1G'") from None
    if not math.isfinite(n):  # 'inf', 'nan', '1e400G': int() would raise OverflowError
        raise ValueError("expected a finite size such as '256M' or '1G'")
    if n <= 0:
        raise ValueError("a size must be positive")
    if n > MAX_INT:
        raise ValueError(f"a size must be at most {MAX_INT} bytes")
    return int(n)


def size_text(n: int) -> str:
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


# A byte count written as "256M" / "1G" / 4096 in the files.
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "pattern": r"^\s*[0-9.]+\s*([KkMmGgTt]([Ii]?[Bb])?)?\s*$"},
            ],
            "description": "bytes, or a size such as '256M' or '1G'",
        }
    ),
]


class Settings(BaseModel):
    """Every settings table: unknown keys are errors (a typo must not fall back to a
    default), values are never coerced across kinds (true is not 1), records are frozen."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=False, use_enum_values=False, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _integers_fit(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            huge = _huge_int(data)
            if huge is not None:
                raise problem(f"too large: at most {MAX_INT}", key=huge)
        return data


def _huge_int(data: Any, key: str = "") -> str | None:
    """The dotted key of the first integer in ``data`` that SQLite cannot store."""
    if isinstance(data, Mapping):
        items: Any = ((f"{key}.{k}" if key else str(k), v) for k, v in data.items())
    elif isinstance(data, list | tuple):
        items = ((f"{key}[{i}]", v) for i, v in enumerate(data))
    else:
        is_int = isinstance(data, int) and not isinstance(data, bool)
        return key if is_int and abs(data) > MAX_INT else None
    for k, v in items:
        found = _huge_int(v, k)
        if found is not None:
            return found
    return None


def problem(
    message: str, hint: str | None = None, *, key: str | None = None
) -> PydanticCustomError:
    """A validation error raised from a validator: ``key`` (dotted, relative to the model
    that raises it) is the setting it is about, ``hint`` how to fix it."""
    ctx = {k: v for k, v in (("hint", hint), ("key", key)) if v}
    return PydanticCustomError("crashlab", message.replace("{", "{{").replace("}", "}}"), ctx)


# pydantic's wording -> the lab's (short, the same for files and --set)
_MESSAGES = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "int_parsing": "expected an integer",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "finite_number": "must be a finite number",
    "string_type": "expected a string",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "too_short": "needs at least {min_length} item(s)",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
}


def _dotted(loc: Sequence[int | str], tags: frozenset[str]) -> str:
    """``('crash', 'states', 0, 'reorder', 'max_states')`` -> ``crash.states[0].max_states``:
    the tag a discriminated union puts in the location is not a key of the file."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (part in tags and i + 1 < len(loc)):
            out += ("." if out else "") + part
    return out


def _value_at(data: Any, loc: Sequence[int | str], tags: frozenset[str]) -> Any:
    if loc and isinstance(data, Mapping) and loc[0] not in data:
        return "(the default)"  # the file does not set it: the model's default is at fault
    node = data
    for i, part in enumerate(loc):
        if part in tags and i + 1 < len(loc):
            continue  # a union's tag, as _dotted skips it: the op generator's tag "ops" is
            # also one of its keys, and read as one it named the op count as the value
        if i == len(loc) - 1 and isinstance(node, Mapping) and part not in node:
            # the last key is not in its table: the default is at fault, and the table
            # printed whole would hide what the message names
            return "(the default)"
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            continue  # a union tag in the location: not a key of the data
    return node


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The valid keys of the table at ``loc`` (for "did you mean")."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            continue
        field = current.model_fields.get(part)
        if field is None:
            continue
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _model_in(annotation: Any) -> Any:
    found = _models_in(annotation)
    return found[0] if found else None


def to_input_error(
    path: Path,
    model: type[BaseModel],
    data: Mapping[str, Any],
    e: ValidationError,
    overridden: frozenset[str] = frozenset(),
) -> InputError:
    """The first error of ``e`` as the lab says bad input: file, key, value, hint."""
    err = e.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    tags = frozenset(_union_tags(model))
    key = _dotted(loc, tags)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = loc[:-1]
        known = _fields_at(model, [p for p in parent if p not in tags])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        return InputError(
            f"{path}: unknown key {key!r}",
            hint=f"did you mean {close[0]!r}?" if close else ("valid keys: " + ", ".join(known)),
        )
    if kind == "missing":
        return InputError(f"{path}: missing required key {key!r}")
    if kind == "union_tag_not_found":
        tag = str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'")
        return InputError(f"{path}: missing required key {_dotted((*loc, tag), tags)!r}")
    ctx = err.get("ctx") or {}
    if "key" in ctx:
        # "filesystems[2].type" -> ("filesystems", 2, "type"), as pydantic's own locations
        parts = re.findall(r"[^.\[\]]+", str(ctx["key"]))
        loc = (*loc, *(int(p) if p.isdigit() else p for p in parts))
        key = _dotted(loc, tags)
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in _MESSAGES:
        msg = _MESSAGES[kind].format(**ctx)
    hint: str | None = ctx.get("hint")
    if kind in ("literal_error", "enum", "union_tag_invalid"):
        expected = str(ctx.get("expected") or ctx.get("expected_tags") or "")
        options = [o.strip().strip("'") for o in expected.replace(" or ", ",").split(",")]
        options = [o for o in options if o]
        given = ctx.get("tag", err.get("input"))
        msg = f"not one of {', '.join(options)}"
        if kind == "union_tag_invalid":
            loc = (*loc, str(ctx.get("discriminator", "kind")).strip("'"))
            key = _dotted(loc, tags)
        close = difflib.get_close_matches(str(given), options, n=1)
        hint = hint or (f"did you mean {close[0]!r}?" if close else None)
    value = _value_at(data, loc, tags)
    if key in overridden:
        return InputError(f"{path}: --set {key}={value!r}: {msg}", hint=hint)
    where = f"key {key!r} = {value!r}: " if key else ""
    return InputError(f"{path}: {where}{msg}", hint=hint)


def _union_tags(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every discriminator value of the unions under ``model``."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    out: set[str] = set()
    for field in model.model_fields.values():
        for member in _models_in(field.annotation):
            kind = member.model_fields.get("kind") or member.model_fields.get("type")
            if kind is not None and get_origin(kind.annotation) is not None:
                out |= {str(a) for a in get_args(kind.annotation)}
            out |= _union_tags(member, seen)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def validate(
    path: Path, model: type[Any], data: Mapping[str, Any], overridden: Sequence[str] = ()
) -> Any:
    """``model`` from ``data`` read from ``path``; ``overridden`` are the dotted keys that
    came from ``--set`` (their errors say so).

    :raise InputError: the first problem, naming the file, the key and the value.
    """
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        raise to_input_error(path, model, data, e, frozenset(overridden)) from None


def dotted_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of nested ``data`` (what a set of ``--set`` overrides touched)."""
    out: list[str] = []
    for k, v in data.items():
        if isinstance(v, Mapping):
            out += dotted_keys(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


# --- --set ---------------------------------------------------------------------------


def settable(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every leaf key of ``model`` (dotted) and its annotation: what ``--set`` accepts."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = _models_in(field.annotation)
        if sub and not _is_list(field.annotation):
            for m in sub:
                out |= settable(m, key + ".")
        else:
            out[key] = field.annotation
    return out


def _is_list(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (list, tuple):
        return True
    return any(_is_list(a) for a in get_args(annotation)) if origin is not None else False


def parse_overrides(
    path: Path, overrides: Sequence[str], keys: Mapping[str, Any], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """``["fs.type=xfs", "ops=50"]`` -> nested data, each value read as TOML when it is
    one (``[25, 50]``, ``true``, ``{kind="fua"}``, ``12``), else as a plain string; a
    unique leaf name (``disk_size``) stands for its dotted key. The models validate the
    result like any file, so ``--set`` gets the same checks and errors."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, eq, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or not key:
            raise InputError(
                f"{path}: --set {item!r}: expected KEY=VALUE", hint="e.g. --set fs.disk_size=1G"
            )
        full = override_key(path, item, keys, aliases)
        *tables, leaf = full.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[leaf] = _value(path, item, raw, keys[full])
    return out


def _value(path: Path, item: str, raw: str, annotation: Any) -> Any:
    if _is_list(annotation) and raw and not raw.startswith("["):
        return [part.strip() for part in raw.split(",") if part.strip()]
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as e:
        if raw.startswith(("[", "{")):
            raise InputError(
                f"{path}: --set {item!r}: not a TOML value: {e}",
                hint='e.g. crash.states=[{kind="fua"}]',
            ) from None
        return raw
    # A string field takes the text as typed (--set name=0x10 stays "0x10"), unless it is
    # typed as a TOML string: a quoted value is its TOML meaning ("a\nb" is two lines,
    # which a multi-line setting such as a fio job cannot be given any other way).
    quoted = isinstance(value, str) and raw[:1] in ('"', "'")
    if (annotation is str and not quoted) or (
        isinstance(value, int | float) and _accepts_str_only(annotation)
    ):
        return raw
    return value


def _accepts_str_only(annotation: Any) -> bool:
    args = get_args(annotation)
    return annotation is str or (bool(args) and all(a is str or a is type(None) for a in args))


def override_key(path: Path, item: str, keys: Mapping[str, Any], aliases: Mapping[str, str]) -> str:
    """The dotted key a ``KEY=VALUE`` override sets (an alias or a unique leaf resolved).

    :raise InputError: an unknown or ambiguous key.
    """
    key, _, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    key = aliases.get(key, key)
    if key in keys:
        return key
    leaves = [k for k in keys if k.rpartition(".")[2] == key]
    if len(leaves) == 1:
        return leaves[0]
    where = f"{path}: --set {key}={raw}"
    if len(leaves) > 1:
        raise InputError(f"{where}: ambiguous key", hint="use one of " + ", ".join(leaves))
    names = [*keys, *aliases, *(k.rpartition(".")[2] for k in keys)]
    close = difflib.get_close_matches(key, names, 1)
    hint = (f"did you mean {close[0]!r}? " if close else "") + "valid keys: " + ", ".join(keys)
    raise InputError(f"{where}: unknown key {key!r}", hint=hint)
