"""Workflows: steps, queries while running, cancel, failure, resume after an actor crash and after SIGKILL."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import ActorSpec, Conflict, WorkflowCancelled

from .._proc import kill_hard, read_line, spawn_module
from .actors import WF_CALLS, Steps
from .conftest import tree, until


@pytest.fixture(autouse=True)
def reset_calls():
    WF_CALLS.clear()


async def _steps_done(node, address: str, steps: list[str]) -> bool:
    """The workflow finished these steps (checkpointed) and waits for the "go" signal."""
    status = await node.ask(address, "query", {"name": "status"})
    return status["completed_steps"] == steps and status["waiting_for"] == "go"


async def test_run_returns_the_result_and_steps_run_once(make_node):
    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    got = await node.ask("wf/1", "run", {"items": ["a", "b"]})
    assert got == {"status": "completed", "result": {"results": ["A", "B"]}, "workflow_id": "wf/1"}
    assert await node.ask("wf/1", "run", {"items": ["a", "b"]}) == got  # finished: same outcome, no re-run
    assert WF_CALLS == ["a", "b"]
    with pytest.raises(Conflict):
        await node.ask("wf/1", "start", {"items": ["a"]})


async def test_query_answers_while_running_and_signal_continues(make_node):
    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    run = asyncio.ensure_future(node.ask("wf/2", "run", {"items": ["a", "b"], "gate": True}))
    await until(lambda: _steps_done(node, "wf/2", ["a"]))
    status = await node.ask("wf/2", "query")
    assert status["status"] == "running" and not run.done()
    await node.ask("wf/2", "signal", {"name": "go"})
    assert (await run)["result"] == {"results": ["A", "B"]}


async def test_cancel_signal_reaches_a_running_workflow(make_node):
    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    run = asyncio.ensure_future(node.ask("wf/3", "run", {"items": ["a", "b"], "gate": True}))
    await until(lambda: _steps_done(node, "wf/3", ["a"]))
    assert (await node.ask("wf/3", "signal", {"name": "cancel"}))["cancelled"] is True
    with pytest.raises(WorkflowCancelled):
        await run
    assert (await node.ask("wf/3", "query"))["status"] == "cancelled"
    assert WF_CALLS == ["a"]


async def test_a_failing_step_fails_the_workflow_with_a_structured_error(make_node):
    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    from minihermes.runtime import ActorError

    with pytest.raises(ActorError) as ei:
        await node.ask("wf/4", "run", {"items": ["a", "b", "c"], "fail_at": "b"})
    err = ei.value.to_dict()["error"]
    assert err["code"] == "step_failed" and err["step"] == "b" and "failed on b" in err["message"]
    status = await node.ask("wf/4", "query")
    assert status["status"] == "failed" and status["completed_steps"] == ["a"]


async def test_bad_run_arguments_are_refused(make_node):
    from minihermes.runtime import InvalidArgument

    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    with pytest.raises(InvalidArgument) as ei:
        await node.ask("wf/5", "run", {"items": "abc"})
    assert ei.value.details["field"] == "items"
    with pytest.raises(InvalidArgument):
        await node.ask("wf/5", "run", {})
    assert (await node.ask("wf/5", "query"))["status"] == "idle"


async def test_resumes_after_the_actor_task_is_cancelled(make_node):
    node = await make_node(tree(ActorSpec("wf", Steps, virtual=True)))
    await node.ask("wf/6", "start", {"items": ["a", "b"], "gate": True})
    await until(lambda: _steps_done(node, "wf/6", ["a"]))
    cell = node.cells("wf")[0]
    await cell.kill("test crash", abnormal=True)  # the real task, cancelled mid-run
    await node.ask("wf/6", "signal", {"name": "go"})
    # joining the resumed run waits for its outcome
    got = await node.ask("wf/6", "run", {"items": ["a", "b"], "gate": True})
    assert got["result"] == {"results": ["A", "B"]}
    assert WF_CALLS == ["a", "b"]


@pytest.mark.slow
async def test_workflow_resumes_at_the_next_step_after_sigkill(make_node, tmp_path):
    data = tmp_path / "wfdata"
    proc = await spawn_module("tests.runtime.nodeproc", "workflow", str(data))
    assert await read_line(proc) == "A_DONE"
    await kill_hard(proc)
    assert (data / "effects.log").read_text() == "a\n"

    from minihermes.runtime import SystemClock

    from .nodeproc import SideEffects

    node = await make_node(
        tree(ActorSpec("wf", SideEffects, virtual=True)), data_dir=data, use_clock=SystemClock()
    )
    status = await node.ask("wf/job1", "query")
    assert status["status"] == "running" and status["completed_steps"] == ["a"] and status["attempt"] == 2
    await node.ask("wf/job1", "signal", {"name": "go"})
    got = await node.ask("wf/job1", "run", {"log": str(data / "effects.log")}, timeout=60)
    assert got["status"] == "completed"
    assert (data / "effects.log").read_text() == "a\nb\nc\n"
