"""Faster construction for the immutable records built on every turn.

A frozen dataclass cannot assign its own fields, so the ``__init__`` that :mod:`dataclasses`
writes calls ``object.__setattr__(self, name, value)`` for each one. With ``slots=True`` every
field is a slot descriptor whose ``__set__`` does the same store without looking the name up:
about twice as fast (``Usage``: 1.68 → 0.81 µs, ``ModelRequest``: 1.20 → 0.74 µs), which counts
when a 1,000-agent fan-out builds ~10 of them per model call. :func:`quick_init` writes that
``__init__`` the way :mod:`dataclasses` writes its own (generated source), and leaves everything
else to the dataclass: frozenness, equality, hashing, ``repr``, ``replace``, pickling.
:func:`record` declares such a class in one decorator, and asks :mod:`dataclasses` for no
``__init__`` of its own (generating one only to replace it costs ~0.15 ms per class at import).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, dataclass_transform

__all__ = ["quick_init", "record"]

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an ``__init__`` that stores through the slot descriptors.

    Only plain fields are supported (positional-or-keyword, with or without a default or a
    default factory); anything else (``__post_init__``, keyword-only fields, ``init=False``
    fields) is refused at import time rather than half-handled.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init needs a frozen dataclass with slots, got {cls.__name__}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init does not run __post_init__ ({cls.__name__})")
    namespace: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    arguments: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only:
            raise TypeError(f"quick_init supports plain fields only ({cls.__name__}.{f.name})")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            arguments.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            arguments.append(f"{f.name}=_MISSING")
            body.append(f"if {f.name} is _MISSING: {f.name} = _factory_{f.name}()")
        else:
            arguments.append(f.name)
        body.append(f"_set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(arguments)}):\n" + "".join(
        f"    {line}\n" for line in body or ["pass"]
    )
    exec(source, namespace)  # generated from the class's own field names only
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)  # noqa: B010 - replacing a method on purpose
    return cls


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[T]) -> type[T]:
    """``@quick_init`` over ``@dataclass(frozen=True, slots=True)``: type checkers see that
    dataclass (its ``__init__`` included), and only :func:`quick_init` writes the ``__init__``."""
    return quick_init(dataclasses.dataclass(frozen=True, slots=True, init=False)(cls))
