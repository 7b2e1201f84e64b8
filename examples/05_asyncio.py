"""asyncio: three turns at once on an AsyncRuntime, one approval, one stop, nothing blocking.

python examples/05_asyncio.py
"""

from __future__ import annotations

import asyncio
import threading

from actors import AsyncRuntime, TextDelta, ToolApprovalRequest, tool
from actors.testing import Reply, Request, ScriptedProvider, call, say, use_tools


@tool
async def lookup(city: str) -> dict[str, object]:
    """Look a city up."""
    await asyncio.sleep(0.05)
    return {"city": city, "population_m": {"Paris": 2.1, "Oslo": 0.7}.get(city, 0)}


@tool(requires_approval=True)
def book_table(city: str, people: int) -> str:
    """Book a table (a person must say yes)."""
    return f"booked for {people} in {city}"


def model(request: Request) -> Reply:
    """A scripted model: looks up, asks to book, answers; stateless, from the conversation."""
    last, first = request.messages[-1], request.messages[0]["content"]
    if last["role"] == "user" and "book" in first:
        return use_tools(call("book_table", {"city": "Oslo", "people": 2}))
    if last["role"] == "user" and "talk" in first:
        return say(" ".join(["and so on"] * 200), hold_after=3, hold=threading.Event())  # talks until stopped
    if last["role"] == "user":
        return use_tools(call("lookup", {"city": "Paris"}))
    return say(f"Done: {last['content']}")


async def main() -> None:
    with ScriptedProvider(responder=model) as scripted:
        async with AsyncRuntime(scripted.provider()) as rt:
            lookup_turn = await rt.run("How big is Paris?", tools=[lookup])
            booking = await rt.run("Please book a table in Oslo", tools=[book_table])
            chatter = await rt.run("talk to me")

            async def approve_when_asked() -> str:
                async for event in booking.events(timeout=60):
                    if isinstance(event, ToolApprovalRequest):
                        print(f"approving {event.name}({event.arguments})")
                        await booking.approve(event.call_id)
                return (await booking.result()).text

            async def stop_after_some_text() -> str:
                async for event in chatter.events(timeout=60):
                    if isinstance(event, TextDelta):
                        await chatter.stop("enough")
                return (await chatter.result()).finish_reason

            looked_up, booked, stopped = await asyncio.gather(
                lookup_turn.result(60), approve_when_asked(), stop_after_some_text()
            )
            print("lookup:", looked_up.text)
            print("booking:", booked)
            print("chatter:", stopped)


if __name__ == "__main__":
    asyncio.run(main())
