// Drives the dashboard page in headless Chromium (Debian's /usr/bin/chromium, playwright-core).
//
//   node tests/drive.mjs URL [--lines N] [--width 1400]
//
// Waits until the page has drawn, prints "READY <json of window.drlDashboard.returnPoints()>"
// with the milliseconds it took, then reads commands on stdin, one per line:
//   wait LABEL N     wait (<= 10 s) until the return chart has N points for LABEL, print
//                    "SEEN <ms>" or "TIMEOUT <json>"
//   set ID VALUE     set a control (select, range, checkbox: true/false) as a user would
//   click TEXT       click the element with that text (a run name opens its page)
//   text SELECTOR    print "TEXT <json of its textContent>"
//   shot PATH        screenshot
//   call NAME ARGS   print "CALLED <json of window.drlDashboard[NAME](...ARGS)>" (ARGS: a JSON list)
//   sort COLUMN      click the runs table's header COLUMN, print "SORTED"
//   download N BUTTON PATH   click the Nth (from 0) button BUTTON (CSV, PNG), save what it
//                    downloads to PATH, print "DOWNLOADED <suggested file name>"
//   quit
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const [url, ...rest] = process.argv.slice(2);
const option = (name, fallback) => {
  const index = rest.indexOf(name);
  return index >= 0 ? rest[index + 1] : fallback;
};
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const page = await browser.newPage({ viewport: { width: Number(option("--width", 1400)), height: 1000 } });
const errors = [];
page.on("pageerror", (error) => errors.push(String(error)));
const started = Date.now();
await page.goto(url);
const lines = Number(option("--lines", 1)); // wait until the return chart has this many lines
await page.waitForFunction((n) => window.drlDashboard && Object.keys(window.drlDashboard.returnPoints()).length >= n,
  lines, { timeout: 120000, polling: 20 });
const points = await page.evaluate(() => window.drlDashboard.returnPoints());
console.log(`READY ${Date.now() - started} ${JSON.stringify(points)}`);
if (errors.length) console.log(`ERRORS ${JSON.stringify(errors)}`);

const commands = createInterface({ input: process.stdin });
for await (const line of commands) {
  const [command, ...args] = line.trim().split(" ");
  if (command === "wait") {
    const count = Number(args.pop());
    const label = args.join(" ");
    const begin = Date.now();
    try {
      await page.waitForFunction(([l, n]) => (window.drlDashboard.returnPoints()[l] || 0) >= n,
        [label, count], { timeout: 60000, polling: 50 });
      console.log(`SEEN ${Date.now() - begin}`);
    } catch {
      console.log(`TIMEOUT ${JSON.stringify(await page.evaluate(() => window.drlDashboard.returnPoints()))}`);
    }
  } else if (command === "set") {
    const [id, ...value] = args;
    await page.evaluate(([i, v]) => {
      const node = document.getElementById(i);
      if (node.type === "checkbox") node.checked = v === "true"; else node.value = v;
      node.dispatchEvent(new Event("input"));
      node.dispatchEvent(new Event("change"));
    }, [id, value.join(" ")]);
    console.log("SET");
  } else if (command === "click") {
    await page.getByText(args.join(" "), { exact: true }).first().click();
    console.log("CLICKED");
  } else if (command === "text") {
    const selector = args.join(" ");
    await page.waitForFunction((s) => {
      const node = document.querySelector(s);
      return node && node.textContent && !node.textContent.startsWith("loading");
    }, selector, { timeout: 30000 });
    console.log(`TEXT ${JSON.stringify(await page.textContent(selector))}`);
  } else if (command === "shot") {
    await page.screenshot({ path: args.join(" "), fullPage: true });
    console.log("SHOT");
  } else if (command === "call") {
    const [name, ...json] = args;
    const result = await page.evaluate(([n, a]) => window.drlDashboard[n](...a), [name, JSON.parse(json.join(" ") || "[]")]);
    console.log(`CALLED ${JSON.stringify(result)}`);
  } else if (command === "sort") {
    await page.locator("#runs-table th", { hasText: args.join(" ") }).first().click();
    console.log("SORTED");
  } else if (command === "download") {
    const [index, button, ...path] = args;
    const [file] = await Promise.all([
      page.waitForEvent("download", { timeout: 30000 }),
      page.getByRole("button", { name: button, exact: true }).nth(Number(index)).click(),
    ]);
    await file.saveAs(path.join(" "));
    console.log(`DOWNLOADED ${file.suggestedFilename()}`);
  } else if (command === "quit") {
    break;
  }
}
if (errors.length) console.log(`ERRORS ${JSON.stringify(errors)}`);
await browser.close();
// stdin stays open (the caller's pipe) and would keep node's event loop alive.
process.exit(0);
