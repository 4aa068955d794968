"""The chat page at / in a real headless Chromium (Debian chromium + chromium-driver, selenium).

Types a message, waits for streamed tokens to arrive in the DOM, checks the text against the
server's own non-streamed answer and the live figures (TTFT, TPOT, cached tokens, KV usage), and
saves a screenshot as a test artefact (KVLM_ARTIFACTS, default build/test-artifacts).
"""
import json
import os
import shutil
import time
import urllib.request

import pytest

from conftest import ROOT, Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = os.environ.get("KVLM_ARTIFACTS", os.path.join(ROOT, "build", "test-artifacts"))


def need_browser():
    try:
        import selenium  # noqa: F401
    except ImportError:
        selenium = None
    if CHROMIUM and CHROMEDRIVER and selenium is not None:
        return
    msg = "SKIPPED: chromium, chromedriver or selenium missing; NOT CHECKED: the chat page in a browser"
    if os.environ.get("KVLM_REQUIRE_SHARED") == "1":  # CI installs them (scripts/deps.sh)
        pytest.fail("KVLM_REQUIRE_SHARED=1 but " + msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def browser():
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,800",
              "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    # The driver comes from Debian, never downloaded (the CI machine has no internet but PyPI).
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def post(base, path, body, key=None):
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=h)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def wait_for(cond, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def type_and_send(driver, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = driver.find_element(By.ID, "input")
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)  # Enter sends; the page's keydown handler submits the form


def last_reply(driver):
    from selenium.webdriver.common.by import By
    replies = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant, .msg.error")
    return replies[-1] if replies else None


def test_chat_page_streams_and_shows_live_figures(browser):
    from selenium.webdriver.common.by import By
    s = Server("--max-seqs", "4")
    try:
        browser.get(s.base + "/")
        assert browser.title == "kvlm"
        wait_for(lambda: browser.find_element(By.ID, "model").text == "stories", "the model name")
        wait_for(lambda: browser.find_element(By.ID, "kv-total").text not in ("", "–"), "KV figures")

        prompt = "Once upon a time, there was a little girl who liked to play in the park with her dog."
        # What the page must show: the server's own greedy answer to the same chat turn.
        want = post(s.base, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                      "max_tokens": 120, "temperature": 0})
        want_text = want["choices"][0]["message"]["content"]
        assert len(want_text) > 20

        browser.find_element(By.ID, "max-tokens").clear()
        browser.find_element(By.ID, "max-tokens").send_keys("120")
        type_and_send(browser, prompt)

        # Tokens show up in the DOM while the reply is still streaming or once it is done.
        reply = wait_for(lambda: last_reply(browser), "the reply element")
        wait_for(lambda: reply.find_element(By.CLASS_NAME, "body").text != "", "streamed tokens in the DOM")
        wait_for(lambda: reply.get_attribute("data-state") in ("done", "error"), "the end of the stream")
        meta = reply.find_element(By.CLASS_NAME, "meta").text
        assert reply.get_attribute("data-state") == "done", meta
        # The text arrived as several SSE chunks, not one body at the end.
        assert int(reply.get_attribute("data-chunks")) > 1
        # What the DOM shows is exactly the server's answer (textContent: no whitespace folding).
        shown = browser.execute_script("return arguments[0].querySelector('.body').textContent", reply)
        assert shown == want_text
        assert "TTFT" in meta and "TPOT" in meta and "from the cache" in meta
        # Same prompt twice (once through the API above, once from the page): the page's request
        # found the shared prompt blocks, and says so.
        cached = int(meta.split(" from the cache")[0].rsplit(", ", 1)[1])
        assert cached > 0, meta
        ttft = float(meta.split("TTFT ")[1].split(" ms")[0])
        assert ttft > 0

        # The header's live figures follow /v1/kv: after both requests, prompt tokens were served.
        wait_for(lambda: browser.find_element(By.ID, "reused").text.split(" / ")[0] not in ("", "–", "0"),
                 "the cache figure in the header")
        usage = browser.find_element(By.ID, "kv-usage").text
        assert usage.endswith("%")

        # A second turn carries the conversation (chat history goes back to the server).
        type_and_send(browser, "And then?")
        wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2, "the second reply")
        second = last_reply(browser)
        wait_for(lambda: second.get_attribute("data-state") in ("done", "error"), "the second reply's end")
        assert second.get_attribute("data-state") == "done"

        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "chat_page.png")
        assert browser.save_screenshot(shot)
        assert os.path.getsize(shot) > 10_000
        print(f"screenshot: {shot}")
    finally:
        s.stop()


def test_chat_page_with_api_key(browser):
    """A keyed server serves the page; requests carry the key typed into it; a wrong key shows an error."""
    from selenium.webdriver.common.by import By
    key = "page-test-key-123"
    s = Server("--api-key", key)
    try:
        browser.get(s.base + "/")
        browser.execute_script("localStorage.clear()")
        browser.get(s.base + "/")
        box = browser.find_element(By.ID, "api-key")
        box.send_keys("wrong-key-000")
        browser.find_element(By.ID, "mode").send_keys("text")
        type_and_send(browser, "Once upon a time")
        bad = wait_for(lambda: last_reply(browser), "the error reply")
        wait_for(lambda: bad.get_attribute("data-state") == "error", "the error state")
        assert "API key" in bad.find_element(By.CLASS_NAME, "meta").text

        box.clear()
        box.send_keys(key)
        type_and_send(browser, "Once upon a time")
        wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 1, "the keyed reply")
        good = last_reply(browser)
        wait_for(lambda: good.get_attribute("data-state") in ("done", "error"), "the keyed reply's end")
        assert good.get_attribute("data-state") == "done", good.text
        want = post(s.base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 256, "temperature": 0}, key)
        shown = browser.execute_script("return arguments[0].querySelector('.body').textContent", good)
        assert shown == want["choices"][0]["text"]
    finally:
        s.stop()
