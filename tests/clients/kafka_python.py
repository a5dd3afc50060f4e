"""A second Kafka client for idem's tests, from another codebase: kafka-python.

    kafka_python.py BROKERS produce TOPIC KIND [TRUTH]  # creates a 1-partition topic, sends KIND's records in batches
    kafka_python.py BROKERS read TOPIC           # prints each record as JSON: partition, offset, key, value
    kafka_python.py BROKERS committed TOPIC GROUP  # prints the group's committed offset of partition 0

KIND is one of:
    batch20   20 payments p0..p19 of amount 1, keyed by id, in one batch (linger 50 ms)
    keyless   two payments without a key: (a, 5) and (b, 3)
    mixed     good and bad records: p0 (5), not JSON, amount "five", a null value, p4 (3)
    overflow  two payments of amount 2**63 - 1

With TRUTH, each keyed payment is written there as a JSON line (`{"id": "p0", "payer": "a",
"amount": 1}`, the truth format `idem kafka consume --truth` reads) once the broker
acknowledged it, and only then: a killed producer leaves out what it never saw
acknowledged. The file has no first or end line, as a truth from a writer other than idem.
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic


def pay(payer, amount):
    return json.dumps({"payer": payer, "amount": amount}).encode()


RECORDS = {
    "batch20": [(f"p{i}".encode(), pay("a", 1)) for i in range(20)],
    "keyless": [(None, pay("a", 5)), (None, pay("b", 3))],
    "mixed": [
        (b"p0", pay("a", 5)),
        (b"p1", b"not json"),
        (b"p2", b'{"payer": "a", "amount": "five"}'),
        (b"p3", None),
        (b"p4", pay("b", 3)),
    ],
    "overflow": [(b"p0", pay("a", 2**63 - 1)), (b"p1", pay("b", 2**63 - 1))],
}


def acknowledged(truth, key, value, _metadata):
    """Writes the payment the broker acknowledged to the truth file (kept out: a value
    that is not a payment)."""
    try:
        pay = json.loads(value)
        line = {"id": key.decode(), "payer": pay["payer"], "amount": pay["amount"]}
    except (TypeError, ValueError, KeyError):
        return
    if not isinstance(line["amount"], int) or not isinstance(line["payer"], str):
        return
    truth.write(json.dumps(line) + "\n")
    truth.flush()


def main():
    brokers, action, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if action == "produce":
        records = RECORDS[sys.argv[4]]
        KafkaAdminClient(bootstrap_servers=brokers).create_topics([NewTopic(topic, 1, 1)])
        producer = KafkaProducer(bootstrap_servers=brokers, linger_ms=50)
        truth = open(sys.argv[5], "w") if len(sys.argv) > 5 else None
        for key, value in records:
            future = producer.send(topic, key=key, value=value)
            if truth is not None and key is not None:
                future.add_callback(acknowledged, truth, key, value)
        producer.flush()
        if truth is not None:
            truth.close()
        print(json.dumps({"sent": len(records)}))
    elif action == "read":
        consumer = KafkaConsumer(
            bootstrap_servers=brokers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        parts = consumer.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        for m in consumer:
            print(json.dumps({
                "partition": m.partition,
                "offset": m.offset,
                "key": m.key.decode() if m.key is not None else None,
                "value": json.loads(m.value) if m.value is not None else None,
            }))
    elif action == "committed":
        consumer = KafkaConsumer(
            bootstrap_servers=brokers, group_id=sys.argv[4], enable_auto_commit=False
        )
        print(json.dumps({"committed": consumer.committed(TopicPartition(topic, 0))}))
    else:
        sys.exit(f"unknown action {action}")


if __name__ == "__main__":
    main()
