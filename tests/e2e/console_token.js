// For tests/e2e/console_auth.rs: the console page off loopback in a real headless Chromium asks
// for a token, and with TOKEN given reads the overview and follows the event stream.
//
// Env: PLAYWRIGHT, CHROMIUM, URL (the console), TOKEN, OPERATOR (the name the overview shows).
"use strict";
const { chromium } = require(process.env.PLAYWRIGHT);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.setDefaultTimeout(20000);
  await page.goto(process.env.URL);
  await page.locator("#token").waitFor();
  await page.fill("#token", process.env.TOKEN);
  await page.getByRole("button", { name: "Use token" }).click();
  await page.locator("#operator", { hasText: process.env.OPERATOR }).waitFor();
  await page.locator("#live.on").waitFor();
  await browser.close();
  console.log(JSON.stringify({ problems }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
