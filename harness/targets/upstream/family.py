"""Families as data: the record a family is (``Family``) and the one target every record becomes (``FamilyTarget``).

A record says where the family is (``Locate``), which upstream files it
executes (``Module``: the current dotted name first, then older forms), which
definitions it calls (``Symbol``; ``Method``: an engine method, its class never
built), and, per protocol method, the ``Entry`` that serves it: the symbols it
calls, the capabilities it brings, and the convention translation
(``translate(up, call)``: argument layout and units, never a step upstream's
own composition performs). Alternatives for one
method are several entries, the first whose symbols are all present serving.

Declared means present. An entry or option is declared when the symbols it
names exist in the revision (``Option.when``: ``"name"`` or
``"name(parameter)"``, ``&`` for several, any of the alternatives); whether it
WORKS is the checks' business, never inferred from a keyword in the source.
A method whose every entry lacks a symbol is ``MissingUpstream``, an ERROR
naming what was tried, unless the record gives the reason it may be absent
(``Entry.since``: arrived later); what a family never declares is
``not_declared`` with its reason.

``FamilyTarget`` has the protocol's entry points once, generated from the
call records (``calls.py``); it guards each record at the boundary (a capability the revision
lacks is a clear error naming it, once, for every family; ``chunk_size`` runs
as one chunk where ``chunking`` is not declared, which changes no value), and
calls the translation inside the calling context: the job's groups in
Megatron's parallel-state stand-in, the revision's modules present, dynamo
off (``torch.compile`` decorations run eagerly), the family's own state
(``Family.context``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.ranks.device import device_type
from harness.targets.protocol import Target
from harness.targets.upstream import calls, megatron_stand_in
from harness.targets.upstream.loader import Loader, MissingUpstream, keyed_in_part
from harness.targets.upstream.locate import Locate, find


@dataclass(frozen=True)
class Module:
    """An upstream file the family executes: dotted names, the current one first, then older forms."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Symbol:
    """A definition the family calls: the key(s) of its ``Module`` and its names (current first, then older)."""

    module: str | tuple[str, ...]
    names: tuple[str, ...]

    @property
    def modules(self) -> tuple[str, ...]:
        return (self.module,) if isinstance(self.module, str) else self.module


@dataclass(frozen=True)
class Method:
    """A method the family calls as a plain function, its class never built (``Loader.method``): an engine or
    trainer method whose module imports the whole framework. The file (current path first, then older forms),
    the class, the method; ``self`` is the translation's stand-in. With ``inner``: the function of that name
    defined inside the method (an older revision's closure), as a factory binding its free variables by name
    (``Loader.inner``). With ``read``: the method parsed, never run (``Loader.read_method``): how upstream calls
    the code under test, for the translation to call it alike."""

    paths: tuple[str, ...]
    owner: str
    name: str
    inner: str | None = None
    read: bool = False

    def describe(self) -> str:
        inside = f"'s {self.inner}" if self.inner else ""
        return f"{self.owner}.{self.name}{inside} in {' or '.join(self.paths)}"


@dataclass(frozen=True)
class Entry:
    """One protocol method served by upstream code (see the module docstring)."""

    serves: str  # "token_log_probs", "packed_log_probs", "policy_loss", "hidden_log_probs", ...
    calls: tuple[str, ...]  # symbol keys, all present for this entry to serve
    translate: Callable  # (up, call record) -> the protocol's result
    declares: frozenset  # capabilities it brings
    since: str | None = None  # None: required; else why an older revision may lack it (then not declared)
    lacks: dict = field(default_factory=dict)  # family options this path does not honour, each with why


@dataclass(frozen=True)
class Option:
    """A capability declared where its symbols are present (``when``: any of the alternatives; see above)."""

    capability: str
    when: tuple[str, ...]
    extends: str  # the capability it refines: declared only with it ("policy_loss", "token", ...)


@dataclass(frozen=True)
class Deselection:
    """Checks a history replay of the family leaves out: which (``-k``), why, and what running them costs."""

    keyword: str
    reason: str
    cost: str


@dataclass(frozen=True)
class Family:
    """One upstream family (see the module docstring)."""

    name: str
    locate: Locate
    modules: dict
    symbols: dict
    entries: tuple[Entry, ...]
    options: tuple[Option, ...] = ()
    placeholders: tuple = ()
    not_declared: dict = field(default_factory=dict)
    expectations: tuple[str, ...] = ()
    deselect: tuple[Deselection, ...] = ()
    context: Callable | None = None  # (up, tp_group, cp_group) -> context manager: the family's own calling state
    prepare: Callable | None = None  # (up) -> None: facts read once per revision, after loading, before declaring
    combinations: Callable | None = None  # (up, PolicyOptions) -> names of option combinations it has no form for
    triton: bool = False  # its files decorate Triton kernels as they execute: on a CPU, the interpreter first
    cpu_case_limits: dict | None = None  # on a CPU, the largest case it is checked on (harness/cases/limits.py)

    def target(self, where=None) -> FamilyTarget:
        return FamilyTarget(self, where)


def parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) if fn is not None else set()


def accepted(fn, **keywords) -> dict:
    """Those of ``keywords`` that ``fn`` takes: a revision's signature decides which settings it is handed."""
    taken = parameters(fn)
    return {key: value for key, value in keywords.items() if key in taken}


def field_names(config) -> frozenset[str]:
    """A configuration dataclass's field names (what ``configured`` options read), empty where the revision lacks
    the class (None)."""
    return frozenset(f.name for f in dataclasses.fields(config)) if config is not None else frozenset()


def configured(where: str, *fields: str) -> Callable:
    """An ``Option`` condition: the revision's configuration class (``where``) has every one of ``fields``.

    The record's ``prepare`` reads the class's field names into ``up.config_fields`` (TRL's ``GRPOConfig``,
    ms-swift's Megatron RLHF arguments): an option is declared by the settings that select it, never by a
    keyword in a method's source.
    """

    def holds(up) -> bool:
        return set(fields) <= up.config_fields

    holds.__doc__ = f"{where} has {', '.join(fields)}"
    return holds


def on_cuda(expression: str) -> Callable:
    """An ``Option`` condition: ``expression`` holds (as in ``Option.when``) and the device is CUDA. For code that
    moves a tensor to CUDA itself (``.cuda()``), which no CPU run can execute; ``expression`` is kept on the condition
    for a stand-in of that code that runs anywhere."""

    def holds(up) -> bool:
        return device_type() == "cuda" and _holds(up, expression)

    holds.expression = expression
    holds.__doc__ = f"{expression}, on a CUDA device"
    return holds


# What a definition raises for a value it does not take (a string switch's else, a registry's lookup, a missing
# keyword, the symbol absent: None called).
REFUSALS = (KeyError, ValueError, NotImplementedError, TypeError)


def accepts(name: str, *args, **kwargs) -> Callable:
    """An ``Option`` condition: the revision's ``name`` returns on ``args`` (the last, or a keyword: the option's
    value) instead of refusing it (``REFUSALS``).

    For options a revision holds as data its code runs, a string switch or a registry (verl's ``kl_penalty``,
    slime's ``compute_approx_kl``): the value is declared where the definition takes it, never where its name
    appears in the source.
    """

    def holds(up) -> bool:
        try:
            getattr(up, name)(*args, **kwargs)
        except REFUSALS:
            return False
        return True

    value = args[-1] if args else next(iter(kwargs.values()), "")
    holds.__doc__ = f"{name} takes {value!r}"
    return holds


def configured_options(where: str, extends: str, table: dict) -> tuple[Option, ...]:
    """One ``Option`` per capability of ``table`` (capability -> the fields of ``where`` that select it), each
    declared where the configuration class has those fields (``configured``)."""
    return tuple(Option(capability, (configured(where, *fields),), extends) for capability, fields in table.items())


def _holds(up, expression) -> bool:
    """``"name"``: the symbol is present; ``"name(p)"``: and takes ``p``; ``a & b``: both; a callable: its
    answer on the revision (a registry's entries: data the revision holds, never its source text)."""
    if callable(expression):
        return bool(expression(up))
    for term in (t.strip() for t in expression.split("&")):
        name, _, parameter = term.partition("(")
        found = getattr(up, name)
        if found is None or (parameter and parameter.rstrip(")") not in parameters(found)):
            return False
    return True


class FamilyTarget(Target):
    """The target a ``Family`` record becomes (see the module docstring)."""

    def __init__(self, family: Family, where=None):
        located = find(family.name, family.locate, where)
        if family.triton and device_type() == "cpu":
            os.environ.setdefault("TRITON_INTERPRET", "1")  # read by triton.jit when a kernel is decorated
        self.family, self.root = family, located.root
        self.case_limits = family.cpu_case_limits if device_type() == "cpu" else None
        self.name = f"{family.name}@{located.revision}" if located.revision else f"{family.name}-{located.version}"
        if located.version == "unknown":
            self.name = family.name
        self.loader = Loader(located.root, family.locate.packages, family.placeholders)
        self.up = self._bind()
        if family.prepare is not None:
            family.prepare(self.up)
        self.entries: dict[str, Entry] = {}
        self.not_declared = dict(family.not_declared)
        capabilities: set[str] = set()
        for serves in dict.fromkeys(entry.serves for entry in family.entries):
            candidates = [e for e in family.entries if e.serves == serves]
            entry = next((e for e in candidates if all(getattr(self.up, s) is not None for s in e.calls)), None)
            if entry is None:
                self._absent(serves, candidates)
                continue
            self.entries[serves] = entry
            capabilities |= entry.declares
        for option in family.options:
            if option.extends in capabilities and any(_holds(self.up, when) for when in option.when):
                capabilities.add(option.capability)
        if capabilities & {"token", "packed"} and "vocab_parallel" not in self.not_declared:
            capabilities.add("vocab_parallel")  # its logits path takes the shard; a whole-vocabulary one says why not
        self.capabilities = frozenset(capabilities)

    @property
    def executed(self) -> tuple[str, ...]:
        """Every upstream file executed so far (relative to its root): what a history replay keys and replays. A
        second root a record's prepare loads (``up.roots``: its loaders; ms-swift's Megatron-core) adds its files."""
        second = (path for loader in getattr(self.up, "roots", ()) for path in loader.executed)
        return tuple(sorted({*self.loader.executed, *second}))

    @property
    def alone(self) -> dict[str, tuple[str, ...]]:
        """The executed files of which only some definitions were loaded alone (``Loader.alone``): a history keys
        those by the definitions, not the whole file."""
        return keyed_in_part(
            (loader.executed, loader.alone) for loader in (self.loader, *getattr(self.up, "roots", ()))
        )

    def _bind(self) -> types.SimpleNamespace:
        """The revision's modules and symbols by the record's keys (None where absent)."""
        up = types.SimpleNamespace(family=self.family, loader=self.loader, root=self.root, modules={})
        for key, module in self.family.modules.items():
            up.modules[key] = self.loader.find(*module.names)
        for key, symbol in self.family.symbols.items():
            if isinstance(symbol, Method):
                setattr(up, key, self._method(symbol))
                continue
            found = (getattr(up.modules[m], n, None) for m in symbol.modules for n in symbol.names)
            setattr(up, key, next((f for f in found if f is not None), None))
        return up

    def _method(self, method: Method):
        """The method of the first of its files present, None where none is or it lacks the method."""
        path = self.loader.first_present(method.paths)
        try:
            if path is None:
                return None
            if method.inner:
                return self.loader.inner(path, method.owner, method.name, method.inner)
            if method.read:
                return self.loader.read_method(path, method.owner, method.name)
            return self.loader.method(path, method.owner, method.name)
        except LookupError:
            return None

    def _absent(self, serves: str, candidates) -> None:
        """No entry for ``serves``: not declared with the record's reason, else an ERROR naming what was tried."""
        reasons = [e.since for e in candidates if e.since]
        if reasons:
            self.not_declared[serves] = reasons[0]
            return
        tried = []
        for entry in candidates:
            for key in entry.calls:
                state = "absent" if getattr(self.up, key) is None else "present"
                symbol = self.family.symbols.get(key)
                if symbol is None:
                    where = getattr(self.up, "read_from", {}).get(key)  # the file a record's prepare read it from
                    tried.append(
                        f"{key} in {where} ({state})" if where else f"{key}, read by the record's prepare ({state})"
                    )
                    continue
                if isinstance(symbol, Method):
                    tried.append(f"{symbol.describe()} ({state})")
                    continue
                modules = [name for m in symbol.modules for name in self.family.modules[m].names]
                files = " or ".join(f"{name.replace('.', '/')}.py" for name in modules)
                tried.append(f"{'/'.join(symbol.names)} in {files} ({state})")
        raise MissingUpstream(f"{self.name} at {self.root}: nothing serves {serves}: {'; '.join(tried)}")

    def combination_needs(self, options) -> set[str]:
        """What a combination of policy options needs that the family has no form for (``Family.combinations``)."""
        return set(self.family.combinations(self.up, options)) if self.family.combinations else set()

    def capabilities_for(self, needed) -> frozenset:
        """The family's capabilities less what the path serving ``needed`` lacks (``Entry.lacks``)."""
        serves = next((record.serves for record in calls.RECORDS if record.level in needed), None)
        entry = self.entries.get(serves)
        return self.capabilities - set(entry.lacks) if entry is not None else self.capabilities

    # ---- the boundary: guards, the calling context, the translation -------------------------------

    def _call(self, serves: str, call):
        call.validate()
        entry = self.entries.get(serves)
        lacks = entry.lacks if entry is not None else {}
        declared = self.capabilities - set(lacks)
        missing = call.needs() - declared
        if missing:
            asked = ", ".join(f"{calls.ARGUMENTS.get(c, 'options')} needs {c!r}" for c in sorted(missing))
            known = sorted(missing & {*lacks, *self.not_declared})  # sorted: the same message on every run
            why = {c: lacks.get(c) or self.not_declared[c] for c in known}
            raise ValueError(
                f"{self.name}: {asked}, which this revision does not declare" + (f" ({why})" if why else "")
            )
        if getattr(call, "chunk_size", None) is not None and "chunking" not in declared:
            call = call.replace(chunk_size=None)  # one chunk: chunking changes no value (docs/targets.md)
        with self._calling(getattr(call, "tp_group", None), getattr(call, "cp_group", None)):
            return self.entries[serves].translate(self.up, call)

    @contextlib.contextmanager
    def _calling(self, tp_group, cp_group):
        megatron_stand_in.set_groups(tp_group, cp_group)
        family_state = self.family.context(self.up, tp_group, cp_group) if self.family.context else None
        with self.loader.present(), torch._dynamo.config.patch(disable=True), family_state or contextlib.nullcontext():
            yield


def _entry_point(record):
    """The protocol method ``record`` serves: its arguments bound by the record's signature (a missing or unknown
    one is a TypeError naming it), the record built and handed to the boundary."""
    signature = calls.signature(record)

    def entry_point(self, *args, **keywords):
        try:
            arguments = signature.bind(self, *args, **keywords).arguments
        except TypeError as error:
            raise TypeError(f"{self.name}.{record.serves}(): {error}") from None
        del arguments["self"]
        return self._call(record.serves, record(**arguments, **record.fixed))

    entry_point.__name__, entry_point.__qualname__ = record.serves, f"FamilyTarget.{record.serves}"
    entry_point.__signature__, entry_point.__doc__ = signature, getattr(Target, record.serves).__doc__
    return entry_point


for _record in calls.RECORDS:  # the protocol's entry points, written once: by the call records
    setattr(FamilyTarget, _record.serves, _entry_point(_record))
