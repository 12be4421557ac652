"""Streaming query listeners whose events cross py4j whole, as their JSON.

PySpark's own bridge (`pyspark.sql.streaming.listener.JStreamingQueryListener`) builds each
event from its Java object a field at a time: a progress event costs a round trip for every
field of the progress, of each of its sources and of its sink, and a read of each of its maps
(durations, event time, metrics, observed metrics) key by key, ended by a Java exception
PySpark converts. That is tens of milliseconds of the driver's Python per event, taken on the
one thread that drains Spark's listener queue for every query of the application: a worker
application running many groups' queries falls behind on its events, and a stop reaches the
group's run late (docs/benchmarks.md, "Fleet, part 2").

Spark gives each event whole as JSON (`json()`, what Spark Connect sends its clients), and
PySpark builds the same event from it (`fromJson`): one round trip per event. A listener that
derives from `JsonEventsListener` is added and removed with `spark.streams.addListener` and
`removeListener` like any other and gets PySpark's event classes, with the same contents.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from jobs.runtime.py4j import java_class

# The JVM side of a Python listener: it calls the Python object (a py4j callback) per event.
WRAPPER = "org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper"


class JsonEventBridge:
    """The Python object the JVM's wrapper calls: each event read in one call (its JSON) and
    handed to `listener` as PySpark's event."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self.listener.onQueryStarted(QueryStartedEvent.fromJson(json.loads(jevent.json())))

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.onQueryIdle(QueryIdleEvent.fromJson(json.loads(jevent.json())))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJson(json.loads(jevent.json())))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class JsonEventsListener(StreamingQueryListener):
    """A StreamingQueryListener whose events come through `JsonEventBridge`.

    `spark.streams.addListener` registers a Python listener's `_jlistener`, the JVM wrapper
    PySpark builds around its own bridge once per listener; this builds it around
    `JsonEventBridge` instead, with the same name and caching, so adding, removing and
    finding the listener (testing/spark.py) work as for any other."""

    @property
    def _jlistener(self) -> Any:  # a py4j JavaObject
        if not hasattr(self, "_jlistenerobj"):
            wrapper = java_class(SparkSession.active(), WRAPPER, "a streaming query listener")
            self._jlistenerobj = wrapper(JsonEventBridge(self))
        return self._jlistenerobj
