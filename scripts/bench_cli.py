#!/usr/bin/env python3
"""First-token latency of a new conversation with the real Claude CLI, cold and with the
pre-warmed spare, and the RSS of each live CLI process.

Usage: scripts/bench_cli.py CLAUDE_BIN [ROUNDS]

Builds nothing: run `cargo build --release` in the workspace root first. Starts the fake
Messages API (`target/release/fake-anthropic`, from the `agentmux-fakes` package) and
`agentmux serve --backend claude` twice on 127.0.0.1, once
with `claude.prewarm = false` and once with `true`, and opens ROUNDS (default 5) new
conversations on each, a few seconds apart. Installs the `websockets` package into
.deps/bench-venv when it is missing.
"""

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyvenv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def cli_pids(cli):
    real = os.path.realpath(cli)
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.path.realpath(f"/proc/{name}/exe") == real:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


async def run(cli, prewarm, rounds):
    import websockets

    work = tempfile.mkdtemp(prefix="agentmux-bench-cli-")
    api = subprocess.Popen([os.path.join(RELEASE, "fake-anthropic"), "--port", "0"],
                           stdout=subprocess.PIPE, text=True)
    api_url = api.stdout.readline().split()[-1]
    config = os.path.join(work, "agentmux.toml")
    with open(config, "w") as f:
        f.write(f'[claude]\nconfig_dir = "{work}/claude-home"\nprewarm = {str(prewarm).lower()}\n')
    env = dict(os.environ, ANTHROPIC_BASE_URL=api_url, ANTHROPIC_API_KEY="dummy",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", CLAUDE_CODE_MAX_RETRIES="0",
               RUST_LOG="warn")
    server = subprocess.Popen([os.path.join(RELEASE, "agentmux"), "serve", "--bind", "127.0.0.1:0",
                               "--data-dir", os.path.join(work, "data"), "--backend", "claude",
                               "--claude-bin", cli, "--config", config],
                              stdout=subprocess.PIPE, text=True, env=env)
    addr = server.stdout.readline().strip().split("http://")[1]
    latencies = []
    try:
        async with websockets.connect(f"ws://{addr}/ws", max_size=None) as ws:
            for i in range(rounds):
                await asyncio.sleep(3.0)  # time for a replacement spare to get ready
                started = time.monotonic()
                await ws.send(json.dumps({"type": "chat", "agent_id": f"bench-{i}", "content": "hello"}))
                first = None
                while True:
                    frame = json.loads(await ws.recv())
                    kind = frame["message_type"]
                    if (first is None and kind == "stream_event"
                            and frame["message"]["event"]["type"] == "content_block_delta"):
                        first = time.monotonic() - started
                    if kind == "result":
                        break
                latencies.append(first)
        rss = [r for r in (rss_kib(p) for p in cli_pids(cli)) if r]
    finally:
        server.terminate()
        server.wait()
        api.terminate()
    return latencies, rss


async def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    pyvenv.ensure("websockets", "bench-venv")
    cli = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) == 3 else 5
    cold, rss = await run(cli, False, rounds)
    warm, _ = await run(cli, True, rounds)
    report = {
        "cold_first_token_s": cold,
        "prewarmed_first_token_s": warm,
        "cold_median_s": statistics.median(cold),
        "prewarmed_median_s": statistics.median(warm),
        "ratio": statistics.median(warm) / statistics.median(cold),
        "rss_kib_per_live_cli": rss,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
