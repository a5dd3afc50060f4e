"""idem mqtt bench's baseline: paho-mqtt's plain subscriber loop, nothing durable.

python plain_sub.py HOST:PORT TOPIC CLIENT_ID COUNT TIMEOUT_S

Connects with clean session 0 under CLIENT_ID, subscribes to TOPIC at QoS 2, sums the
"amount" of each payment received until COUNT have arrived (0: only make the session),
disconnects and prints {"messages": N, "sum": S}. Exits 1 after TIMEOUT_S seconds.
"""
import json
import sys
import time

import paho.mqtt.client as mqtt

host, port = sys.argv[1].rsplit(":", 1)
topic, client_id, count, timeout = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
state = {"messages": 0, "sum": 0, "subscribed": False}

client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)


def on_connect(c, _userdata, _flags, reason_code, _properties):
    if reason_code != 0:
        print(f"refused: {reason_code}", file=sys.stderr)
        sys.exit(1)
    c.subscribe(topic, qos=2)


def on_subscribe(_c, _userdata, _mid, _codes, _properties):
    state["subscribed"] = True


def on_message(_c, _userdata, message):
    state["messages"] += 1
    state["sum"] += json.loads(message.payload)["amount"]


client.on_connect = on_connect
client.on_subscribe = on_subscribe
client.on_message = on_message
client.connect(host, int(port), keepalive=60)
deadline = time.monotonic() + timeout
while state["messages"] < count or not state["subscribed"]:
    client.loop(timeout=0.05)
    if time.monotonic() > deadline:
        print(f"{state['messages']} of {count} in {timeout} s", file=sys.stderr)
        sys.exit(1)
client.disconnect()
client.loop(timeout=0.05)
print(json.dumps({"messages": state["messages"], "sum": state["sum"]}))
