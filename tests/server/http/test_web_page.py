"""The web page at ``/`` in a real browser: Debian's headless Chromium driven by selenium types a
text, picks the languages, translates, uploads a .docx and downloads its translation (named as the
CLI names it), on the bundled translator, and draws a sentence's attention map when it is ticked;
the header says which pairs are served, swapping works where the reverse pair is served and is
refused where it is not, and status messages sit beside the buttons they answer; screenshots are
taken and checked (the page rendered, the result shown).

``ATTNSERVE_SCREENSHOTS=docs/images pytest tests/server/http/test_web_page.py`` also writes the
screenshots the README shows. Skipped, with the reason, where chromium or its driver is missing
(.ci/run installs both).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from lxml import etree
from PIL import Image, ImageStat

from tests.support import office_files as office

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="chromium and chromium-driver not installed (Debian: apt-get install chromium chromium-driver)",
)
TEXT = "on Monday, March 3, 2025 at 3:45 PM"
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,900"):
        options.add_argument(flag)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


def translate_api(server, text: str, **extra: str) -> str:
    body = json.dumps({"q": text, "source": "en", "target": "de", **extra}).encode()  # extra may swap them
    request = urllib.request.Request(
        f"http://{server.http_address}/translate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())["translatedText"]


def screenshot(driver, tmp_path: Path, name: str) -> Image.Image:
    """The page as a PNG, checked not blank; kept in $ATTNSERVE_SCREENSHOTS when that is set."""
    png = driver.get_screenshot_as_png()
    image = Image.open(io.BytesIO(png)).convert("L")
    assert max(ImageStat.Stat(image).stddev) > 10, "the screenshot is blank"
    (tmp_path / name).write_bytes(png)
    if os.environ.get("ATTNSERVE_SCREENSHOTS"):
        Path(os.environ["ATTNSERVE_SCREENSHOTS"], name).write_bytes(png)
    return image


def load(driver, server) -> None:
    driver.get(f"http://{server.http_address}/")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))


def saved_runs(driver, name: str) -> list[str]:
    """The text of each run of the .docx the browser saved as ``name`` (waited for, up to 30 s)."""
    saved = driver.downloads / name
    deadline = time.monotonic() + 30
    while not saved.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    with zipfile.ZipFile(saved) as package:
        body = package.read("word/document.xml")
    return ["".join(r.itertext()) for r in etree.fromstring(body).iter(f"{W}r")]


def beside(status, button) -> bool:
    """Whether the status line sits on the button's row, just after it (not somewhere below)."""
    s, b = status.rect, button.rect
    same_row = abs((s["y"] + s["height"] / 2) - (b["y"] + b["height"] / 2)) < b["height"]
    return same_row and 0 <= s["x"] - (b["x"] + b["width"]) < 64


def picked(driver) -> tuple[str, str]:
    source, target = (Select(driver.find_element(By.ID, i)) for i in ("source", "target"))
    return source.first_selected_option.get_attribute("value"), target.first_selected_option.get_attribute("value")


def wait_for_result(driver) -> str:
    result = driver.find_element(By.ID, "result")
    WebDriverWait(driver, 60).until(lambda d: result.get_attribute("value"))
    return result.get_attribute("value")


def test_translate_a_text_and_a_docx_in_the_browser(serve, browser, tmp_path):
    # its own state folder: the file job below would otherwise stay a day in the repository's shared one
    with serve(REPO, http_port=0, download_dir=str(tmp_path / "kept"), state_dir=str(tmp_path / "state")) as server:
        load(browser, server)
        assert browser.find_element(By.ID, "served").text.startswith("1 pair: en → de;")
        source, target = Select(browser.find_element(By.ID, "source")), Select(browser.find_element(By.ID, "target"))
        assert "en" in [o.get_attribute("value") for o in source.options]
        source.select_by_value("en")
        target.select_by_value("de")
        box = browser.find_element(By.ID, "text")
        box.send_keys(TEXT)
        box.send_keys(Keys.CONTROL, Keys.ENTER)  # the keyboard path; the button does the same
        result = browser.find_element(By.ID, "result")
        WebDriverWait(browser, 60).until(lambda d: result.get_attribute("value"))
        assert result.get_attribute("value") == translate_api(server, TEXT)
        status = browser.find_element(By.ID, "status")
        assert "Translated." in status.text and beside(status, browser.find_element(By.ID, "translate"))
        assert not browser.find_element(By.ID, "map-box").is_displayed()  # only when asked for
        screenshot(browser, tmp_path, "web-page-text.png")

        swap = browser.find_element(By.ID, "swap")  # de -> en is not served: nothing to swap to
        assert not swap.is_enabled() and "German" in swap.get_attribute("title")
        browser.execute_script("arguments[0].click()", swap)
        assert picked(browser) == ("en", "de")
        browser.execute_script("document.getElementById('result').value = ''")
        browser.find_element(By.ID, "translate").click()  # still translates
        assert wait_for_result(browser) == translate_api(server, TEXT)

        browser.find_element(By.ID, "show-map").send_keys(Keys.SPACE)  # the map of the translation shown, by keyboard
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#attention-map table"))
        assert "Attention map shown." in status.text
        table = browser.find_element(By.CSS_SELECTOR, "#attention-map table")
        columns = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th[scope=col]")]
        rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
        assert " ".join(columns) == "on Monday, March 3, 2025 at 3:45 PM"
        targets = [r.find_element(By.TAG_NAME, "th").text for r in rows]
        assert " ".join(targets) == " ".join(result.get_attribute("value").split())
        marz = rows[targets.index("März")].find_elements(By.TAG_NAME, "td")
        weights = [float(c.get_attribute("textContent")) for c in marz]
        assert columns[max(range(len(weights)), key=weights.__getitem__)] == "March"  # the darkest cell
        browser.set_window_size(1100, 1150)  # the whole map in the picture
        screenshot(browser, tmp_path, "web-page-attention.png")
        browser.set_window_size(1100, 900)
        browser.find_element(By.ID, "show-map").send_keys(Keys.SPACE)  # off: the map goes
        assert not browser.find_element(By.ID, "map-box").is_displayed()

        memo = tmp_path / "memo.docx"
        memo.write_bytes(office.docx([[("Due ", ""), (TEXT, "b")]]))
        browser.find_element(By.ID, "file").send_keys(str(memo))
        browser.find_element(By.ID, "file-translate").click()
        link = browser.find_element(By.ID, "download")
        WebDriverWait(browser, 60).until(lambda d: link.is_displayed())
        assert link.text == "Download memo.de.docx"
        file_status = browser.find_element(By.ID, "file-status")
        assert file_status.text == "memo.docx translated (1 sentence)."  # a file job
        assert beside(file_status, browser.find_element(By.ID, "file-translate"))
        link.click()
        runs = saved_runs(browser, "memo.de.docx")  # as attnserve-client translate-file names it
        assert len(runs) == 2 and " ".join("".join(runs).split()) == " ".join(
            translate_api(server, f"Due {TEXT}").split()
        )
        screenshot(browser, tmp_path, "web-page.png")  # the README's

        browser.set_window_size(390, 844)  # a phone's width: nothing scrolls sideways
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        screenshot(browser, tmp_path, "web-page-phone.png")


def test_the_page_works_with_api_keys(serve, browser, tmp_path):
    with serve(REPO, http_port=0, auth_tokens="page-key", download_dir=str(tmp_path / "kept")) as server:
        load(browser, server)
        assert browser.find_element(By.ID, "key-box").get_attribute("open") is not None  # keyRequired: shown
        browser.find_element(By.ID, "text").send_keys(TEXT)
        browser.find_element(By.ID, "translate").click()
        status = browser.find_element(By.ID, "status")
        WebDriverWait(browser, 30).until(lambda d: "failed" in status.text)
        assert "API key" in status.text
        key = browser.find_element(By.ID, "api-key")
        key.send_keys("page-key", Keys.TAB)  # change event: kept in localStorage
        load(browser, server)  # a reload keeps the key
        assert browser.find_element(By.ID, "api-key").get_attribute("value") == "page-key"
        browser.find_element(By.ID, "text").send_keys(TEXT)
        browser.find_element(By.ID, "translate").click()
        result = browser.find_element(By.ID, "result")
        WebDriverWait(browser, 60).until(lambda d: result.get_attribute("value"))
        assert result.get_attribute("value") == translate_api(server, TEXT, api_key="page-key")

        # the file is fetched with the key in a header and saved from a blob: no key in any URL
        memo = tmp_path / "memo.docx"
        memo.write_bytes(office.docx([[("Due ", ""), (TEXT, "b")]]))
        browser.find_element(By.ID, "file").send_keys(str(memo))
        browser.find_element(By.ID, "file-translate").click()
        link = browser.find_element(By.ID, "download")
        WebDriverWait(browser, 60).until(lambda d: link.is_displayed())
        href = link.get_attribute("href")
        assert href.startswith("blob:") and "api_key" not in href and "page-key" not in href, href
        link.click()
        text = "".join(saved_runs(browser, "memo.de.docx"))
        assert " ".join(text.split()) == " ".join(translate_api(server, f"Due {TEXT}", api_key="page-key").split())
        history = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert not [url for url in history if "api_key" in url], history


@pytest.fixture
def both_ways(tmp_path) -> Path:
    """The bundled translator, and the same weights declared as de -> en: two pairs, each the other's reverse."""
    repo = tmp_path / "both-ways"
    repo.mkdir()
    (repo / "translator-en-de").symlink_to(REPO / "translator-en-de", target_is_directory=True)
    reverse = repo / "translator-de-en"
    reverse.mkdir()
    for path in (REPO / "translator-en-de").iterdir():
        if path.name != "model.json":
            (reverse / path.name).symlink_to(path)
    manifest = json.loads((REPO / "translator-en-de" / "model.json").read_text())
    languages = {"source": ["de"], "target": ["en"], "default_source": "de", "default_target": "en"}
    manifest.update(name="translator-de-en", languages={**manifest["languages"], **languages})
    (reverse / "model.json").write_text(json.dumps(manifest))
    return repo


def test_swap_turns_the_pair_and_the_translation_around(serve, browser, tmp_path, both_ways):
    with serve(both_ways, http_port=0, download_dir=str(tmp_path / "kept")) as server:
        load(browser, server)
        served = browser.find_element(By.ID, "served").text
        assert served.startswith("2 pairs: ") and "en → de" in served and "de → en" in served
        Select(browser.find_element(By.ID, "source")).select_by_value("en")
        Select(browser.find_element(By.ID, "target")).select_by_value("de")
        browser.find_element(By.ID, "text").send_keys(TEXT)
        browser.find_element(By.ID, "translate").click()
        german = wait_for_result(browser)
        browser.find_element(By.ID, "swap").click()
        assert picked(browser) == ("de", "en")
        assert (
            browser.find_element(By.ID, "text").get_attribute("value") == german
        )  # the translation, to translate back
        assert browser.find_element(By.ID, "result").get_attribute("value") == ""
        browser.find_element(By.ID, "translate").click()
        assert wait_for_result(browser) == translate_api(server, german, source="de", target="en")
        assert "Translated." in browser.find_element(By.ID, "status").text


def test_a_file_job_past_the_request_rates_waits_and_saves_under_the_servers_name(serve, browser, tmp_path):
    """Each look at a job's progress counts against the client's request rates: a page that has
    spent them waits as the server's 429 asks (Retry-After) and goes on, where it gave up at the
    first refusal; the file is saved under the name the server gives it (an all-emoji name: file.de.docx)."""
    with serve(REPO, http_port=0, requests_per_minute=3, download_dir=str(tmp_path / "kept")) as server:
        load(browser, server)
        memo = tmp_path / "🙂.docx"
        memo.write_bytes(office.docx([[("Due ", ""), (TEXT, "b")]]))
        browser.find_element(By.ID, "file").send_keys(str(memo))
        browser.find_element(By.ID, "file-translate").click()  # the upload and two looks spend the minute's 3
        status = browser.find_element(By.ID, "file-status")
        WebDriverWait(browser, 30).until(lambda d: "asking again in" in status.text)
        assert "too many requests" in status.text and "failed" not in status.text
        link = browser.find_element(By.ID, "download")
        WebDriverWait(browser, 90).until(lambda d: link.is_displayed())
        assert link.text == "Download file.de.docx"
        link.click()
        assert "".join(saved_runs(browser, "file.de.docx")).strip()
