"""Reads partition 0 of a topic from the start, then asks the broker for its end offset."""
import sys
from kafka import KafkaConsumer, TopicPartition
brokers, topic = sys.argv[1], sys.argv[2]
c = KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=2000)
tp = TopicPartition(topic, 0)
c.assign([tp])
offsets = [m.offset for m in c]
print("fetched", len(offsets), "records, offsets", offsets[0], "to", offsets[-1])
print("end offset (ListOffsets, latest):", c.end_offsets([tp])[tp])
