"""An operator answers the confirmation a thread waits on: approve, approve with edits, or
decline, reviewed first (``POST /answer/confirm``), then run (``POST /answer``).

Why a turn, and the API's own request: the answer is a selection (``interaction_id``,
``option`` and, for an approval with edits, ``edits``) with empty text, run through the served
agent with the logged-in principal as ``host_context["actor"]``, exactly as ``POST
/v1/threads/{id}/turns`` runs it. So the kernel checks it as it checks every answer (the
interaction still open, the edits against the capability's ``editable`` fields, its schema and
the policies) and records it in the thread's history with the actor; the inspector decides
nothing the kernel does not. The turn runs in the request, waiting for the thread's lease, as
``busy="wait"`` runs a turn.

Why the review step makes the turn id: the confirmed form carries it, so the same form sent
twice (a double click, a reload) replays the committed turn and runs nothing twice. A refusal
(``EDIT_INVALID``, ``EDIT_NOT_ALLOWED``, an interaction answered meanwhile) runs nothing and is
shown on the thread's page, with the form as it was filled in.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...contracts.errors import (
    ErrorCode,
    InvalidInputError,
    KernelError,
    ModelGatewayError,
    TurnTimeoutError,
)
from ...contracts.ids import validate_thread_id
from ...kernel import CompiledAgent, PendingConfirmation, pending_confirmation
from ...operations import redact
from ._answer_form import (
    EDIT_PREFIX,
    field_inputs,
    is_answer_turn,
    new_answer_turn,
    shown,
    typed_edits,
)
from ._inspector import Inspector, InspectorProblem, _thread_href
from ._security import _field, _form
from ._session import Session
from ._threads import thread_context

logger = logging.getLogger("intention_kernel.http.inspector")

_STALE = (
    "this confirmation was answered or replaced meanwhile: nothing ran; the page shows the"
    " thread as it is now"
)
_KEPT = "nothing ran and the confirmation still waits for an answer"


def _thread(form: Mapping[str, str]) -> str:
    try:
        return validate_thread_id(_field(form, "thread"))
    except KernelError:
        raise InspectorProblem(400, "INVALID_INPUT", "give a valid thread id") from None


def _agent(inspector: Inspector) -> CompiledAgent:
    if inspector.agent is None:
        raise InspectorProblem(
            501, "NO_AGENT", "answering needs the agent: serve the inspector with one"
        )
    return inspector.agent


def _problem(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "details": [], "invalid": []}


def _error(exc: KernelError) -> tuple[dict[str, Any], int]:
    """What the page says of a refused or failed answer, and the status it is sent with."""
    code = str(exc.code)
    context = exc.context
    details: list[str] = []
    problems = context.get("problems")
    for problem in problems if isinstance(problems, list) else []:
        if isinstance(problem, dict):
            loc = problem.get("loc")
            where = ".".join(str(p) for p in loc) if isinstance(loc, list) else ""
            details.append(f"{where}: {problem.get('msg')}" if where else str(problem.get("msg")))
    refusal = context.get("refusal")
    if isinstance(refusal, str):
        details.append(f"the agent's policy says: {refusal}")
    editable = context.get("editable")
    if isinstance(editable, list):
        names = ", ".join(str(n) for n in editable)
        details.append(f"editable fields: {names}" if names else "no field is editable")
    fields = context.get("fields")
    invalid = [str(f) for f in fields] if isinstance(fields, list) else []
    if code == ErrorCode.INTERACTION_NOT_ACTIVE:
        message, status = _STALE, 409
    elif code in (ErrorCode.EDIT_INVALID, ErrorCode.EDIT_NOT_ALLOWED):
        message, status = f"{exc.message}; {_KEPT}", 422
    elif isinstance(exc, InvalidInputError):
        message, status = f"{redact(exc.message)}; nothing ran", 422
    elif isinstance(exc, TurnTimeoutError):
        message = (
            "the answer did not finish in time and may still commit: reload the page before"
            " answering again"
        )
        status = 503
    elif isinstance(exc, ModelGatewayError):
        logger.warning("an operator's answer failed at the model provider: %s", exc.message)
        message, status = "the model provider failed; the cause is in the service's log", 502
    else:
        message, status = redact(exc.message), 503 if exc.retryable else 409
    return {"code": code, "message": message, "details": details, "invalid": invalid}, status


async def _again(
    inspector: Inspector,
    request: Request,
    session: Session,
    thread_id: str,
    error: dict[str, Any],
    status: int,
    *,
    option: str = "",
    values: Mapping[str, str] | None = None,
) -> Response:
    """The thread's page with the refusal, and the form as the operator filled it in (when
    the same confirmation still waits)."""
    context = await thread_context(inspector, request, session, thread_id)
    context["answer_error"] = error
    section = context["answer"]
    if section is not None and section["can_answer"]:
        section["option"] = option
        section["values"] = dict(values or {})
        section["invalid"] = error.get("invalid", [])
    return inspector.render(request, "thread.html", context, status=status, session=session)


async def _pending(
    inspector: Inspector, thread_id: str, interaction_id: str
) -> PendingConfirmation | None:
    checkpoint = await inspector.store.load_checkpoint(thread_id)
    pending = pending_confirmation(_agent(inspector), checkpoint)
    return pending if pending is not None and pending.interaction_id == interaction_id else None


def _typed(form: Mapping[str, str]) -> dict[str, str]:
    return {k.removeprefix(EDIT_PREFIX): v for k, v in form.items() if k.startswith(EDIT_PREFIX)}


async def review_answer(inspector: Inspector, request: Request, session: Session) -> Response:
    """What will run, to be confirmed (nothing runs here): the answer, the edited fields with
    their proposed and approved values, the actor."""
    form = await _form(request)
    thread_id = _thread(form)
    await inspector.require(session, thread_id, "answer")
    option = _field(form, "option")
    pending = await _pending(inspector, thread_id, _field(form, "interaction"))
    if pending is None:
        error = _problem(str(ErrorCode.INTERACTION_NOT_ACTIVE), _STALE)
        return await _again(inspector, request, session, thread_id, error, 409)
    typed = _typed(form)
    if option not in pending.options:
        error = _problem("ANSWER_REQUIRED", "choose an answer")
        return await _again(
            inspector, request, session, thread_id, error, 422, option=option, values=typed
        )
    edits: dict[str, JsonValue] = {}
    if option in pending.accepting:  # a declining answer takes no edits: they are not sent
        try:
            edits = typed_edits(pending, form)
            pending.check_edits(edits)
        except InvalidInputError as exc:
            error, status = _error(exc)
            return await _again(
                inspector, request, session, thread_id, error, status, option=option, values=typed
            )
    rows = [
        {
            "name": name,
            "proposed": pending.proposed.get(name),
            "approved": value,
            "json": json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
        }
        for name, value in edits.items()
    ]
    context: dict[str, Any] = {
        "title": "Confirm the answer",
        "thread_id": thread_id,
        "pending": pending,
        "option": option,
        "accepting": option in pending.accepting,
        "edits": rows,
        "actor": session.principal.id,
        "turn_id": new_answer_turn(),
    }
    return inspector.render(request, "answer_confirm.html", context, session=session)


def _edits(form: Mapping[str, str]) -> dict[str, JsonValue]:
    """The reviewed edits: each ``edit.<field>`` of the confirmed form holds its JSON value."""
    edits: dict[str, JsonValue] = {}
    for name, text in _typed(form).items():
        try:
            edits[name] = json.loads(text)
        except (ValueError, RecursionError):
            raise InvalidInputError(
                f"the edited input is not valid: {name}",
                code=ErrorCode.EDIT_INVALID,
                context={"reason": "invalid", "fields": [name]},
            ) from None
    return edits


def _shown_again(
    pending: PendingConfirmation | None, edits: Mapping[str, JsonValue]
) -> dict[str, str]:
    if pending is None:
        return {}
    inputs = {f.name: f for f in field_inputs(pending)}
    return {n: shown(v, inputs[n].kind) for n, v in edits.items() if n in inputs}


async def run_answer(inspector: Inspector, request: Request, session: Session) -> Response:
    """Run the confirmed answer as a turn of the thread, with the operator as the actor."""
    form = await _form(request)
    thread_id = _thread(form)
    await inspector.require(session, thread_id, "answer")
    agent = _agent(inspector)
    interaction_id, option = _field(form, "interaction"), _field(form, "option")
    turn_id = _field(form, "turn")
    if not is_answer_turn(turn_id) or _field(form, "confirmed") != "1":
        error = _problem("NOT_CONFIRMED", "review the answer and confirm it first")
        return await _again(inspector, request, session, thread_id, error, 422)
    try:
        edits = _edits(form)
        selection: dict[str, JsonValue] = {"interaction_id": interaction_id, "option": option}
        if edits:
            selection["edits"] = edits
        await agent.run(
            thread_id=thread_id,
            turn_id=turn_id,
            text="",
            selection=selection,
            host_context={"actor": session.principal.id},
            timeout=inspector.turn_timeout,
        )
    except KernelError as exc:
        error, status = _error(exc)
        pending = await _pending(inspector, thread_id, interaction_id)
        values = _shown_again(pending, _edits_or_none(form))
        return await _again(
            inspector, request, session, thread_id, error, status, option=option, values=values
        )
    logger.info(
        "confirmation %s on %s answered %s%s by %s (turn %s)",
        interaction_id,
        thread_id,
        option,
        f" with edits to {', '.join(sorted(edits))}" if edits else "",
        session.principal.id,
        turn_id,
    )
    target = f"{_thread_href(request, thread_id)}&answered={turn_id}#answered"
    return RedirectResponse(target, status_code=303)


def _edits_or_none(form: Mapping[str, str]) -> dict[str, JsonValue]:
    try:
        return _edits(form)
    except InvalidInputError:
        return {}
