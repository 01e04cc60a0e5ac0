#!/usr/bin/env python3
"""Drives headless Chromium through the DevTools protocol over --remote-debugging-pipe (fd 3: commands in,
fd 4: replies out, each message JSON ending in a NUL byte; https://chromedevtools.github.io/devtools-protocol/),
standard library only. Used by WebDashboardTests: loads pages, submits the page's own forms the way a click
does (the browser posts the form with its hidden CSRF field), checks the text shown, keeps screenshots.

usage: browser.py CHROMIUM SCREENSHOT_DIR STEPS_JSON
STEPS_JSON: [{"goto": URL} | {"submit": CSS_SELECTOR_OF_FORM} | {"click": CSS_SELECTOR_OF_BUTTON}
             | {"viewport": "WIDTHxHEIGHT"} | {"media": "dark"|"light"} | {"eval": JS_EXPRESSION}
             | {"wait": JS_EXPRESSION} | {"exec": [PROGRAM, ARG...]},
             with optional "expect": TEXT, "shot": NAME]
"click" clicks the button as an operator does (its form's submit handlers run, then the browser posts the form; a
confirm() dialog is accepted). "viewport" emulates a screen of that size (Emulation.setDeviceMetricsOverride, mobile
below 800 px wide); "media" emulates prefers-color-scheme (Emulation.setEmulatedMedia); neither reloads the page.
"eval" runs the expression on the page and, with "expect", compares String(result) with it exactly (no navigation
is awaited); "wait" polls the expression every 100 ms for up to 15 s until it is truthy.
Prints one line per step; exits 1 with the reason on the first failure."""
import base64, json, os, select, subprocess, sys, tempfile, time

class Browser:
    def __init__(self, chromium):
        self.to_r, self.to_w = os.pipe()
        self.from_r, self.from_w = os.pipe()
        self.profile = tempfile.mkdtemp(prefix="web-test-chromium-")
        def plumbing():
            # Move the two ends to 3 and 4 (via fresh numbers, so one never overwrites the other) and keep them
            # open across exec (pipes are created close-on-exec).
            to_r, from_w = os.dup(self.to_r), os.dup(self.from_w)
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-pipe", "--user-data-dir=" + self.profile, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=plumbing)
        os.close(self.to_r)
        os.close(self.from_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)

    def send(self, message):
        os.write(self.to_w, json.dumps(message).encode() + b"\0")

    def read(self, timeout):
        deadline = time.time() + timeout
        while b"\0" not in self.buffer:
            left = deadline - time.time()
            if left <= 0 or not select.select([self.from_r], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=False, timeout=30):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.send(message)
        while True:
            reply = self.read(timeout)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if reply.get("method") == "Page.javascriptDialogOpening":
                # A confirm() the page asked (a button with data-confirm): answered yes, as the operator would.
                self.send({"id": 1_000_000 + self.next_id, "method": "Page.handleJavaScriptDialog",
                           "params": {"accept": True}, "sessionId": self.session})
                continue
            self.events.append(reply)

    def wait_for_load(self, timeout=30):
        deadline = time.time() + timeout
        while True:
            for event in self.events:
                if event.get("method") == "Page.loadEventFired":
                    self.events.clear()
                    return
            self.events.clear()
            self.events.append(self.read(max(0.01, deadline - time.time())))

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def close(self):
        try:
            self.send({"id": 0, "method": "Browser.close"})
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()

def main():
    chromium, shots, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    os.makedirs(shots, exist_ok=True)
    browser = Browser(chromium)
    try:
        for number, step in enumerate(steps, 1):
            browser.events.clear()
            if "viewport" in step:
                width, height = (int(part) for part in step["viewport"].split("x"))
                browser.call("Emulation.setDeviceMetricsOverride",
                             {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 800}, session=True)
                browser.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            elif "media" in step:
                browser.call("Emulation.setEmulatedMedia",
                             {"features": [{"name": "prefers-color-scheme", "value": step["media"]}]}, session=True)
            elif "exec" in step:
                # A change outside the page at this exact point of the steps (a Redis write the live view must
                # follow): run to completion before the next step, so no timer races the browser's start.
                done = subprocess.run(step["exec"], capture_output=True, text=True, timeout=60)
                if done.returncode != 0:
                    print(f"step {number}: {step['exec'][0]} exited {done.returncode}: {done.stderr.strip()}")
                    return 1
                print(f"step {number}: ok, ran {step['exec'][0]}")
                continue
            elif "eval" in step or "wait" in step:
                if "wait" in step:
                    deadline = time.time() + 15
                    while not browser.evaluate(step["wait"]):
                        if time.time() > deadline:
                            print(f"step {number}: still false after 15 s: {step['wait']}")
                            return 1
                        time.sleep(0.1)
                    value = True
                else:
                    value = browser.evaluate(step["eval"])
                shown = json.dumps(value) if not isinstance(value, str) else value
                if "shot" in step:
                    png = browser.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
                    with open(os.path.join(shots, step["shot"] + ".png"), "wb") as out:
                        out.write(base64.b64decode(png))
                if "expect" in step and shown != step["expect"]:
                    print(f"step {number}: {step.get('eval') or step.get('wait')} gave {shown!r}, not {step['expect']!r}")
                    return 1
                print(f"step {number}: ok, {shown}")
                continue
            if "goto" in step:
                browser.call("Page.navigate", {"url": step["goto"]}, session=True)
            elif "viewport" in step or "media" in step:
                pass
            elif "click" in step:
                found = browser.evaluate(
                    "(() => { const b = document.querySelector(%s); if (!b) return false; b.click(); return true; })()"
                    % json.dumps(step["click"]))
                if not found:
                    print(f"step {number}: no button matches {step['click']}")
                    return 1
            else:
                found = browser.evaluate(
                    "(() => { const f = document.querySelector(%s); if (!f) return false; f.submit(); return true; })()"
                    % json.dumps(step["submit"]))
                if not found:
                    print(f"step {number}: no form matches {step['submit']}")
                    return 1
            if "goto" in step or "click" in step or "submit" in step:
                browser.wait_for_load()
            text = browser.evaluate("document.body ? document.body.innerText : ''") or ""
            title = browser.evaluate("document.title")
            if "shot" in step:
                png = browser.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
                with open(os.path.join(shots, step["shot"] + ".png"), "wb") as out:
                    out.write(base64.b64decode(png))
            if "expect" in step and step["expect"] not in text:
                print(f"step {number}: page '{title}' does not show {step['expect']!r}")
                return 1
            print(f"step {number}: ok, page '{title}'")
        return 0
    finally:
        browser.close()

if __name__ == "__main__":
    sys.exit(main())
