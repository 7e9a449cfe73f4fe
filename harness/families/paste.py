"""What a framework family gives the reproducers (:class:`Family`), and how a module's pure
part is pasted into a script (:func:`below`). NumPy-free, imports nothing of the harness."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def below(path: str, marker: str) -> str:
    """The text of the module at ``path`` below its ``marker`` line: the second occurrence of
    ``marker`` (the first is the constant that names it), through the end of the file."""
    text = Path(path).read_text(encoding="utf-8")
    return text[text.index(marker, text.index(marker) + 1):]


@dataclass(frozen=True)
class Family:
    """One framework family of ``Handed.family``, as its reproducer script needs it.

    - ``framework(call)``: the script's framework part (imports, ``framework_versions``,
      ``device``, ``run_framework``), written below ``CALL = <call>``; it calls the pasted code;
    - ``pasted``: the sources pasted above it (each the pure part of a module the adapter runs);
    - ``needs(call)``: what the script needs installed, for its docstring and README;
    - ``choices``: the keys of ``call`` whose values choose the framework part's text, with the
      values that do (every other value of the call is data, written into ``CALL``);
    - ``trackers``: the issue tracker of each framework the family's calls name
      (``call["framework"]``), ``title_prefix`` the prefix its issue form asks for;
    - ``converted``: (file, what it is) of the model file the script runs again, if any.
    """

    name: str
    framework: Callable[[dict[str, Any]], str]
    needs: Callable[[dict[str, Any]], str]
    pasted: tuple[Callable[[], str], ...] = ()
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    trackers: dict[str, str] = field(default_factory=dict)
    title_prefix: dict[str, str] = field(default_factory=dict)
    converted: tuple[str, str] | None = None
