"""Opens a page in headless Chromium and reports what a person would see:
console errors, every network request, a few DOM counts, the load time
and a screenshot.

Chromium is driven with its DevTools protocol over --remote-debugging-pipe
(null-terminated JSON on file descriptors 3 and 4), so no websocket client
is needed.
"""
import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome",
              "google-chrome-stable")


def find_chromium():
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, binary=None, width=1200, height=1600):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no chromium binary on PATH")
        self.profile = tempfile.mkdtemp(prefix="autotune-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Out of the way of 3 and 4, where the child wants them.
        for name in ("to_child_r", "from_child_w"):
            fd = locals()[name]
            high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
            os.close(fd)
            if name == "to_child_r":
                to_child_r = high
            else:
                from_child_w = high

        def wire_pipes():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)
        self.process = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--mute-audio",
             f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=wire_pipes,
            # Descriptors 3 and 4 are made in the child, after the point
            # where close_fds would close them again.
            close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events = []

    def _send(self, method, params=None, session=None):
        self._next_id += 1
        message = {"id": self._next_id, "method": method,
                   "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=60.0):
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method, timeout=120.0):
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("method") == method:
                return message
            self.events.append(message)

    def open(self, url, timeout=120.0):
        """Loads url in a fresh tab; returns a Page."""
        target = self.call("Target.createTarget", {"url": "about:blank"})
        session = self.call("Target.attachToTarget",
                            {"targetId": target["targetId"],
                             "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.events.clear()
        started = time.monotonic()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", timeout)
        load_seconds = time.monotonic() - started
        return Page(self, session, url, load_seconds)

    def close(self):
        try:
            self._send("Browser.close")
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser, session, url, load_seconds):
        self.browser = browser
        self.session = session
        self.url = url
        self.load_seconds = load_seconds

    def evaluate(self, expression):
        result = self.browser.call("Runtime.evaluate",
                                   {"expression": expression,
                                    "returnByValue": True},
                                   session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _events(self, *methods):
        return [e for e in self.browser.events
                if e.get("sessionId") == self.session
                and e.get("method") in methods]

    def console_errors(self):
        """Console messages of level error, uncaught exceptions and
        browser log errors (a blocked or failed load among them)."""
        out = []
        for e in self._events("Runtime.consoleAPICalled"):
            if e["params"].get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description")))
                                    for a in e["params"].get("args", [])))
        for e in self._events("Runtime.exceptionThrown"):
            details = e["params"]["exceptionDetails"]
            thrown = details.get("exception", {}).get("description", "")
            out.append(f"{details.get('text', '?')} {thrown}".strip())
        for e in self._events("Log.entryAdded"):
            entry = e["params"]["entry"]
            if entry.get("level") == "error":
                out.append(f"{entry.get('source')}: {entry.get('text')}")
        return out

    def requests(self):
        """URLs of every request the page made, the page itself excluded."""
        urls = [e["params"]["request"]["url"]
                for e in self._events("Network.requestWillBeSent")]
        return [u for u in urls if u != self.url]

    def screenshot(self, path, full_page=True):
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.browser.call("Page.getLayoutMetrics",
                                     session=self.session)["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 6000),
                              "scale": 1}
        data = self.browser.call("Page.captureScreenshot", params,
                                 session=self.session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path
