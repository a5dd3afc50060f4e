"""`idem kafka bench`'s second baseline: kafka-python's plain loop over a topic's payments.

    python -c "$(cat plain_sum.py)" BROKERS TOPIC

Reads every partition from offset 0 to the end offset it had at the start, with the fetch
settings of idem's readers (client::FETCH: 1 MiB a fetch and a partition, 50 ms fetch
wait), isolation_level read_committed and no group; json.loads each value, sums the
amounts, and prints {"records": .., "sum": ..}.
"""
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition

DEADLINE_S = 120


def main():
    brokers, topic = sys.argv[1], sys.argv[2]
    consumer = KafkaConsumer(
        bootstrap_servers=brokers,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_bytes=1048576,
        max_partition_fetch_bytes=1048576,
        fetch_max_wait_ms=50,
    )
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        sys.exit(f"the broker has no topic {topic}")
    parts = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(parts)
    records, total = 0, 0
    started = time.monotonic()
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        if time.monotonic() - started > DEADLINE_S:
            sys.exit(f"{topic}: the end offsets {ends} not reached after {DEADLINE_S} s")
        for batch in consumer.poll(timeout_ms=100).values():
            for m in batch:
                total += json.loads(m.value)["amount"]
                records += 1
    consumer.close()
    print(json.dumps({"records": records, "sum": total}))


if __name__ == "__main__":
    main()
