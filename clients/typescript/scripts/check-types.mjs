// Fails when src/schema.ts no longer matches the API it types.
//
// 1. src/schema.ts against the committed openapi.json (openapi-typescript --check).
// 2. With STRATA_URL set, the committed openapi.json against the document that stack serves.
// (tests/unit/test_typescript_openapi.py makes the same comparison as 2 in process, without a stack.)
// Fix a drift with: python scripts/dump_openapi.py && npm run generate
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const FIX = "regenerate: python scripts/dump_openapi.py && npm run generate (in clients/typescript)";

const cli = fileURLToPath(new URL("../node_modules/openapi-typescript/bin/cli.js", import.meta.url));
const check = spawnSync(
  process.execPath,
  [cli, "openapi.json", "--output", "src/schema.ts", "--default-non-nullable", "false", "--check"],
  { cwd: root, encoding: "utf8" },
);
if (check.status !== 0) {
  console.error(check.stdout + check.stderr);
  console.error(`src/schema.ts differs from what openapi.json generates; ${FIX}`);
  process.exit(1);
}
console.log("src/schema.ts matches openapi.json");

const url = process.env.STRATA_URL;
if (url) {
  const served = await (await fetch(new URL("/openapi.json", url))).json();
  const committed = JSON.parse(readFileSync(new URL("../openapi.json", import.meta.url), "utf8"));
  if (JSON.stringify(served) !== JSON.stringify(committed)) {
    console.error(`the stack at ${url} serves another OpenAPI document than openapi.json; ${FIX}`);
    process.exit(1);
  }
  console.log(`openapi.json matches ${url}/openapi.json`);
}
