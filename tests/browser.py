"""A real Chromium, headless, driven through Selenium and the distribution's chromedriver.

Nothing is downloaded: the browser is ``/usr/bin/chromium`` and the driver
``/usr/bin/chromedriver`` (Debian's ``chromium`` and ``chromium-driver``; ``.ci/run``
installs them). Without them the browser tests fail when ``GREENROOM_CI`` is set (CI sets
it) and are skipped, loudly, on a developer's machine.

Each ``Browser`` has a fresh profile directory, waits on conditions (``until``), never on
time, and ends its chromedriver and every Chromium process it started when closed.
Screenshots go to ``ARTIFACTS`` (``test-artifacts/console``, not committed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "console"
DOCS_IMAGES = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
]


def require_chromium() -> None:
    """Fail in CI, skip loudly elsewhere, when Chromium or its driver is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if not missing:
        return
    why = (
        f"the browser tests need {' and '.join(missing)} (Debian: apt-get install chromium chromium-driver); "
        "NOT RUN: the console was not tested in a browser"
    )
    if os.environ.get("GREENROOM_CI"):
        pytest.fail(why)
    pytest.skip(why)


class Browser:
    """One headless Chromium with a fresh profile (and ``flags`` of the test's)."""

    def __init__(self, flags: tuple[str, ...] = ()) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, should anything wake it, fetches nothing
        os.environ.setdefault("SE_AVOID_STATS", "true")
        self.profile = tempfile.mkdtemp(prefix="greenroom-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in [*FLAGS, *flags, f"--user-data-dir={self.profile}"]:
            options.add_argument(flag)
        self.service = Service(CHROMEDRIVER)
        self.driver = webdriver.Chrome(service=self.service, options=options)
        self.driver.set_page_load_timeout(30)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def until(self, condition: Callable[[Any], Any], timeout: float = 30.0, message: str = "") -> Any:
        """Wait until ``condition(driver)`` is truthy (a condition, polled by Selenium)."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(condition, message)
        except TimeoutException:
            self.screenshot("timeout")
            body = self.text("body")
            raise AssertionError(f"waited {timeout} s for: {message}; the page says:\n{body}") from None

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def click(self, css: str, timeout: float = 30.0) -> None:
        """Click the first element matching ``css``, once it is there. The page may replace
        the element between finding and clicking it (a re-render): the click then never
        happened, and the element is found again."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked(driver: Any) -> bool:
            try:
                self.find(css).click()
            except StaleElementReferenceException:
                return False
            return True

        self.until(clicked, timeout, f"a click on {css}")

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self, css: str) -> str:
        """The text of the first element matching ``css`` ("" if there is none), read in
        one step (the page may replace the element at any time)."""
        texts = self.texts(css)
        return texts[0] if texts else ""

    def texts(self, css: str) -> list[str]:
        """The text of every element matching ``css``, read in one step."""
        script = "return [...document.querySelectorAll(arguments[0])].map((n) => (n.innerText ?? n.textContent).trim())"
        return [str(t) for t in self.driver.execute_script(script, css)]

    def attributes(self, css: str, names: list[str]) -> list[dict[str, str]]:
        """The attributes ``names`` of every element matching ``css``, read in one step (an
        element found in one call may be replaced before the next reads it)."""
        script = (
            "return [...document.querySelectorAll(arguments[0])]"
            ".map((n) => Object.fromEntries(arguments[1].map((a) => [a, n.getAttribute(a) ?? ''])))"
        )
        return [{str(k): str(v) for k, v in d.items()} for d in self.driver.execute_script(script, css, names)]

    def rect(self, css: str) -> dict[str, float]:
        """Where the first element matching ``css`` is drawn: ``left``, ``right``, ``top``, ``bottom`` (CSS pixels)."""
        script = "const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]"
        return dict(zip(("left", "right", "top", "bottom"), map(float, self.driver.execute_script(script, css))))

    def beside(self, css: str, button: str) -> bool:
        """``css`` is drawn just right of ``button``, on its line."""
        a, b = self.rect(css), self.rect(button)
        middle = (a["top"] + a["bottom"]) / 2
        return b["top"] <= middle <= b["bottom"] and 0 <= a["left"] - b["right"] <= 40

    def wait_text(self, css: str, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """Wait until the text of ``css`` satisfies ``predicate``; return it."""
        self.until(lambda d: predicate(self.text(css)), timeout, f"{css}: last seen {self.text(css)!r}")
        return self.text(css)

    def screenshot(self, name: str, css: str | None = None, *, docs: bool = False) -> Path:
        """A PNG of the page (or of one element) in ``ARTIFACTS``; with ``docs`` also in
        ``docs/img`` when ``GREENROOM_DOCS_IMAGES`` is set (the docs' picture is updated on purpose)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        if css is None:
            self.driver.save_screenshot(str(path))
        else:
            self.find(css).screenshot(str(path))
        assert path.stat().st_size > 0
        if docs and os.environ.get("GREENROOM_DOCS_IMAGES"):
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, DOCS_IMAGES / path.name)
        return path

    def leftovers(self) -> list[int]:
        """Live processes of this browser: those whose command line names its profile."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if self.profile.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue  # it ended meanwhile
        return found

    def close(self) -> None:
        """End the browser and its driver, and remove the profile; fail if a process of it
        was still alive 10 s after (it is killed, by pid, first)."""
        from .helpers import wait_until

        try:
            self.driver.quit()
        finally:
            process = getattr(self.service, "process", None)
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
            left = [] if wait_until(lambda: not self.leftovers(), timeout=10) else self.leftovers()
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(self.profile, ignore_errors=True)
        assert not left, f"Chromium processes {left} outlived the browser"
