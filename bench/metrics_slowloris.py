#!/usr/bin/python3
"""Times a /metrics scrape while slow clients hold the metrics port.

Usage: metrics_slowloris.py --port PORT [--host 127.0.0.1] [--connections 64]
           [--interval 4] [--settle 2] [--scrapes 3] [--timeout 60]

Opens `connections` TCP connections to the daemon's metrics port; each sends
a request line and then one more header line every `interval` seconds and
never finishes its request (a "slowloris"). After `settle` seconds it scrapes
GET /metrics `scrapes` times, one after another, and prints each scrape's
time and status, then how many slow connections the server still holds
(neither answered nor closed). Exits 0 whatever the timings: it measures, it does not judge.
"""
import argparse
import socket
import threading
import time
import urllib.error
import urllib.request


def slow_client(host, port, interval, stop, opened):
    try:
        sock = socket.create_connection((host, port), timeout=5)
    except OSError:
        return
    opened.append(sock)
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        n = 0
        while not stop.wait(interval):
            sock.sendall(b"X-Slow-%d: 1\r\n" % n)
            n += 1
    except OSError:
        pass


def still_waiting(sock):
    """True while the server has neither answered nor closed `sock`."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--interval", type=float, default=4.0)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    stop = threading.Event()
    opened = []
    threads = [threading.Thread(target=slow_client, daemon=True,
                                args=(args.host, args.port, args.interval,
                                      stop, opened))
               for _ in range(args.connections)]
    for thread in threads:
        thread.start()
    time.sleep(args.settle)
    url = f"http://{args.host}:{args.port}/metrics"
    for i in range(args.scrapes):
        start = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=args.timeout) as reply:
                reply.read()
                status = reply.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as error:
            status = f"error: {error}"
        print(f"scrape {i + 1}: {time.monotonic() - start:.3f} s, "
              f"status {status}", flush=True)
    waiting = sum(1 for sock in opened if still_waiting(sock))
    print(f"slow connections opened {len(opened)}, still held by the "
          f"server {waiting}")
    stop.set()
    for sock in opened:
        sock.close()


if __name__ == "__main__":
    main()
