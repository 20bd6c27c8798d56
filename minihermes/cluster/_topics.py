"""Topics across nodes: a watcher on one node sees the events an actor publishes on another.

A node subscribes on NATS to the subjects of the topics it has local subscribers for and lists them in its
heartbeat; a publishing node sends an event over NATS only when some other node lists its topic. Events are
signed like every fabric message and best effort like local ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from minihermes.runtime.store import Scope

if TYPE_CHECKING:
    from ._fabric import Cluster


class TopicBridge:
    """The ``PubSub.bridge`` of a clustered node."""

    def __init__(self, cluster: Cluster) -> None:
        self._c = cluster
        self._watched: dict[str, tuple[Scope, str]] = {}
        self._topic_subs: dict[str, Any] = {}

    def subjects(self) -> list[str]:
        return list(self._watched)

    def watch(self, scope: Scope, topic: str) -> None:
        subject = self._c.subjects.topic(scope, topic)
        self._watched[subject] = (scope, topic)
        if subject not in self._topic_subs and self._c._nc is not None:
            self._topic_subs[subject] = None
            self._c.spawn(self._subscribe_topic(subject), "mh-topic")
        self._c.directory_changed()

    async def _subscribe_topic(self, subject: str) -> None:
        assert self._c._nc is not None
        sub = await self._c._nc.subscribe(subject, cb=self._on_topic)
        if subject in self._watched and self._topic_subs.get(subject) is None:
            self._topic_subs[subject] = sub
        else:  # unwatched meanwhile, or watched again and subscribed by a later call
            await sub.unsubscribe()
            if subject not in self._watched:
                self._topic_subs.pop(subject, None)

    def unwatch(self, scope: Scope, topic: str) -> None:
        subject = self._c.subjects.topic(scope, topic)
        self._watched.pop(subject, None)
        sub = self._topic_subs.pop(subject, None)
        if sub is not None:
            self._c.spawn(sub.unsubscribe(), "mh-topic")
        self._c.directory_changed()

    def forward(self, scope: Scope, topic: str, event: Any) -> None:
        if self._c._dir is None:
            return
        subject = self._c.subjects.topic(scope, topic)
        if self._c._dir.interested(subject):
            self._c.post(subject, {"s": list(scope), "t": topic, "e": event})

    def remote_interest(self, scope: Scope, topic: str) -> bool:
        return self._c._dir is not None and self._c._dir.interested(self._c.subjects.topic(scope, topic))

    async def _on_topic(self, msg: Msg) -> None:
        body = self._c.open_notice(msg)
        if body is None:
            return
        tenant, ns = body["s"]
        scope = (str(tenant), str(ns))
        topic = str(body["t"])
        if self._c.subjects.topic(scope, topic) == msg.subject:  # the scope named is the one signed for
            self._c.node.pubsub.deliver(scope, topic, body.get("e"))
