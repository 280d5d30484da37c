"""Issue 16 item 10: predicts too big to run on the event loop run in the thread pool one
at a time (more threads only fight over the interpreter lock: 0.5x a bare app with 64
connections at 256 rows), against real uvicorn on 127.0.0.1 and real clients."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import uvicorn

from ckptsync.serving import ModelManager, create_app

from .conftest import MLPServable, publish, wait_until


def test_big_predicts_run_one_pool_thread_at_a_time(tmp_path):
    publish(tmp_path, 7)
    servable = MLPServable()
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def hook() -> None:  # inside the forward: how many run at once
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1

    servable.run_hook = hook
    manager = ModelManager(servable, tmp_path, rescan_interval_s=0.05)
    app = create_app(manager, "mlp", own_manager=True, inline_max_body_bytes=64 * 2**10)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn")
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), timeout_s=30)
        assert server.started
        manager.wait_for_version(7, timeout_s=10)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/models/mlp:predict"
        body = json.dumps({"instances": [[0.5, 1.0, 2.0, 0.25]] * 3000}).encode()
        assert len(body) > app.state.options.inline_max_body_bytes  # a pool-thread request
        codes: list[int] = []
        start = threading.Barrier(8)

        def client() -> None:
            with httpx.Client(timeout=60.0) as c:
                start.wait(30)
                codes.append(c.post(url, content=body).status_code)

        clients = [threading.Thread(target=client) for _ in range(8)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(60)
        assert codes == [200] * 8
        assert state["max"] == 1, f"{state['max']} big predicts ran at once"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
