// Drives the khai console page in a real headless Chromium (playwright-core), for
// tests/e2e/console.rs: overview, then the controller, then the failing object, whose error
// (with its file:line) must be on the page. Saves a screenshot of each view in SHOTS.
//
// Env: PLAYWRIGHT (playwright-core's directory), CHROMIUM (the browser), URL (the console),
// CONTROLLER, OBJECT (namespace/name), EXPECT (text the object's error must hold), SHOTS.
"use strict";
const { chromium } = require(process.env.PLAYWRIGHT);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.setDefaultTimeout(20000);

  await page.goto(process.env.URL);
  await page.getByRole("link", { name: process.env.CONTROLLER, exact: true }).waitFor();
  await page.locator("#live.on").waitFor();
  // The config's webhook is listed under its heading, as a table row.
  await page.getByRole("cell", { name: "validate, mutate, convert", exact: true }).waitFor();
  await page.screenshot({ path: `${process.env.SHOTS}/overview.png`, fullPage: true });

  await page.getByRole("link", { name: process.env.CONTROLLER, exact: true }).click();
  const link = page.getByRole("link", { name: process.env.OBJECT, exact: true });
  await link.waitFor();
  await page.screenshot({ path: `${process.env.SHOTS}/controller.png`, fullPage: true });

  await link.click();
  const error = page.locator("pre.error-text", { hasText: process.env.EXPECT }).first();
  await error.waitFor();
  const shown = await error.textContent();
  await page.getByRole("cell", { name: "Warning" }).first().waitFor();
  await page.screenshot({ path: `${process.env.SHOTS}/object.png`, fullPage: true });
  await browser.close();
  console.log(JSON.stringify({ error: shown, problems }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
