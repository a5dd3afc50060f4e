"""An MQTT client for idem's tests, from another codebase: paho-mqtt 2.x (MQTT 3.1.1, and
MQTT 5 where asked).

    paho_mqtt.py publish --broker HOST:PORT --topic T --qos Q --count N --seed S --truth FILE
                         [--resends R] [--inflight K] [--timeout S] [--mqtt 3.1.1|5]
        Publishes N payments {"id": "p17", "payer": "ada", "amount": 5} (ids p0..p{N-1},
        payer and amount 1..=9 drawn from random.Random(S)), each once and in order, and R
        application resends of earlier payments (the same id, payer and amount in a new
        PUBLISH), placed by the same seed. Writes FILE as JSON lines, one per PUBLISH
        (resends included, in the order sent), keeps at most K unanswered (default 4, the
        broker's max_inflight_messages), waits until every PUBLISH has completed (PUBACK at
        QoS 1, PUBCOMP at QoS 2) and prints one JSON summary line, whose "sum" is that of
        the N payments (each id once).

    paho_mqtt.py subscribe --broker HOST:PORT --topic T --qos Q --client-id ID --count N
                           [--timeout S] [--linger S]
        A clean_session=0 client: prints its CONNACK's session present flag as the first
        line, {"session_present": true}, subscribes to T at Q only when the broker has no
        session for ID (the subscription is part of the session), then prints each
        message's payload as a JSON line, in the order received, until N have arrived
        (and then for --linger seconds more, to see any beyond N) or --timeout seconds
        have passed. Each message is acknowledged once printed (paho hands a QoS 2 message
        over on PUBREL; its PUBCOMP follows the print). --count 0 only connects,
        subscribes if there is no session, lingers, and disconnects.

    paho_mqtt.py publish-sizes --broker HOST:PORT --topic T --qos Q --sizes 256,257
        Publishes one JSON payload of exactly each size in bytes, {"id": "s256", "pad":
        "xx..."}, and prints a summary line once each PUBLISH has completed.

    paho_mqtt.py raw-qos2-probe --broker HOST:PORT --topic T --client-id ID [--quiet S]
        A small MQTT 3.1.1 client over a raw socket (not paho) that leaves the broker's QoS 2
        deliveries unanswered, or answers them only in part, over three connections, and
        prints each packet the broker sends as a JSON line; see raw_qos2_probe below.

    paho_mqtt.py raw-v5-window --broker HOST:PORT --topic T --client-id ID --count N
                               --receive-maximum R [--quiet S]
    paho_mqtt.py raw-v5-session --broker HOST:PORT --topic T --client-id ID
                                [--session-expiry S]
        Raw MQTT 5 clients: the broker's sends against a Receive Maximum, and whether a
        session outlives its connection; see raw_v5_window and raw_v5_session below.

Exit codes: 0 done; 1 the broker is not there, refused the connection or closed it, or a
PUBLISH did not complete in time (one sentence on stderr); 2 bad arguments; 3 (subscribe)
fewer than N messages arrived before the timeout.
"""
import argparse
import json
import random
import socket
import struct
import sys
import threading
import time

import paho.mqtt.client as mqtt

PAYERS = ["ada", "bob", "cy", "dee", "eve"]
CONNECT_TIMEOUT = 10.0


def fail(sentence, code=1):
    print(sentence, file=sys.stderr)
    sys.exit(code)


def host_port(broker):
    host, _, port = broker.rpartition(":")
    return host, int(port)


def payments(count, seed, resends):
    """The PUBLISH schedule: each payment once, in order, and `resends` earlier ones again."""
    rng = random.Random(seed)
    pays = [
        {"id": f"p{i}", "payer": rng.choice(PAYERS), "amount": rng.randint(1, 9)}
        for i in range(count)
    ]
    order = list(range(count))
    if resends and not count:
        fail("--resends needs --count 1 or more", 2)
    for _ in range(resends):
        k = rng.randrange(count)
        # Anywhere after the payment's first PUBLISH: an application that resends it.
        at = rng.randint(order.index(k) + 1, len(order))
        order.insert(at, k)
    return pays, order


def connected_client(broker, inflight, v5=False):
    """A publishing paho client connected to `broker` with its network loop running.

    At most `inflight` PUBLISH unanswered (paho queues the rest, in order): Mosquitto 2.0
    closes the connection of an MQTT 3.1.1 client that has more QoS 1 or 2 PUBLISH
    unanswered than the broker's max_inflight_messages (paho's own default is 20).
    """
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311)
    client.max_inflight_messages_set(inflight)
    state = {"event": threading.Event(), "flags": None, "reason": None, "lost": None}

    def on_connect(_client, _userdata, flags, reason_code, _properties):
        state["flags"], state["reason"] = flags, reason_code
        state["event"].set()

    def on_disconnect(_client, _userdata, _flags, reason_code, _properties):
        # paho would connect again by itself; a test client stops instead.
        if state["lost"] is None:
            state["lost"] = reason_code

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    host, port = host_port(broker)
    try:
        client.connect(host, port, keepalive=30)
    except OSError as e:
        fail(f"no MQTT broker at {broker}: {e.strerror or e}")
    client.loop_start()
    if not state["event"].wait(CONNECT_TIMEOUT):
        client.loop_stop()
        fail(f"the broker at {broker} did not answer the CONNECT within {CONNECT_TIMEOUT:.0f} s")
    if state["reason"].is_failure:
        client.loop_stop()
        fail(f"the broker at {broker} refused the connection: {state['reason']}")
    return client, state


def wait_published(client, state, infos, timeout, broker, record=lambda: None):
    deadline = time.monotonic() + timeout
    for info in infos:
        record()
        while not info.is_published():
            if state["lost"] is not None:
                done = sum(1 for i in infos if i.is_published())
                client.loop_stop()
                fail(f"the broker at {broker} closed the connection ({state['lost']}) after "
                     f"{done} of {len(infos)} PUBLISH completed")
            if time.monotonic() > deadline:
                done = sum(1 for i in infos if i.is_published())
                fail(f"{len(infos) - done} of {len(infos)} PUBLISH to {broker} did not complete "
                     f"within {timeout:g} s")
            info.wait_for_publish(0.05)


def finish(client, state=None):
    if state is not None:
        state["lost"] = "the client's own DISCONNECT"
    client.disconnect()
    client.loop_stop()


def publish(a):
    pays, order = payments(a.count, a.seed, a.resends)
    client, state = connected_client(a.broker, a.inflight, a.mqtt == "5")
    infos, lines = [], []
    for k in order:
        line = json.dumps(pays[k])
        infos.append(client.publish(a.topic, line.encode(), qos=a.qos))
        lines.append(line)
    # Only what the broker completed (PUBACK, PUBCOMP; QoS 0 at send) goes to the truth,
    # a line as each completes, so a publisher stopped at any point leaves a truth of
    # what the broker took.
    with open(a.truth, "w", encoding="utf-8") as truth:
        written = [0]

        def record():
            while written[0] < len(infos) and infos[written[0]].is_published():
                truth.write(lines[written[0]] + "\n")
                truth.flush()
                written[0] += 1

        try:
            wait_published(client, state, infos, a.timeout, a.broker, record)
        finally:
            record()
    finish(client, state)
    print(json.dumps({
        "published": len(order),
        "payments": a.count,
        "resends": a.resends,
        "sum": sum(p["amount"] for p in pays),
        "topic": a.topic,
        "qos": a.qos,
    }))


def publish_sizes(a):
    client, state = connected_client(a.broker, 4)
    infos = []
    sizes = [int(s) for s in a.sizes.split(",")]
    for size in sizes:
        head = json.dumps({"id": f"s{size}", "pad": ""})
        if size < len(head):
            fail(f"a payload of {size} bytes is shorter than {head}", 2)
        payload = json.dumps({"id": f"s{size}", "pad": "x" * (size - len(head))}).encode()
        assert len(payload) == size
        infos.append(client.publish(a.topic, payload, qos=a.qos))
    wait_published(client, state, infos, a.timeout, a.broker)
    finish(client, state)
    print(json.dumps({"published": sizes, "topic": a.topic, "qos": a.qos}))


def subscribe(a):
    received = []
    enough = threading.Event()
    lock = threading.Lock()

    def on_message(client, _userdata, message):
        try:
            line = json.dumps(json.loads(message.payload))
        except ValueError:
            line = json.dumps({"raw": message.payload.decode("utf-8", "replace")})
        with lock:
            print(line, flush=True)
            received.append(line)
            if len(received) >= a.count:
                enough.set()
        # Acknowledged once printed (PUBACK at QoS 1, PUBCOMP at QoS 2).
        client.ack(message.mid, message.qos)

    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=a.client_id,
        clean_session=False,
        protocol=mqtt.MQTTv311,
        manual_ack=True,
    )
    client.on_message = on_message
    state = {"event": threading.Event(), "reason": None, "subscribed": threading.Event()}

    def on_connect(client, _userdata, flags, reason_code, _properties):
        state["reason"] = reason_code
        if not reason_code.is_failure:
            # Printed before the network loop reads any PUBLISH of this connection.
            print(json.dumps({"session_present": bool(flags.session_present)}), flush=True)
            if flags.session_present:
                state["subscribed"].set()
            else:
                client.subscribe(a.topic, qos=a.qos)
        state["event"].set()

    def on_subscribe(_client, _userdata, _mid, reason_codes, _properties):
        if any(rc.is_failure for rc in reason_codes):
            state["refused"] = reason_codes
        state["subscribed"].set()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    host, port = host_port(a.broker)
    try:
        client.connect(host, port, keepalive=30)
    except OSError as e:
        fail(f"no MQTT broker at {a.broker}: {e.strerror or e}")
    client.loop_start()
    started = time.monotonic()
    if not state["event"].wait(CONNECT_TIMEOUT):
        fail(f"the broker at {a.broker} did not answer the CONNECT within {CONNECT_TIMEOUT:.0f} s")
    if state["reason"].is_failure:
        fail(f"the broker at {a.broker} refused the connection: {state['reason']}")
    if not state["subscribed"].wait(CONNECT_TIMEOUT):
        fail(f"the broker at {a.broker} did not answer the SUBSCRIBE within {CONNECT_TIMEOUT:.0f} s")
    if "refused" in state:
        fail(f"the broker at {a.broker} refused the subscription to {a.topic}: {state['refused']}")
    if a.count == 0:
        enough.set()
    got = enough.wait(max(0.0, a.timeout - (time.monotonic() - started)))
    if got and a.linger > 0:
        time.sleep(a.linger)
    finish(client)
    with lock:
        n = len(received)
    if not got:
        print(f"{n} of {a.count} messages arrived within {a.timeout:g} s", file=sys.stderr)
        sys.exit(3)


# A raw MQTT 3.1.1 client: just enough of the protocol (CONNECT, SUBSCRIBE, PUBLISH at QoS 2
# and its PUBREC, PUBREL, PUBCOMP) to leave a delivery unanswered on purpose.

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, DISCONNECT = 8, 9, 14
NAMES = {2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP", 9: "SUBACK",
         14: "DISCONNECT"}


def properties(b):
    """The CONNACK properties idem reads (MQTT 5 §3.2.2.3), by name; the rest skipped."""
    out, i = {}, 0
    sizes = {0x11: 4, 0x21: 2, 0x24: 1, 0x25: 1, 0x27: 4, 0x28: 1, 0x29: 1, 0x2A: 1, 0x13: 2, 0x22: 2}
    names = {0x11: "session_expiry_interval", 0x21: "receive_maximum", 0x24: "maximum_qos",
             0x25: "retain_available", 0x27: "maximum_packet_size", 0x22: "topic_alias_maximum"}
    while i < len(b):
        pid, i = b[i], i + 1
        if pid in sizes:
            v = int.from_bytes(b[i:i + sizes[pid]], "big")
            i += sizes[pid]
            if pid in names:
                out[names[pid]] = v
        elif pid == 0x26:
            for _ in range(2):
                (n,) = struct.unpack("!H", b[i:i + 2])
                i += 2 + n
        else:
            (n,) = struct.unpack("!H", b[i:i + 2])
            i += 2 + n
    return out


def mqtt_string(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def varint(n):
    """A Variable Byte Integer (MQTT 3.1.1 §2.2.3, MQTT 5 §1.5.5)."""
    out = b""
    while True:
        byte, n = n % 128, n // 128
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def read_varint(b):
    """(value, bytes it took) of the Variable Byte Integer at the start of `b`."""
    value, i = 0, 0
    while True:
        value |= (b[i] & 0x7F) << (7 * i)
        i += 1
        if not b[i - 1] & 0x80:
            return value, i


def packet(kind, flags, body):
    return bytes([kind << 4 | flags]) + varint(len(body)) + body


class Raw:
    """A raw-socket client. With `v5`, MQTT 5 (§3.1.2.2 protocol level 5): CONNECT carries
    the Receive Maximum (0x21, §3.1.2.11.3) and the Session Expiry Interval (0x11,
    §3.1.2.11.2) given, each left out when None, and the broker's packets are read with
    their properties skipped."""

    def __init__(self, broker, client_id, clean, v5=False, receive_maximum=None, session_expiry=None):
        host, port = host_port(broker)
        try:
            self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError as e:
            fail(f"no MQTT broker at {broker}: {e.strerror or e}")
        self.buf, self.v5 = b"", v5
        body = mqtt_string("MQTT") + bytes([5 if v5 else 4, 0x02 if clean else 0x00]) + struct.pack("!H", 30)
        if v5:
            props = b""
            if session_expiry is not None:
                props += bytes([0x11]) + struct.pack("!I", session_expiry)
            if receive_maximum is not None:
                props += bytes([0x21]) + struct.pack("!H", receive_maximum)
            body += varint(len(props)) + props
        self.sock.sendall(packet(CONNECT, 0, body + mqtt_string(client_id)))
        p = self.read(CONNECT_TIMEOUT)
        if p is None or p["packet"] != "CONNACK" or p["return_code"] != 0:
            fail(f"the broker at {broker} refused the connection of {client_id}: {p}")
        self.session_present = p["session_present"]
        self.connack = p

    def read(self, timeout):
        """The next packet from the broker as a dict, or None if none arrives within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.parse()
            if p is not None:
                return p
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not data:
                return {"packet": "EOF"}
            self.buf += data

    def parse(self):
        if len(self.buf) < 2:
            return None
        length, mult, i = 0, 1, 1
        while True:
            if i >= len(self.buf):
                return None
            byte = self.buf[i]
            length += (byte & 0x7F) * mult
            mult *= 128
            i += 1
            if not byte & 0x80:
                break
        if len(self.buf) < i + length:
            return None
        head, body = self.buf[0], self.buf[i:i + length]
        self.buf = self.buf[i + length:]
        kind = head >> 4
        p = {"packet": NAMES.get(kind, str(kind))}
        if kind == CONNACK:
            p["session_present"] = bool(body[0] & 1)
            p["return_code"] = body[1]
            if self.v5:
                n, i = read_varint(body[2:])
                p["properties"] = properties(body[2 + i:2 + i + n])
        elif kind == PUBLISH:
            qos = (head >> 1) & 3
            (tlen,) = struct.unpack("!H", body[:2])
            p.update(dup=bool(head & 0x08), qos=qos, retain=bool(head & 1), topic=body[2:2 + tlen].decode())
            rest = body[2 + tlen:]
            if qos:
                (p["packet_id"],), rest = struct.unpack("!H", rest[:2]), rest[2:]
            if self.v5:
                n, i = read_varint(rest)
                rest = rest[i + n:]
            p["payload"] = rest.decode("utf-8", "replace")
        elif kind == DISCONNECT:
            p["reason"] = body[0] if body else 0
        elif kind in (PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK):
            (p["packet_id"],) = struct.unpack("!H", body[:2])
            if kind == SUBACK:
                rest = body[2:]
                if self.v5:
                    n, i = read_varint(rest)
                    rest = rest[i + n:]
                p["granted"] = list(rest)
            elif self.v5 and len(body) > 2:
                p["reason"] = body[2]
            if kind == PUBREL and head & 0x0F != 0x02:
                p["bad_flags"] = head & 0x0F
        return p

    def send(self, kind, packet_id):
        # PUBREL carries the fixed flags 0010 (MQTT 3.1.1, 3.6.1).
        self.sock.sendall(packet(kind, 0x02 if kind == PUBREL else 0, struct.pack("!H", packet_id)))

    def subscribe(self, topic, qos):
        props = b"\x00" if self.v5 else b""
        self.sock.sendall(packet(SUBSCRIBE, 0x02, struct.pack("!H", 1) + props + mqtt_string(topic) + bytes([qos])))
        return self.expect("SUBACK")

    def publish_qos2(self, topic, packet_id, payload):
        body = mqtt_string(topic) + struct.pack("!H", packet_id) + payload.encode()
        self.sock.sendall(packet(PUBLISH, 2 << 1, body))
        self.expect("PUBREC")
        self.send(PUBREL, packet_id)
        self.expect("PUBCOMP")

    def expect(self, name):
        p = self.read(CONNECT_TIMEOUT)
        if p is None or p["packet"] != name:
            fail(f"expected {name} from the broker, got {p}")
        return p

    def drop(self):
        """Closes the connection without DISCONNECT: what a crash looks like to the broker."""
        self.sock.close()

    def disconnect(self):
        self.sock.sendall(packet(DISCONNECT, 0, b""))
        self.sock.close()


def raw_qos2_probe(a):
    """Leaves the broker's QoS 2 deliveries unanswered, connection after connection, and
    prints each packet the broker sends as a JSON line naming its phase:

      subscribed     CONNACK's session_present and the SUBACK of a first connection
      first          the PUBLISHes it receives of 10 (published at QoS 2 by a second
                     connection) while it answers none; then it drops the connection
      second         what a second connection receives; it answers the first PUBLISH with
                     PUBREC only
      after-pubrec   what the broker sends then; the connection is dropped before PUBCOMP
      third          what a third connection receives; it answers with PUBCOMP
      after-pubcomp  what the broker sends then

    Each phase ends once nothing has arrived for --quiet seconds after its first packet
    (for which it waits up to 10 s).
    """
    topic, cid = a.topic, a.client_id

    def show(phase, p, **more):
        print(json.dumps({"phase": phase, **p, **more}), flush=True)

    def drain(sub, phase):
        # The first packet may be slow to come (a busy machine); the rest of a phase's
        # packets follow it at once.
        got = []
        while (p := sub.read(a.quiet if got else CONNECT_TIMEOUT)) is not None:
            show(phase, p)
            got.append(p)
        return got

    sub = Raw(a.broker, cid, clean=False)
    show("subscribed", sub.subscribe(topic, 2), session_present=sub.session_present)
    pub = Raw(a.broker, f"{cid}-pub", clean=True)
    for i in range(10):
        pub.publish_qos2(topic, i + 1, f"m{i}")
    pub.disconnect()
    first = drain(sub, "first")
    sub.drop()
    if not first:
        fail("the broker sent nothing of the 10 messages")

    sub = Raw(a.broker, cid, clean=False)
    show("second", {"packet": "CONNACK"}, session_present=sub.session_present)
    drain(sub, "second")
    packet_id = first[0]["packet_id"]
    sub.send(PUBREC, packet_id)
    drain(sub, "after-pubrec")
    sub.drop()

    sub = Raw(a.broker, cid, clean=False)
    show("third", {"packet": "CONNACK"}, session_present=sub.session_present)
    drain(sub, "third")
    sub.send(PUBCOMP, packet_id)
    drain(sub, "after-pubcomp")
    sub.disconnect()


def raw_burst(a):
    """Sends --count QoS 2 PUBLISH back to back (packet ids 1.., payloads b0..), prints
    each packet the broker answers (phase "pubrec"), then sends PUBREL for each PUBREC
    and prints the answers (phase "pubcomp"). A closed connection is printed as EOF.
    """
    pub = Raw(a.broker, a.client_id, clean=True)

    def show(phase, p):
        print(json.dumps({"phase": phase, **p}), flush=True)

    def read_until(phase, want, n):
        got = 0
        while got < n:
            p = pub.read(CONNECT_TIMEOUT)
            if p is None:
                return False
            show(phase, p)
            if p["packet"] == "EOF":
                return False
            got += p["packet"] == want
        return True

    try:
        for i in range(a.count):
            body = mqtt_string(a.topic) + struct.pack("!H", i + 1) + f"b{i}".encode()
            pub.sock.sendall(packet(PUBLISH, 2 << 1, body))
        if not read_until("pubrec", "PUBREC", a.count):
            return
        for i in range(a.count):
            pub.send(PUBREL, i + 1)
        if read_until("pubcomp", "PUBCOMP", a.count):
            pub.disconnect()
    except OSError:
        show("send", {"packet": "EOF"})


def raw_v5_window(a):
    """An MQTT 5 subscriber with Receive Maximum --receive-maximum (MQTT 5 §3.1.2.11.3)
    leaves the broker's QoS 2 deliveries unanswered and prints each packet the broker
    sends as a JSON line naming its phase:

      connected      its CONNACK (session present, reason code, the properties read)
      first          the PUBLISHes it receives of --count (published at QoS 2 by another
                     connection) while it answers none
      after-pubcomp  what the broker sends once the first is completed (PUBREC, the
                     broker's PUBREL, PUBCOMP), the others still unanswered
    """
    def show(phase, p, **more):
        print(json.dumps({"phase": phase, **p, **more}), flush=True)

    def drain(phase):
        got = []
        while (p := sub.read(a.quiet if got else CONNECT_TIMEOUT)) is not None:
            if p["packet"] == "PUBREL" and phase == "complete":
                return [p]
            show(phase, p)
            got.append(p)
        return got

    sub = Raw(a.broker, a.client_id, clean=True, v5=True,
              receive_maximum=a.receive_maximum, session_expiry=3600)
    show("connected", sub.connack)
    sub.subscribe(a.topic, 2)
    pub = Raw(a.broker, f"{a.client_id}-pub", clean=True)
    for i in range(a.count):
        pub.publish_qos2(a.topic, i + 1, f"m{i}")
    pub.disconnect()
    first = drain("first")
    if not first:
        fail("the broker sent nothing of the messages")
    sub.send(PUBREC, first[0]["packet_id"])
    drain("complete")
    sub.send(PUBCOMP, first[0]["packet_id"])
    drain("after-pubcomp")
    sub.disconnect()


def raw_v5_session(a):
    """An MQTT 5 client connects with Clean Start 0 (MQTT 5 §3.1.2.4) and, unless
    --session-expiry is left out, that Session Expiry Interval (§3.1.2.11.2), subscribes,
    disconnects, connects again the same way and prints its two CONNACKs' session present
    flags as one JSON line."""
    flags = []
    for _ in range(2):
        sub = Raw(a.broker, a.client_id, clean=False, v5=True, session_expiry=a.session_expiry)
        flags.append(sub.session_present)
        if not sub.session_present:
            sub.subscribe(a.topic, 2)
        sub.disconnect()
        time.sleep(0.2)
    print(json.dumps({"session_present": flags}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--broker", required=True, help="HOST:PORT")
        p.add_argument("--topic", required=True)

    p = sub.add_parser("publish")
    common(p)
    p.add_argument("--qos", type=int, choices=[0, 1, 2], required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--truth", required=True)
    p.add_argument("--resends", type=int, default=0)
    p.add_argument("--inflight", type=int, default=4, help="PUBLISH unanswered at most (the broker's max_inflight_messages)")
    p.add_argument("--timeout", type=float, default=60.0, help="for every PUBLISH to complete")
    p.add_argument("--mqtt", choices=["3.1.1", "5"], default="3.1.1", help="the protocol (paho's MQTTv311 or MQTTv5)")
    p.set_defaults(run=publish)

    p = sub.add_parser("publish-sizes")
    common(p)
    p.add_argument("--qos", type=int, choices=[0, 1, 2], required=True)
    p.add_argument("--sizes", required=True, help="payload sizes in bytes, comma-separated")
    p.add_argument("--timeout", type=float, default=10.0)
    p.set_defaults(run=publish_sizes)

    p = sub.add_parser("subscribe")
    common(p)
    p.add_argument("--qos", type=int, choices=[0, 1, 2], required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--linger", type=float, default=0.0)
    p.set_defaults(run=subscribe)

    p = sub.add_parser("raw-qos2-probe")
    common(p)
    p.add_argument("--client-id", required=True)
    p.add_argument("--quiet", type=float, default=0.7, help="seconds without a packet that end a phase")
    p.set_defaults(run=raw_qos2_probe)

    p = sub.add_parser("raw-burst")
    common(p)
    p.add_argument("--client-id", required=True)
    p.add_argument("--count", type=int, required=True)
    p.set_defaults(run=raw_burst)

    p = sub.add_parser("raw-v5-window")
    common(p)
    p.add_argument("--client-id", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--receive-maximum", type=int, required=True)
    p.add_argument("--quiet", type=float, default=0.7, help="seconds without a packet that end a phase")
    p.set_defaults(run=raw_v5_window)

    p = sub.add_parser("raw-v5-session")
    common(p)
    p.add_argument("--client-id", required=True)
    p.add_argument("--session-expiry", type=int, default=None)
    p.set_defaults(run=raw_v5_session)

    a = ap.parse_args()
    a.run(a)


if __name__ == "__main__":
    main()
