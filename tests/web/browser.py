#!/usr/bin/python3
"""browser.py -- the dashboard in a real browser.

Headless Chromium (Debian's chromium, driven by chromium-driver through
python3-selenium) opens every page of `skipq web` on a database seeded with
real work -- a host with the testkit plugin runs the jobs -- and checks what
a person sees: the counts, a chart drawn, a job's attempts on its timeline,
the hosts, schedules and limits. It clicks Retry on a dead job and watches
the job run to done. Values holding <script> and "><img onerror=...> in a
payload, an error message and a unique key must show as text: no alert, no
element injected, nothing run. A screenshot of each page is saved.

Run by CTest (label "browser") with $SKIPQ_TEST_DB pointing at a throwaway
server, as the Criterion suites are. Exit status 77 (skipped) when the
browser, its driver or selenium is missing.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

SKIP = 77

try:
    from selenium import webdriver
    from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    print(f"browser: skipped: python3-selenium is missing ({e})")
    sys.exit(SKIP)

XSS_SCRIPT = "<script>window.__xss = 'script'; alert('xss')</script>"
XSS_IMG = '"><img src=x onerror="window.__xss=\'img\';alert(1)">'
# testkit reads its payload's strings up to the first backslash: no " here
XSS_ERR = "</td><img src=x onerror=window.__xss='err';alert(1)><script>alert(2)</script>"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1000"]


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class World:
    """A database of its own, a host running its jobs, and skipq web."""

    def __init__(self, args):
        self.args = args
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="skipq-browser-")
        admin = os.environ.get("SKIPQ_TEST_DB", "")
        if not admin:
            print("browser: skipped: SKIPQ_TEST_DB is not set (run through scripts/test.sh)")
            sys.exit(SKIP)
        self.admin = admin
        self.dbname = f"browser_{os.getpid()}"
        self.db = f"{admin} dbname={self.dbname}"

    def sql(self, statement, db=None):
        return subprocess.run(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1", db or self.db, "-c", statement],
                              check=True, capture_output=True, text=True).stdout.strip()

    def skipq(self, *argv):
        r = subprocess.run([self.args.skipq, *argv, "--db", self.db], capture_output=True, text=True)
        if r.returncode != 0:
            raise Failed(f"skipq {' '.join(argv)}: exit {r.returncode}: {r.stderr}")
        return r.stdout.strip()

    def start(self, argv, log):
        f = open(os.path.join(self.tmp, log), "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def setup(self):
        self.sql(f"CREATE DATABASE {self.dbname}", db=self.admin)
        self.skipq("migrate")
        # A day of earlier work (imports, one attempt in 23 retried), ending
        # an hour ago, so the day chart has a shape; the ids come first
        self.sql("""
            WITH g AS (
              SELECT n, now() - interval '24 hours' + n * interval '30 seconds' AS t
                FROM generate_series(1, 2760) n
               WHERE (n * 7919) % 100 < 50 + 45 * sin(n / 2760.0 * 3 * pi())),
            j AS (
              INSERT INTO skipq.jobs (queue, kind, payload, status, attempts, max_attempts, run_at, created_at,
                                      finished_at)
              SELECT 'imports', 'csv.import', jsonb_build_object('file', 'batch-' || n || '.csv'), 'done',
                     CASE WHEN n % 23 = 0 THEN 2 ELSE 1 END, 5, t, t, t + interval '2 seconds' FROM g
              RETURNING id, attempts, created_at)
            INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at, finished_at, status, error)
            SELECT id, a, 'import-1:4242:w' || (id % 4), created_at + (a - 1) * interval '1 second',
                   created_at + (a - 1) * interval '1 second' + interval '300 ms',
                   CASE WHEN a < attempts THEN 'retry' ELSE 'done' END,
                   CASE WHEN a < attempts THEN 'S3 read timeout' END
              FROM j, generate_series(1, j.attempts) a""")
        # Work a person would look at: quick jobs, retries, dead ones
        for i in range(30):
            self.skipq("enqueue", "test", json.dumps({"sleep_ms": 5 * (i % 7)}))
        self.timeline_job = int(self.skipq("enqueue", "test", '{"fail_times": 2, "retry_in_ms": 150}'))
        for i in range(4):
            self.skipq("enqueue", "test", json.dumps({"permanent": f"smtp 550: mailbox unavailable for user {i}"}))
        # dead once; a retry gives it the attempt it needs
        self.redeem_job = int(self.skipq("enqueue", "test", '{"fail_times": 1}', "--max-attempts", "1"))
        # markup in a payload, an error message and a unique key
        self.xss_job = int(self.skipq("enqueue", "test", json.dumps({"permanent": XSS_ERR, "note": XSS_SCRIPT}),
                                      "--unique-key", XSS_IMG))
        # jobs nobody serves, on a paused queue
        for i in range(3):
            self.skipq("enqueue", "report.build", "{}", "--queue", "reports")
        self.skipq("pause", "--queue", "reports")
        ini = os.path.join(self.tmp, "host.ini")
        with open(ini, "w") as f:
            f.write(f"""[database]
url = {self.db}

[host]
name = web-demo
lease = 5s
heartbeat = 500ms
poll_interval = 50ms
shutdown_grace = 2s

[plugin testkit]
path = {self.args.plugins}/testkit.so

[queue default]
threads = 3
kinds = test

[kind test]
max_running = 6

[cron nightly-report]
schedule = 30 2 * * MON-FRI
timezone = Europe/Paris
kind = report.build
queue = reports
""")
        self.host = self.start([self.args.skipq, "run", "-c", ini], "host.log")
        self.wait_sql("SELECT count(*) FROM skipq.jobs WHERE queue = 'default' AND status IN ('done', 'dead')",
                      "36", 60)
        self.port = free_port()
        self.web = self.start([self.args.skipq, "web", "--listen", f"127.0.0.1:{self.port}", "--db", self.db],
                              "web.log")
        deadline = time.time() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                check(time.time() < deadline and self.web.poll() is None, "skipq web did not start: " +
                      open(os.path.join(self.tmp, "web.log")).read())
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/"

    def wait_sql(self, statement, want, seconds):
        deadline = time.time() + seconds
        while True:
            got = self.sql(statement)
            if got == want:
                return
            check(time.time() < deadline, f"waited {seconds} s for {statement} = {want}; got {got}")
            time.sleep(0.1)

    def teardown(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        for name in ("web.log", "host.log"):
            path = os.path.join(self.tmp, name)
            if os.path.exists(path):
                text = open(path).read()
                check("Sanitizer" not in text and "runtime error:" not in text, f"{name}: {text}")
        try:
            self.sql(f"DROP DATABASE IF EXISTS {self.dbname} WITH (FORCE)", db=self.admin)
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)


class Browser:
    def __init__(self, out):
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
        if not chromium or not os.path.exists(driver):
            print("browser: skipped: chromium or chromium-driver is missing (scripts/deps.sh installs them)")
            sys.exit(SKIP)
        o = webdriver.ChromeOptions()
        o.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            o.add_argument(flag)
        self.profile = tempfile.mkdtemp(prefix="skipq-chromium-")
        o.add_argument(f"--user-data-dir={self.profile}")
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(driver), options=o)
        self.out = out
        os.makedirs(out, exist_ok=True)

    def quit(self):
        self.d.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    def wait(self, cond, seconds=15, what=""):
        """Pages redraw themselves: an element found a moment ago may be
        gone, so a condition is simply tried again."""
        try:
            return WebDriverWait(self.d, seconds, poll_frequency=0.1,
                                 ignored_exceptions=(StaleElementReferenceException, Failed)).until(cond)
        except TimeoutException:
            raise Failed(f"waited {seconds} s for {what or cond}")

    def css(self, selector):
        return self.d.find_elements(By.CSS_SELECTOR, selector)

    def text_of(self, selector):
        """The text of the element once it is shown (found but hidden,
        as while a page redraws, it is looked for again)."""
        def shown(d):
            e = EC.visibility_of_element_located((By.CSS_SELECTOR, selector))(d)
            return e.text if e else False
        return self.wait(shown, what=f"{selector} shown")

    def untouched(self, page):
        """No alert, no injected element, no script of the data ran, no CSP
        violation or other error in the console."""
        try:
            alert = self.d.switch_to.alert
            raise Failed(f"{page}: an alert opened: {alert.text}")
        except NoAlertPresentException:
            pass
        check(self.d.execute_script("return window.__xss === undefined"), f"{page}: injected script ran")
        check(self.d.execute_script("return document.querySelectorAll('img[src=\"x\"], script:not([src])').length")
              == 0, f"{page}: an element was injected")
        errors = [e["message"] for e in self.d.get_log("browser") if e["level"] == "SEVERE"]
        check(not errors, f"{page}: console errors: {errors}")

    def screenshot(self, name):
        """The whole page, not just the window."""
        time.sleep(0.3)
        h = self.d.execute_script("return document.documentElement.scrollHeight")
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1400, "height": max(900, h), "deviceScaleFactor": 1, "mobile": False})
        time.sleep(0.3)
        self.d.save_screenshot(os.path.join(self.out, f"{name}.png"))
        self.d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def overview(b, w):
    b.d.get(w.url)
    b.wait(lambda d: b.css("#overview-table tr[data-kind='test']"), what="the overview table")
    row = b.css("#overview-table tr[data-queue='default'][data-kind='test'] td")
    cells = [c.text for c in row]
    # Queue / kind, Ready, Scheduled, Blocked, Running, Expired, Dead, Done 1h, Dead 1h, ...
    check(cells[6] == "6", f"dead jobs of default/test: {cells}")
    check(cells[7] == "31", f"done in the last hour: {cells}")
    reports = [c.text for c in b.css("#overview-table tr[data-queue='reports'][data-kind='report.build'] td")]
    check(reports[1] == "3" and "queue paused" in reports[13] and "no live host" in reports[13],
          f"reports/report.build: {reports}")
    check("1" == b.text_of("#status .stat .v"), "live hosts")
    check("queue reports" in b.text_of(".banner.paused"), "the paused banner")
    # the hour chart: done bars drawn, their total as the legend says
    b.wait(lambda d: b.css("#chart-hour svg.chart rect.bar-done"), what="bars in the hour chart")
    heights = [float(r.get_attribute("height")) for r in b.css("#chart-hour svg.chart rect.bar-done")]
    check(sum(heights) > 0, "the hour chart has no height")
    legend = b.text_of("#chart-hour .total")
    check(legend.startswith("31 done"), f"hour chart legend: {legend}")
    b.wait(lambda d: b.css("#chart-day svg.chart rect.bar-done"), what="bars in the day chart")
    check("#" in b.text_of("#last-error"), "the last error names its job")
    b.untouched("overview")
    b.screenshot("overview")


def jobs(b, w):
    b.d.get(w.url + "#/jobs?status=dead")
    b.wait(lambda d: b.css("#jobs-table tbody tr[data-id]"), what="the dead jobs")
    rows = b.css("#jobs-table tbody tr[data-id]")
    check(len(rows) == 6, f"{len(rows)} dead jobs listed")
    xss_row = b.css(f"#jobs-table tr[data-id='{w.xss_job}'] td.err")[0]
    check(xss_row.text == XSS_ERR, f"the error shows as text: {xss_row.text!r}")
    b.untouched("jobs (dead)")
    # the filter form: text in the last error
    b.d.get(w.url + "#/jobs?queue=default")
    b.wait(lambda d: len(b.css("#jobs-table tbody tr[data-id]")) == 37, what="37 jobs on queue default")
    form = b.css("#filters")[0]
    form.find_element(By.NAME, "error").send_keys("MAILBOX")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    b.wait(lambda d: "error=MAILBOX" in d.current_url and "queue=default" in d.current_url and
           len(b.css("#jobs-table tbody tr[data-id]")) == 4, what="4 jobs whose error holds 'mailbox'")
    check("server" in b.text_of("#page-timing"), "the page's server time")
    b.untouched("jobs (filtered)")
    b.d.get(w.url + "#/jobs")
    b.wait(lambda d: len(b.css("#jobs-table tbody tr[data-id]")) == 50 and b.css("#older"), what="a page of 50")
    b.screenshot("jobs")
    # the next page, by keyset
    b.css("#older")[0].click()
    b.wait(lambda d: "before=" in d.current_url and len(b.css("#jobs-table tbody tr[data-id]")) == 50,
           what="the older page")


def job_timeline(b, w):
    b.d.get(w.url + f"#/job/{w.timeline_job}")
    b.wait(lambda d: b.css("svg.timeline rect.attempt"), what="the timeline")
    bars = b.css("svg.timeline rect.attempt")
    kinds = [r.get_attribute("class") for r in bars]
    check(kinds == ["attempt retry", "attempt retry", "attempt done"], f"attempts on the timeline: {kinds}")
    rows = b.css("#executions tbody tr")
    check(len(rows) == 3 and "planned failure 1 of 2" in rows[0].text, f"attempt rows: {[r.text for r in rows]}")
    check('"fail_times": 2' in b.text_of("#payload"), "the pretty payload")
    b.untouched("job")
    b.screenshot("job")


def job_xss(b, w):
    b.d.get(w.url + f"#/job/{w.xss_job}")
    b.wait(lambda d: b.css("#payload"), what="the payload")
    check(XSS_SCRIPT in b.text_of("#payload"), "the payload shows its markup as text")
    check(b.text_of("#unique-key") == XSS_IMG, "the unique key shows as text")
    check(b.text_of("#last-error-text") == XSS_ERR, "the error shows as text")
    b.untouched("job with markup")


def dead_and_retry(b, w):
    b.d.get(w.url + "#/dead")
    b.wait(lambda d: b.css("#dead-groups tr.dead-group"), what="the dead groups")
    groups = {r.find_elements(By.CSS_SELECTOR, "td")[1].text: r for r in b.css("#dead-groups tr.dead-group")}
    check("smtp N: mailbox unavailable for user N" in groups, f"groups: {list(groups)}")
    check(groups["smtp N: mailbox unavailable for user N"].find_elements(By.CSS_SELECTOR, "td")[2].text == "4",
          "four in the smtp group")
    folded = XSS_ERR.replace("1", "N").replace("2", "N")
    check(folded in groups, f"the markup's group shows as text: {list(groups)}")
    b.untouched("dead")
    b.screenshot("dead")
    # open the group of the job to redeem and retry it alone
    row = groups["planned failure N of N"]
    row.find_element(By.XPATH, ".//button[text()='Jobs']").click()
    button = b.wait(EC.element_to_be_clickable((By.CSS_SELECTOR, f"button[data-retry='{w.redeem_job}']")),
                    what="the job's Retry button")
    b.screenshot("dead-group")
    button.click()
    b.wait(lambda d: "1 of 1 job(s) back to pending" in b.text_of("#notice"), what="the retry notice")
    b.d.get(w.url + f"#/job/{w.redeem_job}")
    b.wait(lambda d: b.css("h1 .badge.done"), seconds=30, what="the retried job done")
    kinds = [r.get_attribute("class") for r in b.css("svg.timeline rect.attempt")]
    check(kinds == ["attempt retry", "attempt done"] or kinds == ["attempt dead", "attempt done"],
          f"the retried job's attempts: {kinds}")
    check(w.sql(f"SELECT status FROM skipq.jobs WHERE id = {w.redeem_job}") == "done", "done in the database")
    b.untouched("retried job")
    b.screenshot("job-retried")


def hosts(b, w):
    b.d.get(w.url + "#/hosts")
    b.wait(lambda d: b.css("#hosts-table tr[data-host]"), what="the hosts")
    row = b.css("#hosts-table tr[data-host]")[0].text
    check("web-demo:" in row and "alive" in row and "default" in row, f"host row: {row}")
    cron = b.text_of("#cron-table tbody tr")
    check("nightly-report" in cron and "30 2 * * MON-FRI" in cron and "Europe/Paris" in cron, f"cron: {cron}")
    limits = b.text_of("#limits-table tbody tr")
    check(limits.startswith("test 6"), f"limits: {limits}")
    check("reports" in b.text_of("#paused-table tbody tr"), "the paused queue")
    check("report.build" in b.text_of(".banner.warn"), "the unserved kind is flagged")
    b.untouched("hosts")
    b.screenshot("hosts")
    # resume from the page, then pause again
    b.css("#paused-table button[data-action='resume']")[0].click()
    b.wait(lambda d: "Nothing is paused." in b.text_of("#paused-table"), what="resumed")
    check(w.sql("SELECT count(*) FROM skipq.paused") == "0", "resumed in the database")
    form = b.css("#pause-form")[0]
    form.find_element(By.NAME, "name").send_keys("reports")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    b.wait(lambda d: "reports" in b.text_of("#paused-table tbody tr"), what="paused again")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--skipq", required=True)
    p.add_argument("--plugins", required=True)
    p.add_argument("--out", required=True, help="where the screenshots go")
    args = p.parse_args()
    w = World(args)
    b = None
    try:
        w.setup()
        b = Browser(args.out)
        for step in (overview, jobs, job_timeline, job_xss, dead_and_retry, hosts):
            t0 = time.time()
            step(b, w)
            print(f"browser: {step.__name__}: ok ({time.time() - t0:.1f} s)")
        print(f"browser: screenshots in {args.out}")
        return 0
    except Failed as e:
        print(f"browser: FAILED: {e}")
        if b:
            b.screenshot("failure")
            print(f"browser: the page at the failure: {os.path.join(args.out, 'failure.png')}")
        for name in ("web.log", "host.log"):
            path = os.path.join(w.tmp, name)
            if os.path.exists(path):
                print(f"--- {name}\n" + open(path).read()[-4000:])
        return 1
    finally:
        if b:
            b.quit()
        w.teardown()


if __name__ == "__main__":
    sys.exit(main())
