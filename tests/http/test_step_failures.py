"""A failed step over HTTP is a committed turn (200), not a 500: a small bank agent of our own
with one read (its backend can be down) and one confirmed write (its key can be reused for
another amount), on SQLite and PostgreSQL, through a real server on loopback."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import DurabilityStore, EffectAuthority, ModelRequest
from intention_kernel.http import BearerTokens, create_app
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.testing import ScriptedModelGateway

from .support import TOKENS, Live, bearer, serve

SECRET = "amqp://teller:hunter2-s3cret@10.1.2.3/ledger"


class Account(BaseModel):
    account: str


class Balance(BaseModel):
    account: str
    eur: int


class Transfer(BaseModel):
    reference: str
    payee: str
    amount_eur: int


class Transferred(BaseModel):
    transfer_id: str


class Bank:
    """The bank's backend: ``down`` makes every balance read raise ``ConnectionError``."""

    def __init__(self) -> None:
        self.down = False
        self.transfers: list[str] = []

    async def balance(self, account: str) -> int:
        if self.down:
            raise ConnectionError(f"no route to {SECRET}")
        return 300

    async def transfer(self, authority: EffectAuthority, amount: int) -> JsonValue:
        self.transfers.append(authority.idempotency_key)
        return {"transfer_id": f"tr-{len(self.transfers)}", "amount": amount}


async def _balance(context: CapabilityContext, query: Account) -> Completed:
    eur = await context.ports["bank"].balance(query.account)
    return Completed(output=Balance(account=query.account, eur=eur), text=f"You have {eur} EUR.")


async def _transfer(context: CapabilityContext, transfer: Transfer) -> Completed:
    bank: Bank = context.ports["bank"]
    effect = await context.run_effect(
        f"transfer:{transfer.reference}",
        lambda authority: bank.transfer(authority, transfer.amount_eur),
    )
    assert isinstance(effect.value, dict)
    return Completed(
        output=Transferred(transfer_id=str(effect.value["transfer_id"])),
        text=f"Sent {transfer.amount_eur} EUR to {transfer.payee}.",
    )


INTENTIONS: dict[str, list[dict[str, Any]]] = {
    "balance?": [{"capability": "accounts.balance", "input": {"account": "A-1"}}],
    "pay rent": [
        {
            "capability": "payments.transfer",
            "input": {"reference": "rent-12", "payee": "Landlord", "amount_eur": 5},
        }
    ],
    "pay rent again, more": [
        {
            "capability": "payments.transfer",
            "input": {"reference": "rent-12", "payee": "Landlord", "amount_eur": 9800},
        }
    ],
}


def _interpret(request: ModelRequest) -> JsonValue:
    text = request.input["text"]
    assert isinstance(text, str)
    answer: JsonValue = {"option": "yes"} if text == "yes" else None
    return {"intentions": list[JsonValue](INTENTIONS.get(text, [])), "answer": answer}


def bank_agent(store: DurabilityStore, bank: Bank) -> tuple[CompiledAgent, ScriptedModelGateway]:
    model = ScriptedModelGateway(
        {"interpret": _interpret, "compose": {"text": "Done.", "citations": []}}
    )
    kernel = Kernel(durability=store, model=model, ports={"bank": bank})
    agent = define_agent(
        id="bank",
        version="1.0.0",
        description="A small bank.",
        capabilities=[
            define_capability(
                id="accounts.balance",
                version="1.0.0",
                description="Tell an account's balance.",
                input=Account,
                output=Balance,
                effect="read",
                execute=_balance,
            ),
            define_capability(
                id="payments.transfer",
                version="1.0.0",
                description="Send money to a payee.",
                input=Transfer,
                output=Transferred,
                effect="write",
                confirmation="required",
                execute=_transfer,
            ),
        ],
    )
    return kernel.compile(agent), model


def _serve(agent: CompiledAgent) -> Any:
    return serve(create_app(agent, authenticate=BearerTokens.from_secrets(TOKENS)))


async def _yes(live: Live, thread: str, key: str, interaction: dict[str, Any]) -> Any:
    selection = {"interaction_id": interaction["id"], "option": "yes"}
    return await live.post(thread, key, {"text": "", "selection": selection})


async def test_an_unreachable_backend_is_a_committed_retryable_answer(
    store: DurabilityStore,
) -> None:
    bank = Bank()
    bank.down = True
    agent, model = bank_agent(store, bank)
    async with _serve(agent) as live:
        answer = await live.post("acct-1", "turn-1", {"text": "balance?"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        [step] = body["response"]["steps"]
        assert step["status"] == "failed" and step["retryable"] is True
        assert body["response"]["kind"] == "fallback"
        assert body["response"]["text"] == (
            "I could not complete that: it could not be done right now; please try again"
        )
        assert body["checkpoint"]["revision"] == 1
        assert model.count("compose") == 0
        history = await live.client.get("/v1/threads/acct-1/turns", headers=bearer())
        assert history.status_code == 200
        replay = await live.post("acct-1", "turn-1", {"text": "balance?"})
        assert replay.headers["idempotent-replayed"] == "true"
        for text in (answer.text, history.text, replay.text):
            assert "hunter2" not in text and "10.1.2.3" not in text
            assert "ConnectionError" not in text
        bank.down = False
        again = await live.post("acct-1", "turn-2", {"text": "balance?"})
        assert again.status_code == 200 and again.json()["response"]["steps"][0]["status"] == (
            "completed"
        )


async def test_a_confirmed_write_refused_by_the_ledger_answers_and_frees_the_thread(
    store: DurabilityStore,
) -> None:
    bank = Bank()
    agent, _ = bank_agent(store, bank)
    async with _serve(agent) as live:
        asked = await live.post("acct-2", "turn-1", {"text": "pay rent"})
        paid = await _yes(live, "acct-2", "turn-2", asked.json()["interaction"])
        assert paid.status_code == 200, paid.text
        assert paid.json()["response"]["steps"][0]["status"] == "completed"

        asked = await live.post("acct-2", "turn-3", {"text": "pay rent again, more"})
        assert asked.status_code == 200 and asked.json()["interaction"] is not None
        refused = await _yes(live, "acct-2", "turn-4", asked.json()["interaction"])
        assert refused.status_code == 200, refused.text
        body = refused.json()
        [step] = body["response"]["steps"]
        assert step["status"] == "failed" and step["retryable"] is False
        assert step["reason"] == "this conflicts with an earlier operation under the same key"
        assert body["interaction"] is None and body["checkpoint"]["agenda"] == []
        assert bank.transfers == ["payments.transfer:transfer:rent-12"]

        # The thread goes on: another "yes" has nothing to accept, a question is answered.
        later = await live.post("acct-2", "turn-5", {"text": "yes"})
        assert later.status_code == 200 and later.json()["response"]["kind"] == "clarification"
        balance = await live.post("acct-2", "turn-6", {"text": "balance?"})
        assert balance.status_code == 200
        assert balance.json()["response"]["steps"][0]["status"] == "completed"
