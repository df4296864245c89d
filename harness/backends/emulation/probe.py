"""Measuring an emulated (or live) link: RTT by UDP echo, bulk TCP throughput by a timed transfer.

The servers and clients run inside the VMs' namespaces as `python -m harness.backends.emulation.probe`:
    echo ADDR PORT            UDP echo server, until killed
    ping ADDR PORT COUNT [TIMEOUT_S]
                              prints {"rtt_ms": [...], "lost": n} (one probe in flight at a time, GAP_S
                              apart; a probe not back in TIMEOUT_S, default 2, is lost)
    sink ADDR PORT            TCP: accept one connection, read to the end, answer with the count and
                              how long the second half of the bytes took to arrive
    send ADDR PORT BYTES      prints {"bytes": n, "seconds": s, "steady_bytes_per_s": r, "in_flight_bytes": w}:
                              s from connect to the sink's answer, r the rate of the second half (past
                              slow start), w the bytes unacknowledged during it, on average
"""
import json
import socket
import struct
import sys
import threading
import time
from pathlib import Path

CHUNK = 1 << 20
# Probes are spaced, as ping's are, so that the minimum (the statistic every RTT in the suite
# reports) comes from probes spread over time: a stall of the machine spoils some, not all.
GAP_S = 0.005
PROBES = 50
SAMPLE_S = 0.002  # how often a sender looks at its bytes in flight


def min_rtt_ms(rtts: list[float]) -> float:
    """The RTT of a link, as ping reports it: the fastest probe. Slower ones measure the machine's
    scheduling (a process not yet woken), which the link does not add."""
    if not rtts:
        raise RuntimeError("no probe came back: the link lost every one")
    return min(rtts)


def echo(addr: str, port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)


def ping(addr: str, port: int, count: int, timeout_s: float = 2.0) -> tuple[list[float], int]:
    """RTTs of the probes that came back, and how many did not (a lossy link loses some)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rtts, lost = [], 0
    for i in range(count):
        start = time.perf_counter()
        s.sendto(i.to_bytes(4, "big"), (addr, port))
        try:
            while True:
                s.settimeout(max(1e-3, timeout_s - (time.perf_counter() - start)))
                if int.from_bytes(s.recvfrom(2048)[0], "big") == i:
                    break  # else a late answer to an earlier probe
            rtts.append((time.perf_counter() - start) * 1e3)
        except TimeoutError:
            lost += 1
        time.sleep(GAP_S)
    return rtts, lost


def sink(addr: str, port: int) -> None:
    server = socket.create_server((addr, port))
    print("ready", flush=True)
    conn, _ = server.accept()
    preamble = b""
    while len(preamble) < 64:  # the sender says how much it will send, in a fixed 64 bytes
        chunk = conn.recv(64 - len(preamble))
        if not chunk:
            raise RuntimeError("the sender closed the connection before saying how much it would send")
        preamble += chunk
    half = int(preamble.split(b"\n")[0])
    total, buffer, half_at = 0, bytearray(CHUNK), None
    while n := conn.recv_into(buffer):  # into one buffer: the probe must not compete with the link for CPU
        total += n
        if half_at is None and total >= half:
            half_at = time.perf_counter()
    second_half = time.perf_counter() - half_at if half_at else 0.0
    conn.sendall(f"{total} {second_half}".encode())
    conn.close()


def send(addr: str, port: int, nbytes: int) -> dict:
    payload = memoryview(bytes(CHUNK))
    start = time.perf_counter()
    conn = socket.create_connection((addr, port), timeout=120)
    conn.sendall(f"{nbytes // 2}\n".ljust(64).encode())  # a fixed-size preamble the sink reads first
    left, in_flight, sent_all = nbytes, [], threading.Event()

    def sample() -> None:  # at even times: samples taken as send() returns would all fall just after ACKs
        while not sent_all.wait(SAMPLE_S):
            if left <= nbytes // 2:
                in_flight.append(unacked_bytes(conn))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while left > 0:
        left -= conn.send(payload[:min(CHUNK, left)])  # a view: no copy per send
    sent_all.set()
    sampler.join()
    conn.shutdown(socket.SHUT_WR)
    received, second_half = conn.recv(128).split()
    seconds = time.perf_counter() - start
    steady = (int(received) - nbytes // 2) / float(second_half) if float(second_half) > 0 else None
    return {"bytes": int(received), "seconds": seconds, "steady_bytes_per_s": steady,
            "in_flight_bytes": sum(in_flight) / len(in_flight) if in_flight else None}


def unacked_bytes(conn: socket.socket) -> int:
    """Bytes sent and not yet acknowledged (struct tcp_info: snd_mss at byte 16, unacked at 24,
    in segments of snd_mss even where the stack hands the NIC larger ones): the window the flow
    actually keeps on the link, which Linux holds below its send buffer."""
    info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
    mss, unacked = struct.unpack_from("=I4xI", info, 16)
    return mss * unacked


def tcp_window_bytes() -> int:
    """What one connection can have in flight: the smaller of the send buffer and the usable
    part of the receive buffer (tcp_adv_win_scale = 1 keeps half of it for overhead)."""
    base = Path("/proc/sys/net/ipv4")
    rmem = int((base / "tcp_rmem").read_text().split()[2])
    wmem = int((base / "tcp_wmem").read_text().split()[2])
    scale = int((base / "tcp_adv_win_scale").read_text())
    usable = rmem - (rmem >> scale) if scale > 0 else rmem >> -scale
    return min(usable, wmem)


def main(argv: list[str]) -> None:
    mode, addr, port, *rest = argv
    if mode == "echo":
        echo(addr, int(port))
    elif mode == "ping":
        rtts, lost = ping(addr, int(port), int(rest[0]), *map(float, rest[1:2]))
        print(json.dumps({"rtt_ms": rtts, "lost": lost}))
    elif mode == "sink":
        sink(addr, int(port))
    elif mode == "send":
        print(json.dumps(send(addr, int(port), int(rest[0]))))
    elif mode == "window":
        print(tcp_window_bytes())


if __name__ == "__main__":
    main(sys.argv[1:])
