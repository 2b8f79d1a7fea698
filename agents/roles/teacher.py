"""The teacher role: reflects on a whole group of rollouts with their rewards and proposes curation ops.

This is the "review/reflect" step of Karpathy's system prompt learning, with the group view of
Training-Free GRPO (compare successes and failures of the same task) and ACE/ExpeL-style
structured ops. The reply is untrusted: it is parsed by :func:`agents.parsing.parse_with_retry`
(fences stripped, JSON extracted, pydantic-validated, one retry showing the error), then each
proposed lesson is checked again here: it must be general (no reference answer, no numbers
copied from the task) and tags may only name lessons that were in context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.capabilities import Capability, has_capability
from agents.parsing import sample_and_parse
from agents.policy import Message, Policy
from agents.roles.critic import NOTE_CUT_OFF
from lessons.ops import AddOp, EditOp, MergeOp, Reflection
from lessons.outcomes import passes
from lessons.text import contains_token, neutralise_lesson, neutralise_model_text

# Must make the teacher compare the group's attempts and return ONLY the JSON object below.
TEACHER_SYSTEM = """You are a teacher. A student attempted one task several times; each attempt has a reward (1 = correct, 0 = wrong) and a critique.
The rewards come from a verifier: trust them and do not solve the task yourself.
Start from the failure summary: a wrong attempt either broke the answer format (no <answer> tag, or ran past the length limit) or got the method wrong (a wrong value inside the tag: a sign dropped, an operation swapped, a step skipped).
In "analysis", say in one sentence which kind of mistake most wrong attempts made and what the correct attempts did instead.
When most wrong attempts broke the format, the first lesson says how to end the reply: with the final value alone inside <answer></answer>, and no working after it.
Then write at most 2 GENERAL lessons that would prevent that mistake on OTHER tasks of the same kind.
A lesson is one short imperative sentence (at most 20 words) of advice, for any task of this kind: it never mentions this task ("in this case", "this problem"), its numbers or its answer, and it does not repeat a lesson the student was already shown.
Also tag each lesson that was shown to the student as helpful, harmful or neutral.
Reply with ONE JSON object and nothing else:
{"analysis": "<one sentence>", "add": [{"text": "<lesson>", "scope": "<task family or global>"}], "tags": [{"lesson_id": "<id>", "tag": "helpful|harmful|neutral"}]}
Optional keys, only for lessons shown to the student: "edit": [{"lesson_id": "<id>", "text": "<better lesson>"}], "merge": [{"lesson_ids": ["<id>", "<id>"], "text": "<one lesson saying both>"}], "retire": [{"lesson_id": "<id>", "why": "<reason>"}]."""

# Appended to the group's view when the library is close to its token budget.
LIBRARY_FULL_NOTE = (
    "The lesson library is nearly full ({used} of {budget} tokens): prefer merging lessons "
    "that say the same thing or retiring misleading ones over adding new ones."
)

# Shown on the retry: the validation error of the first reply.
TEACHER_RETRY = "Your reply could not be used: {error}. Reply again with ONLY the JSON object described above."

# Shown once when every op of a valid reply was screened out: why, and what a lesson must be instead.
TEACHER_SCREEN_RETRY = ("None of your lessons could be kept: {reasons}. Write them again as general advice for any task "
                        "of this kind, without this task's numbers or answer. Reply with ONLY the JSON object.")

# The local model is steered into the schema by starting its reply (prefill).
TEACHER_PREFILL = '{"analysis": "'

MAX_ADDS = 2  # lessons a single reflection may add
ATTEMPT_CHARS = 220  # characters of each attempt shown to the teacher (the 135M solver's replies are ~60 tokens)

# One worked example (a few-shot pair) so small teachers follow the format. Its lessons are
# never accepted verbatim from a reply: a copy of the example is not a lesson learned.
EXAMPLE_FAMILY = "chain_sum"
EXAMPLE_QUESTION = "State the final answer to the following arithmetic problem: 31 - 48 ="
EXAMPLE_ROLLOUTS = (
    ("31 - 48 = 17 <answer>17</answer>", 0.0, "answer '17' is incorrect"),
    ("48 - 31 = 17, so 31 - 48 = -17. <answer>-17</answer>", 1.0, "answer '-17' is correct"),
    ("The answer is 79.", 0.0, "answer '79' is incorrect; no <answer> tag; answer taken from the text"),
)
EXAMPLE_REPLY = {
    "analysis": "The correct attempt subtracted the smaller from the larger number and kept the minus sign; the others dropped the sign or added.",
    "add": [
        {"text": "When the number being subtracted is larger, compute the difference and make the result negative.", "scope": "chain_sum"},
        {"text": "End with the final number inside <answer></answer> tags.", "scope": "global"},
    ],
    "tags": [],
}

# Replies that echo the format instead of filling it, or state a specific result.
_TEMPLATE_ECHO = re.compile(r"<\s*(lesson(_id)?|id|one sentence|task family[^>]*)\s*>|helpful\|harmful", re.I)
# An operator with no operand beside it ("the answer to + is ."): a worked example whose numbers the grammar kept out.
_HOLLOW_EXAMPLE = re.compile(r"\b(?:to|of|is|from|and|equals)\s+[-+*/=×÷](?:\s|$)|[-+*/=×÷]\s+(?:is|equals|[.,;:])"
                             r"|\w\s+[.,;:](?:\s|$)|\b(?:from|to|of|and|by)\s{2,}\w", re.I)
# A lesson that starts in lower case continues a sentence: recorded, an analysis cut at its length limit
# ("… the goal of solving a problem is to find") went on in the lesson ("the correct answer, not just …").
_FRAGMENT = re.compile(r"^[\W_]*[a-z]")
# A lesson restated under its id label, as the lessons are listed to the teacher ("chain_sum-<id>: 'To provide the
# final answer, …'": the grammar allows no digit, so the id's digits became "<id>"; recorded, session 24), in quotes.
_ID_LABEL = re.compile(r"^\s*[a-z][a-z0-9_.]*-(?:<id>|id|\d+)\s*:\s*", re.I)
# Two or more spaces inside the model's raw lesson text: a hole where it meant a number the reply grammar
# keeps out ("Think of  and  which have the relation of  and"; recorded, session 24).
_HOLE = re.compile(r"\S {2,}\S")
# A complete sentence: text up to a full stop, "!" or "?" followed by whitespace or the end (closing quotes kept).
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")
_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]*$")
LESSON_MAX_CHARS = 160  # the longest lesson text the reply grammar lets the teacher write
_STATES_RESULT = re.compile(r"\b(answer|result|sum|total|difference)\b[^.;:!?]{0,60}?(\bis|\bwas|\bequals|=)\s*-?\d", re.I)


def reflection_schema(lesson_ids: Sequence[str], family: str) -> dict:
    """The JSON schema a reflection must match, for grammar-constrained decoding (llama.cpp).

    ``analysis`` comes first (the teacher states what separated successes from failures before it
    writes a lesson), then at most :data:`MAX_ADDS` lessons of bounded length with a scope of
    ``family`` or ``global``, then tags: one per shown lesson, whose ids are the only ones allowed.
    EDIT / MERGE / RETIRE exist only when lessons were shown. The reply is still validated as
    :class:`lessons.ops.Reflection` and screened: the grammar fixes the shape, not the content.

    Args:
        lesson_ids: ids of the lessons that were in the solver's context.
        family: the task family (a lesson's scope is it or ``global``).

    Returns:
        A JSON-schema dict (draft 2020-12 subset that llama.cpp's converter reads).
    """
    # a lesson's text holds no digit (no number of this or any task), line break, quote or escape
    lesson = {"type": "string", "pattern": f"^[^0-9\\n\"\\\\]{{12,{LESSON_MAX_CHARS}}}$"}
    props: dict = {
        "analysis": {"type": "string", "maxLength": 400},
        "add": {"type": "array", "maxItems": MAX_ADDS, "items": {
            "type": "object", "properties": {"text": lesson, "scope": {"enum": [family, "global"]}},
            "required": ["text", "scope"], "additionalProperties": False}},
    }
    required = ["analysis", "add"]
    if lesson_ids:
        ids = {"enum": list(dict.fromkeys(lesson_ids))}
        props["tags"] = {"type": "array", "maxItems": len(ids["enum"]), "items": {
            "type": "object", "properties": {"lesson_id": ids, "tag": {"enum": ["helpful", "harmful", "neutral"]}},
            "required": ["lesson_id", "tag"], "additionalProperties": False}}
        props["edit"] = {"type": "array", "maxItems": 1, "items": {
            "type": "object", "properties": {"lesson_id": ids, "text": lesson},
            "required": ["lesson_id", "text"], "additionalProperties": False}}
        props["retire"] = {"type": "array", "maxItems": 1, "items": {
            "type": "object", "properties": {"lesson_id": ids, "why": {"type": "string", "minLength": 3, "maxLength": 160}},
            "required": ["lesson_id", "why"], "additionalProperties": False}}
        required.append("tags")
        if len(ids["enum"]) >= 2:
            props["merge"] = {"type": "array", "maxItems": 1, "items": {
                "type": "object", "properties": {"lesson_ids": {"type": "array", "items": ids, "minItems": 2, "maxItems": 3},
                                                 "text": lesson},
                "required": ["lesson_ids", "text"], "additionalProperties": False}}
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


@dataclass
class RolloutView:
    """What the teacher sees of one rollout (never the reference answer)."""

    completion: str
    reward: float
    critique: str
    guided: bool = False  # sampled with the hint in context
    failed_criteria: list[str] | None = None  # rubric rewards: titles of the criteria it failed (RaR verdicts)


@dataclass
class ReflectResult:
    """The outcome of one reflection: validated ops (or None), raw replies, and what was rejected."""

    reflection: Reflection | None
    raw: list[str]
    error: str | None
    rejected: list[str] = field(default_factory=list)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_summary(rollouts: Sequence[RolloutView]) -> str | None:
    """One line counting the kinds of mistake among a group's wrong unguided attempts, or None.

    Kinds (from the verifier's grade and the critic's format notes, never from a model): ran past the
    token limit (:data:`agents.roles.critic.NOTE_CUT_OFF` in the critique), no ``<answer>`` tag in the
    text, or a wrong value inside the tag. A small teacher reading eight attempts one by one misses
    what their counts show at once (measured: 218 of 320 wrong attempts of the 135M solver had no tag,
    89 were cut off, and the 1.5B teacher's lessons were about arithmetic it re-did wrongly), so the
    count is stated for it, as an ACE/ExpeL reflector is given its execution feedback.

    Args:
        rollouts: the group as the teacher sees it; guided attempts and rubric-graded attempts
            (``failed_criteria`` set) are not counted.

    Returns:
        ``"Failure summary: of the 6 wrong attempts, 3 gave no <answer> tag, 1 ran past the length
        limit, 2 had a wrong value inside the tag."`` — or None when no verifier-graded attempt failed.
    """
    wrong = [r for r in rollouts if not r.guided and r.failed_criteria is None and not passes(r.reward)]
    if not wrong:
        return None
    cut = sum(NOTE_CUT_OFF in r.critique for r in wrong)
    untagged = sum(NOTE_CUT_OFF not in r.critique and "<answer>" not in r.completion.lower() for r in wrong)
    kinds = [(untagged, "gave no <answer> tag"), (cut, "ran past the length limit"),
             (len(wrong) - cut - untagged, "had a wrong value inside the tag")]
    parts = ", ".join(f"{n} {what}" for n, what in kinds if n)
    return f"Failure summary: of the {len(wrong)} wrong attempt{'s' if len(wrong) != 1 else ''}, {parts}."


def reflect_messages(
    family: str,
    question: str,
    rollouts: Sequence[RolloutView],
    lessons_shown: Sequence[tuple[str, str]],
    hint: str | None = None,
    library_note: str | None = None,
) -> str:
    """The teacher's view of one group: the task, every rollout with reward and critique, the lessons shown.

    Guided rollouts (sampled with ``hint``) are listed after the hint, so the teacher can ask
    what the hint taught that a general lesson could keep. Identical attempts (same text, reward
    and critique) are listed once with their count, and each is clipped to
    :data:`ATTEMPT_CHARS`: the prompt is what the teacher's time goes to on a CPU.

    Everything here that a model wrote (the attempts, critiques, failed criteria, the hint, the
    lessons) is neutralised (:func:`lessons.text.neutralise_model_text`) before it enters the
    prompt, so a literal ``<|im_start|>`` in a rollout cannot open a turn of the teacher's chat.

    Args:
        family: the task family.
        question: the task text.
        rollouts: the group as the teacher sees it.
        lessons_shown: ``(lesson_id, text)`` of the lessons in the solver's context.
        hint: the hint of the guided rollouts, if any.
        library_note: a line about the library's state, if any.

    Returns:
        The user turn's text.
    """
    lines = [f"Task family: {family}", f"Task: {_clip(question, 600)}", "Attempts:"]

    def attempts(views: Sequence[RolloutView], start: int) -> list[str]:
        counts: dict[tuple, int] = {}
        for r in views:
            failed = tuple(neutralise_model_text(t, one_line=True) for t in r.failed_criteria or ())
            key = (_clip(neutralise_model_text(r.completion), ATTEMPT_CHARS), r.reward,
                   neutralise_model_text(r.critique, one_line=True), failed if r.failed_criteria is not None else None)
            counts[key] = counts.get(key, 0) + 1
        out = []
        for i, ((text, reward, critique, failed), n) in enumerate(counts.items(), start):
            line = f"{i}. reward {reward:g}{f' (x{n})' if n > 1 else ''} | {json.dumps(text)} | critique: {critique}"
            if failed is not None:
                line += f" | failed criteria: {'; '.join(failed) if failed else 'none'}"
            out.append(line)
        return out

    unguided = [r for r in rollouts if not r.guided]
    guided = [r for r in rollouts if r.guided]
    shown = attempts(unguided, 1)
    lines += shown
    summary = failure_summary(rollouts)
    if summary:
        lines.append(summary)
    if guided:
        lines.append(f"All attempts failed, so the student tried again with this hint: {json.dumps(_clip(neutralise_model_text(hint or ''), 400))}")
        lines.append("Guided attempts (what did the hint teach that a general lesson could keep?):")
        lines += attempts(guided, len(shown) + 1)
    if lessons_shown:
        lines.append("Lessons shown to the student:")
        lines += [f"- {lid}: {json.dumps(neutralise_lesson(text))}" for lid, text in lessons_shown]
    else:
        lines.append("Lessons shown to the student: none")
    if library_note:
        lines.append(library_note)
    lines.append("Write the JSON object now.")
    return "\n".join(lines)


def teacher_messages(
    family: str,
    question: str,
    rollouts: Sequence[RolloutView],
    lessons_shown: Sequence[tuple[str, str]],
    hint: str | None = None,
    library_note: str | None = None,
    worked_example: bool = True,
) -> list[Message]:
    """The full teacher chat: system prompt, the worked example (user/assistant), then this group.

    ``worked_example=False`` leaves the example out: a teacher decoding under the reply's JSON
    schema (:func:`reflection_schema`) needs no format demonstration, and the 1.5B teacher copied
    the example's lessons into unrelated groups when shown one (measured: 3 of 4 replies).
    """
    group = {"role": "user", "content": reflect_messages(family, question, rollouts, lessons_shown, hint, library_note)}
    if not worked_example:
        return [{"role": "system", "content": TEACHER_SYSTEM}, group]
    example = reflect_messages(EXAMPLE_FAMILY, EXAMPLE_QUESTION, [RolloutView(*r) for r in EXAMPLE_ROLLOUTS], [])
    return [
        {"role": "system", "content": TEACHER_SYSTEM},
        {"role": "user", "content": example},
        {"role": "assistant", "content": json.dumps(EXAMPLE_REPLY)},
        group,
    ]


def _numbers(text: str) -> set[str]:
    """Number tokens in ``text`` ("57", "-3", "2.5"); a sentence-ending period is not a decimal point."""
    return set(re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w|\.\d)", text))


def complete_sentences(text: str, raw: str | None = None) -> str:
    """A lesson the reply grammar cut at :data:`LESSON_MAX_CHARS` without its end, cut back to its complete sentences.

    Recorded from the 1.5B teacher: about a third of its lessons run into the limit and end mid-word
    ("… If you are unsure about the correct answer, check the previous attempts for"); the sentences
    before the cut are whole lessons ("To ensure that the answer is in the correct format, always
    include the <answer> tag."). A text shorter than the limit, or one that ends a sentence, comes
    back unchanged (another teacher may leave out a final full stop); a cut one with no complete
    sentence comes back unchanged too, and :func:`screen_reflection` rejects it.

    Args:
        text: the lesson as the teacher wrote it.

    Returns:
        The text up to its last complete sentence, stripped.
    """
    text = text.strip()
    if not _cut_off(raw if raw else text):
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    kept = text[: ends[-1]].strip() if ends else ""
    return kept if len(kept) >= 12 and len(kept.split()) >= 3 else text  # the grammar's shortest lesson


def _cut_off(text: str) -> bool:
    """Whether ``text`` reached the grammar's length limit without ending a sentence.

    ``text`` may be the model's raw text: spaces padding a sentence the grammar would not let it
    finish (no digit allowed) to the limit count toward the length, and are not its end.
    """
    return len(text) >= LESSON_MAX_CHARS - 1 and _ENDS_SENTENCE.search(text.rstrip()) is None


def _without_id_label(text: str) -> str:
    """``text`` without a leading lesson-id label and the quotes around what follows it (:data:`_ID_LABEL`).

    The rest is the lesson the teacher restated; as an ADD it upvotes the lesson it repeats
    (:class:`lessons.library.curation.Curator`'s near-duplicate rule) instead of being refused as a fragment.
    """
    m = _ID_LABEL.match(text)
    if m is None:
        return text
    rest = text[m.end():].strip()
    if rest[:1] in "'\"" and rest:
        rest = rest[1:]
        if rest.rstrip()[-1:] in "'\"":
            rest = rest.rstrip()[:-1]
    return rest if len(rest.strip()) >= 12 else text  # the grammar's shortest lesson; shorter: left to the screen


def screen_reflection(
    reflection: Reflection,
    family: str,
    question: str,
    reference_answer: str | None,
    lessons_shown: Sequence[str],
) -> tuple[Reflection, list[str]]:
    """Keep only the ops that are safe to apply; return the screened reflection and the reasons for rejections.

    Rules: at most :data:`MAX_ADDS` adds; an added lesson must not contain the reference
    answer, any number that appears in the task or any number of two or more digits (lessons
    are general, and the reference answer never reaches a lesson; the 1.5B teacher cites numbers of
    tasks it imagines), must not state a specific result ("the answer is 24"),
    echo the reply template, repeat itself, start mid-sentence (in lower case), hold a hole where
    a number was left out (two spaces inside the model's raw text: the grammar allows no digit), end
    mid-sentence at the length limit (spaces padding it there count: a cut text keeps its complete
    sentences, :func:`complete_sentences`), or copy the worked example; its scope is the
    task's family or ``global``. EDIT and MERGE texts pass the same checks; tags, EDIT,
    MERGE and RETIRE must name lessons that were in context (one tag per lesson, first wins).
    """
    rejected: list[str] = []
    task_numbers = _numbers(question)
    example_texts = {a["text"] for a in EXAMPLE_REPLY["add"]}
    shown = set(lessons_shown)

    def problem(text: str, raw: str, cut: bool) -> str | None:
        sentences = [x.strip().lower() for x in re.split(r"[.!?;]\s*", text) if len(x.split()) >= 3]
        leaked = _numbers(text) & task_numbers
        if reference_answer and contains_token(text, reference_answer.strip()):
            return "contains the reference answer"
        if leaked:
            return f"task-specific numbers {sorted(leaked)}"
        specific = sorted(n for n in _numbers(text) if len(n.lstrip("-").split(".")[0]) >= 2)
        if specific:  # a general lesson needs no multi-digit number; one here comes from some task (this or another)
            return f"specific numbers {specific}"
        if _STATES_RESULT.search(text):
            return "states a specific result"
        if _HOLLOW_EXAMPLE.search(text):
            return "a worked example without its numbers"
        if _FRAGMENT.match(text):
            return "starts mid-sentence: a fragment, not a lesson"
        if _HOLE.search(raw.strip()):
            return "a hole where a number was left out"
        if cut:
            return "cut off mid-sentence at the length limit"
        if _TEMPLATE_ECHO.search(text):
            return "echoes the reply template"
        if len(sentences) != len(set(sentences)):
            return "repeats itself"
        if text in example_texts:
            return "copies the worked example"
        return None

    def kept(op: AddOp | EditOp | MergeOp) -> tuple[AddOp | EditOp | MergeOp, str, bool]:
        """The op with its id label removed and its text cut back to complete sentences; the raw text of
        what is kept; and whether it stays cut off at the length limit (the model's raw text decides)."""
        text0 = _without_id_label(op.text)
        text = complete_sentences(text0, op.raw_text)
        cut = _cut_off(op.raw_text) and text == text0.strip()  # at the limit and no complete sentence to keep
        raw = complete_sentences(_without_id_label(op.raw_text), op.raw_text)  # the raw text of what is kept
        return op.model_copy(update={"text": text}), raw, cut

    adds = []
    for op in reflection.add:
        op, raw, cut = kept(op)
        reason = problem(op.text, raw, cut)
        if reason:
            rejected.append(f"ADD rejected ({reason}): {op.text!r}")
            continue
        if op.scope not in {family, "global"}:
            op = op.model_copy(update={"scope": family})
        if len(adds) >= MAX_ADDS:
            rejected.append(f"ADD rejected (more than {MAX_ADDS} per reflection): {op.text!r}")
            continue
        adds.append(op)
    edits, merges, retires = [], [], []
    for op in reflection.edit:
        op, raw, cut = kept(op)
        reason = "lesson was not in context" if op.lesson_id not in shown else problem(op.text, raw, cut)
        if reason:
            rejected.append(f"EDIT {op.lesson_id} rejected ({reason}): {op.text!r}")
        else:
            edits.append(op)
    for op in reflection.merge:
        op, raw, cut = kept(op)
        missing = [i for i in op.lesson_ids if i not in shown]
        reason = f"{', '.join(missing)} not in context" if missing else problem(op.text, raw, cut)
        if reason:
            rejected.append(f"MERGE {'+'.join(op.lesson_ids)} rejected ({reason}): {op.text!r}")
        else:
            merges.append(op)
    for op in reflection.retire:
        if op.lesson_id not in shown:
            rejected.append(f"RETIRE {op.lesson_id} rejected (lesson was not in context)")
        else:
            retires.append(op)
    tags, seen = [], set()
    for t in reflection.tags:
        if t.lesson_id not in shown:
            rejected.append(f"tag rejected (lesson {t.lesson_id!r} was not in context)")
        elif t.lesson_id not in seen:
            seen.add(t.lesson_id)
            tags.append(t)
    return reflection.model_copy(update={"add": adds, "edit": edits, "merge": merges, "retire": retires, "tags": tags}), rejected


def reflect(
    teacher: Policy,
    family: str,
    question: str,
    rollouts: Sequence[RolloutView],
    lessons_shown: Sequence[tuple[str, str]],
    reference_answer: str | None = None,
    temperature: float = 0.3,
    max_tokens: int = 256,
    seed: int | None = None,
    hint: str | None = None,
    library_note: str | None = None,
) -> ReflectResult:
    """Ask the teacher for curation ops on one group; validate and screen them.

    Args:
        teacher: the teacher's policy.
        family: the task family (the default scope of new lessons).
        question: the task text.
        rollouts: the whole group, each with reward and critique.
        lessons_shown: ``(lesson_id, text)`` of the lessons that were in the solver's context.
        reference_answer: used only to reject lessons that leak it; never shown to the teacher.
        temperature, max_tokens, seed: sampling settings for the teacher.
        hint: the hint the guided rollouts in ``rollouts`` were sampled with, if any.
        library_note: a line about the library's state (e.g. :data:`LIBRARY_FULL_NOTE`).

    Returns:
        A :class:`ReflectResult`. A reply that stays invalid after one retry gives
        ``reflection=None`` and the error. A valid reply whose every op the screen rejects is
        asked for once more with the reasons shown (:data:`TEACHER_SCREEN_RETRY`); ``rejected``
        lists the rejections of both. This function does not raise on bad model output.
    """
    constrained = has_capability(teacher, Capability.JSON_SCHEMA)
    base = teacher_messages(family, question, rollouts, lessons_shown, hint, library_note, worked_example=not constrained)
    outcome = sample_and_parse(
        teacher, base, Reflection, TEACHER_RETRY, temperature, max_tokens, seed, prefill=TEACHER_PREFILL,
        json_schema=reflection_schema([lid for lid, _ in lessons_shown], family),
    )
    if outcome.value is None:
        return ReflectResult(None, outcome.raw, outcome.error)
    shown_ids = [lid for lid, _ in lessons_shown]
    screened, rejected = screen_reflection(outcome.value, family, question, reference_answer, shown_ids)
    raw = list(outcome.raw)
    if rejected and not _has_ops(screened) and outcome.attempts < 2:
        # every op was screened out: one more try with the reasons shown (the 1.5B teacher often writes a
        # worked example of this task instead of a lesson; told so, it generalises)
        # the reply and the reasons (which quote its lesson ids) are model text: neutralised
        reasons = neutralise_model_text("; ".join(r.split(":")[0] for r in rejected), one_line=True)
        again = base + [{"role": "assistant", "content": neutralise_model_text(raw[-1])},
                        {"role": "user", "content": TEACHER_SCREEN_RETRY.format(reasons=reasons)}]
        second = sample_and_parse(teacher, again, Reflection, TEACHER_RETRY, temperature,
                                  max_tokens, None if seed is None else seed + 7, prefill=TEACHER_PREFILL, retries=0,
                                  json_schema=reflection_schema(shown_ids, family))
        raw += second.raw
        if second.value is not None:
            screened2, rejected2 = screen_reflection(second.value, family, question, reference_answer, shown_ids)
            if _has_ops(screened2):
                return ReflectResult(screened2, raw, None, rejected + rejected2)
            rejected += rejected2
    return ReflectResult(screened, raw, None, rejected)


def _has_ops(r: Reflection) -> bool:
    """Whether a screened reflection still does something (an op or a tag)."""
    return bool(r.add or r.edit or r.merge or r.retire or r.tags)
