// Drives the browser test (mcp/apps browser_test.go): Debian's chromium,
// headless, opens the test host page at the URL argv[2] (which runs the
// code argv[3] and then argv[4] in a new session through pyrun, and shows
// pyrun's view of the second result), looks at what the view drew,
// downloads its file, sorts its table, presses "Run again" on the call's
// cell and on the earlier cell, saves a screenshot to argv[5]; then opens
// the page again as a host without ui/download-file and has the view show
// the file; and prints what it saw as one JSON object.
import { chromium } from "playwright-core";

const [url, setup, code, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
  timeout: 60_000,
});
const report = { console: [] };
try {
  // Tall enough for both cells: frames of other processes are painted
  // only within the viewport.
  const page = await browser.newPage({ viewport: { width: 1000, height: 2600 } });
  page.setDefaultTimeout(60_000);
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") report.console.push(m.type() + ": " + m.text());
  });
  await page.goto(url + "?setup=" + encodeURIComponent(setup) + "&code=" + encodeURIComponent(code));
  await page.waitForFunction(() => ["sent", "failed"].includes(window.hostState?.step));
  report.host = await page.evaluate(() => window.hostState);
  if (report.host.step === "sent") {
    const app = page.frameLocator("#app");
    const first = app.locator('section.cell[data-n="1"]');
    await first.locator(".status.ok, .status.error").waitFor();
    report.past = await app.locator("section.cell.past").evaluateAll((els) =>
      els.map((el) => ({
        label: el.querySelector(".label").textContent,
        status: el.querySelector(".status").textContent,
        code: el.querySelector("pre.code").textContent,
      })),
    );
    report.first = await first.evaluate((cell) => ({
      label: cell.querySelector(".label").textContent,
      status: cell.querySelector(".status").textContent,
      statusColor: getComputedStyle(cell.querySelector(".status")).color,
      code: cell.querySelector("pre.code").textContent,
      stdout: cell.querySelector("pre.stdout")?.textContent ?? null,
      session: cell.dataset.session ?? null,
      images: [...cell.querySelectorAll("img.display")].map((i) => ({
        src: i.src.slice(0, 22),
        width: i.naturalWidth,
        height: i.naturalHeight,
      })),
      tableHead: [...cell.querySelectorAll(".table thead th")].map((th) => th.textContent),
      tableColumn: [...cell.querySelectorAll(".table tbody tr")].map((tr) => tr.cells[1]?.textContent),
      frames: cell.querySelectorAll("iframe.html").length,
      files: [...cell.querySelectorAll("a.file")].map((a) => ({ name: a.textContent, uri: a.dataset.uri })),
    }));
    // The HTML display's script ran, inside its own sandboxed frame.
    report.chart = await first.frameLocator("iframe.html").locator("#c").textContent();
    // Sort the table by its second column (a click on the header).
    await first.locator(".table thead th").nth(1).click();
    report.sorted = await first.evaluate((cell) =>
      [...cell.querySelectorAll(".table tbody tr")].map((tr) => tr.cells[1]?.textContent),
    );
    // Download the file: the host reads it from pyrun.
    await first.locator("a.file").first().click();
    await page.waitForFunction(() => window.hostState.downloads.length > 0);
    report.downloads = await page.evaluate(() => window.hostState.downloads);
    // Run the cell again: tools/call from the view, through the host.
    await first.locator("button.rerun").click();
    const second = app.locator('section.cell[data-n="2"]');
    await second.locator(".status.ok, .status.error").waitFor();
    report.second = await second.evaluate((cell) => ({
      status: cell.querySelector(".status").textContent,
      stdout: cell.querySelector("pre.stdout")?.textContent ?? null,
      session: cell.dataset.session ?? null,
      images: cell.querySelectorAll("img.display").length,
    }));
    // Run the earlier cell again: its code, in the session, at the end.
    await app.locator("section.cell.past button.rerun").first().click();
    const third = app.locator('section.cell[data-n="3"]');
    await third.locator(".status.ok, .status.error").waitFor();
    report.third = await third.evaluate((cell) => ({
      status: cell.querySelector(".status").textContent,
      code: cell.querySelector("pre.code").textContent,
      label: cell.querySelector(".label").textContent,
    }));
    await page.screenshot({ path: shot, fullPage: true });

    // A host that cannot download: the view reads the file through it
    // and shows it under its link.
    const page2 = await browser.newPage();
    page2.setDefaultTimeout(60_000);
    await page2.goto(url + "?nodownload=1&setup=" + encodeURIComponent(setup) + "&code=" + encodeURIComponent(code));
    await page2.waitForFunction(() => ["sent", "failed"].includes(window.hostState?.step));
    const cell = page2.frameLocator("#app").locator('section.cell[data-n="1"]');
    await cell.locator("a.file").first().click();
    report.shown = await cell.locator(".file-view").first().textContent();
    report.downloadsWithout = await page2.evaluate(() => window.hostState.downloads.length);
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
