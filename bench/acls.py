"""Authorization figures: the cost of one ``StandardAuthorizer.authorize`` call with
10,000 ACLs (all literal, all prefixed, and a mix), and a broker's produce throughput
with the authorizer on versus off, in the same run.

    .venv/bin/python bench/acls.py [--acls N] [--records N] [--rounds N] [--skip-broker]

The produce figure uses confluent-kafka against one broker on 127.0.0.1 (acks=1,
100-byte records); with the authorizer on, the principal (User:ANONYMOUS) is allowed by
a literal ACL on the topic among N others, so every request is checked for real. Both
brokers run at once and the rounds alternate between them (which goes first too);
medians are printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from strom.security.authorizer import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)

TOPIC = ResourceType.TOPIC


def build(kind: str, count: int, rng: random.Random) -> StandardAuthorizer:
    authorizer = StandardAuthorizer()
    for i in range(count):
        prefixed = kind == "prefixed" or (kind == "mixed" and i % 2)
        name = f"team-{i}-" if prefixed else f"topic-{i}"
        pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
        permission = AclPermissionType.DENY if i % 10 == 0 else AclPermissionType.ALLOW
        principal = f"User:u{rng.randrange(100)}"
        binding = AclBinding(TOPIC, name, pattern, principal, "*", AclOperation.READ, permission)
        authorizer.add(i, binding)
    return authorizer


def time_authorize(authorizer: StandardAuthorizer, count: int, calls: int) -> list[float]:
    rng = random.Random(7)
    names = [
        f"team-{rng.randrange(count)}-orders" if i % 2 else f"topic-{rng.randrange(count)}"
        for i in range(calls)
    ]
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for name in names:
            authorizer.authorize("User:u1", "10.0.0.1", AclOperation.READ, TOPIC, name)
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return rounds


def produce_rate(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.num.messages": 1000}
    )
    value = b"x" * 100
    producer.produce(topic, value)
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)
    return records / (time.perf_counter() - start)


def broker_figures(acls: int, records: int, rounds: int) -> None:
    """Both brokers up at once and produce rounds alternated between them, so that the
    machine's drift (other processes on a shared box) weighs on both alike."""
    from broker_process import BrokerProcess
    from confluent_kafka.admin import AclBinding as Binding
    from confluent_kafka.admin import AclOperation as Op
    from confluent_kafka.admin import AclPermissionType as Perm
    from confluent_kafka.admin import AdminClient, NewTopic, ResourcePatternType
    from confluent_kafka.admin import ResourceType as RType

    secured = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    with tempfile.TemporaryDirectory() as tmp:
        brokers = {
            "off": BrokerProcess(Path(tmp) / "off" / "data", {}),
            "on": BrokerProcess(Path(tmp) / "on" / "data", secured),
        }
        for b in brokers.values():
            b.data_dir.parent.mkdir(parents=True)
            b.start()
        try:
            for label, broker in brokers.items():
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(10)
                if label == "off":
                    continue
                bindings = [
                    Binding(
                        RType.TOPIC,
                        f"other-{i}",
                        ResourcePatternType.PREFIXED if i % 2 else ResourcePatternType.LITERAL,
                        f"User:u{i % 100}",
                        "*",
                        Op.READ,
                        Perm.ALLOW,
                    )
                    for i in range(acls)
                ]
                bindings.append(
                    Binding(
                        RType.TOPIC,
                        "bench",
                        ResourcePatternType.LITERAL,
                        "User:ANONYMOUS",
                        "*",
                        Op.WRITE,
                        Perm.ALLOW,
                    )
                )
                for first in range(0, len(bindings), 1000):
                    for f in admin.create_acls(bindings[first : first + 1000]).values():
                        f.result(60)
            rates: dict[str, list[float]] = {"off": [], "on": []}
            for round_index in range(rounds):
                order = ["off", "on"] if round_index % 2 == 0 else ["on", "off"]
                for label in order:
                    rates[label].append(produce_rate(brokers[label].bootstrap, "bench", records))
        finally:
            for b in brokers.values():
                b.stop()
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    shown = {k: ", ".join(f"{r:,.0f}" for r in v) for k, v in rates.items()}
    print(f"produce, authorizer off:              median {off:10,.0f} records/s ({shown['off']})")
    print(
        f"produce, authorizer on ({acls:,} ACLs): median {on:10,.0f} records/s "
        f"({shown['on']}); {on / off - 1:+.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5, help="produce rounds per broker")
    parser.add_argument("--skip-broker", action="store_true")
    args = parser.parse_args()
    rng = random.Random(1)
    for kind in ("literal", "prefixed", "mixed"):
        authorizer = build(kind, args.acls, rng)
        rounds = time_authorize(authorizer, args.acls, args.calls)
        print(
            f"authorize() with {args.acls:,} {kind:8} ACLs: "
            f"median {statistics.median(rounds):.2f} us/call, best {min(rounds):.2f} us/call"
        )
    if not args.skip_broker:
        broker_figures(args.acls, args.records, args.rounds)


if __name__ == "__main__":
    main()
