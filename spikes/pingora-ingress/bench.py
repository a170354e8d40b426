#!/usr/bin/env python3
"""Issue 21's measurements: pingora-ingress beside runway-ingress and nginx, on the same
upstream (runway-ingress's `bench upstream`, a minimal hyper server).

  instructions  instructions per request under callgrind, each proxy on one thread
  throughput    req/s and p99 under wrk (HTTP/1.1) and h2load (HTTPS/1.1, HTTP/2 with 10
                streams), interleaved rounds, median

    python3 bench.py --bin-dir DIR [--spike target/release/pingora-ingress] \
        [--only instructions|throughput] [--rounds 3] [--seconds 10] [--json out.json]

DIR holds `runway-ingress` and `bench` (cargo build --release -p runway-ingress --bin
runway-ingress --example bench, in the workspace). Needs nginx, wrk, h2load, valgrind, openssl.

Instructions per request are measured by difference, so that connection set-up and TLS
handshakes cancel out: the same h2load command (same clients, so the same connections and
handshakes) is run with N1 and then N2 requests, each between `callgrind_control --zero` and
`--dump`, and the figure is (Ir(N2) - Ir(N1)) / (N2 - N1). Ir(N2) / N2 (handshakes amortized
over N2) is given too.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HOST = "hello.bench.localhost"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, seconds=60):
    start = time.time()
    while time.time() - start < seconds:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {seconds} s")


def stop(process, sig=signal.SIGTERM, seconds=10):
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def peak_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Setup:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="pingora-spike-")
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        # ECDSA P-256, as the workspace's bench makes with rcgen.
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", self.key, "-out", self.cert,
             "-days", "30", "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"],
            check=True, capture_output=True)
        self.upstream_port = free_port()
        self.upstream = subprocess.Popen(
            [os.path.join(args.bin_dir, "bench"), "upstream", f"127.0.0.1:{self.upstream_port}"])
        wait_listening(self.upstream_port)
        self.routes = os.path.join(self.dir, "routes.json")
        with open(self.routes, "w") as f:
            json.dump({"domain": "localhost", "routes": [{
                "service": "hello", "env": "bench", "revisions": [{
                    "name": "hello-1", "weight": 100,
                    "instances": [{"address": f"127.0.0.1:{self.upstream_port}"}]}]}]}, f)

    def close(self):
        stop(self.upstream)
        shutil.rmtree(self.dir, ignore_errors=True)

    def nginx_config(self, name, plain, tls, workers, single):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        # As the workspace bench's nginx_config; one process (no master) under callgrind.
        head = "master_process off;\n" if single else ""
        config = f"""{head}worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    upstream app {{ server 127.0.0.1:{self.upstream_port}; keepalive 64; keepalive_requests 1000000; }}
    ssl_certificate {self.cert};
    ssl_certificate_key {self.key};
    ssl_protocols TLSv1.2 TLSv1.3;
    server {{
        listen 127.0.0.1:{plain};
        listen 127.0.0.1:{tls} ssl http2;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"""
        path = os.path.join(d, "nginx.conf")
        with open(path, "w") as f:
            f.write(config)
        return path, d

    def command(self, name, plain, tls, threads, single):
        """The command line of proxy `name` listening on `plain` and `tls`."""
        if name == "runway-ingress":
            command = [os.path.join(self.args.bin_dir, "runway-ingress"),
                       "--routes", self.routes,
                       "--listen", f"127.0.0.1:{plain}",
                       "--https", f"127.0.0.1:{tls}", "--no-redirect",
                       "--ca-dir", os.path.join(self.dir, "ca"),
                       "--certificate", f"{HOST}:{self.cert}:{self.key}",
                       "--admin", f"127.0.0.1:{free_port()}",
                       "--threads", str(threads)]
            if single:
                command += ["--event-loops", "1"]
            return command
        if name.startswith("pingora-ingress"):
            command = [self.args.spike, "--listen", f"127.0.0.1:{plain}",
                       "--https", f"127.0.0.1:{tls}", "--cert", self.cert, "--key", self.key,
                       "--upstream", f"127.0.0.1:{self.upstream_port}",
                       "--threads", str(threads)]
            if "no-steal" in name:
                command.append("--no-work-stealing")
            if name.endswith("bare"):
                command.append("--bare")
            return command
        if name == "nginx":
            config, d = self.nginx_config(f"nginx-{plain}", plain, tls, threads, single)
            return ["nginx", "-c", config, "-p", d]
        raise ValueError(name)


def start(setup, name, threads, single=False, valgrind_out=None):
    plain, tls = free_port(), free_port()
    command = setup.command(name, plain, tls, threads, single)
    if valgrind_out:
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=yes",
                   f"--callgrind-out-file={valgrind_out}"] + command
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(plain, 120)
    wait_listening(tls, 120)
    return process, plain, tls


# --- loads -------------------------------------------------------------------------------------

def h2load(port, load, extra, log=None):
    command = ["h2load", f"--connect-to=127.0.0.1:{port}"] + extra
    if log:
        command.append(f"--log-file={log}")
    if load == "http1":
        command += ["--h1", f"http://{HOST}/"]
    elif load == "https1":
        command += ["--h1", f"https://{HOST}/"]
    else:
        command += [f"https://{HOST}/"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=900)
    text = out.stdout
    rate = None
    failed = 0
    succeeded = 0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("finished in "):
            m = re.search(r", ([\d.]+) req/s", line)
            if m:
                rate = float(m.group(1))
        elif line.startswith("requests: "):
            for part in line[len("requests: "):].split(", "):
                n, _, what = part.partition(" ")
                if what in ("failed", "errored", "timeout"):
                    failed += int(n)
                if what == "succeeded":
                    succeeded = int(n)
    status_2xx = re.search(r"status codes: (\d+) 2xx", text)
    return {"rate": rate, "failed": failed, "succeeded": succeeded,
            "2xx": int(status_2xx.group(1)) if status_2xx else 0, "text": text + out.stderr}


def percentile(values, p):
    values = sorted(values)
    if not values:
        return 0.0
    index = max(0, int(-(-len(values) * p // 1)) - 1)
    return values[index]


def wrk(port, seconds, connections, threads):
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
         "-H", f"Host: {HOST}", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, timeout=seconds + 60).stdout
    result = {"errors": ""}
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    for line in out.splitlines():
        fields = line.split()
        if fields[:1] == ["Requests/sec:"]:
            result["rate"] = float(fields[1])
        elif fields[:1] in (["50%"], ["99%"]):
            m = re.match(r"([\d.]+)(us|ms|s)$", fields[1])
            result["p50" if fields[0] == "50%" else "p99"] = float(m.group(1)) * unit[m.group(2)]
        elif line.strip().startswith(("Non-2xx", "Socket errors")):
            result["errors"] = line.strip()
    if "rate" not in result:
        raise RuntimeError("wrk printed no rate:\n" + out)
    return result


def throughput_once(port, tls_port, load, seconds, connections, threads, log):
    if load == "http1":
        return wrk(port, seconds, connections, threads)
    if load == "https1":
        extra = ["--clients", str(connections), "--threads", str(threads)]
    else:
        streams = 10
        clients = max(-(-connections // streams), threads)
        extra = ["--clients", str(clients), "--max-concurrent-streams", str(streams),
                 "--threads", str(threads)]
    extra += [f"--duration={seconds}", "--warm-up-time=1"]
    result = h2load(tls_port, load, extra, log)
    if result["rate"] is None:
        raise RuntimeError("h2load printed no rate:\n" + result["text"])
    micros = []
    with open(log) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                try:
                    micros.append(int(parts[2]))
                except ValueError:
                    pass
    return {"rate": result["rate"], "p50": percentile(micros, 0.5) / 1000,
            "p99": percentile(micros, 0.99) / 1000,
            "errors": f"{result['failed']} failed" if result["failed"] else ""}


LOADS = {
    "http1": "HTTP/1.1 (wrk)",
    "https1": "HTTPS, HTTP/1.1 (h2load)",
    "h2": "HTTPS, HTTP/2, 10 streams per connection (h2load)",
}


def throughput(setup, names, args):
    running = {}
    try:
        for name in names:
            running[name] = start(setup, name, args.threads)
        rows = {}
        for load in LOADS:
            for round_ in range(args.rounds):
                for name in names:
                    _, plain, tls = running[name]
                    print(f"throughput: {name} {load} round {round_ + 1}", file=sys.stderr)
                    log = os.path.join(setup.dir, f"{name}.log")
                    result = throughput_once(plain, tls, load, args.seconds, args.connections,
                                             args.threads, log)
                    rows.setdefault((load, name), []).append(result)
        peaks = {name: peak_kib(p.pid) for name, (p, _, _) in running.items()}
    finally:
        for process, _, _ in running.values():
            stop(process)
    table = {}
    for (load, name), results in rows.items():
        table.setdefault(load, {})[name] = {
            "rates": [r["rate"] for r in results],
            "p99s": [r["p99"] for r in results],
            "rate": statistics.median(r["rate"] for r in results),
            "p50": statistics.median(r["p50"] for r in results),
            "p99": statistics.median(r["p99"] for r in results),
            "errors": [r["errors"] for r in results if r["errors"]],
        }
    return {"loads": table, "peak_kib": peaks}


# --- instructions ------------------------------------------------------------------------------

def callgrind_total(path):
    """The `totals:` (or `summary:`) Ir of a callgrind dump."""
    total = None
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or (total is None and line.startswith("summary:")):
                total = int(line.split()[1])
    if total is None:
        raise RuntimeError(f"no totals in {path}")
    return total


def dump(pid, out_prefix, label):
    before = set(glob.glob(out_prefix + "*"))
    subprocess.run(["callgrind_control", "--dump=" + label, str(pid)], check=True,
                   capture_output=True, timeout=600)
    # The dump is written by the process itself: wait for the new file.
    for _ in range(600):
        new = set(glob.glob(out_prefix + "*")) - before
        if new:
            path = new.pop()
            time.sleep(0.5)
            return path
        time.sleep(0.1)
    raise RuntimeError("callgrind wrote no dump")


INSTRUCTION_LOADS = {
    # HTTP/1.1 without pipelining (-m 1): one request at a time per connection, as browsers.
    "http1": ["--clients=4", "--max-concurrent-streams=1"],
    "https1": ["--clients=4", "--max-concurrent-streams=1"],
    "h2": ["--clients=4", "--max-concurrent-streams=10"],
}


def instructions(setup, names, args):
    results = {}
    for name in names:
        out = os.path.join(setup.dir, f"callgrind.{name}.out")
        process, plain, tls = start(setup, name, 1, single=True, valgrind_out=out)
        try:
            pid = process.pid
            # Warm up every load (pools, allocator, TLS session caches).
            for load in INSTRUCTION_LOADS:
                port = plain if load == "http1" else tls
                r = h2load(port, load, INSTRUCTION_LOADS[load] + [f"--requests={args.warmup}"])
                if r["2xx"] != args.warmup:
                    raise RuntimeError(f"{name} warm-up {load}: {r['text']}")
            time.sleep(1)
            # Idle cost, for scale: what the process does by itself in 5 s.
            subprocess.run(["callgrind_control", "--zero", str(pid)], check=True,
                           capture_output=True)
            time.sleep(5)
            idle = callgrind_total(dump(pid, out, "idle"))
            results[name] = {"idle_ir_per_s": idle / 5}
            for load in INSTRUCTION_LOADS:
                port = plain if load == "http1" else tls
                totals = {}
                for n in (args.n1, args.n2):
                    print(f"instructions: {name} {load} n={n}", file=sys.stderr)
                    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True,
                                   capture_output=True)
                    r = h2load(port, load, INSTRUCTION_LOADS[load] + [f"--requests={n}"])
                    if r["2xx"] != n:
                        raise RuntimeError(f"{name} {load} n={n}: {r['text']}")
                    time.sleep(2)  # let the closes be handled before the dump
                    totals[n] = callgrind_total(dump(pid, out, f"{load}-{n}"))
                results[name][load] = {
                    "ir_n1": totals[args.n1], "ir_n2": totals[args.n2],
                    "per_request": (totals[args.n2] - totals[args.n1]) / (args.n2 - args.n1),
                    "amortized": totals[args.n2] / args.n2,
                }
                print(f"  {name} {load}: {results[name][load]['per_request']:.0f} Ir/request",
                      file=sys.stderr)
        finally:
            # nginx without a master stops on SIGQUIT/SIGTERM; pingora exits on SIGINT at once.
            stop(process, signal.SIGINT if name.startswith("pingora") else signal.SIGTERM, 60)
    return results


# --- report ------------------------------------------------------------------------------------

def report(results, names):
    lines = []
    if "instructions" in results:
        lines.append("Instructions per request (callgrind Ir, one thread; by difference of "
                     f"{results['n2']} and {results['n1']} requests; handshakes amortized over "
                     f"{results['n2']} in brackets)\n")
        lines.append("| proxy | HTTP/1.1 | HTTPS/1.1 | HTTP/2 (TLS) | idle Ir/s |")
        lines.append("| --- | ---: | ---: | ---: | ---: |")
        for name in names:
            r = results["instructions"].get(name)
            if not r:
                continue
            cells = [f"{r[l]['per_request']:,.0f} ({r[l]['amortized']:,.0f})"
                     for l in INSTRUCTION_LOADS]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {r['idle_ir_per_s']:,.0f} |")
        lines.append("")
    if "throughput" in results:
        t = results["throughput"]
        lines.append(f"Throughput (median of {results['rounds']} interleaved rounds of "
                     f"{results['seconds']} s; {results['connections']} connections, "
                     f"{results['threads']} client threads, {results['threads']} proxy threads)\n")
        for load, title in LOADS.items():
            lines.append(f"{title}\n")
            lines.append("| proxy | req/s | p50 ms | p99 ms | rounds (req/s) | errors |")
            lines.append("| --- | ---: | ---: | ---: | --- | --- |")
            for name in names:
                r = t["loads"].get(load, {}).get(name)
                if not r:
                    continue
                rounds = ", ".join(f"{x:,.0f}" for x in r["rates"])
                lines.append(f"| {name} | {r['rate']:,.0f} | {r['p50']:.3f} | {r['p99']:.3f} | "
                             f"{rounds} | {'; '.join(r['errors'])} |")
            lines.append("")
        lines.append("Peak memory (VmHWM, MiB): " + ", ".join(
            f"{n} {k / 1024:.1f}" for n, k in t["peak_kib"].items()))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--spike", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "target/release/pingora-ingress"))
    parser.add_argument("--only", choices=["instructions", "throughput"])
    parser.add_argument("--proxies", default="runway-ingress,pingora-ingress,nginx")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--n1", type=int, default=2000)
    parser.add_argument("--n2", type=int, default=12000)
    parser.add_argument("--json")
    args = parser.parse_args()
    names = args.proxies.split(",")
    setup = Setup(args)
    results = {"rounds": args.rounds, "seconds": args.seconds,
               "connections": args.connections, "threads": args.threads,
               "n1": args.n1, "n2": args.n2}
    try:
        if args.only in (None, "instructions"):
            results["instructions"] = instructions(setup, names, args)
        if args.only in (None, "throughput"):
            results["throughput"] = throughput(setup, names, args)
    finally:
        setup.close()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    print(report(results, names))


if __name__ == "__main__":
    main()
