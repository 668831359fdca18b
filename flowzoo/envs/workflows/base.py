"""What a workflow declares: roles, turn order, prompts, parsers, where the answer comes from.

The engine (:class:`flowzoo.envs.core.WorkflowEnv`) owns everything PettingZoo needs; a
workflow is a small class over an :class:`Episode` record that also owns everything about
its roles (which solve, which flags mean "unparsed", per-family defaults, its scripted
expert). Adding a workflow is one file: subclass :class:`Workflow` and call
``flowzoo.register(MyWorkflow)``.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from flowzoo.tasks.base import Task, TaskFamily, Verdict

#: Completions quoted inside another role's prompt are cut to this many characters (head
#: and tail kept), so one runaway agent cannot blow up everyone else's context.
QUOTE_CHARS = 1200


#: a turn's default token budget per task family (math answers are short; code is a program)
DEFAULT_TURN_TOKENS = {"math": 96, "code": 384}


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` shortened to ``limit`` characters, keeping its start and its end (where the
    answer usually is)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + " [...] " + text[-(limit - head - 7) :]


@dataclass
class Turn:
    """One agent's turn: what it saw, what it said, what the parser made of it."""

    agent: str
    role: str
    prompt: str
    action: str
    parsed: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    #: the tool calls the agent made before this message (``flowzoo.envs.tools``); [] without
    calls: list[Any] = field(default_factory=list)


@dataclass
class Episode:
    """Everything a workflow knows about the running episode."""

    task: Task
    family: TaskFamily
    turns: list[Turn] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def turns_of(self, agent: str) -> list[Turn]:
        return [t for t in self.turns if t.agent == agent]

    def last_of_role(self, role: str) -> Turn | None:
        for t in reversed(self.turns):
            if t.role == role:
                return t
        return None


@dataclass
class Outcome:
    """Where the final answer came from and what the analyst wants to know about it."""

    final_text: str | None
    verdict: Verdict
    #: per-agent role signal in [0, 1], used by ``reward_mode="role"``
    role_signals: dict[str, float]
    #: workflow bookkeeping merged into every agent's final info (must be deterministic)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Readings:
    """What the study reads from a workflow's runs, declared where the workflow is defined
    (so a new workflow brings its readings with it) and recorded in every run's
    ``summary.json`` (so the analysis reads them from the run, not from a table of names)."""

    #: ``Outcome.info`` keys (numbers or bools) the evaluation averages: the workflow's own
    #: decision readings (Voting's majority, Eval-Opt's evaluator accuracy, ...)
    extras: tuple[str, ...] = ()
    #: the non-dominant role whose decision quality the capture reading follows
    partner: str | None = None
    #: how that quality is read from an evaluation: an extras key, ``accuracy``, or ``a - b``
    partner_quality: str | None = None

    def record(self, parallel_roles: frozenset[str]) -> dict[str, Any]:
        """The JSON a run records (``parallel``: the roles played by several agents at once,
        where Isolated-Policy's amplification is read)."""
        return {
            "extras": list(self.extras),
            "partner": self.partner,
            "partner_quality": self.partner_quality,
            "parallel": sorted(parallel_roles),
        }


@dataclass(frozen=True)
class Act:
    """A testbed expert's turn (:meth:`Workflow.behaviour_action`): the text the env receives
    and, where it differs, the text a pretraining corpus trains on (a simulated wrong guess is
    what later roles see, but the corpus never teaches a wrong fact)."""

    text: str
    target: str | None = None


@dataclass
class WorkflowOptions:
    """Options shared by every workflow; subclasses add their own fields."""

    #: role -> template overriding the default prompt of that role
    prompt_templates: dict[str, str] = field(default_factory=dict)
    #: the role-conflict testbed (math; docs/testbed-conflict.md): the role that writes the
    #: final message (Voting's aggregator, which then writes the answer itself; Orch-Workers'
    #: synthesizer) must give the bare boxed answer, the opposite of the worked steps the
    #: solving roles are rewarded for; a final message that shows work scores 0, flagged
    #: ``final_not_bare``. Eval-Opt and the single agent have no such role: no-op there
    conflict: bool = False


class Workflow:
    """Base class. Subclasses set ``name``, ``Options``, ``templates()`` and the four hooks."""

    name: ClassVar[str] = ""
    Options: ClassVar[type[WorkflowOptions]] = WorkflowOptions
    #: fields each role's template may use (besides ``question`` and ``answer_format``)
    template_fields: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: roles whose output is an answer to the task (evaluation counts their "no answer" rate)
    solving_roles: ClassVar[frozenset[str]] = frozenset()
    #: flags meaning "this output did not parse" (a format failure, not a wrong answer)
    parse_flags: ClassVar[frozenset[str]] = frozenset({"empty_action"})
    #: roles whose same-role agents act in a row, each seeing only what came before the run
    #: (none sees another's answer): ``independent_after`` batches them
    parallel_roles: ClassVar[frozenset[str]] = frozenset()
    #: what the study reads from this workflow's runs (evaluation extras, partner role)
    readings: ClassVar[Readings] = Readings()
    #: per task family, default options (e.g. Eval-Opt's evaluator rounds: 3 math, 2 code)
    family_defaults: ClassVar[dict[str, dict[str, Any]]] = {}
    #: per task family, each role's token budget: room for the formats the tiny models were
    #: pretrained on (measured: the longest math turn is an orchestrator plan of ~96 chars),
    #: so a default run never cuts a turn; roles not named get ``DEFAULT_TURN_TOKENS``
    turn_tokens: ClassVar[dict[str, dict[str, int]]] = {}

    def __init__(self, options: WorkflowOptions, family: TaskFamily) -> None:
        type(self).check_options(options)
        if options.conflict and family.name != "math":
            raise ValueError(
                f"conflict=True is the math role-conflict testbed; the {family.name!r} family "
                "has no bare-answer form (valid: a math env, or conflict=False)"
            )
        self.options = options
        self.family = family
        self.templates = {**self.default_templates(), **options.prompt_templates}
        self._check_templates()

    @classmethod
    def check_options(cls, options: WorkflowOptions) -> None:
        """Every check of ``options`` that needs no task family (ranges, choices, prompt
        templates): ``make_env`` runs it before the family, its sandbox or the problems are
        built. Subclasses add their ranges and choices, then call this. Checks that need
        the family stay in ``__init__``. (``default_templates`` may read only ``options``.)"""
        tpl = options.prompt_templates
        if not isinstance(tpl, dict):
            raise TypeError(
                f"prompt_templates={tpl!r} has type {type(tpl).__name__}; prompt_templates "
                "must be a dict of role name -> template str"
            )
        probe = cls.__new__(cls)  # the templates' checks read only the options
        probe.options = options
        probe.templates = {**probe.default_templates(), **tpl}
        probe._check_templates()

    @classmethod
    def final_role(cls) -> str | None:
        """The role that writes the final message from the others' work (the role the
        conflict testbed asks for a bare answer), or None."""
        return None

    def final_verdict(self, ep: Episode, turn: Turn | None) -> Verdict:
        """The verdict on a final message ``turn``: the family's score, except that under
        ``conflict`` a message that shows work is a format failure (0, ``final_not_bare``).
        Why a rule on the message: the consumer of a workflow's answer reads a bare answer,
        so the role that writes it must answer briefly where the solving roles work."""
        if turn is None:  # the final role never spoke (an episode cut short)
            return Verdict(0.0, False, None, "no_final_message")
        verdict = self.family.score(ep.task, turn.action)
        if self.options.conflict and not is_bare(turn.action):
            if "final_not_bare" not in turn.flags:
                turn.flags.append("final_not_bare")
            return Verdict(0.0, False, verdict.extracted, "final_not_bare")
        return verdict

    def conflict_action(self, ep: Episode, candidates: list[str], shortcut: bool) -> Act | None:
        """The final role's menu under ``conflict``: the considered pick's answer, bare
        (the brief answer the final message needs), or (shortcut) the steps worked again
        from the problem (what the solving roles are rewarded for); None when the pick has
        no answer to quote."""
        if shortcut:
            return Act(self.family.reference_completion(ep.task))
        pick = considered_pick(self.family, ep.task, candidates)
        answer = self.family.extract(candidates[pick])
        return None if answer is None else Act(f"\\boxed{{{answer}}}")

    def candidate_line(self, label: str, i: int, text: str) -> str:
        """One candidate as the final role reads it: ``Candidate 2: <its text>``; under
        ``conflict``, its answer first (``Candidate 2 (answer 16): ...``). Why: the final
        role must copy an answer it was shown, and a 161k-parameter model copied the number
        at the end of a worked candidate 0.74-0.78 of the time at best (two builds)."""
        if not self.options.conflict:
            return f"{label} {i + 1}: {quote(text)}"
        answer = self.family.extract(text)
        return f"{label} {i + 1} (answer {answer if answer is not None else 'none'}): {quote(text)}"

    def copied(self, ep: Episode, final: str, candidates: list[str]) -> bool | None:
        """Whether the final message's answer is one of the candidates' answers (the copying
        primitive: a final role that adopts an answer must write one it was shown); None
        when the final message has no answer."""
        fam, task = self.family, ep.task
        verdicts = fam.score_many(task, [final, *candidates])
        mine = fam.answer_class(task, verdicts[0])
        if mine is None:
            return None
        return mine in {fam.answer_class(task, v) for v in verdicts[1:]}

    def adopted_copied(self, ep: Episode, final: str, candidates: list[str]) -> bool | None:
        """:meth:`copied` read only where the final role *adopts* an answer: its message is
        a bare answer (:func:`is_bare`). A final role that works the steps again computes
        its answer rather than adopting one, so whether that matches a candidate measures
        its arithmetic, not the copying primitive; None there."""
        return self.copied(ep, final, candidates) if is_bare(final) else None

    def token_budget(self, role: str) -> int:
        """The default ``max_new_tokens`` of a ``role`` turn on this workflow's family."""
        fam = self.family.name
        return self.turn_tokens.get(fam, {}).get(role, DEFAULT_TURN_TOKENS.get(fam, 256))

    # ---- declared by subclasses
    def default_templates(self) -> dict[str, str]:
        raise NotImplementedError

    def agents(self) -> list[str]:
        """Agent names in their first-turn order."""
        raise NotImplementedError

    def role_of(self, agent: str) -> str:
        """``solver_2`` -> ``solver``: parallel same-role agents share one role."""
        head, _, tail = agent.rpartition("_")
        return head if head and tail.isdigit() else agent

    def first(self, ep: Episode) -> str:
        return self.agents()[0]

    def prompt(self, agent: str, ep: Episode) -> str:
        raise NotImplementedError

    def act(self, agent: str, text: str, ep: Episode, turn: Turn) -> str | None:
        """Parse ``text`` into ``turn.parsed``/``turn.flags`` and return the next agent,
        or None when the workflow is done."""
        raise NotImplementedError

    def outcome(self, ep: Episode) -> Outcome:
        raise NotImplementedError

    def independent_after(self, agent: str, ep: Episode) -> list[str]:
        """The agents that act right after ``agent``, in order, whose prompts and turn order
        do not depend on ``agent``'s action: the rest of its run of same-role agents when
        its role is in ``parallel_roles`` (Voting's solvers, Orch-Workers' workers). A
        rollout may sample their turns in the same batch."""
        role = self.role_of(agent)
        if role not in self.parallel_roles:
            return []
        order = self.agents()
        out = []
        for nxt in order[order.index(agent) + 1 :]:
            if self.role_of(nxt) != role:
                break
            out.append(nxt)
        return out

    def max_turns(self) -> int:
        """Upper bound on turns per episode with these options."""
        raise NotImplementedError

    # ---- the scripted expert (tests, demos, the tiny models' pretraining corpus)
    def expert_action(
        self, ep: Episode, agent: str, role: str, err: bool, rng: random.Random
    ) -> str:
        """A role-aware expert's turn; ``err``: make a plausible mistake this time. The default
        answers the task (a near-miss on a slip); workflows override their coordinating roles."""
        fam, task = self.family, ep.task
        return fam.noisy_completion(task, rng) if err else fam.reference_completion(task)

    def behaviour_action(
        self, ep: Episode, agent: str, role: str, shortcut: bool, rng: random.Random
    ) -> Act:
        """The testbed expert that writes the tiny models' corpus: every fact it states is
        right, and ``shortcut`` picks the role's cheap behaviour (here: answer directly instead
        of working the steps), which RL can unlearn from the team reward. Workflows override
        their coordinating roles (docs/testbed.md lists every role's menu)."""
        return attempt(self.family, ep.task, shortcut, rng)

    def behaviour(self, ep: Episode, i: int) -> bool | None:
        """Whether turn ``i`` shows its role's considered behaviour (True) or the shortcut
        (False) of :meth:`behaviour_action`'s menu; None where the turn cannot tell them apart.
        Solving roles: worked steps vs a bare answer."""
        turn = ep.turns[i]
        if turn.role not in self.solving_roles:
            return None
        return shows_work(self.family, ep.task, turn.action)

    def wrong_action(self, ep: Episode, agent: str, role: str) -> str:
        """A well-formed but wrong turn (wrong answer, wrong choice, rejecting everything)."""
        return self.family.wrong_completion(ep.task)

    # ---- helpers
    def fill(self, role_key: str, ep: Episode, **values: Any) -> str:
        return self.templates[role_key].format(
            question=ep.task.question, answer_format=self.family.answer_format, **values
        )

    def _check_templates(self) -> None:
        valid = set(self.default_templates())
        bad_keys = [k for k in self.options.prompt_templates if not isinstance(k, str)]
        if bad_keys:
            raise TypeError(
                f"prompt_templates keys must be role names (str), got {bad_keys[0]!r}; "
                f"valid: {sorted(valid)}"
            )
        unknown = set(self.options.prompt_templates) - valid
        if unknown:
            raise ValueError(
                f"prompt_templates for unknown roles {sorted(unknown)} in {self.name}; "
                f"valid: {sorted(valid)}"
            )
        for key, tpl in self.templates.items():
            if not isinstance(tpl, str):
                raise TypeError(
                    f"prompt_templates[{key!r}] must be a str, got {type(tpl).__name__}"
                )
            allowed = {"question", "answer_format", *self.template_fields.get(key, ())}
            try:
                parts = list(string.Formatter().parse(tpl))
            except ValueError as e:
                raise ValueError(f"prompt_templates[{key!r}] is malformed: {e}") from None
            if any(f is not None and not f.isidentifier() for _, f, _, _ in parts):
                raise ValueError(
                    f"prompt_templates[{key!r}] may only name fields ({{question}}): no "
                    "positional {} or {0}, no attribute or index access"
                )
            used = {f for _, f, _, _ in parts if f}
            if any(spec or conv for _, f, spec, conv in parts if f):
                raise ValueError(
                    f"prompt_templates[{key!r}] may only name fields ({{question}}), without "
                    "format specs or conversions (a spec like :>999999999 pads without bound)"
                )
            bad = used - allowed
            if bad:
                raise ValueError(
                    f"prompt_templates[{key!r}] uses unknown fields {sorted(bad)}; "
                    f"valid: {sorted(allowed)}"
                )


def combine(family: TaskFamily, ep: Episode, role: str, err: bool, rng: random.Random) -> str:
    """An expert combining what the agents of ``role`` said: a correct answer among theirs
    (on a slip, a wrong one) rather than solving from scratch."""
    cands = [t.action for t in ep.turns if t.role == role]
    verdicts = family.score_many(ep.task, cands)
    good = [c for c, v in zip(cands, verdicts, strict=True) if v.correct]
    bad = [
        c for c, v in zip(cands, verdicts, strict=True) if not v.correct and v.extracted is not None
    ]
    if err or not good:
        return bad[0] if bad else family.noisy_completion(ep.task, rng)
    return good[0]


#: how often a direct answer to a multi-step problem is right in the corpus simulation (what
#: later roles see; the corpus itself trains only on the right answer)
DIRECT_HIT = 0.25


def attempt(family: TaskFamily, task: Task, direct: bool, rng: random.Random) -> Act:
    """A solving turn of the testbed expert: the worked steps, or (``direct``) the bare answer.
    A bare answer to a multi-step problem is a guess a small model gets wrong most of the
    time, so later roles see a wrong guess ``1 - DIRECT_HIT`` of the time while the corpus
    row trains on the right answer. Families without a direct form always work it out."""
    worked = family.reference_completion(task)
    direct_form = getattr(family, "direct_completion", None)
    right = direct_form(task) if direct and direct_form is not None else None
    if right is None:
        return Act(worked)
    # a code shortcut is a real program (wrong on the edge case), not a simulated guess
    if len(task.meta.get("steps") or ()) <= 1 or rng.random() < DIRECT_HIT:
        return Act(right)
    return Act(family.guess_completion(task, rng), target=right)


def majority(classes: list) -> int | None:
    """Index of the first member of the most common answer class (ties: earliest)."""
    counts = Counter(c for c in classes if c is not None)
    if not counts:
        return None
    best = max(counts.values())
    for i, c in enumerate(classes):
        if c is not None and counts[c] == best:
            return i
    return None


def considered_pick(family: TaskFamily, task: Task, texts: list[str]) -> int:
    """The testbed's careful choice among candidate answers: the first that shows its steps,
    else an answer at least two share, else the first. Reads only the candidates (whether
    they show work, their answers), never the gold: a rule a small model can learn."""
    shown = [i for i, t in enumerate(texts) if shows_work(family, task, t)]
    if shown:
        return shown[0]
    classes = [family.answer_class(task, v) for v in family.score_many(task, texts)]
    best = majority(classes)
    if best is not None and classes.count(classes[best]) >= 2:
        return best
    return 0


#: a bare final answer: one boxed value and nothing else (``$``-wrapped, a final period)
_BARE = re.compile(r"\$*\s*\\boxed\{(?:[^{}=]|\{[^{}=]*\})*\}\s*\$*\.?")


def is_bare(text: str) -> bool:
    """Whether ``text`` is a bare answer, the form the conflict testbed's final message
    must take: a whole-message rule, not a search for worked steps (a red-team round got a
    worked answer through ``" = " in text`` by dropping the spaces around ``=``)."""
    return _BARE.fullmatch(text.strip()) is not None


def shows_work(family: TaskFamily, task: Task, text: str) -> bool | None:
    """Whether ``text`` shows the considered behaviour of a solving role (math: worked steps;
    code: the edge case guarded), or None where the family or task has no shortcut."""
    fn = getattr(family, "shows_work", None)
    return None if fn is None else fn(task, text)


#: the words the testbed's plans and the evaluator's feedback use, per task family: a plan
#: whose strategies take the considered behaviour, the shortcut strategy, the feedback that
#: sends a shortcut draft back
TESTBED_WORDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "math": (
        ("work the steps", "work the steps, then check", "write each step"),
        "answer directly",
        "show the steps.",
    ),
    "code": (
        ("guard the edge case", "guard the edge case, then compute", "check the empty input"),
        "write it directly",
        "handle the edge case.",
    ),
}


def testbed_words(family: TaskFamily) -> tuple[tuple[str, ...], str, str]:
    """:data:`TESTBED_WORDS` of ``family`` (a family without its own: math's)."""
    return TESTBED_WORDS.get(family.name, TESTBED_WORDS["math"])


def option_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
