"""Sends N records to a new one-partition topic in one batch (linger 50 ms, one flush)."""
import json
import sys

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

brokers, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
KafkaAdminClient(bootstrap_servers=brokers).create_topics([NewTopic(topic, 1, 1)])
producer = KafkaProducer(bootstrap_servers=brokers, linger_ms=50)
for i in range(n):
    producer.send(topic, key=f"p{i}".encode(), value=json.dumps({"payer": "a", "amount": 1}).encode())
producer.flush()
print("sent", n)
