"""What a run runs, decided once for the three front doors: ``rnn-harness run``,
:func:`harness.check` and the pytest plugin. Each parses its own arguments into a
:class:`Request` and uses the :class:`Plan` that :func:`plan` returns, so that the same request
selects the same adapters on the same device whichever door it comes through.

The rules:

- adapters: none given, or ``all``: the default selection, every adapter but the named-only
  ones (:attr:`Adapter.named_only`: left out for cost), which come in where named, beside
  ``all`` or in a case's ``adapters:`` (then on that case only); ``every``: every adapter, the
  named-only ones included and named (they run on every case); names: those adapters.
- device: as given; else ``all`` where adapters are named one by one (a named GPU adapter is
  run, or reported unavailable, never dropped) or a GPU is required (each GPU adapter that
  cannot run is named); else the devices this machine has: ``cpu``, and ``gpu`` too where
  :func:`harness.gpus.gpu_present` sees a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.adapters import SELECTIONS, Adapter, left_out, named_explicitly, select
from harness.errors import HarnessError
from harness.names import check_adapters, check_case_adapters
from harness.spec import Case

DEVICES = ("cpu", "gpu", "all")


def adapter_names(spec: str | Sequence[str] | None, field: str = "--adapters"
                  ) -> list[str] | None:
    """The adapter names ``spec`` gives: a comma-separated string or a list (None: none given,
    the default selection). Nothing named (``""``, ``[]``) is refused, as are an empty name, a
    name given twice and an unknown one (with the closest known names)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        names = [n.strip() for n in spec.split(",")] if spec.strip() else []
    else:
        names = list(spec)
        wrong = [n for n in names if not isinstance(n, str)]
        if wrong:
            raise HarnessError(f"expected adapter names, got {type(wrong[0]).__name__} "
                               f"{wrong[0]!r}", field=field)
    if not names:  # not "no choice made": that would run the default selection
        raise HarnessError(f"expected adapter names (or 'all', 'every'), got none: leave "
                           f"{field} out for the default selection", field=field)
    check_adapters(names, field)
    return names


def _spelled(field: str, value: str) -> str:
    """``--device all`` on a command line, ``device='all'`` in code."""
    return f"{field} {value}" if field.startswith("-") else f"{field}={value!r}"


def default_device(device: str | None, require_gpu: bool = False, named: bool = False,
                   field: str = "--device") -> tuple[str, str]:
    """The run's device (cpu | gpu | all), and a note for the summary when the default left
    adapters out. Given: as given. Else ``all`` with ``require_gpu`` or with adapters named one
    by one (``named``); else the devices this machine has."""
    from harness import gpus

    if device is not None:
        return device, ""
    if require_gpu or named:
        return "all", ""
    if gpus.gpu_present():
        return "all", ""
    return "cpu", f"no GPU here: GPU adapters not selected ({_spelled(field, 'all')} reports them)"


@dataclass(frozen=True)
class Request:
    """What a front door was asked, as it was given. Checked when made: bad names or a bad
    device raise :class:`HarnessError` naming the door's argument (``adapters_field``,
    ``device_field``: ``--adapters`` on the command line, ``adapters`` in code); an unknown
    adapter name in a case raises :class:`CaseError` naming its file, field and line."""

    # a comma-separated string or a list of names, ``all`` and ``every`` among them; None: all
    adapters: str | Sequence[str] | None = None
    # cpu | gpu | all; None: the device rule (:func:`default_device`)
    device: str | None = None
    # a GPU job: every device is selected, and a GPU adapter that cannot run is a failure
    require_gpu: bool = False
    # the cases to run: their ``adapters:`` bring in the named-only adapters they name
    cases: Sequence[Case] = ()
    adapters_field: str = "--adapters"
    device_field: str = "--device"

    def __post_init__(self) -> None:
        if self.device is not None and self.device not in DEVICES:
            raise HarnessError(f"expected one of {', '.join(DEVICES)}, got {self.device!r}",
                               field=self.device_field)
        object.__setattr__(self, "cases", tuple(self.cases))
        adapter_names(self.adapters, self.adapters_field)  # bad names refused here, up front
        check_case_adapters(self.cases)  # and the adapter names the cases refer to

    @property
    def names(self) -> list[str] | None:
        return adapter_names(self.adapters, self.adapters_field)

    @property
    def named_one_by_one(self) -> bool:
        """Adapters named without ``all`` or ``every``: each runs whatever its device."""
        names = self.names
        return bool(names) and not set(SELECTIONS) & set(names)


@dataclass(frozen=True)
class Plan:
    """What runs: the adapters (the baseline among them, in the registry's order), the device,
    the adapters named explicitly (a named-only one among them runs on every case:
    :func:`harness.pairs.selected_by_case`), the named-only adapters of the device left out
    (name -> why), and a note where the device rule left the GPU adapters out."""

    request: Request
    adapters: tuple[Adapter, ...]
    device: str
    named: frozenset[str]
    left_out: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def gpu_work(self) -> bool:
        return any(a.device == "gpu" for a in self.adapters)

    def for_cases(self, cases: Sequence[Case]) -> Plan:
        """The same request and device for other cases (the plugin's: one case file at a
        time), without asking the machine again."""
        return _planned(replace(self.request, cases=cases), self.device, self.note)


def plan(request: Request) -> Plan:
    """The plan for ``request`` (module docstring: the rules)."""
    device, note = default_device(request.device, request.require_gpu,
                                  named=request.named_one_by_one, field=request.device_field)
    return _planned(request, device, note)


def _planned(request: Request, device: str, note: str) -> Plan:
    names = request.names
    chosen = tuple(select(names, device, request.cases))
    return Plan(request=request, adapters=chosen, device=device,
                named=named_explicitly(names), left_out=left_out(chosen, device), note=note)


__all__ = ["DEVICES", "Plan", "Request", "adapter_names", "default_device", "plan"]
