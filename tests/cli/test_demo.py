"""`demo wordcount`'s topics: a run that picked its own prefix deletes its topics
when it ends, so runs do not pile up `demo-XXXX.*`; a prefix it was given stays. The
cluster is a stand-in that makes the topics as the real ones do and whose job never ends:
what is tested is the demo's end, on the real broker, without Spark or services."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import pytest

from jobledger.cli import demo
from jobledger.services.kafka import admin_client
from jobledger.services.kafka_topics import create_topics


@dataclass
class NeverEnds(demo.DemoCluster):
    """Makes the run's topics, then waits in vain: the demo gives up and ends."""

    made: ClassVar[dict[str, list[str]]] = {}
    """The topics each run made, by the prefix it chose."""

    def __post_init__(self) -> None:
        create_topics(self.bootstrap, self.prefix, partitions=1)
        NeverEnds.made[self.prefix] = _topics(self.bootstrap, self.prefix)

    def describe(self) -> str:
        return "a stand-in"

    def submit(self, job) -> None:
        pass

    def wait_for_end(self, job_id: str, timeout_s: float):
        raise TimeoutError(f"job {job_id} did not end")

    def log(self) -> list:
        return []

    def close(self) -> None:
        pass


def _topics(bootstrap: str, prefix: str) -> list[str]:
    topics = admin_client(bootstrap).list_topics(timeout=30).topics
    return sorted(t for t in topics if t.startswith(prefix))


@pytest.mark.parametrize("given", [None, "given-{}."], ids=["own prefix", "given prefix"])
def test_a_run_deletes_the_topics_of_a_prefix_it_chose_and_keeps_a_given_one(
    kafka_bootstrap, tmp_path, capsys, given
):
    text = tmp_path / "words.txt"
    text.write_text("a b a\n")
    prefix = given.format(tmp_path.name) if given else None
    status = demo.run(text, kafka_bootstrap, tmp_path, timeout_s=1, prefix=prefix,
                      cluster_type=NeverEnds)  # fmt: skip
    said = capsys.readouterr().err
    ((chosen, made),) = NeverEnds.made.items()
    NeverEnds.made.clear()
    assert (status, len(made) > 0) == (1, True)
    if given:
        assert chosen == prefix
        assert _topics(kafka_bootstrap, chosen) == made
        assert f"topics {chosen}* kept: the prefix was given" in said
    else:
        assert chosen.startswith("demo-")
        deadline = time.monotonic() + 30  # the broker's metadata follows a deletion shortly
        while _topics(kafka_bootstrap, chosen):
            assert time.monotonic() < deadline, _topics(kafka_bootstrap, chosen)
            time.sleep(0.1)
        assert f"deleted the run's {len(made)} topics {chosen}*" in said
