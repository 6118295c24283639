// Drives the khai console page in a real headless Chromium (playwright-core), for
// tests/e2e/console.rs: the overview (which must update live, without a reload, when the test
// creates an object after this prints "ready"), its webhooks, the controller, the failing object
// (whose error with its file:line must be on the page), and the playground (an edit giving the
// expected plan, then a child the API server's dry run refuses). Saves a 1000×700 screenshot of
// each view in SHOTS: these are docs/console-*.png.
//
// Env: PLAYWRIGHT (playwright-core's directory), CHROMIUM (the browser), URL (the console),
// CONTROLLER, NAMESPACE, OBJECT (namespace/name), EXPECT (text the object's error must hold),
// SHOTS.
"use strict";
const { chromium } = require(process.env.PLAYWRIGHT);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.setDefaultTimeout(20000);
  const shot = (name) => page.screenshot({ path: `${process.env.SHOTS}/${name}.png` });

  await page.goto(process.env.URL);
  const controller = page.getByRole("link", { name: process.env.CONTROLLER, exact: true });
  await controller.waitFor();
  await page.locator("#live.on").waitFor();
  // The objects column of the controller's row, before and after the test adds an object.
  const objects = page.getByRole("row").filter({ has: controller }).getByRole("cell").nth(2);
  const before = Number(await objects.textContent());
  await page.evaluate(() => { window.sameDocument = true; });
  console.log("ready");
  await page.waitForFunction(
    ([n, name]) => [...document.querySelectorAll("tr")].some(r =>
      r.querySelector("a")?.textContent === name && Number(r.children[2].textContent) > n),
    [before, process.env.CONTROLLER]);
  if (!(await page.evaluate(() => window.sameDocument))) throw new Error("the page reloaded");
  await shot("overview");

  // The config's webhook is listed under its heading, as a table row.
  const webhook = page.getByRole("cell", { name: "validate, mutate, convert", exact: true });
  await webhook.waitFor();
  await page.getByRole("heading", { name: "Webhooks" }).scrollIntoViewIfNeeded();
  await shot("webhooks");

  await controller.click();
  const link = page.getByRole("link", { name: process.env.OBJECT, exact: true });
  await link.waitFor();
  await shot("controller");

  await link.click();
  const error = page.locator("pre.error-text", { hasText: process.env.EXPECT }).first();
  await error.waitFor();
  const shown = await error.textContent();
  await page.getByRole("cell", { name: "Warning" }).first().waitFor();
  await shot("object");

  await page.goto(`${process.env.URL}#/p/${process.env.CONTROLLER}/${process.env.NAMESPACE}/sessions`);
  await page.locator("#script").waitFor();
  const script = await page.inputValue("#script");
  await page.fill("#script", script.replace("replicas: obj.spec.desired_size", "replicas: -1"));
  await page.click("#run");
  await page.locator("#verdict", { hasText: "refused by the API server's dry run" }).waitFor();
  await page.fill("#script", script.replace("port: 6379, targetPort", "port: 6380, targetPort"));
  await page.click("#run");
  await page.locator("#diff", { hasText: "+    port: 6380" }).waitFor();
  await page.locator("#patch", { hasText: "6380" }).waitFor();
  await shot("playground");
  await browser.close();
  console.log(JSON.stringify({ error: shown, problems }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
