// `npm test` runs the live tests too: without a stack to run them against it fails, rather
// than passing on the unit tests alone. `npm run test:unit` runs only those.
if (!process.env.STRATA_URL || !process.env.STRATA_API_KEY) {
  console.error(
    "npm test needs a running Strata: set STRATA_URL and STRATA_API_KEY " +
      "(strata up prints both), or run `npm run test:unit` for the tests without one",
  );
  process.exit(1);
}
