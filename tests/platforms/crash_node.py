"""A node of the agent app with a Telegram connection, run as a child process and SIGKILLed by the test.

``python -m tests.platforms.crash_node DATA_DIR BASE_URL TOKEN``: the first run registers the credential,
the connection and the linked user; every run prints ``ready`` once its node is up, then serves forever.
"""

from __future__ import annotations

import asyncio
import sys

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import RequestContext
from minihermes.runtime._loop import run as run_on_loop

ADMIN = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))


async def main(data_dir: str, base_url: str, token: str) -> None:
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
    node = build_agent_node(config)
    await node.start()
    listing = await node.ask("platform_gateway", "list_platforms", {}, ctx=ADMIN)
    if not listing["platforms"]:
        await node.ask(
            "llm_gateway", "register_credential", {"phantom_token": "tg", "api_key": token}, ctx=ADMIN
        )
        await node.ask(
            "platform_gateway",
            "register_platform",
            {
                "platform": "telegram",
                "name": "tg",
                "credential": "tg",
                "base_url": base_url,
                "settings": {"poll_timeout": 1},
            },
            ctx=ADMIN,
        )
        await node.ask(
            "platform_gateway",
            "link_user",
            {"name": "tg", "platform_user_id": "111", "user_id": "dana"},
            ctx=ADMIN,
        )
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1], sys.argv[2], sys.argv[3]))
